"""Broker core through the official client: configure, push, pop, ack, nack,
DLQ, leases, consumer groups, subscription modes, multi-partition pop.

Spec: shared/spec/queen2-wire.md §3 and §4.
"""

import asyncio
import time

import pytest

from qhelpers import (
    aiotest,
    create_queue,
    drain,
    new_tid,
    poll_pop,
    pop,
    push,
    qname,
    uid,
)

pytestmark = pytest.mark.core


# ---------------------------------------------------------------------------
# Configure / delete
# ---------------------------------------------------------------------------


@aiotest
async def test_configure_echoes_options(q):
    name = qname("cfg")
    res = await q.queue(name).config(
        {"lease_time": 60, "retry_limit": 5, "priority": 7, "max_size": 5000}
    ).create()
    assert res["configured"] is True
    assert res["queue"] == name
    opts = res["options"]
    assert opts["leaseTime"] == 60
    assert opts["retryLimit"] == 5
    assert opts["priority"] == 7
    assert opts["maxSize"] == 5000


@aiotest
async def test_configure_without_config_sends_defaults(q):
    # create() with no config() sends the nine QUEUE_DEFAULTS; namespace/task null.
    name = qname("cfgdef")
    res = await q.queue(name).create()
    assert res["configured"] is True
    assert res["options"]["leaseTime"] == 300
    assert res["options"]["retryLimit"] == 3


@aiotest
async def test_delete_queue(q):
    name = qname("del")
    await create_queue(q, name)
    await push(q, name, [{"x": 1}])
    res = await q.queue(name).delete()
    assert res["deleted"] is True
    # Its messages went with it: configured again, the queue is empty.
    await create_queue(q, name)
    assert await pop(q, name) == []
    # A missing queue is 200 with deleted:false (delete-before-create idiom).
    again = await q.queue(qname("never")).delete()
    assert again["deleted"] is False


# ---------------------------------------------------------------------------
# Push / pop
# ---------------------------------------------------------------------------


@aiotest
async def test_push_single_and_pop(q):
    name = qname("one")
    await create_queue(q, name)
    tid = new_tid()
    res = await q.queue(name).push([{"data": {"hello": "world"}, "transactionId": tid}])
    assert isinstance(res, list) and len(res) == 1
    item = res[0]
    assert item["status"] == "queued"
    assert item["transaction_id"] == tid
    assert isinstance(item["message_id"], str) and item["message_id"]
    assert item.get("index", 0) == 0
    assert q.recorder.matching("POST", "/api/v1/push")[-1].status == 201

    msgs = await pop(q, name)
    assert len(msgs) == 1
    m = msgs[0]
    assert m["data"] == {"hello": "world"}
    assert m["transactionId"] == tid
    assert m["partitionId"]
    assert m["leaseId"]
    assert m.get("partition", "Default") == "Default"
    ack = await q.ack(m)
    assert ack["success"] is True and not ack.get("error")


@aiotest
async def test_push_to_unconfigured_queue_creates_it(q):
    name = qname("auto")
    await push(q, name, [{"n": 1}])
    msgs = await pop(q, name)
    assert [m["data"] for m in msgs] == [{"n": 1}]


@aiotest
async def test_push_batch_1000_then_pop_all_in_order(q):
    name = qname("k")
    await create_queue(q, name)
    n = 1000
    res = await push(q, name, [{"i": i} for i in range(n)])
    assert [r["index"] for r in res] == list(range(n))
    assert len({r["message_id"] for r in res}) == n
    seen = await drain(q, name, expect=n, batch=1000)
    assert [m["data"]["i"] for m in seen] == list(range(n))
    assert await pop(q, name) == []


@aiotest
async def test_null_and_empty_payload_round_trip(q):
    name = qname("null")
    await create_queue(q, name)
    await push(q, name, [None, {}, 0, "s", [1, 2]])
    msgs = await pop(q, name, batch=10)
    assert len(msgs) == 5
    assert "data" in msgs[0] and msgs[0]["data"] is None
    assert msgs[1]["data"] == {}
    assert msgs[2]["data"] == 0
    assert msgs[3]["data"] == "s"
    assert msgs[4]["data"] == [1, 2]


