"""The operator surface through the official client: every admin call that
``queen-mq`` 2.6 sends over the wire, each checked against what it must show.

Covered, by client method (queen/admin/admin.py unless noted):
  resources   get_overview, get_namespaces, get_tasks, list_queues, get_queue,
              get_queue_depth, get_partitions
  messages    list_messages, get_message, delete_message, retry_message
  DLQ         queue(q)[.partition(p)].dlq(group)[.limit/.offset/.from_/.to].get()
  groups      list_consumer_groups, get_consumer_group, get_lagging_consumers,
              refresh_consumer_stats, seek_consumer_group,
              delete_consumer_group_for_queue, Queen.delete_consumer_group,
              Queen.update_consumer_group_timestamp
  status      get_status, get_queue_stats, get_queue_detail, get_analytics
  system      health, metrics, get_system_metrics, get_worker_metrics
  traces      get_traces_for_message, get_traces_by_name, get_trace_names
  queues      queue(q).delete()
  client-only clear_queue, move_message_to_dlq (raise before any request)

The maintenance switches (``/api/v1/system/maintenance[/pop]``) have no client
method; they are flipped here over raw HTTP and the test checks what the
client's push, buffered push and pop then do. They are broker-wide, so those
tests always switch them off again (the suite runs tests one at a time).

Every admin call of the client is answered; none is an expected failure.

Spec: shared/spec/queen2-wire.md §3.2, §3.7, §3.8, §3.13; queen-v1-reference.md §2.8-§2.11.
"""

import asyncio
import contextlib
import datetime as dt
import json
from typing import Any, Iterator, List

import httpx
import pytest
from queen import Queen

from qhelpers import (
    QUEEN_URL,
    aiotest,
    create_queue,
    drain,
    poll_pop,
    pop,
    push,
    qname,
    uid,
)

pytestmark = pytest.mark.admin

QM = "__QUEUE_MODE__"


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def iso(delta_seconds: float = 0.0) -> str:
    return (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=delta_seconds)).isoformat()


def group_row(rows: List[dict], group: str, queue: str) -> Any:
    """The entry of ``group`` on ``queue`` in a consumer-groups array (or None)."""
    return next((r for r in rows if r.get("name") == group and r.get("queueName") == queue), None)


def by_name(rows: List[dict], key: str, value: str) -> Any:
    return next((r for r in rows if r.get(key) == value), None)


