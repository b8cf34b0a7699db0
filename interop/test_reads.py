"""Reads by offset (queue.fetch -> POST /api/v1/fetch) and partition discovery
(queue.changed_since -> POST /api/v1/partitions/changed).

Spec: shared/spec/queen2-wire.md §3.9.
Client: queen/reads/offset_reads.py.

The client swallows the two entry errors (OFFSET_OUT_OF_RANGE and
UNKNOWN_TOPIC_OR_PARTITION read as "no records"), so the tests that care about
the exact code also look at the raw answer through ``BodyTap``: a pass-through
transport slid under the suite's recorder. It changes nothing on the wire.
"""

import asyncio
import json
import time
from datetime import datetime, timezone
from typing import Any, Dict, List

import httpx
import pytest

from qhelpers import aiotest, create_queue, new_tid, pop, push, qname

pytestmark = pytest.mark.reads

OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"

# Spec §3.9: 1200 partitions x 3 records (two fetch calls: 1000 + 200 entries)
# and 1100 partitions for discovery (two pages of at most 1000).
FETCH_PARTITIONS = 1200
CHANGED_PARTITIONS = 1100
PUSH_CONCURRENCY = 32


class BodyTap(httpx.AsyncBaseTransport):
    """Keeps (method, path, request JSON, status, answer JSON) of every exchange."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.seen: List[Dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = await response.aread()  # decoded
        await response.aclose()
        self.seen.append(
            {
                "method": request.method,
                "path": request.url.path,
                "request": _json_or_none(request.content),
                "status": response.status_code,
                "answer": _json_or_none(body),
            }
        )
        headers = [
            (k, v)
            for k, v in response.headers.multi_items()
            if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        return httpx.Response(response.status_code, headers=headers, content=body, extensions=response.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def answers(self, path: str) -> List[Dict[str, Any]]:
        return [e for e in self.seen if e["path"] == path]


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def tap(q) -> BodyTap:
    """Slide a BodyTap under the recorder of this test's client."""
    t = BodyTap(q.recorder._inner)
    q.recorder._inner = t
    return t


async def push_partitions(q, queue: str, names: List[str], per: int) -> Dict[str, List[str]]:
    """``per`` records into each partition (one push call per partition, at
    most PUSH_CONCURRENCY in flight). Returns partition -> transactionIds in
    push order."""
    gate = asyncio.Semaphore(PUSH_CONCURRENCY)
    tids = {p: [new_tid() for _ in range(per)] for p in names}

    async def one(p: str) -> None:
        async with gate:
            await push(q, queue, [{"p": p, "i": i} for i in range(per)], partition=p, tids=tids[p])

    await asyncio.gather(*[one(p) for p in names])
    return tids


def assert_iso(ts: Any) -> None:
    assert isinstance(ts, str) and ts, ts
    datetime.fromisoformat(ts.replace("Z", "+00:00"))


# ---------------------------------------------------------------------------
# fetch
# ---------------------------------------------------------------------------


@aiotest
async def test_fetch_1200_partitions_of_3(q):
    name = qname("rd-many")
    parts = [f"p{i:04d}" for i in range(FETCH_PARTITIONS)]
    started = time.monotonic()
    tids = await push_partitions(q, name, parts, 3)
    pushed_in = time.monotonic() - started

    n_before = len(q.recorder.matching("POST", "/api/v1/fetch"))
    read = await q.queue(name).fetch(parts)
    assert list(read) == parts  # in the order named
    bad = []
    for p in parts:
        r = read[p]
        got = (
            [rec["offset"] for rec in r["records"]],
            r["highWatermark"],
            r["logStartOffset"],
            r["nextOffset"],
        )
        if got != ([0, 1, 2], 3, 0, 3):
            bad.append((p, got))
    assert not bad, f"{len(bad)} partitions read wrong, first: {bad[:3]}"

    sample = read[parts[7]]
    assert sample["partition"] == parts[7]
    assert [rec["transactionId"] for rec in sample["records"]] == tids[parts[7]]
    assert [rec["payload"] for rec in sample["records"]] == [{"p": parts[7], "i": i} for i in range(3)]
    for rec in sample["records"]:
        assert_iso(rec["ts"])
        assert isinstance(rec["offset"], int) and not isinstance(rec["offset"], bool)
    # Every record's tid, everywhere.
    assert all([rec["transactionId"] for rec in read[p]["records"]] == tids[p] for p in parts)
    # 1000 + 200 entries, each read to its high watermark in its first answer.
    calls = q.recorder.matching("POST", "/api/v1/fetch")[n_before:]
    assert len(calls) == 2, calls
    assert all(c.status == 200 for c in calls)
    print(f"pushed {FETCH_PARTITIONS}x3 in {pushed_in:.1f}s")