@aiotest
async def test_dedup_by_transaction_id(q):
    name = qname("dedup")
    await create_queue(q, name)
    tid = new_tid()
    first = await q.queue(name).push([{"data": {"v": 1}, "transactionId": tid}])
    assert first[0]["status"] == "queued"
    dup = await q.queue(name).push([{"data": {"v": 2}, "transactionId": tid}])
    assert dup[0]["status"] == "duplicate"
    assert dup[0]["message_id"] == first[0]["message_id"]
    # Inside one request: the second occurrence is a duplicate of the first.
    tid2 = new_tid()
    both = await q.queue(name).push(
        [{"data": {"v": 3}, "transactionId": tid2}, {"data": {"v": 4}, "transactionId": tid2}]
    )
    assert [r["status"] for r in both] == ["queued", "duplicate"]
    assert both[1]["message_id"] == both[0]["message_id"]
    # The same transactionId on another partition is a different message.
    other = await q.queue(name).partition("p2").push([{"data": {"v": 5}, "transactionId": tid}])
    assert other[0]["status"] == "queued"

    # Exactly three messages exist: v1 and v3 on Default, v5 on p2.
    everything = await drain_all_partitions(q, name, expect=3)
    by_partition = {}
    for m in everything:
        by_partition.setdefault(m["partitionId"], []).append(m["data"]["v"])
    assert sorted(by_partition.values()) == [[1, 3], [5]]
    assert await pop(q, name) == []


async def drain_all_partitions(q, name, expect, timeout=10.0):
    """Drain a queue across partitions: pop (one partition per call) + ack."""
    seen = []
    deadline = time.monotonic() + timeout
    while len(seen) < expect and time.monotonic() < deadline:
        msgs = await pop(q, name, batch=100)
        if not msgs:
            await asyncio.sleep(0.1)
            continue
        seen.extend(msgs)
        res = await q.ack(msgs)
        assert res["success"], res
    return seen


@aiotest
async def test_pop_on_empty_queue_returns_nothing(q):
    name = qname("empty")
    await create_queue(q, name)
    t0 = time.monotonic()
    assert await pop(q, name) == []
    assert time.monotonic() - t0 < 3.0, "wait=false must not long-poll"
    last = q.recorder.matching("GET", "/api/v1/pop")[-1]
    assert last.status in (200, 204)
    assert "wait=false" in last.query


@aiotest
async def test_pop_without_batch_uses_autopilot(q):
    # The default builder (autopilot on, batch never set) sends autopilot=true
    # and no batch: the broker picks the size. Delivery must still work.
    name = qname("auto-pilot")
    await create_queue(q, name)
    await push(q, name, [{"i": i} for i in range(3)])
    msgs = await q.queue(name).wait(False).pop()
    assert 1 <= len(msgs) <= 3
    assert [m["data"]["i"] for m in msgs] == list(range(len(msgs)))
    query = q.recorder.matching("GET", "/api/v1/pop")[-1].query
    assert "autopilot=true" in query and "batch=" not in query


@aiotest
async def test_long_poll_returns_when_push_lands(q):
    name = qname("lp")
    await create_queue(q, name)

    async def later():
        await asyncio.sleep(1.5)
        await push(q, name, [{"late": True}])

    t0 = time.monotonic()
    pusher = asyncio.create_task(later())
    msgs = await q.queue(name).batch(1).wait(True).timeout_millis(8000).pop()
    elapsed = time.monotonic() - t0
    await pusher
    assert [m["data"] for m in msgs] == [{"late": True}]
    assert 1.2 <= elapsed < 4.5, f"long poll returned after {elapsed:.2f}s"


@aiotest
async def test_long_poll_times_out_empty(q):
    name = qname("lpto")
    await create_queue(q, name)
    t0 = time.monotonic()
    msgs = await q.queue(name).batch(1).wait(True).timeout_millis(1000).pop()
    elapsed = time.monotonic() - t0
    assert msgs == []
    assert 0.8 <= elapsed < 4.0, f"long poll with timeout=1000 answered after {elapsed:.2f}s"


