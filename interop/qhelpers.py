"""Shared helpers for the queen-rs interop suite.

Every test talks to the broker through the official ``queen-mq`` 2.6 Python
client, which is asyncio-only. pytest (without a plugin) cannot run ``async
def`` tests, so each test is written as ``async def test_x(q, ...)`` and
decorated with :func:`aiotest`, which runs it under ``asyncio.run`` with a fresh
``Queen`` client passed as the first argument and a hard per-test deadline.

The client is built with a recording httpx transport. It changes nothing on
the wire; it only notes (method, path, status) of every exchange, so that a
test also fails when the broker answered a 5xx anywhere, or a non-2xx on one of
the routes whose errors the client swallows (pop answers ``[]`` on any error,
the DLQ listing answers ``{messages: [], total: 0}``). Without it, "pop returned
nothing" would hide a broken pop.

Environment:
  QUEEN_URL              broker base URL (default http://127.0.0.1:6632)
  QUEEN_RETRY_ATTEMPTS   client retry_attempts (default 1: a 5xx is not
                         silently retried and re-sent; the client's own
                         default is 3)
  QUEEN_TEST_TIMEOUT     per-test deadline in seconds (default 30)
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import signal
import time
import uuid
from typing import Any, Awaitable, Callable, Dict, List, Optional

import httpx
from queen import Queen

QUEEN_URL = os.environ.get("QUEEN_URL", "http://127.0.0.1:6632").rstrip("/")
RETRY_ATTEMPTS = int(os.environ.get("QUEEN_RETRY_ATTEMPTS", "1"))
TEST_TIMEOUT = float(os.environ.get("QUEEN_TEST_TIMEOUT", "30"))

# Routes whose failures the client turns into an empty answer instead of an
# exception. A non-2xx there must fail the test on its own.
_SWALLOWING_PREFIXES = ("/api/v1/pop", "/api/v1/dlq")


class Exchange:
    __slots__ = ("method", "path", "query", "status")

    def __init__(self, method: str, path: str, query: str, status: int) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.status = status

    def __repr__(self) -> str:
        q = f"?{self.query}" if self.query else ""
        return f"{self.method} {self.path}{q} -> {self.status}"


class RecordingTransport(httpx.AsyncBaseTransport):
    """Pass-through transport that records every exchange's status."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.exchanges: List[Exchange] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        self.exchanges.append(
            Exchange(
                request.method,
                request.url.path,
                request.url.query.decode() if isinstance(request.url.query, bytes) else str(request.url.query),
                response.status_code,
            )
        )
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()

    def problems(self) -> List[Exchange]:
        bad = []
        for ex in self.exchanges:
            if ex.status >= 500:
                bad.append(ex)
            elif ex.path.startswith(_SWALLOWING_PREFIXES) and ex.status not in (200, 204):
                bad.append(ex)
        return bad

    def matching(self, method: str, path_prefix: str) -> List[Exchange]:
        return [e for e in self.exchanges if e.method == method and e.path.startswith(path_prefix)]


def make_client(recorder: Optional[RecordingTransport] = None) -> Queen:
    return Queen(QUEEN_URL, retry_attempts=RETRY_ATTEMPTS, transport=recorder)


def aiotest(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """Run ``async def test(q, *fixtures)`` under asyncio.run.

    ``q`` is a fresh Queen client; its recorder is ``q.recorder``. The test
    fails if the broker answered 5xx anywhere or a non-2xx on a swallowing
    route, even when the assertions of the body passed.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            recorder = RecordingTransport()
            # Queen() installs its own SIGINT/SIGTERM handlers and close()
            # resets them to SIG_DFL; keep pytest's Ctrl-C behaviour intact.
            saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
            client = make_client(recorder)
            client.recorder = recorder  # type: ignore[attr-defined]
            try:
                await asyncio.wait_for(fn(client, *args, **kwargs), TEST_TIMEOUT)
            finally:
                try:
                    await client.close()
                finally:
                    for s, h in saved.items():
                        signal.signal(s, h)
            problems = recorder.problems()
            assert not problems, f"broker answered errors the client hid or retried: {problems}"

        asyncio.run(main())

    # Hide the injected client from pytest's fixture resolution.
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]
    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    # (__signature__ stops inspect.signature from following __wrapped__)
    return wrapper


def uid(n: int = 10) -> str:
    return uuid.uuid4().hex[:n]


def qname(tag: str) -> str:
    """A queue name unique to this test run (URL-safe: the client does not
    percent-encode queue names in pop/delete paths)."""
    return f"it-{tag}-{uid()}"


def kv_ns(tag: str = "kv") -> str:
    """A KV namespace unique to this test (matches ^[a-z0-9][a-z0-9._-]{0,63}$)."""
    return f"it-{tag}-{uid(12)}"


def new_tid() -> str:
    return str(uuid.uuid4())


async def pop(q: Queen, queue: str, *, batch: int = 100, group: Optional[str] = None,
              mode: Optional[str] = None, partition: Optional[str] = None) -> List[Dict[str, Any]]:
    """A non-waiting pop with an explicit batch."""
    b = q.queue(queue)
    if partition:
        b = b.partition(partition)
    b = b.batch(batch).wait(False)
    if group:
        b = b.group(group)
    if mode:
        b = b.subscription_mode(mode)
    return await b.pop()


async def poll_pop(q: Queen, queue: str, *, timeout: float = 10.0, interval: float = 0.2,
                   want: int = 1, **kw: Any) -> List[Dict[str, Any]]:
    """Non-waiting pops every ``interval`` s until at least ``want`` messages
    arrive in one pop, or the deadline passes (then returns the last answer)."""
    deadline = time.monotonic() + timeout
    while True:
        msgs = await pop(q, queue, **kw)
        if len(msgs) >= want or time.monotonic() >= deadline:
            return msgs
        await asyncio.sleep(interval)


async def drain(q: Queen, queue: str, *, expect: int, group: Optional[str] = None,
                mode: Optional[str] = None, batch: int = 1000, timeout: float = 10.0) -> List[Dict[str, Any]]:
    """Pop and batch-ack until ``expect`` messages were seen (or the deadline)."""
    seen: List[Dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    ctx = {"group": group} if group else None
    while len(seen) < expect and time.monotonic() < deadline:
        msgs = await pop(q, queue, batch=batch, group=group, mode=mode)
        if not msgs:
            await asyncio.sleep(0.1)
            continue
        seen.extend(msgs)
        res = await q.ack(msgs, True, ctx)
        assert res.get("success"), f"batch ack refused: {res}"
    return seen


async def create_queue(q: Queen, name: str, **options: Any) -> Dict[str, Any]:
    b = q.queue(name)
    if options:
        b = b.config(options)
    res = await b.create()
    assert isinstance(res, dict) and res.get("configured") is True, f"configure failed: {res}"
    return res


async def push(q: Queen, queue: str, payloads: List[Any], *, partition: Optional[str] = None,
               tids: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    """Push ``payloads`` (each wrapped as {"data": p}) and check every item queued."""
    items = []
    for i, p in enumerate(payloads):
        item: Dict[str, Any] = {"data": p}
        if tids:
            item["transactionId"] = tids[i]
        items.append(item)
    b = q.queue(queue)
    if partition:
        b = b.partition(partition)
    res = await b.push(items)
    assert isinstance(res, list) and len(res) == len(items), f"push answer: {res!r}"
    for r in res:
        assert r.get("status") == "queued", f"push item not queued: {r}"
    return res
