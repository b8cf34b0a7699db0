"""Timers (client.timers, client.timer(queue), and the transaction's timers
rider): POST /api/v1/timers, DELETE|GET /api/v1/timers/:queue/*timerKey,
GET /api/v1/timers/:queue.

Spec: shared/spec/queen2-wire.md §3.10, §2.1-§2.3, §4 item 14.
Client: queen/timers/timers.py, queen/timers/ops.py,
queen/builders/transaction_builder.py (TransactionTimerBuilder).

Pending timers are scheduled 60 s or more ahead, so they never fire while a
test runs; the ones meant to fire use a negative delay and are polled for at
most FIRE_WAIT seconds.
"""

import asyncio
import time
from datetime import datetime, timedelta
from typing import Any, Dict, List, Optional

import pytest

from queen import TimerError
from queen.errors import wrap_http_error

from qhelpers import aiotest, create_queue, kv_ns, new_tid, pop, push, qname, uid

pytestmark = pytest.mark.timers

FIRE_WAIT = 15.0
LATER_MS = 600_000  # pending for the whole test


def timer_key(tag: str = "t") -> str:
    return f"{tag}:{uid(12)}"


def assert_iso(ts: Any) -> None:
    assert isinstance(ts, str) and ts, ts
    datetime.fromisoformat(ts.replace("Z", "+00:00"))


def assert_scheduled(res, *, queue, key, txn, status="scheduled"):
    assert res["ok"] is True, res
    assert bool(res) is True
    assert res["status"] == status, res
    assert res["queue"] == queue
    assert res["timerKey"] == key
    assert res["txn"] == txn
    assert isinstance(res["messageId"], str) and res["messageId"], res
    assert_iso(res["deliverAt"])


async def wait_for_message(q, queue: str, deadline: float, *, partition: Optional[str] = None) -> List[Dict[str, Any]]:
    """Non-waiting pops every 0.2 s until something arrives or ``deadline``
    (a time.monotonic() value) passes."""
    while True:
        msgs = await pop(q, queue, batch=10, partition=partition)
        if msgs or time.monotonic() >= deadline:
            return msgs
        await asyncio.sleep(0.2)