# ---------------------------------------------------------------------------
# Ordering and consumer groups
# ---------------------------------------------------------------------------


@aiotest
async def test_fifo_with_concurrent_consumers_in_one_group(q):
    name = qname("fifo")
    group = f"g-{uid()}"
    await create_queue(q, name)
    n = 40
    await push(q, name, [{"i": i} for i in range(n)])
    seen = []

    async def handler(msg):
        seen.append(msg["data"]["i"])

    await (
        q.queue(name)
        .group(group)
        .subscription_mode("all")
        .concurrency(10)
        .batch(1)
        .each()
        .wait(False)
        .idle_millis(2000)
        .consume(handler)
    )
    assert seen == list(range(n)), f"out of order or lost: {seen}"
    assert await pop(q, name, mode="all", group=group) == []


@aiotest
async def test_consumer_groups_each_see_every_message(q):
    name = qname("fan")
    await create_queue(q, name)
    await push(q, name, [{"i": i} for i in range(5)])
    g1, g2 = f"g1-{uid()}", f"g2-{uid()}"
    a = await drain(q, name, expect=5, group=g1, mode="all")
    b = await drain(q, name, expect=5, group=g2, mode="all")
    assert [m["data"]["i"] for m in a] == list(range(5))
    assert [m["data"]["i"] for m in b] == list(range(5))
    assert all(m.get("consumerGroup", g1) == g1 for m in a)
    # Both groups are at the end now.
    assert await pop(q, name, mode="all", group=g1) == []
    assert await pop(q, name, mode="all", group=g2) == []


@aiotest
async def test_workers_in_one_group_compete(q):
    name = qname("compete")
    group = f"g-{uid()}"
    await create_queue(q, name)
    await push(q, name, [{"i": i} for i in range(3)])
    first = await pop(q, name, group=group, mode="all")
    assert len(first) == 3
    # The partition is leased to the first worker for this group.
    assert await pop(q, name, group=group, mode="all") == []
    assert (await q.ack(first, True, {"group": group}))["success"]
    assert await pop(q, name, mode="all", group=group) == []


@aiotest
async def test_queue_mode_is_independent_of_groups(q):
    name = qname("qmode")
    await create_queue(q, name)
    await push(q, name, [{"i": i} for i in range(3)])
    billing = f"billing-{uid()}"
    consumed = await drain(q, name, expect=3, group=billing, mode="all")
    assert len(consumed) == 3
    # Queue mode (__QUEUE_MODE__) has its own cursor and still sees everything.
    qm = await pop(q, name, batch=10)
    assert [m["data"]["i"] for m in qm] == [0, 1, 2]
    assert (await q.ack(qm))["success"]
    # And consuming in queue mode does not move the group's cursor back.
    assert await pop(q, name, mode="all", group=billing) == []


@aiotest
async def test_subscription_mode_new_skips_history(q):
    name = qname("subnew")
    group = f"new-{uid()}"
    await create_queue(q, name)
    await push(q, name, [{"old": i} for i in range(3)])
    await asyncio.sleep(0.5)
    # Registration: the group's first pop, which returns nothing.
    assert await pop(q, name, group=group, mode="new") == []
    await asyncio.sleep(0.5)
    await push(q, name, [{"new": i} for i in range(3)])
    got = await poll_pop(q, name, group=group, mode="new", batch=10, want=3, timeout=3)
    assert [m["data"] for m in got] == [{"new": 0}, {"new": 1}, {"new": 2}]
    assert (await q.ack(got, True, {"group": group}))["success"]
    # Later pops ignore subscriptionMode: the stored cursor wins.
    await push(q, name, [{"new": 3}, {"new": 4}])
    got2 = await pop(q, name, group=group, mode="new", batch=10)
    assert [m["data"] for m in got2] == [{"new": 3}, {"new": 4}]
    assert (await q.ack(got2, True, {"group": group}))["success"]
    # A group registered with "all" sees the history too.
    everything = await drain(q, name, expect=8, group=f"all-{uid()}", mode="all")
    assert len(everything) == 8