def values_of(obj: Any, key: str) -> Iterator[Any]:
    """Every value stored under ``key`` anywhere in a JSON tree."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                yield v
            yield from values_of(v, key)
    elif isinstance(obj, list):
        for v in obj:
            yield from values_of(v, key)


async def status_of(call) -> int:
    """The HTTP status a client call raised (the call must raise)."""
    with pytest.raises(httpx.HTTPStatusError) as info:
        await call
    return info.value.response.status_code


async def dead_letter(q: Queen, queue: str, error: str, *, group: str = None,
                      partition: str = None) -> dict:
    """Pop the head message and nack it; the queue has retry_limit 0, so it
    goes straight to the DLQ. Returns the popped message."""
    msgs = await pop(q, queue, batch=1, group=group, partition=partition,
                     mode="all" if group else None)
    assert len(msgs) == 1, msgs
    ctx = {"error": error}
    if group:
        ctx["group"] = group
    res = await q.ack(msgs[0], False, ctx)
    assert res["success"] is True and res.get("dlq") is True, res
    return msgs[0]


@contextlib.asynccontextmanager
async def maintenance(path: str):
    """Switch a maintenance flag on for the block, and always off after it.
    Raw HTTP: the client has no method for /api/v1/system/maintenance*."""
    async with httpx.AsyncClient(base_url=QUEEN_URL, timeout=10) as h:
        r = await h.post(path, json={"enabled": True})
        assert r.status_code == 200, r.text
        try:
            yield r.json()
        finally:
            off = await h.post(path, json={"enabled": False})
            assert off.status_code == 200, off.text


# ---------------------------------------------------------------------------
# system
# ---------------------------------------------------------------------------


@aiotest
async def test_health_and_metrics(q):
    health = await q.admin.health()
    assert health["status"] == "healthy"
    assert health["database"] == "connected"
    # The client parses /metrics as JSON (a text body would come back as
    # None): the broker answers the JSON summary there.
    metrics = await q.admin.metrics()
    assert isinstance(metrics, dict), metrics
    assert metrics["database"]["poolSize"] >= 1
    assert metrics["uptimeSeconds"] >= 0
    assert [e.status for e in q.recorder.matching("GET", "/metrics")] == [200]


# ---------------------------------------------------------------------------
# resources
# ---------------------------------------------------------------------------


@aiotest
async def test_resources_count_what_was_pushed(q):
    name, ns, task = qname("res"), f"ns-{uid()}", f"task-{uid()}"
    res = await q.queue(name).namespace(ns).task(task).create()
    assert res["configured"] is True
    await push(q, name, [{"i": 0}, {"i": 1}], partition="p1")
    await push(q, name, [{"i": 2}], partition="p2")

    overview = await q.admin.get_overview()
    assert overview["queues"] >= 1 and overview["partitions"] >= 2
    assert overview["messages"]["total"] >= 3

    nss = (await q.admin.get_namespaces())["namespaces"]
    mine = by_name(nss, "namespace", ns)
    assert mine is not None, nss
    assert (mine["queues"], mine["partitions"]) == (1, 2)
    assert (mine["messages"]["total"], mine["messages"]["pending"]) == (3, 3)
    tasks = (await q.admin.get_tasks())["tasks"]
    assert by_name(tasks, "task", task)["messages"]["total"] == 3

    listed = by_name((await q.admin.list_queues())["queues"], "name", name)
    assert listed is not None
    assert (listed["namespace"], listed["task"], listed["partitions"]) == (ns, task, 2)
    assert listed["messages"]["total"] == 3 and listed["messages"]["pending"] == 3
    stats = by_name((await q.admin.get_queue_stats())["queues"], "name", name)
    assert stats is not None and stats["messages"]["total"] == 3

    detail = await q.admin.get_queue(name)
    assert detail["name"] == name and detail["namespace"] == ns
    assert sorted(p["name"] for p in detail["partitions"]) == ["p1", "p2"]
    assert detail["totals"]["total"] == 3 and detail["totals"]["pending"] == 3

    parts = (await q.admin.get_partitions(queue=name))["partitions"]
    assert {p["name"]: p["messages"]["total"] for p in parts} == {"p1": 2, "p2": 1}
    assert all(p["queue"] == name for p in parts)
    everywhere = (await q.admin.get_partitions())["partitions"]
    assert {p["id"] for p in parts} <= {p["id"] for p in everywhere}

    # A leased message is processing; an acked one is completed.
    msgs = await pop(q, name, batch=1, partition="p2")
    t = (await q.admin.get_queue(name))["totals"]
    assert (t["pending"], t["processing"]) == (2, 1), t
    assert (await q.ack(msgs[0]))["success"] is True
    t = (await q.admin.get_queue(name))["totals"]
    assert (t["pending"], t["processing"], t["completed"]) == (2, 0, 1), t


@aiotest
async def test_unknown_queue_and_message_are_404(q):
    name = qname("missing")
    assert await status_of(q.admin.get_queue(name)) == 404
    assert await status_of(q.admin.get_queue_depth(name)) == 404
    await create_queue(q, name)
    res = await push(q, name, [{"x": 1}])
    msgs = await pop(q, name)
    pid = msgs[0]["partitionId"]
    assert await status_of(q.admin.get_message(pid, "no-such-tx")) == 404
    # Only a dead letter can be retried.
    assert await status_of(q.admin.retry_message(pid, res[0]["transaction_id"])) == 404
    gone = await q.admin.delete_message(pid, "no-such-tx")
    assert gone["success"] is False and gone["message"] == "Message not found"


# ---------------------------------------------------------------------------
# messages
# ---------------------------------------------------------------------------


@aiotest
async def test_message_listing_follows_the_lifecycle(q):
    name = qname("msgs")
    await create_queue(q, name, retry_limit=0)
    tids = [r["transaction_id"] for r in await push(q, name, [{"i": i} for i in range(3)])]

    rows = (await q.admin.list_messages(queue=name))["messages"]
    assert sorted(r["transactionId"] for r in rows) == sorted(tids)
    assert all(r["status"] == "pending" and r["queue"] == name for r in rows), rows
    assert all(r["queuePath"] == f"{name}/Default" for r in rows)

    # Head goes to the DLQ, the next one is leased, the last stays pending.
    dead = await dead_letter(q, name, "list me")
    leased = await pop(q, name, batch=1)

    def txns(rows):
        return [r["transactionId"] for r in rows]

    assert txns((await q.admin.list_messages(queue=name, status="dead_letter"))["messages"]) == [
        dead["transactionId"]
    ]
    processing = (await q.admin.list_messages(queue=name, status="processing"))["messages"]
    assert txns(processing) == [leased[0]["transactionId"]]
    assert processing[0]["leaseExpiresAt"]
    assert txns((await q.admin.list_messages(queue=name, status="pending"))["messages"]) == [tids[2]]

    assert (await q.ack(leased[0]))["success"] is True
    assert txns((await q.admin.list_messages(queue=name, status="completed"))["messages"]) == [tids[1]]
    page = (await q.admin.list_messages(queue=name, limit=1, offset=1))["messages"]
    assert len(page) == 1


@aiotest
async def test_message_detail_and_delete(q):
    name = qname("detail")
    await create_queue(q, name, lease_time=30)
    pushed = await push(q, name, [{"keep": 0}, {"drop": 1}, {"keep": 2}])
    msgs = await pop(q, name, batch=1)
    head = msgs[0]
    detail = await q.admin.get_message(head["partitionId"], head["transactionId"])
    assert detail["transactionId"] == head["transactionId"]
    assert detail["partitionId"] == head["partitionId"]
    assert detail["queue"] == name and detail["payload"] == {"keep": 0}
    assert detail["queueConfig"]["leaseTime"] == 30
    groups = detail["consumerGroups"]
    assert [g["name"] for g in groups] == [QM], groups
    assert groups[0]["consumed"] is False and groups[0]["leaseExpiresAt"], groups
    assert (await q.ack(head))["success"] is True
    detail = await q.admin.get_message(head["partitionId"], head["transactionId"])
    assert detail["consumerGroups"][0]["consumed"] is True

    # Delete the middle message: it is gone from detail, listing and pop.
    pid, middle = head["partitionId"], pushed[1]["transaction_id"]
    assert (await q.admin.get_message(pid, middle))["payload"] == {"drop": 1}
    res = await q.admin.delete_message(pid, middle)
    assert res["success"] is True and res["transactionId"] == middle
    assert await status_of(q.admin.get_message(pid, middle)) == 404
    left = (await q.admin.list_messages(queue=name, status="pending"))["messages"]
    assert [r["transactionId"] for r in left] == [pushed[2]["transaction_id"]]
    assert (await q.admin.get_queue(name))["totals"]["pending"] == 1
    assert [m["data"] for m in await pop(q, name, batch=10)] == [{"keep": 2}]


# ---------------------------------------------------------------------------
# DLQ
# ---------------------------------------------------------------------------


@aiotest
async def test_dlq_listing_filters_pages_and_totals(q):
    name = qname("dlqf")
    group = f"g-{uid()}"
    await create_queue(q, name, retry_limit=0)
    await push(q, name, [{"p": 1}], partition="p1")
    await push(q, name, [{"p": 2}], partition="p2")
    await dead_letter(q, name, "group-p1", group=group, partition="p1")
    await dead_letter(q, name, "group-p2", group=group, partition="p2")
    await dead_letter(q, name, "queue-mode-p1", partition="p1")

    everything = await q.queue(name).dlq().get()
    assert everything["total"] == 3 and len(everything["messages"]) == 3
    assert sorted(m["errorMessage"] for m in everything["messages"]) == [
        "group-p1", "group-p2", "queue-mode-p1"]
    assert all(m["queue"] == name for m in everything["messages"])

    of_group = await q.queue(name).dlq(group).get()
    assert of_group["total"] == 2
    assert {m["consumerGroup"] for m in of_group["messages"]} == {group}
    of_p2 = await q.queue(name).partition("p2").dlq().get()
    assert [(m["partition"], m["data"]) for m in of_p2["messages"]] == [("p2", {"p": 2})]

    page = await q.queue(name).dlq().limit(1).offset(1).get()
    assert len(page["messages"]) == 1 and page["total"] == 3
    assert page["messages"][0]["transactionId"] in {m["transactionId"] for m in everything["messages"]}
    assert (await q.queue(name).dlq().from_(iso(3600)).get())["messages"] == []
    assert (await q.queue(name).dlq().to("2000-01-01T00:00:00Z").get())["messages"] == []
    assert len((await q.queue(name).dlq().from_(iso(-3600)).to(iso(3600)).get())["messages"]) == 3


@aiotest
async def test_retry_from_dlq_makes_it_poppable(q):
    name = qname("dlqretry")
    await create_queue(q, name, retry_limit=0)
    await push(q, name, [{"n": "first"}])
    dead = await dead_letter(q, name, "boom for the DLQ")
    dlq = await q.queue(name).dlq().get()
    assert [m["transactionId"] for m in dlq["messages"]] == [dead["transactionId"]]
    assert "boom for the DLQ" in dlq["messages"][0]["errorMessage"]
    detail = await q.admin.get_message(dead["partitionId"], dead["transactionId"])
    assert "boom for the DLQ" in detail["errorMessage"]
    assert await pop(q, name) == []

    res = await q.admin.retry_message(dead["partitionId"], dead["transactionId"])
    assert res["success"] is True and res["transactionId"] == dead["transactionId"]
    assert (await q.queue(name).dlq().get())["messages"] == []
    assert (await q.admin.list_messages(queue=name, status="dead_letter"))["messages"] == []
    again = await pop(q, name)
    # The retry is Queen 1.6's dead-letter replay: the message comes back as
    # `dlq:<record id>`, so a repeated retry cannot push it twice.
    assert [m["data"] for m in again] == [{"n": "first"}]
    assert again[0]["transactionId"].startswith("dlq:"), again[0]["transactionId"]
    assert (await q.ack(again[0]))["success"] is True


# ---------------------------------------------------------------------------
# consumer groups
# ---------------------------------------------------------------------------


@aiotest
async def test_consumer_groups_list_detail_and_lagging(q):
    name = qname("cg")
    group = f"billing-{uid()}"
    await create_queue(q, name)
    await push(q, name, [{"i": i} for i in range(3)])
    assert len(await drain(q, name, expect=3, group=group, mode="all")) == 3
    one = await pop(q, name, batch=1)  # queue mode: 1 of 3, then acked
    assert (await q.ack(one[0]))["success"] is True

    rows = await q.admin.list_consumer_groups()
    billing, qm = group_row(rows, group, name), group_row(rows, QM, name)
    assert billing is not None and qm is not None, rows
    assert billing["topics"] == [name]
    assert (billing["totalLag"], billing["state"]) == (0, "Stable"), billing
    assert (qm["totalLag"], qm["partitionsWithLag"], qm["state"]) == (2, 1, "Lagging"), qm

    detail = await q.admin.get_consumer_group(group)
    assert [(r["name"], r["queueName"]) for r in detail] == [(group, name)]
    part = detail[0]["partitions"]
    assert [(p["partition"], p["offsetLag"], p["leaseActive"]) for p in part] == [("Default", 0, False)]

    lagging = await q.admin.get_lagging_consumers(0)
    assert group_row(lagging, QM, name) is not None
    assert group_row(lagging, group, name) is None
    assert group_row(await q.admin.get_lagging_consumers(3600), QM, name) is None

    refreshed = await q.admin.refresh_consumer_stats()
    assert refreshed["success"] is True


@aiotest
async def test_seek_moves_the_group(q):
    name = qname("seek")
    group = f"g-{uid()}"
    await create_queue(q, name)
    await push(q, name, [{"i": i} for i in range(3)])
    assert len(await drain(q, name, expect=3, group=group, mode="all")) == 3
    assert await pop(q, name, mode="all", group=group) == []

    # Back to an hour ago: the whole history is delivered again.
    back = await q.admin.seek_consumer_group(group, name, {"timestamp": iso(-3600)})
    assert back["success"] is True and back["partitionsUpdated"] == 1 and back["seekToEnd"] is False
    replay = await pop(q, name, mode="all", group=group, batch=10)
    assert [m["data"] for m in replay] == [{"i": 0}, {"i": 1}, {"i": 2}]
    lag = (await q.admin.get_consumer_group(group))[0]["partitions"][0]
    assert lag["offsetLag"] == 3 and lag["leaseActive"] is True

    # To the end: the open lease is dropped and nothing is left to deliver.
    end = await q.admin.seek_consumer_group(group, name, {"toEnd": True})
    assert end["success"] is True and end["seekToEnd"] is True
    assert await pop(q, name, mode="all", group=group, batch=10) == []
    lag = (await q.admin.get_consumer_group(group))[0]["partitions"][0]
    assert lag["offsetLag"] == 0 and lag["leaseActive"] is False
    await push(q, name, [{"i": 3}])
    assert [m["data"] for m in await pop(q, name, mode="all", group=group, batch=10)] == [{"i": 3}]


@aiotest
async def test_seek_without_options_is_400_naming_the_fields(q):
    name = qname("seekbad")
    group = f"g-{uid()}"
    await push(q, name, [{"x": 1}])
    await pop(q, name, group=group, mode="all")
    with pytest.raises(httpx.HTTPStatusError) as info:
        await q.admin.seek_consumer_group(group, name)
    assert info.value.response.status_code == 400
    message = str(info.value)
    assert "toEnd" in message and "timestamp" in message, message


@aiotest
async def test_update_subscription_timestamp(q):
    name = qname("subts")
    group = f"g-{uid()}"
    await push(q, name, [{"x": 1}])
    await pop(q, name, group=group, mode="all")
    res = await q.update_consumer_group_timestamp(group, "2026-01-01T00:00:00Z")
    assert res["success"] is True and res["consumerGroup"] == group
    assert res["rowsUpdated"] >= 1 and res["newTimestamp"].startswith("2026-01-01T00:00:00")
    row = (await q.admin.get_consumer_group(group))[0]
    assert row["subscriptionMode"] == "timestamp"
    assert row["subscriptionTimestamp"].startswith("2026-01-01T00:00:00"), row


@aiotest
async def test_delete_consumer_group_for_one_queue(q):
    qa, qb = qname("cgdela"), qname("cgdelb")
    group = f"g-{uid()}"
    for n in (qa, qb):
        await push(q, n, [{"q": n, "i": i} for i in range(2)])
        assert len(await drain(q, n, expect=2, group=group, mode="all")) == 2
    assert sorted(r["queueName"] for r in await q.admin.get_consumer_group(group)) == sorted([qa, qb])

    res = await q.admin.delete_consumer_group_for_queue(group, qa)
    assert res["success"] is True and res["queueName"] == qa and res["deletedPartitions"] == 1
    assert [r["queueName"] for r in await q.admin.get_consumer_group(group)] == [qb]
    # On qa the group starts afresh (mode all replays); on qb it keeps its place.
    assert len(await pop(q, qa, group=group, mode="all", batch=10)) == 2
    assert await pop(q, qb, group=group, mode="all", batch=10) == []


@aiotest
async def test_delete_consumer_group_everywhere(q):
    qa, qb = qname("cgalla"), qname("cgallb")
    group = f"g-{uid()}"
    for n in (qa, qb):
        await push(q, n, [{"i": 0}])
        assert len(await drain(q, n, expect=1, group=group, mode="all")) == 1
    res = await q.delete_consumer_group(group)
    assert res["success"] is True and res["deletedPartitions"] == 2, res
    assert await q.admin.get_consumer_group(group) == []
    assert group_row(await q.admin.list_consumer_groups(), group, qa) is None
    for n in (qa, qb):
        assert len(await pop(q, n, group=group, mode="all", batch=10)) == 1


# ---------------------------------------------------------------------------
# status and maintenance
# ---------------------------------------------------------------------------


@aiotest
async def test_status_summarises_queues_and_switches(q):
    name = qname("status")
    await push(q, name, [{"i": i} for i in range(3)])
    status = await q.admin.get_status()
    assert status["overview"]["messages"]["total"] >= 3
    assert status["maintenance"]["maintenanceMode"] is False
    assert status["maintenance"]["popMaintenanceMode"] is False
    mine = by_name(status["queues"], "queue", name)
    assert mine is not None and mine["depth"] == 3, status["queues"]


@aiotest
async def test_push_maintenance_spools_pushes_and_drains_them_after(q):
    """Queen 1.6: under push maintenance a push is kept in the broker's file
    spool and answered 201 with items `buffered`; nothing is written until
    maintenance ends, then the spool drains in order."""
    name = qname("maint")
    await create_queue(q, name)
    async with maintenance("/api/v1/system/maintenance") as on:
        assert on["maintenanceMode"] is True
        assert (await q.admin.get_status())["maintenance"]["maintenanceMode"] is True
        res = await q.queue(name).push([{"data": {"b": i}} for i in range(2)])
        assert [r["status"] for r in res] == ["buffered", "buffered"], res
        assert all(r["transactionId"] for r in res), res
        async with httpx.AsyncClient(base_url=QUEEN_URL, timeout=10) as h:
            spool = (await h.get("/api/v1/status/buffers")).json()
        assert spool["enabled"] is True and spool["pending"] >= 2, spool
        assert (await q.admin.get_queue(name))["totals"]["total"] == 0
    got = await poll_pop(q, name, want=2, batch=10)
    assert [m["data"] for m in got] == [{"b": 0}, {"b": 1}]
    assert [m["transactionId"] for m in got] == [r["transactionId"] for r in res]


@aiotest
async def test_pop_maintenance_answers_empty_while_messages_wait(q):
    name = qname("popmaint")
    await push(q, name, [{"i": 0}, {"i": 1}])
    async with maintenance("/api/v1/system/maintenance/pop") as on:
        assert on["popMaintenanceMode"] is True and on["maintenanceMode"] is False
        assert (await q.admin.get_status())["maintenance"]["popMaintenanceMode"] is True
        assert await pop(q, name, batch=10) == []
        assert q.recorder.matching("GET", "/api/v1/pop")[-1].status == 204
        assert (await q.admin.get_queue(name))["totals"]["pending"] == 2
    assert [m["data"] for m in await pop(q, name, batch=10)] == [{"i": 0}, {"i": 1}]


# ---------------------------------------------------------------------------
# delete queue
# ---------------------------------------------------------------------------


@aiotest
async def test_delete_queue_removes_it_from_every_view(q):
    name = qname("delq")
    await create_queue(q, name, retry_limit=0)
    await push(q, name, [{"i": i} for i in range(3)])
    await dead_letter(q, name, "dies with the queue")
    assert (await q.admin.get_queue(name))["totals"]["total"] == 3
    assert group_row(await q.admin.list_consumer_groups(), QM, name) is not None
    assert len((await q.queue(name).dlq().get())["messages"]) == 1

    res = await q.queue(name).delete()
    assert res["deleted"] is True and res["existed"] is True, res
    assert await status_of(q.admin.get_queue(name)) == 404
    assert by_name((await q.admin.list_queues())["queues"], "name", name) is None
    assert (await q.admin.get_partitions(queue=name))["partitions"] == []
    assert (await q.admin.list_messages(queue=name))["messages"] == []
    assert (await q.queue(name).dlq().get())["messages"] == []
    assert group_row(await q.admin.list_consumer_groups(), QM, name) is None
    again = await q.queue(name).delete()
    assert again["deleted"] is False


# ---------------------------------------------------------------------------
# client-side only
# ---------------------------------------------------------------------------


@aiotest
async def test_client_only_admin_methods_send_nothing(q):
    with pytest.raises(NotImplementedError):
        await q.admin.clear_queue(qname("x"))
    with pytest.raises(NotImplementedError):
        await q.admin.move_message_to_dlq("00000000-0000-0000-0000-000000000000", "tx")
    assert q.recorder.exchanges == []


# ---------------------------------------------------------------------------
# dashboard reads, depth in the client's shape, traces
# ---------------------------------------------------------------------------


@aiotest
async def test_queue_depth_in_the_client_shape(q):
    name = qname("depth")
    group = f"g-{uid()}"
    await push(q, name, [{"i": 0}, {"i": 1}], partition="p1")
    await push(q, name, [{"i": 2}], partition="p2")
    # The group retires p1 entirely; queue mode consumes nothing.
    msgs = await pop(q, name, batch=10, group=group, mode="all", partition="p1")
    assert (await q.ack(msgs, True, {"group": group}))["success"] is True

    whole = await q.admin.get_queue_depth(name)
    assert whole["queue"] == name and whole["group"] is None
    assert whole["pending"] == 3 and whole["partitionsPending"] == 2
    assert {p["partition"]: p["pending"] for p in whole["partitions"]} == {"p1": 2, "p2": 1}

    mine = await q.admin.get_queue_depth(name, group)
    assert mine["group"] == group
    assert mine["pending"] == 1 and mine["partitionsPending"] == 1
    assert {p["partition"]: p["pending"] for p in mine["partitions"] if p["pending"]} == {"p2": 1}
    assert mine["conflation"] is False and mine["effectivePending"] == 1


DASHBOARD_ROUTES = {
    "get_queue_detail": "GET /api/v1/status/queues/:queue",
    "get_analytics": "GET /api/v1/status/analytics",
    "get_system_metrics": "GET /api/v1/analytics/system-metrics",
    "get_worker_metrics": "GET /api/v1/analytics/worker-metrics",
}


@pytest.mark.parametrize(
    "method",
    [
        pytest.param(m, id=m) for m in DASHBOARD_ROUTES
    ],
)
@aiotest
async def test_dashboard_reads(q, method):
    name = qname("dash")
    await push(q, name, [{"i": i} for i in range(3)])
    if method == "get_queue_detail":
        answer = await q.admin.get_queue_detail(name)
        assert isinstance(answer, dict) and name in json.dumps(answer), answer
        assert 3 in list(values_of(answer, "total")), answer
    elif method == "get_analytics":
        answer = await q.admin.get_analytics(queue=name, interval="hour")
        assert isinstance(answer, dict) and answer, answer
    else:
        answer = await getattr(q.admin, method)()
        assert isinstance(answer, dict) and answer, answer


@aiotest
async def test_traces_round_trip(q):
    name = qname("trace")
    trace_name = f"tn-{uid()}"
    await push(q, name, [{"traced": True}])
    seen = []

    async def handler(msg):
        seen.append((msg["partitionId"], msg["transactionId"],
                     await msg["trace"]({"traceName": trace_name, "data": {"step": "one"}})))

    await q.queue(name).batch(1).limit(1).wait(False).idle_millis(1000).consume(handler)
    assert len(seen) == 1, seen
    pid, tx, wrote = seen[0]
    traces = (await q.admin.get_traces_for_message(pid, tx))["traces"]
    assert wrote["success"] is True, wrote
    assert [t["data"] for t in traces] == [{"step": "one"}], traces
    assert trace_name in traces[0]["trace_names"]
    named = await q.admin.get_traces_by_name(trace_name)
    assert [t["transaction_id"] for t in named["traces"]] == [tx]
    names = (await q.admin.get_trace_names())["trace_names"]
    assert by_name(names, "trace_name", trace_name)["trace_count"] == 1