async def wait_gone(q, queue: str, key: str, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while True:
        res = await q.timers.peek(queue, key)
        if not res.get("found") or time.monotonic() >= deadline:
            return res
        await asyncio.sleep(0.2)


# ---------------------------------------------------------------------------
# schedule / reschedule
# ---------------------------------------------------------------------------


@aiotest
async def test_schedule_answers_promise(q):
    tq = qname("tm-sched")
    await create_queue(q, tq)
    key, txn = timer_key(), new_tid()
    res = await q.timers.schedule(tq, key, {"hello": 1}, delay_ms=LATER_MS, txn=txn)
    assert_scheduled(res, queue=tq, key=key, txn=txn)
    calls = q.recorder.matching("POST", "/api/v1/timers")
    assert [c.status for c in calls] == [200]

    # Without a txn the client mints one (a UUID) and the broker echoes it.
    key2 = timer_key()
    res2 = await q.timers.schedule(tq, key2, "text", delay_ms=LATER_MS)
    assert res2["status"] == "scheduled"
    assert isinstance(res2["txn"], str) and len(res2["txn"]) == 36
    assert res2["messageId"] != res["messageId"]

    found = await q.timers.peek(tq, key)
    assert found["found"] is True and bool(found) is True, found
    for field, want in (("queue", tq), ("timerKey", key), ("txn", txn)):
        if field in found:
            assert found[field] == want, found


@aiotest
async def test_schedule_again_is_rescheduled(q):
    tq = qname("tm-resched")
    await create_queue(q, tq)
    key = timer_key()
    first = await q.timers.schedule(tq, key, {"v": 1}, delay_ms=LATER_MS, txn=new_tid())
    assert first["status"] == "scheduled"

    # The same key again, op "schedule": one upsert, status rescheduled.
    t2 = new_tid()
    second = await q.timers.schedule(tq, key, {"v": 2}, delay_ms=2 * LATER_MS, txn=t2)
    assert_scheduled(second, queue=tq, key=key, txn=t2, status="rescheduled")
    # deliverAt strings compare in time order (fixed width).
    assert len(second["deliverAt"]) == len(first["deliverAt"])
    assert first["deliverAt"] < second["deliverAt"]

    # op "reschedule" and the fluent builder answer the same.
    t3 = new_tid()
    third = await q.timers.reschedule(tq, key, {"v": 3}, delay_ms=LATER_MS // 2, txn=t3)
    assert_scheduled(third, queue=tq, key=key, txn=t3, status="rescheduled")
    assert third["deliverAt"] < second["deliverAt"]
    fourth = await q.timer(tq).key(key).payload({"v": 4}).after(timedelta(minutes=20)).schedule()
    assert fourth["status"] == "rescheduled"

    # Still one pending timer under that key.
    page = await q.timers.list(tq)
    assert [r["timerKey"] for r in page["rows"]] == [key]
    assert (await q.timer(tq).key(key).cancel())["status"] == "cancelled"


@aiotest
async def test_negative_delay_fires_promptly(q):
    tq = qname("tm-fire")
    await create_queue(q, tq)
    key, txn = timer_key("fire"), new_tid()
    key_p, txn_p = timer_key("firep"), new_tid()
    payload = {"order": 42, "items": [1, 2], "note": "d\u00e9j\u00e0"}
    res = await q.timers.schedule(tq, key, payload, delay_ms=-1000, txn=txn)
    assert_scheduled(res, queue=tq, key=key, txn=txn)
    res_p = await q.timers.schedule(tq, key_p, "just a string", delay=timedelta(milliseconds=-1), partition="tp", txn=txn_p)
    assert res_p["status"] == "scheduled"

    # One pop serves one partition: pop until both arrived (or FIRE_WAIT).
    deadline = time.monotonic() + FIRE_WAIT
    seen: Dict[str, Dict[str, Any]] = {}
    while len(seen) < 2:
        msgs = await wait_for_message(q, tq, deadline)
        if not msgs:
            break
        for m in msgs:
            assert m["transactionId"] not in seen, f"delivered twice: {m}"
            seen[m["transactionId"]] = m
        assert (await q.ack(msgs, True))["success"] is True
    assert set(seen) == {txn, txn_p}, f"timers not delivered within {FIRE_WAIT}s: {list(seen)}"

    m = seen[txn]
    assert m["data"] == payload
    assert m.get("partition", "Default") == "Default"
    if m.get("id"):
        assert m["id"] == res["messageId"]
    mp = seen[txn_p]
    assert mp["data"] == "just a string"
    assert mp.get("partition", "tp") == "tp"
    if mp.get("id"):
        assert mp["id"] == res_p["messageId"]

    # Fired timers are no longer pending.
    assert (await wait_gone(q, tq, key))["found"] is False
    assert (await wait_gone(q, tq, key_p))["found"] is False
    gone = await q.timers.cancel(tq, key, txn=txn)
    assert gone["ok"] is False and gone["status"] == "absent", gone
    assert gone["txn"] == txn  # so the caller can look for it in the queue
    # Delivered once.
    assert await pop(q, tq, batch=10) == []


# ---------------------------------------------------------------------------
# cancel / peek / list
# ---------------------------------------------------------------------------


@aiotest
async def test_cancel_via_delete_route(q):
    tq = qname("tm-cancel")
    await create_queue(q, tq)
    key, txn = f"order/{uid()}/expire", new_tid()  # a key with '/' stays in the path
    await q.timers.schedule(tq, key, {"x": 1}, delay_ms=LATER_MS, txn=txn)
    assert (await q.timers.peek(tq, key))["found"] is True

    res = await q.timers.cancel(tq, key, txn=txn)
    assert res["ok"] is True and bool(res) is True, res
    assert res["status"] == "cancelled"
    assert res["queue"] == tq and res["timerKey"] == key and res["txn"] == txn
    [call] = q.recorder.matching("DELETE", "/api/v1/timers/")
    assert call.path == f"/api/v1/timers/{tq}/{key}"
    assert call.query == f"txn={txn}"
    assert call.status == 200

    missing = await q.timers.peek(tq, key)
    assert missing["found"] is False and bool(missing) is False
    again = await q.timers.cancel(tq, key, txn=txn)
    assert again["ok"] is False and bool(again) is False
    assert again["status"] == "absent" and again["txn"] == txn
    bare = await q.timers.cancel(tq, key)
    assert bare["ok"] is False and bare["status"] == "absent"
    assert bare.get("txn") is None
    assert all(c.status == 200 for c in q.recorder.matching("DELETE", "/api/v1/timers/"))
    assert await pop(q, tq) == []


@aiotest
async def test_peek_found_and_not_found(q):
    tq = qname("tm-peek")
    await create_queue(q, tq)
    nope = await q.timers.peek(tq, "never-scheduled")
    assert nope["found"] is False and bool(nope) is False
    ghost = await q.timers.peek(qname("tm-ghost"), "k")  # a queue that does not exist
    assert ghost["found"] is False
    key = timer_key()
    await q.timers.schedule(tq, key, [1, 2, 3], delay_ms=LATER_MS)
    hit = await q.timers.peek(tq, key)
    assert hit["found"] is True and bool(hit) is True
    assert all(c.status == 200 for c in q.recorder.matching("GET", "/api/v1/timers/"))


@aiotest
async def test_list_paged(q):
    tq = qname("tm-list")
    await create_queue(q, tq)
    keys = [f"k-{i}" for i in range(5)]
    op = q.timers.op
    res = await q.timers.batch([op.schedule(tq, k, {"k": k}, delay_ms=LATER_MS) for k in reversed(keys)])
    assert len(res) == 5
    assert [r["timerKey"] for r in res] == list(reversed(keys))  # index-aligned
    assert all(r["status"] == "scheduled" for r in res)

    page = await q.timers.list(tq, limit=2)
    assert [r["timerKey"] for r in page["rows"]] == keys[:2]
    assert page["truncated"] is True
    assert page["nextAfter"] == keys[1]
    nxt = await q.timers.list(tq, after=page["nextAfter"], limit=2)
    assert [r["timerKey"] for r in nxt["rows"]] == keys[2:4]
    assert nxt["truncated"] is True
    last = await q.timers.list(tq, after=nxt["nextAfter"], limit=2)
    assert [r["timerKey"] for r in last["rows"]] == keys[4:]
    assert last["truncated"] is False and not last.get("nextAfter")

    everything = await q.timers.list(tq)
    assert [r["timerKey"] for r in everything["rows"]] == keys
    assert everything["truncated"] is False
    walked = await q.timers.list_all(tq, limit=2)
    assert [r["timerKey"] for r in walked] == keys

    empty = await q.timers.list(qname("tm-empty"))
    assert empty.get("rows") == [] and empty.get("truncated") is False


# ---------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------


@aiotest
async def test_same_key_twice_in_one_call_is_bad_request(q):
    tq = qname("tm-dup")
    await create_queue(q, tq)
    op = q.timers.op
    key = timer_key()
    with pytest.raises(TimerError) as excinfo:
        await q.timers.batch(
            [op.schedule(tq, key, 1, delay_ms=LATER_MS), op.schedule(tq, key, 2, delay_ms=LATER_MS)]
        )
    e = excinfo.value
    assert e.status == 400
    assert e.code == "timers_bad_request"
    assert e.response.json()["error"] == "timers_bad_request"
    assert e.response.json().get("code") in (None, "timers_bad_request")
    # A schedule and a cancel of one key are the same key twice too.
    with pytest.raises(TimerError) as excinfo:
        await q.timers.batch([op.schedule(tq, key, 1, delay_ms=LATER_MS), op.cancel(tq, key)])
    assert excinfo.value.status == 400 and excinfo.value.code == "timers_bad_request"
    # Nothing of either call applied.
    assert (await q.timers.peek(tq, key))["found"] is False
    # Sent once each: a 4xx is never retried.
    assert [c.status for c in q.recorder.matching("POST", "/api/v1/timers")] == [400, 400]


@aiotest
async def test_server_owned_field_refused_by_client(q):
    tq = qname("tm-owned")
    for field, value in (("deliverAt", "2030-01-01T00:00:00Z"), ("messageId", new_tid()),
                         ("producerSub", "billing"), ("_anything", 1)):
        op = q.timers.op.schedule(tq, timer_key(), {"x": 1}, delay_ms=LATER_MS)
        op[field] = value
        with pytest.raises(ValueError):
            await q.timers.batch([op])
    assert q.recorder.matching("POST", "/api/v1/timers") == []


@aiotest
async def test_server_owned_field_refused_by_broker(q):
    # NOT the public API: the client refuses these fields before sending (see
    # above), so this posts through the client's own HTTP layer to check that
    # the broker refuses them too (spec §3.10).
    tq = qname("tm-owned-b")
    await create_queue(q, tq)
    for field, value in (("deliverAt", "2030-01-01T00:00:00Z"), ("attempts", 0), ("_x", 1)):
        key = timer_key()
        op = q.timers.op.schedule(tq, key, {"x": 1}, delay_ms=LATER_MS)
        op[field] = value
        with pytest.raises(Exception) as excinfo:
            try:
                await q._http_client.post("/api/v1/timers", {"operations": [op]})
            except Exception as error:
                raise wrap_http_error(error, TimerError) from None
        e = excinfo.value
        assert isinstance(e, TimerError), repr(e)
        assert e.status == 400, field
        assert e.code == "timers_bad_request", (field, e.code)
        assert (await q.timers.peek(tq, key))["found"] is False


@aiotest
async def test_delay_is_required_locally(q):
    with pytest.raises(ValueError):
        await q.timers.schedule(qname("tm-nodelay"), "k", {"x": 1})
    with pytest.raises(ValueError):
        await q.timer(qname("tm-nokey")).payload(1).after_ms(5).schedule()
    assert q.recorder.matching("POST", "/api/v1/timers") == []


# ---------------------------------------------------------------------------
# the timers rider of a transaction
# ---------------------------------------------------------------------------


@aiotest
async def test_rider_commits_with_push(q):
    tq = qname("tm-rider")
    await create_queue(q, tq)
    key, txn, push_tid = timer_key("rider"), new_tid(), new_tid()
    res = await (
        q.transaction()
        .queue(tq)
        .push([{"data": {"pushed": 1}, "transactionId": push_tid}])
        .timer(tq)
        .key(key)
        .payload({"timer": 1})
        .after_ms(LATER_MS)
        .txn(txn)
        .schedule()
        .commit()
    )
    assert res["success"] is True and bool(res) is True, res
    results = res["results"]
    assert [r["type"] for r in results] == ["push", "timer"]
    assert results[0]["transactionId"] == push_tid
    assert results[1].get("status") == "scheduled", results[1]
    assert results[1].get("timerKey") == key and results[1].get("txn") == txn

    peek = await q.timers.peek(tq, key)
    assert peek["found"] is True
    msgs = await pop(q, tq, batch=10)
    assert [m["transactionId"] for m in msgs] == [push_tid]  # the timer is still pending
    assert (await q.ack(msgs[0]))["success"] is True

    # A timer-only bundle (operations: []) cancels it.
    cancelled = await q.transaction().timer(tq).key(key).txn(txn).cancel().commit()
    assert cancelled["success"] is True, cancelled
    assert [r["type"] for r in cancelled["results"]] == ["timer"]
    assert cancelled["results"][0].get("status") == "cancelled", cancelled
    assert (await q.timers.peek(tq, key))["found"] is False


@aiotest
async def test_rider_timer_fires_with_its_txn(q):
    tq = qname("tm-rider-fire")
    await create_queue(q, tq)
    key, txn = timer_key("rf"), new_tid()
    res = await q.transaction().timer(tq).key(key).payload({"late": True}).after_ms(-1).txn(txn).schedule().commit()
    assert res["success"] is True, res
    promised = res["results"][0].get("messageId")
    msgs = await wait_for_message(q, tq, time.monotonic() + FIRE_WAIT)
    assert [m["transactionId"] for m in msgs] == [txn], f"not delivered within {FIRE_WAIT}s"
    assert msgs[0]["data"] == {"late": True}
    if promised and msgs[0].get("id"):
        assert msgs[0]["id"] == promised
    assert (await q.ack(msgs[0]))["success"] is True


@aiotest
async def test_rider_rolled_back_when_required_kv_loses(q):
    tq = qname("tm-rider-lost")
    ns = kv_ns("tm")
    await create_queue(q, tq)
    v1 = (await q.kv.put(ns, "fence", "epoch-1", forever=True))["version"]
    v2 = (await q.kv.put(ns, "fence", "epoch-2", forever=True))["version"]
    key = timer_key("lost")
    res = await (
        q.transaction()
        .kv.check(ns, "fence", expect=v1, required=True)
        .queue(tq)
        .push([{"data": {"pushed": True}}])
        .timer(tq)
        .key(key)
        .payload({"never": True})
        .after_ms(LATER_MS)
        .schedule()
        .commit()
    )
    # Returned, not raised. Flat index: 1 push item + kv[0]; timers come after.
    assert res["success"] is False and bool(res) is False, res
    assert res["reason"] == "kv_precondition", res
    assert res["failedIndex"] == 1, res
    assert res["kvReason"] == "version"
    assert res["version"] == v2 and res["value"] == "epoch-2"
    assert res.get("results") in ([], None)
    assert q.recorder.matching("POST", "/api/v1/transaction")[-1].status == 200

    # Rolled back whole: no timer, no message.
    assert (await q.timers.peek(tq, key))["found"] is False
    assert (await q.timers.list(tq))["rows"] == []
    assert await pop(q, tq, batch=10) == []

    # The same bundle under the live version commits, timer included.
    ok = await (
        q.transaction()
        .kv.check(ns, "fence", expect=v2, required=True)
        .queue(tq)
        .push([{"data": {"pushed": True}}])
        .timer(tq)
        .key(key)
        .payload({"now": True})
        .after_ms(LATER_MS)
        .schedule()
        .commit()
    )
    assert ok["success"] is True, ok
    assert [r["type"] for r in ok["results"]] == ["push", "kv", "timer"]
    assert (await q.timers.peek(tq, key))["found"] is True
    assert (await q.timers.cancel(tq, key))["status"] == "cancelled"