@aiotest
async def test_fetch_moves_no_cursor_and_takes_no_lease(q):
    name = qname("rd-cursor")
    await create_queue(q, name)
    tids = [new_tid() for _ in range(3)]
    await push(q, name, [{"n": 0}, {"n": 1}, {"n": 2}], tids=tids)

    first = (await q.queue(name).fetch("Default"))["Default"]
    assert [r["offset"] for r in first["records"]] == [0, 1, 2]
    assert [r["transactionId"] for r in first["records"]] == tids
    assert [r["payload"] for r in first["records"]] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert (first["highWatermark"], first["logStartOffset"], first["nextOffset"]) == (3, 0, 3)
    second = (await q.queue(name).fetch(["Default"]))["Default"]
    assert second["records"] == first["records"]

    # From an offset: only what follows.
    tail = (await q.queue(name).fetch("Default", offsets={"Default": 1}))["Default"]
    assert [r["offset"] for r in tail["records"]] == [1, 2]
    assert tail["nextOffset"] == 3

    # No cursor moved: a pop (queue mode) and a group both still get all 3.
    msgs = await pop(q, name, batch=10)
    assert [m["transactionId"] for m in msgs] == tids
    # A leased partition reads the same (reads take no lease).
    during = (await q.queue(name).fetch("Default"))["Default"]
    assert [r["transactionId"] for r in during["records"]] == tids
    assert (await q.ack(msgs, True))["success"] is True
    group = await pop(q, name, batch=10, group=f"g-{new_tid()[:8]}", mode="all")
    assert [m["transactionId"] for m in group] == tids

    # Consumed or not, the log reads the same.
    after = (await q.queue(name).fetch("Default"))["Default"]
    assert [r["offset"] for r in after["records"]] == [0, 1, 2]
    assert (after["highWatermark"], after["logStartOffset"]) == (3, 0)


@aiotest
async def test_fetch_past_the_end(q):
    t = tap(q)
    name = qname("rd-end")
    await push(q, name, [{"n": 0}, {"n": 1}, {"n": 2}], partition="a")

    at_end = (await q.queue(name).fetch("a", offsets={"a": 3}))["a"]
    assert at_end["records"] == []
    assert (at_end["highWatermark"], at_end["logStartOffset"], at_end["nextOffset"]) == (3, 0, 3)

    past = (await q.queue(name).fetch("a", offsets={"a": 10}))["a"]
    assert past["records"] == []
    # nextOffset above highWatermark is how the client says "past the end".
    assert (past["highWatermark"], past["logStartOffset"], past["nextOffset"]) == (3, 0, 10)

    last = t.answers("/api/v1/fetch")[-1]
    assert last["status"] == 200
    assert last["request"]["entries"] == [{"queue": name, "partition": "a", "offset": 10, "maxBytes": 8388608}]
    assert last["request"]["maxBytes"] == 8388608
    [entry] = last["answer"]["entries"]
    assert entry["error"] == OFFSET_OUT_OF_RANGE, entry
    assert entry.get("records") in (None, [])
    assert entry["highWatermark"] == 3 and entry["logStartOffset"] == 0


@aiotest
async def test_fetch_missing_queue_and_partition(q):
    t = tap(q)
    ghost = qname("rd-ghost")
    read = await q.queue(ghost).fetch(["Default", "x"])
    for p in ("Default", "x"):
        assert read[p]["records"] == []
        assert read[p]["nextOffset"] == 0
        assert read[p]["highWatermark"] == 0 and read[p]["logStartOffset"] == 0
    [call] = t.answers("/api/v1/fetch")
    assert call["status"] == 200
    assert len(call["answer"]["entries"]) == 2  # index-aligned, even for nothing
    for entry in call["answer"]["entries"]:
        assert entry.get("error") in (None, UNKNOWN_TOPIC_OR_PARTITION), entry
        assert entry.get("records") in (None, [])

    name = qname("rd-part")
    await push(q, name, [{"n": 0}], partition="real")
    both = await q.queue(name).fetch(["real", "nope"])
    assert [r["offset"] for r in both["real"]["records"]] == [0]
    assert both["nope"]["records"] == [] and both["nope"]["nextOffset"] == 0
    entries = t.answers("/api/v1/fetch")[-1]["answer"]["entries"]
    assert entries[0].get("error") is None
    assert entries[1].get("error") in (None, UNKNOWN_TOPIC_OR_PARTITION), entries[1]


