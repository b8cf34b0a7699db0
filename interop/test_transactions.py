"""Transactions (POST /api/v1/transaction) without KV riders.

Spec: shared/spec/queen2-wire.md §2.1, §2.2, §2.4, §2.5.
"""

import asyncio
import time

import pytest

from qhelpers import aiotest, create_queue, new_tid, poll_pop, pop, push, qname

pytestmark = pytest.mark.tx


@aiotest
async def test_push_and_ack_in_one_transaction(q):
    src, dst = qname("tx-src"), qname("tx-dst")
    await create_queue(q, src)
    await create_queue(q, dst)
    await push(q, src, [{"order": 1}])
    [m] = await pop(q, src)
    out_tid = new_tid()
    res = await (
        q.transaction()
        .queue(dst)
        .push([{"data": {"shipped": 1}, "transactionId": out_tid}])
        .ack(m)
        .commit()
    )
    assert res["success"] is True
    assert bool(res) is True
    results = res["results"]
    assert len(results) == 2
    assert results[0]["type"] == "push" and results[0]["success"] is True
    assert results[0]["transactionId"] == out_tid
    assert results[0]["messageId"]
    assert results[1]["type"] == "ack" and results[1]["success"] is True
    assert results[1]["transactionId"] == m["transactionId"]
    # Committed: the source message is consumed, the pushed one is visible to
    # the very next non-waiting pop.
    assert await pop(q, src) == []
    got = await pop(q, dst)
    assert [x["data"] for x in got] == [{"shipped": 1}]
    assert got[0]["transactionId"] == out_tid


@aiotest
async def test_transaction_push_only_and_result_indexes(q):
    dst = qname("tx-push")
    await create_queue(q, dst)
    res = await (
        q.transaction()
        .queue(dst)
        .push([{"data": {"i": 0}}, {"data": {"i": 1}}])
        .queue(dst)
        .partition("other")
        .push([{"data": {"i": 2}}])
        .commit()
    )
    assert res["success"] is True
    assert [r["index"] for r in res["results"]] == [0, 1, 2]
    assert all(r["type"] == "push" and r["success"] for r in res["results"])
    default = await pop(q, dst, batch=10)
    assert [x["data"]["i"] for x in default] in ([0, 1], [2])


@aiotest
async def test_ack_under_expired_lease_rolls_back_whole_bundle(q):
    src, dst = qname("tx-exp-src"), qname("tx-exp-dst")
    await create_queue(q, src, lease_time=1)
    await create_queue(q, dst)
    await push(q, src, [{"order": 2}])
    [m] = await pop(q, src)
    await asyncio.sleep(1.6)  # the 1 s lease is over; nobody popped again
    with pytest.raises(Exception) as excinfo:
        await q.transaction().queue(dst).push([{"data": {"never": True}}]).ack(m).commit()
    assert "rolled back" in str(excinfo.value)
    assert q.recorder.matching("POST", "/api/v1/transaction")[-1].status == 200
    # Nothing was pushed, and the message is still there for the next holder.
    assert await pop(q, dst) == []
    again = await poll_pop(q, src, timeout=5)
    assert [x["transactionId"] for x in again] == [m["transactionId"]]
    assert (await q.ack(again[0]))["success"] is True


@aiotest
async def test_ack_under_lease_taken_by_another_holder_rolls_back(q):
    a, b, dst = qname("tx-a"), qname("tx-b"), qname("tx-ab-dst")
    await create_queue(q, a, lease_time=1)
    await create_queue(q, b, lease_time=60)
    await create_queue(q, dst)
    await push(q, a, [{"a": 1}])
    await push(q, b, [{"b": 1}])
    [ma] = await pop(q, a)
    [mb] = await pop(q, b)
    # Wait until A's lease expired and a new holder took A.
    again = await poll_pop(q, a, timeout=10)
    assert len(again) == 1 and again[0]["leaseId"] != ma["leaseId"]
    with pytest.raises(Exception) as excinfo:
        await q.transaction().ack(ma).ack(mb).queue(dst).push([{"data": {"x": 1}}]).commit()
    assert "rolled back" in str(excinfo.value)
    assert await pop(q, dst) == []
    # The refused bundle changed nothing: the new holder of A and the holder
    # of B (60 s lease) can both still ack, in one bundle.
    res = await q.transaction().ack(again[0]).ack(mb).commit()
    assert res["success"] is True
    assert await pop(q, a) == []
    assert await pop(q, b) == []


@aiotest
async def test_two_queues_two_live_leases_both_acked(q):
    a, b = qname("tx2a"), qname("tx2b")
    await create_queue(q, a)
    await create_queue(q, b)
    await push(q, a, [{"a": 1}])
    await push(q, b, [{"b": 1}])
    [ma] = await pop(q, a)
    [mb] = await pop(q, b)
    res = await q.transaction().ack(ma).ack(mb).commit()
    assert res["success"] is True
    assert [r["type"] for r in res["results"]] == ["ack", "ack"]
    assert await pop(q, a) == []
    assert await pop(q, b) == []


@aiotest
async def test_duplicate_push_in_transaction_rolls_back(q):
    dst, other = qname("tx-dup"), qname("tx-dup-other")
    await create_queue(q, dst)
    await create_queue(q, other)
    tid = new_tid()
    await push(q, dst, [{"first": True}], tids=[tid])
    with pytest.raises(Exception) as excinfo:
        await (
            q.transaction()
            .queue(other)
            .push([{"data": {"side": 1}}])
            .queue(dst)
            .partition("Default")
            .push([{"data": {"second": True}, "transactionId": tid}])
            .commit()
        )
    assert "rolled back" in str(excinfo.value)
    assert await pop(q, other) == []
    msgs = await pop(q, dst, batch=10)
    assert [m["data"] for m in msgs] == [{"first": True}]


@aiotest
async def test_empty_transaction_is_refused_locally(q):
    with pytest.raises(Exception) as excinfo:
        await q.transaction().commit()
    assert "no operations" in str(excinfo.value)
    assert q.recorder.matching("POST", "/api/v1/transaction") == []


@aiotest
async def test_failed_ack_in_transaction_with_retry_limit_zero_dead_letters(q):
    src = qname("tx-nack")
    await create_queue(q, src, retry_limit=0)
    await push(q, src, [{"message": "tx-dlq"}])
    [m] = await pop(q, src)
    res = await q.transaction().ack(m, "failed").commit()
    assert res["success"] is True
    assert await pop(q, src) == []
    deadline = time.monotonic() + 5
    while True:
        dlq = await q.queue(src).dlq().get()
        if dlq["messages"] or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert len(dlq["messages"]) == 1
    assert dlq["messages"][0]["data"]["message"] == "tx-dlq"