@aiotest
async def test_subscription_from_now_skips_history(q):
    name = qname("subnow")
    group = f"now-{uid()}"
    await create_queue(q, name)
    await push(q, name, [{"old": 1}])
    await asyncio.sleep(0.5)
    b = q.queue(name).group(group).subscription_from("now").batch(10).wait(False)
    assert await b.pop() == []
    await asyncio.sleep(0.5)
    await push(q, name, [{"new": 1}])
    b = q.queue(name).group(group).subscription_from("now").batch(10).wait(False)
    got = await b.pop()
    assert [m["data"] for m in got] == [{"new": 1}]


# ---------------------------------------------------------------------------
# Ack / nack / DLQ
# ---------------------------------------------------------------------------


@aiotest
async def test_ack_completes_message(q):
    name = qname("ack")
    await create_queue(q, name)
    await push(q, name, [{"a": 1}])
    [m] = await pop(q, name)
    res = await q.ack(m)
    assert res["success"] is True
    assert res.get("error") is None
    assert q.recorder.matching("POST", "/api/v1/ack")[-1].status == 200
    assert await pop(q, name) == []


@aiotest
async def test_ack_of_last_message_commits_whole_batch(q):
    # Ack as offset commit: acking message N completes the earlier ones.
    name = qname("ackcommit")
    await create_queue(q, name)
    await push(q, name, [{"i": i} for i in range(3)])
    msgs = await pop(q, name, batch=3)
    assert len(msgs) == 3
    res = await q.ack(msgs[2])
    assert res["success"] is True
    assert await pop(q, name) == []


@aiotest
async def test_completed_ack_below_cursor_is_noop(q):
    name = qname("noop")
    await create_queue(q, name)
    await push(q, name, [{"a": 1}])
    [m] = await pop(q, name)
    first = await q.ack(m)
    assert first["success"] is True and not first.get("noop")
    again = await q.ack(m)
    assert again["success"] is True
    assert again.get("noop") is True


@aiotest
async def test_nack_below_cursor_is_already_committed(q):
    name = qname("nackcommitted")
    await create_queue(q, name)
    await push(q, name, [{"a": 1}])
    [m] = await pop(q, name)
    assert (await q.ack(m))["success"]
    res = await q.ack(m, False, {"error": "late nack"})
    assert res["success"] is False
    assert "committed" in res["error"].lower()


@aiotest
async def test_batch_ack_with_nack_in_middle_redelivers_from_nack(q):
    name = qname("mixed")
    await create_queue(q, name)
    tids = [f"tx-{i}-{uid()}" for i in range(1, 6)]
    await push(q, name, [{"i": i} for i in range(5)], tids=tids)
    msgs = await pop(q, name, batch=5)
    assert [m["transactionId"] for m in msgs] == tids
    for i, m in enumerate(msgs):
        m["_status"] = "failed" if i == 1 else "completed"
        if i == 1:
            m["_error"] = "middle failed"
    await q.ack(msgs)
    # The cursor stops just before the lowest nack: tx-2..tx-5 come back.
    again = await poll_pop(q, name, batch=10, want=1, timeout=5)
    assert [m["transactionId"] for m in again] == tids[1:]
    for m in again:
        m.pop("_status", None)
        m.pop("_error", None)
    assert (await q.ack(again))["success"]
    assert await pop(q, name) == []


@aiotest
async def test_batch_ack_success_items(q):
    name = qname("batchack")
    await create_queue(q, name)
    await push(q, name, [{"i": i} for i in range(10)])
    msgs = await pop(q, name, batch=10)
    res = await q.ack(msgs)
    assert res["success"] is True
    results = res["results"]
    assert isinstance(results, list) and len(results) == 10
    assert all(r["success"] is True and r.get("error") is None for r in results)
    assert [r["transactionId"] for r in results] == [m["transactionId"] for m in msgs]
    assert q.recorder.matching("POST", "/api/v1/ack/batch")[-1].status == 200


