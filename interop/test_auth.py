"""JWT auth through the official client (queen-mq 2.6, ``bearer_token``).

A Queen ``read-write`` token pushes and pops (it was refused before Queen's
roles were spoken), a ``read-only`` token may look but not push, and with JWT
on every message carries its pusher's ``sub`` as ``producerSub``: a
``producerSub`` forged in the push body is ignored.

Needs a second broker with JWT on: ``QUEEN_JWT_URL`` and ``QUEEN_JWT_SECRET``
(scripts/test starts one beside the main interop broker).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import time
import uuid

import httpx
import pytest
from queen import Queen

JWT_URL = os.environ.get("QUEEN_JWT_URL", "").rstrip("/")
SECRET = os.environ.get("QUEEN_JWT_SECRET", "")

pytestmark = pytest.mark.skipif(
    not (JWT_URL and SECRET), reason="needs QUEEN_JWT_URL and QUEEN_JWT_SECRET (scripts/test sets them)"
)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def token(sub: str, role: str) -> str:
    """An HS256 JWT as an identity provider would sign it."""
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = _b64(json.dumps({"sub": sub, "role": role, "exp": int(time.time()) + 600}).encode())
    signing_input = f"{header}.{claims}".encode()
    signature = _b64(hmac.new(SECRET.encode(), signing_input, hashlib.sha256).digest())
    return f"{header}.{claims}.{signature}"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_a_read_write_token_pushes_and_each_message_names_its_producer():
    async def go():
        q = Queen(url=JWT_URL, bearer_token=token("alice", "read-write"), retry_attempts=1)
        name = f"auth-{uuid.uuid4().hex[:12]}"
        try:
            res = await q.queue(name).push([{"data": {"n": 1}, "transactionId": "a1"}])
            assert res[0]["status"] == "queued", res
            msgs = await q.queue(name).batch(1).wait(False).pop()
            assert len(msgs) == 1, msgs
            assert msgs[0]["producerSub"] == "alice", msgs[0]
            await q.ack(msgs[0], True)
        finally:
            await q.close()

    run(go())


def test_a_producer_sub_in_the_body_is_ignored():
    async def go():
        name = f"auth-{uuid.uuid4().hex[:12]}"
        alice = token("alice", "read-write")
        headers = {"Authorization": f"Bearer {alice}"}
        async with httpx.AsyncClient(base_url=JWT_URL, headers=headers, timeout=10) as http:
            body = {"items": [{"queue": name, "transactionId": "f1", "payload": {}, "producerSub": "mallory"}]}
            r = await http.post("/api/v1/push", json=body)
            assert r.status_code == 201, r.text
        q = Queen(url=JWT_URL, bearer_token=alice, retry_attempts=1)
        try:
            msgs = await q.queue(name).batch(1).wait(False).pop()
            assert [m["producerSub"] for m in msgs] == ["alice"], msgs
        finally:
            await q.close()

    run(go())


def test_a_read_only_token_cannot_push_and_no_token_is_401():
    async def go():
        name = f"auth-{uuid.uuid4().hex[:12]}"
        async with httpx.AsyncClient(base_url=JWT_URL, timeout=10) as http:
            viewer = {"Authorization": f"Bearer {token('viewer', 'read-only')}"}
            body = {"items": [{"queue": name, "payload": {}}]}
            r = await http.post("/api/v1/push", json=body, headers=viewer)
            assert r.status_code == 403, r.text
            assert r.json()["code"] == "forbidden"
            r = await http.get("/api/v1/resources/queues", headers=viewer)
            assert r.status_code == 200, r.text
            r = await http.post("/api/v1/push", json=body)
            assert r.status_code == 401, r.text
            # The maintenance switches are the admin's alone.
            worker = {"Authorization": f"Bearer {token('alice', 'read-write')}"}
            r = await http.get("/api/v1/system/maintenance", headers=worker)
            assert r.status_code == 403, r.text
            admin = {"Authorization": f"Bearer {token('root', 'admin')}"}
            r = await http.get("/api/v1/system/maintenance", headers=admin)
            assert r.status_code == 200, r.text

    run(go())
