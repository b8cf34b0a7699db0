"""KV riders inside transactions (the top-level "kv" array of
POST /api/v1/transaction): gates, fate sharing with acks and pushes.

Spec: shared/spec/kv.md "Inside a transaction", shared/spec/queen2-wire.md §2.
"""

import asyncio

import pytest

from qhelpers import aiotest, create_queue, kv_ns, new_tid, pop, push, qname

pytestmark = pytest.mark.tx_kv


def assert_kv_precondition(res, *, failed_index, kv_reason):
    assert res["success"] is False, res
    assert bool(res) is False
    assert res["reason"] == "kv_precondition", res
    assert res["failedIndex"] == failed_index, res
    assert res["kvReason"] == kv_reason, res
    assert res.get("results") in ([], None), res


@aiotest
async def test_once_and_ack_commit_together(q):
    src = qname("txkv-once")
    ns = kv_ns("txkv")
    await create_queue(q, src)
    await push(q, src, [{"order": 1}])
    [m] = await pop(q, src)
    key = f"done:{m['transactionId']}"
    res = await q.transaction().once(ns, key, ttl_seconds=300).ack(m).commit()
    assert res["success"] is True and bool(res) is True
    results = res["results"]
    assert len(results) == 2
    assert results[0]["type"] == "ack" and results[0]["success"] is True
    assert results[1]["type"] == "kv"
    assert results[1]["op"] == "putIfAbsent" and results[1]["applied"] is True
    got = await q.kv.get(ns, key)
    assert got["found"] is True and got["value"] is True
    assert await pop(q, src) == []


@aiotest
async def test_flat_result_index_space(q):
    src, dst = qname("txkv-flat-src"), qname("txkv-flat-dst")
    ns = kv_ns("txkv")
    await create_queue(q, src)
    await create_queue(q, dst)
    await push(q, src, [{"in": 1}])
    [m] = await pop(q, src)
    res = await (
        q.transaction()
        .once(ns, f"done:{m['transactionId']}", forever=True)
        .queue(dst)
        .push([{"data": {"out": 1}}, {"data": {"out": 2}}])
        .ack(m)
        .kv.incr(ns, "processed", forever=True)
        .commit()
    )
    assert res["success"] is True
    # push items first, then acks, then the kv rider in its own order.
    assert [r["type"] for r in res["results"]] == ["push", "push", "ack", "kv", "kv"]
    assert res["results"][3]["op"] == "putIfAbsent"
    assert res["results"][4]["op"] == "incr" and res["results"][4]["value"] == 1
    got = await pop(q, dst, batch=10)
    assert [x["data"] for x in got] == [{"out": 1}, {"out": 2}]


@aiotest
async def test_second_identical_bundle_returns_kv_precondition(q):
    src = qname("txkv-dup")
    ns = kv_ns("txkv")
    await create_queue(q, src)
    # The same business event delivered twice (two messages, one gate key).
    await push(q, src, [{"orderId": 42}, {"orderId": 42}])
    key = "order:42"

    [m1] = await pop(q, src, batch=1)
    first = await q.transaction().once(ns, key, forever=True, value={"by": m1["transactionId"]}).ack(m1).commit()
    assert first["success"] is True
    winner = await q.kv.get(ns, key)

    [m2] = await pop(q, src, batch=1)
    second = await q.transaction().once(ns, key, forever=True, value={"by": m2["transactionId"]}).ack(m2).commit()
    # Returned, not raised: 1 ack op + kv[0] => flat index 1.
    assert_kv_precondition(second, failed_index=1, kv_reason="exists")
    assert second["value"] == {"by": m1["transactionId"]}
    assert second["version"] == winner["version"]
    assert q.recorder.matching("POST", "/api/v1/transaction")[-1].status == 200
    # The refused bundle applied nothing: the winner's row is unchanged and
    # m2 is still on the cursor, under its own live lease.
    assert (await q.kv.get(ns, key))["value"] == {"by": m1["transactionId"]}
    assert await pop(q, src) == []
    direct = await q.ack(m2)
    assert direct["success"] is True
    assert not direct.get("noop"), "m2 had already been acked by the refused bundle"
    assert await pop(q, src) == []


@aiotest
async def test_gate_in_front_of_push(q):
    dst = qname("txkv-gate")
    ns = kv_ns("txkv")
    await create_queue(q, dst)
    key = f"evt:{new_tid()}"

    def bundle():
        return q.transaction().once(ns, key, ttl_seconds=600).queue(dst).push([{"data": {"evt": 1}}])

    won = await bundle().commit()
    assert won["success"] is True
    assert [r["type"] for r in won["results"]] == ["push", "kv"]
    lost = await bundle().commit()
    # 1 push item + kv[0] => flat index 1.
    assert_kv_precondition(lost, failed_index=1, kv_reason="exists")
    assert lost["value"] is True
    msgs = await pop(q, dst, batch=10)
    assert [m["data"] for m in msgs] == [{"evt": 1}]