@aiotest
async def test_nack_redelivers_then_dead_letters_with_error_text(q):
    name = qname("dlq")
    await create_queue(q, name, lease_time=30, retry_limit=1)
    await push(q, name, [{"message": "boom"}])
    deliveries = 0
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        msgs = await pop(q, name)
        if not msgs:
            if deliveries >= 2:
                break
            await asyncio.sleep(0.1)
            continue
        deliveries += 1
        assert deliveries <= 2, "retryLimit 1 allows exactly 2 deliveries"
        res = await q.ack(msgs[0], False, {"error": "Test error - triggering DLQ"})
        assert res["success"] is True, res
    assert deliveries == 2
    dlq = await poll_dlq(q, name, want=1)
    assert len(dlq["messages"]) == 1
    entry = dlq["messages"][0]
    assert "Test error" in entry["errorMessage"]
    assert entry["data"]["message"] == "boom"
    assert dlq.get("total", 1) >= 1
    assert await pop(q, name) == []


@aiotest
async def test_each_consumer_nacks_into_dlq(q):
    name = qname("dlqeach")
    await create_queue(q, name, lease_time=30, retry_limit=1)
    await push(q, name, [{"message": "each-boom"}])
    calls = []

    async def handler(msg):
        calls.append(msg["transactionId"])
        raise RuntimeError("Test error from handler")

    await q.queue(name).batch(1).each().wait(False).idle_millis(1500).consume(handler)
    assert len(calls) == 2 and calls[0] == calls[1]
    dlq = await poll_dlq(q, name, want=1)
    assert len(dlq["messages"]) == 1
    assert "Test error from handler" in dlq["messages"][0]["errorMessage"]


@aiotest
async def test_retry_status_does_not_dead_letter(q):
    # "retry" redelivers without charging the retry budget.
    name = qname("retry")
    await create_queue(q, name, retry_limit=0)
    await push(q, name, [{"r": 1}])
    for _ in range(3):
        msgs = await poll_pop(q, name, timeout=3)
        assert len(msgs) == 1
        await q.ack(msgs[0], "retry")
    msgs = await poll_pop(q, name, timeout=3)
    assert len(msgs) == 1
    assert (await q.ack(msgs[0]))["success"]
    dlq = await q.queue(name).dlq().get()
    assert dlq["messages"] == []


