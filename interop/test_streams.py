"""Streams through the Python client's own runtime (queen.Stream, /streams/v1/*):
windows, a running total kept in stream state, a runner killed and restarted,
and a cycle refused on a stale lease leaving nothing behind.

Spec: shared/spec/streams-wire.md. The runner's HTTP client bypasses the
suite's recorder, so the tests check its metrics and on_error as well.
"""

import asyncio
import itertools
import os
import sys

import httpx
import pytest

from queen import Stream
from queen.streams.runtime.cycle import StreamsCycleFailed

from qhelpers import QUEEN_URL, aiotest, create_queue, drain, pop, push, qname, uid

pytestmark = pytest.mark.streams

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_child.py")


async def run(stream, qid, **kw):
    kw.setdefault("max_wait_millis", 200)
    return await stream.run(query_id=qid, url=QUEEN_URL, **kw)


async def state_rows(runner, pid):
    async with httpx.AsyncClient() as h:
        r = await h.post(f"{QUEEN_URL}/streams/v1/state/get",
                         json={"query_id": runner.metrics()["serverQueryId"], "partition_id": pid, "keys": []})
    assert r.status_code == 200, r.text
    return [(x["key"], x["value"]) for x in r.json()["rows"]]


def running_total(value, ctx):
    """A gate that always allows and keeps the partition's total in state."""
    ctx.state["total"] = ctx.state.get("total", 0) + value["amount"]
    value["total"] = ctx.state["total"]
    return True


@aiotest
async def test_a_tumbling_window_counts_exactly(q):
    src, dst, qid = qname("wsrc"), qname("wdst"), f"w-{uid()}"
    await create_queue(q, src)
    await create_queue(q, dst)
    await push(q, src, [{"amount": i} for i in range(30)])
    r = await run(
        Stream.from_(q.queue(src))
        
        .window_tumbling(seconds=2, idle_flush_ms=300)
        .aggregate({"count": lambda v: 1, "sum": lambda v: v["amount"]})
        .to(q.queue(dst)),
        qid,
    )
    try:
        out = await drain(q, dst, expect=1, mode="all", group="verify", timeout=20)
        emitted = out[0]["data"]
        assert emitted["count"] == 30 and emitted["sum"] == sum(range(30)), emitted
        assert r.metrics().get("errorsTotal", 0) == 0, r.metrics()
    finally:
        await r.stop()


@aiotest
async def test_a_running_total_reads_the_state_of_every_earlier_cycle(q):
    src, dst, qid = qname("tsrc"), qname("tdst"), f"t-{uid()}"
    await create_queue(q, src)
    await create_queue(q, dst)
    r = await run(Stream.from_(q.queue(src)).gate(running_total).to(q.queue(dst)),
                  qid, batch_size=7)
    try:
        await push(q, src, [{"amount": i} for i in range(1, 21)])
        got = await drain(q, dst, expect=20, mode="all", group="verify", timeout=20)
        assert [m["data"]["total"] for m in got] == list(itertools.accumulate(range(1, 21)))
        pid = (await pop(q, src, batch=1, group="probe", mode="all"))[0]["partitionId"]
        assert await state_rows(r, pid) == [(pid, {"total": 210})], "a gate keys its state by the partition"
    finally:
        await r.stop()


@aiotest
async def test_a_cycle_on_a_stale_lease_rolls_back_state_emits_and_ack(q):
    src, dst, qid = qname("ssrc"), qname("sdst"), f"s-{uid()}"
    await create_queue(q, src, leaseTime=1)
    await create_queue(q, dst)
    errors, slept = [], []

    async def slow_once(message):
        if not slept:
            slept.append(1)
            await asyncio.sleep(1.6)  # past the 1 s lease: this cycle must be refused
        return message["data"]

    r = await run(Stream.from_(q.queue(src)).map(slow_once).gate(running_total)
                  .to(q.queue(dst)), qid, on_error=lambda e, ctx: errors.append(e))
    try:
        await push(q, src, [{"amount": i} for i in range(1, 6)])
        got = await drain(q, dst, expect=5, mode="all", group="verify", timeout=20)
        await asyncio.sleep(0.5)
        assert await pop(q, dst, mode="all", group="verify") == [], "nothing emitted twice"
        assert [m["data"]["total"] for m in got] == [1, 3, 6, 10, 15], "the refused cycle left no state"
        assert any(isinstance(e, StreamsCycleFailed) and "lease" in str(e) for e in errors), errors
    finally:
        await r.stop()


@aiotest
async def test_a_runner_killed_mid_stream_and_restarted_emits_each_message_once(q):
    src, dst, qid = qname("ksrc"), qname("kdst"), f"k-{uid()}"
    await create_queue(q, src, leaseTime=2)
    await create_queue(q, dst)
    await push(q, src, [{"i": i} for i in range(200)])
    child = await asyncio.create_subprocess_exec(sys.executable, CHILD, QUEEN_URL, src, dst, qid,
                                                 stdout=asyncio.subprocess.PIPE)
    try:
        for _ in range(60):  # let it commit a few cycles, then kill it mid-batch
            await asyncio.wait_for(child.stdout.readline(), 20)
    finally:
        child.kill()
        await child.wait()
    # The same runner again (same code, so the same config hash and query).
    again = await asyncio.create_subprocess_exec(sys.executable, CHILD, QUEEN_URL, src, dst, qid,
                                                 stdout=asyncio.subprocess.DEVNULL)
    try:
        got = await drain(q, dst, expect=200, mode="all", group="verify", timeout=40)
        await asyncio.sleep(2.5)  # past the killed runner's lease
        assert await pop(q, dst, mode="all", group="verify") == [], "nothing emitted twice"
        assert [m["data"]["i"] for m in got] == list(range(200))
    finally:
        again.kill()
        await again.wait()