@aiotest
async def test_lost_gate_pushes_nothing(q):
    dst = qname("txkv-lost")
    ns = kv_ns("txkv")
    await create_queue(q, dst)
    key = "claimed"
    await q.kv.put_if_absent(ns, key, {"by": "other"}, forever=True)
    res = await (
        q.transaction()
        .once(ns, key, forever=True)
        .kv.put(ns, "side-effect", 1, forever=True)
        .queue(dst)
        .push([{"data": {"a": 1}}, {"data": {"a": 2}}])
        .commit()
    )
    # 2 push items + kv[0] => flat index 2.
    assert_kv_precondition(res, failed_index=2, kv_reason="exists")
    assert res["value"] == {"by": "other"}
    assert await pop(q, dst, batch=10) == []
    assert (await q.kv.get(ns, "side-effect"))["found"] is False


@aiotest
async def test_kv_put_with_ack_of_never_pushed_transaction_raises(q):
    src = qname("txkv-ghost")
    ns = kv_ns("txkv")
    await create_queue(q, src)
    await push(q, src, [{"real": 1}])
    [m] = await pop(q, src)
    ghost = {"transactionId": new_tid(), "partitionId": m["partitionId"], "leaseId": m["leaseId"]}
    with pytest.raises(Exception) as excinfo:
        await q.transaction().kv.put(ns, "state", {"x": 1}, forever=True).ack(ghost).commit()
    assert "rolled back" in str(excinfo.value)
    assert q.recorder.matching("POST", "/api/v1/transaction")[-1].status == 200
    assert (await q.kv.get(ns, "state"))["found"] is False
    # The real message is untouched and its lease still good.
    assert (await q.ack(m))["success"] is True


@aiotest
async def test_kv_write_rolled_back_with_expired_lease_ack(q):
    src = qname("txkv-exp")
    ns = kv_ns("txkv")
    await create_queue(q, src, lease_time=1)
    await push(q, src, [{"e": 1}])
    [m] = await pop(q, src)
    await asyncio.sleep(1.6)
    with pytest.raises(Exception) as excinfo:
        await q.transaction().kv.put(ns, "state", 1, forever=True).kv.incr(ns, "n", forever=True).ack(m).commit()
    assert "rolled back" in str(excinfo.value)
    assert (await q.kv.get(ns, "state"))["found"] is False
    assert (await q.kv.get(ns, "n"))["found"] is False


@aiotest
async def test_kv_only_bundle(q):
    ns = kv_ns("txkv")
    res = await (
        q.transaction()
        .kv.put(ns, "a", {"v": 1}, forever=True)
        .kv.incr(ns, "n", delta=2, ttl_seconds=60)
        .kv.get(ns, "missing")
        .kv.get_many(ns, ["a", "missing"])
        .commit()
    )
    assert res["success"] is True
    results = res["results"]
    assert [r["type"] for r in results] == ["kv", "kv", "kv", "kv"]
    assert [r["op"] for r in results] == ["put", "incr", "get", "getMany"]
    assert results[0]["applied"] is True
    assert results[1]["value"] == 2
    assert results[2]["found"] is False
    assert results[3]["missing"] == ["missing"]
    assert (await q.kv.get(ns, "a"))["value"] == {"v": 1}
    with pytest.raises(ValueError):
        q.transaction().kv.get_prefix(ns, "a")  # refused client side


@aiotest
async def test_required_check_guards_a_push(q):
    dst = qname("txkv-check")
    ns = kv_ns("txkv")
    await create_queue(q, dst)
    v1 = (await q.kv.put(ns, "fence", "epoch-1", forever=True))["version"]

    def bundle(expect):
        return (
            q.transaction()
            .kv.check(ns, "fence", expect=expect, required=True)
            .queue(dst)
            .push([{"data": {"epoch": expect}}])
        )

    ok = await bundle(v1).commit()
    assert ok["success"] is True
    v2 = (await q.kv.put(ns, "fence", "epoch-2", forever=True))["version"]
    stale = await bundle(v1).commit()
    assert_kv_precondition(stale, failed_index=1, kv_reason="version")
    assert stale["value"] == "epoch-2"
    assert stale["version"] == v2
    msgs = await pop(q, dst, batch=10)
    assert [m["data"] for m in msgs] == [{"epoch": v1}]