async def poll_dlq(q, name, want, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        res = await q.queue(name).dlq().get()
        if len(res.get("messages") or []) >= want or time.monotonic() >= deadline:
            return res
        await asyncio.sleep(0.2)


@aiotest
async def test_ack_of_unknown_transaction_is_refused_and_keeps_lease(q):
    name = qname("ghost")
    await create_queue(q, name)
    await push(q, name, [{"a": 1}])
    [m] = await pop(q, name)
    ghost = {"transactionId": new_tid(), "partitionId": m["partitionId"], "leaseId": m["leaseId"]}
    res = await q.ack([ghost])
    assert res["success"] is False
    assert "unresolv" in res["error"].lower()
    # The real lease was not burned.
    assert await pop(q, name) == []
    assert (await q.ack([m]))["success"] is True
    assert await pop(q, name) == []


# ---------------------------------------------------------------------------
# Leases
# ---------------------------------------------------------------------------


@aiotest
async def test_lease_expiry_redelivers(q):
    name = qname("lease")
    await create_queue(q, name, lease_time=1)
    await push(q, name, [{"l": 1}])
    [m1] = await pop(q, name)
    t0 = time.monotonic()
    # While the lease is live the partition is not handed out again.
    assert await pop(q, name) == []
    again = await poll_pop(q, name, timeout=10, interval=0.2)
    elapsed = time.monotonic() - t0
    assert len(again) == 1, "not redelivered after lease expiry"
    m2 = again[0]
    assert m2["transactionId"] == m1["transactionId"]
    assert m2["leaseId"] and m2["leaseId"] != m1["leaseId"]
    assert elapsed >= 0.7, f"redelivered after {elapsed:.2f}s, before the 1 s lease expired"
    # The stale lease no longer fences anything.
    stale = await q.ack([m1])
    assert stale["success"] is False
    assert "lease" in stale["error"].lower()
    assert (await q.ack(m2))["success"] is True
    assert await pop(q, name) == []


@aiotest
async def test_lease_renew_extends_and_reports_gone_leases(q):
    name = qname("renew")
    await create_queue(q, name, lease_time=2)
    await push(q, name, [{"r": 1}])
    [m] = await pop(q, name)
    await asyncio.sleep(1.0)
    r = await q.renew(m)
    assert r["success"] is True, r
    assert r["newExpiresAt"]
    assert r.get("renewed", 1) >= 1
    ext = q.recorder.matching("POST", "/api/v1/lease/")[-1]
    assert ext.path == f"/api/v1/lease/{m['leaseId']}/extend" and ext.status == 200
    # Past the original 2 s lease: still held, so nobody else gets it.
    await asyncio.sleep(1.5)
    assert await pop(q, name) == []
    assert (await q.ack(m))["success"] is True
    # A released lease, and one that never existed: 200, success false, null expiry.
    gone = await q.renew(m["leaseId"])
    assert gone["success"] is False
    assert gone["newExpiresAt"] is None
    never = await q.renew(new_tid())
    assert never["success"] is False
    assert never["newExpiresAt"] is None


# ---------------------------------------------------------------------------
# Commit at delivery (autoAck)
# ---------------------------------------------------------------------------


@aiotest
async def test_commit_on_delivery(q):
    name = qname("autoack")
    await create_queue(q, name)
    await push(q, name, [{"i": i} for i in range(3)])
    msgs = await q.queue(name).batch(10).wait(False).commit_on_delivery().pop()
    assert [m["data"]["i"] for m in msgs] == [0, 1, 2]
    assert all(not m.get("leaseId") for m in msgs)
    assert "autoAck=true" in q.recorder.matching("GET", "/api/v1/pop")[-1].query
    # Nothing to ack: the cursor already moved.
    assert await pop(q, name) == []


# ---------------------------------------------------------------------------
# Multi-partition pop
# ---------------------------------------------------------------------------


@aiotest
async def test_multi_partition_pop_shares_one_lease(q):
    name = qname("mp")
    await create_queue(q, name)
    for p in range(3):
        await push(q, name, [{"p": p, "i": 0}, {"p": p, "i": 1}], partition=f"p{p}")
    msgs = await q.queue(name).partitions(3).batch(100).wait(False).pop()
    assert len(msgs) == 6
    assert len({m["partitionId"] for m in msgs}) == 3
    assert len({m["leaseId"] for m in msgs}) <= 1
    # Per partition, in push order.
    for p in range(3):
        assert [m["data"]["i"] for m in msgs if m["data"]["p"] == p] == [0, 1]
    assert (await q.ack(msgs))["success"] is True
    assert await q.queue(name).partitions(3).batch(100).wait(False).pop() == []


@aiotest
async def test_multi_partition_batch_is_a_global_cap(q):
    name = qname("mpcap")
    await create_queue(q, name)
    for p in range(5):
        await push(q, name, [{"p": p, "i": i} for i in range(4)], partition=f"p{p}")
    msgs = await q.queue(name).partitions(5).batch(10).wait(False).pop()
    assert len(msgs) == 10


@aiotest
async def test_without_partitions_one_pop_claims_one_partition(q):
    name = qname("mpone")
    await create_queue(q, name)
    for p in range(4):
        await push(q, name, [{"p": p, "i": i} for i in range(5)], partition=f"p{p}")
    msgs = await q.queue(name).autopilot(False).batch(100).wait(False).pop()
    assert len(msgs) == 5
    assert len({m["partitionId"] for m in msgs}) == 1
    assert [m["data"]["i"] for m in msgs] == list(range(5))
    query = q.recorder.matching("GET", "/api/v1/pop")[-1].query
    assert "partitions=" not in query and "autopilot" not in query


@aiotest
async def test_pop_from_named_partition(q):
    name = qname("named")
    await create_queue(q, name)
    await push(q, name, [{"p": "a"}], partition="a")
    await push(q, name, [{"p": "b"}], partition="b")
    msgs = await pop(q, name, partition="b")
    assert [m["data"] for m in msgs] == [{"p": "b"}]
    assert msgs[0].get("partition", "b") == "b"
    assert q.recorder.matching("GET", "/api/v1/pop")[-1].path == f"/api/v1/pop/queue/{name}/partition/b"
