"""Queue options through the Python client: message order within a push
(the stream runtime's sort), retryDelay, ttl, encryption at rest (the suite's
broker runs with QUEEN_ENCRYPTION_KEY) and pops by namespace/task.

Spec: shared/spec/queen2-wire.md §3.1 and §3.4; issue 17.
"""

import asyncio
import time
from datetime import datetime

import pytest

from qhelpers import aiotest, create_queue, pop, push, qname, uid

pytestmark = pytest.mark.options


def _ms(created_at: str) -> int:
    return int(datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp() * 1000)


@aiotest
async def test_a_push_sorts_in_push_order_by_created_at_ms_then_id(q):
    name = qname("order")
    await create_queue(q, name)
    await push(q, name, [{"i": i} for i in range(500)])
    msgs = await pop(q, name, batch=500)
    assert [m["data"]["i"] for m in msgs] == list(range(500))
    resorted = sorted(msgs, key=lambda m: (_ms(m["createdAt"]), m["id"]))
    assert [m["id"] for m in resorted] == [m["id"] for m in msgs]


@aiotest
async def test_retry_delay_holds_a_nack_back(q):
    name = qname("retrydelay")
    res = await create_queue(q, name, retryDelay=1200)
    assert res["options"]["retryDelay"] == 1200
    await push(q, name, [{"n": 1}])
    first = await pop(q, name, batch=1)
    await q.ack(first[0], False)
    nacked = time.monotonic()
    assert await pop(q, name, batch=1) == []
    again = []
    while not again and time.monotonic() - nacked < 5:
        await asyncio.sleep(0.1)
        again = await pop(q, name, batch=1)
    assert again and time.monotonic() - nacked >= 1.1


@aiotest
async def test_ttl_skips_expired_messages(q):
    name = qname("ttl")
    await create_queue(q, name, ttl=1)
    await push(q, name, [{"old": True}])
    await asyncio.sleep(1.2)
    await push(q, name, [{"old": False}])
    msgs = await pop(q, name, batch=10)
    assert [m["data"]["old"] for m in msgs] == [False]


@aiotest
async def test_encrypted_queue_round_trips_through_the_client(q):
    name = qname("vault")
    res = await create_queue(q, name, encryptionEnabled=True)
    assert res["options"]["encryptionEnabled"] is True
    payload = {"card": "4111 1111 1111 1111", "n": 12345678901234567, "nested": {"ok": [1, None]}}
    await push(q, name, [payload])
    msgs = await pop(q, name, batch=1)
    assert msgs[0]["data"] == payload


@aiotest
async def test_pop_by_namespace_and_task_spans_queues(q):
    ns = f"ns{uid(8)}"
    low, high = qname("nslow"), qname("nshigh")
    await q.queue(low).namespace(ns).task("send").config({"priority": 1}).create()
    await q.queue(high).namespace(ns).task("send").config({"priority": 9}).create()
    await push(q, low, [{"q": "low"}])
    await push(q, high, [{"q": "high"}])
    first = await q.queue().namespace(ns).task("send").batch(5).wait(False).pop()
    assert [m["data"]["q"] for m in first] == ["high"]
    second = await q.queue().namespace(ns).batch(5).wait(False).pop()
    assert [m["data"]["q"] for m in second] == ["low"]
    res = await q.ack(first + second, True)
    assert res.get("success"), res