@aiotest
async def test_fetch_argument_errors_are_local(q):
    with pytest.raises(ValueError):
        await q.queue(qname("rd-arg")).fetch([""])
    with pytest.raises(ValueError):
        await q.queue(qname("rd-arg")).fetch("a", offsets={"a": -1})
    assert q.recorder.matching("POST", "/api/v1/fetch") == []


# ---------------------------------------------------------------------------
# partitions/changed
# ---------------------------------------------------------------------------


@aiotest
async def test_changed_1100_partitions_two_pages(q):
    t = tap(q)
    name = qname("rd-changed")
    parts = [f"c{i:04d}" for i in range(CHANGED_PARTITIONS)]
    await push_partitions(q, name, parts, 1)

    changed = await q.queue(name).changed_since()
    listed = changed["partitions"]
    names = [p["name"] for p in listed]
    assert len(names) == len(set(names))
    assert set(names) - {"Default"} == set(parts)

    pages = t.answers("/api/v1/partitions/changed")
    assert len(pages) == 2, [len((p["answer"] or {}).get("entries", [{}])[0].get("partitions", [])) for p in pages]
    assert pages[0]["request"] == {"entries": [{"queue": name, "limit": 1000}]}
    first = pages[0]["answer"]["entries"][0]
    assert len(first["partitions"]) == 1000
    assert first["next"]
    assert pages[1]["request"]["entries"][0]["after"] == first["next"]
    second = pages[1]["answer"]["entries"][0]
    assert len(second["partitions"]) == len(listed) - 1000
    assert not second.get("next")

    for p in listed:
        if p["name"] == "Default":
            continue
        assert p["lastOffset"] == 0 and p["logStart"] == 0, p
        assert isinstance(p["id"], str) and p["id"], p
        assert_iso(p["lastWriteAt"])
    assert len({p["id"] for p in listed}) == len(listed)

    # One fixed-width UTC format everywhere: safeTime and every lastWriteAt.
    safe = changed["safeTime"]
    assert_iso(safe)
    widths = {len(p["lastWriteAt"]) for p in listed if p["name"] != "Default"} | {len(safe)}
    assert len(widths) == 1, f"timestamp widths differ: {sorted(widths)}"
    assert min(pages[0]["answer"]["safeTime"], pages[1]["answer"]["safeTime"]) == safe

    # safeTime as the next `since`: a new write shows, with lastWriteAt >= since
    # as strings (that is how clients compare them).
    await asyncio.sleep(0.05)
    await push(q, name, [{"again": True}], partition="c0005")
    delta = await q.queue(name).changed_since(safe)
    assert "c0005" in [p["name"] for p in delta["partitions"]]
    for p in delta["partitions"]:
        assert p["lastWriteAt"] >= safe, (p, safe)
    c5 = next(p for p in delta["partitions"] if p["name"] == "c0005")
    assert c5["lastOffset"] == 1
    assert delta["safeTime"] >= safe

    # A datetime `since` (the client sends ...000000Z) far in the future lists
    # nothing; one in the past lists everything.
    future = await q.queue(name).changed_since(datetime(2999, 1, 1, tzinfo=timezone.utc))
    assert future["partitions"] == []
    past = await q.queue(name).changed_since(datetime(2001, 1, 1))
    assert set(p["name"] for p in past["partitions"]) - {"Default"} == set(parts)


@aiotest
async def test_changed_order_is_creation_order(q):
    name = qname("rd-order")
    for p in ["zz", "aa", "mm"]:
        await push(q, name, [{"p": p}], partition=p)
    changed = await q.queue(name).changed_since()
    names = [p["name"] for p in changed["partitions"] if p["name"] != "Default"]
    assert names == ["zz", "aa", "mm"]


@aiotest
async def test_changed_missing_queue(q):
    t = tap(q)
    ghost = qname("rd-changed-ghost")
    changed = await q.queue(ghost).changed_since()
    assert changed["partitions"] == []
    [call] = t.answers("/api/v1/partitions/changed")
    assert call["status"] == 200
    [entry] = call["answer"]["entries"]
    assert entry.get("error") in (None, UNKNOWN_TOPIC_OR_PARTITION), entry
    assert entry.get("partitions") in (None, [])
    assert not entry.get("next")
