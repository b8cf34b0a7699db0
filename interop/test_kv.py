"""Standalone KV through client.kv (POST /api/v1/kv).

Spec: shared/spec/kv.md, shared/spec/queen2-wire.md §1.
Each test works in its own namespace, so keys never collide across tests or runs.
"""

import asyncio
import time

import pytest

from queen import KvError

from qhelpers import aiotest, kv_ns

pytestmark = pytest.mark.kv


def assert_write(res, *, op, key, applied, reason=None):
    assert res["op"] == op
    assert res["key"] == key
    assert res["applied"] is applied, res
    assert bool(res) is applied
    if applied:
        assert "reason" not in res, res  # present only when not applied
    else:
        assert res["reason"] == reason, res


# ---------------------------------------------------------------------------
# put / get
# ---------------------------------------------------------------------------


@aiotest
async def test_put_get_round_trip(q):
    ns = kv_ns()
    put = await q.kv.put(ns, "user:1", {"name": "ada", "n": [1, 2]}, forever=True)
    assert_write(put, op="put", key="user:1", applied=True)
    assert put["value"] == {"name": "ada", "n": [1, 2]}
    assert isinstance(put["version"], int) and put["version"] > 0
    assert put["index"] == 0

    got = await q.kv.get(ns, "user:1")
    assert got["op"] == "get"
    assert got["found"] is True and bool(got) is True
    assert got["key"] == "user:1"
    assert got["value"] == {"name": "ada", "n": [1, 2]}
    assert got["version"] == put["version"]
    assert got["expiresAt"] is None  # forever
    assert isinstance(got["updatedAt"], str) and got["updatedAt"]

    # An unconditional put replaces value and expiry, with a new, higher version.
    put2 = await q.kv.put(ns, "user:1", "v2", ttl_seconds=300)
    assert put2["applied"] is True
    assert put2["version"] > put["version"]
    got2 = await q.kv.get(ns, "user:1")
    assert got2["value"] == "v2"
    assert isinstance(got2["expiresAt"], str) and got2["expiresAt"]


@aiotest
async def test_found_null_is_not_missing(q):
    ns = kv_ns()
    res = await q.kv.put(ns, "nil", None, forever=True)
    assert res["applied"] is True
    got = await q.kv.get(ns, "nil")
    assert got["found"] is True
    assert "value" in got and got["value"] is None


@aiotest
async def test_get_missing_key(q):
    ns = kv_ns()
    got = await q.kv.get(ns, "nope")
    assert got["found"] is False
    assert bool(got) is False
    assert got["key"] == "nope"
    assert got["op"] == "get"
    assert q.recorder.matching("POST", "/api/v1/kv")[-1].status == 200


# ---------------------------------------------------------------------------
# putIfAbsent / once / expect
# ---------------------------------------------------------------------------


@aiotest
async def test_put_if_absent_twice(q):
    ns = kv_ns()
    first = await q.kv.put_if_absent(ns, "lock", {"by": "first"}, ttl_seconds=60)
    assert_write(first, op="putIfAbsent", key="lock", applied=True)
    assert first["value"] == {"by": "first"}
    second = await q.kv.put_if_absent(ns, "lock", {"by": "second"}, ttl_seconds=60)
    assert_write(second, op="putIfAbsent", key="lock", applied=False, reason="exists")
    assert second["value"] == {"by": "first"}
    assert second["version"] == first["version"]


@aiotest
async def test_put_if_absent_concurrent_single_winner(q):
    ns = kv_ns()
    results = await asyncio.gather(
        *[q.kv.put_if_absent(ns, "race", {"by": i}, forever=True) for i in range(8)]
    )
    winners = [r for r in results if r["applied"]]
    losers = [r for r in results if not r["applied"]]
    assert len(winners) == 1
    assert len(losers) == 7
    for r in losers:
        assert r["reason"] == "exists"
        assert r["value"] == winners[0]["value"]
        assert r["version"] == winners[0]["version"]


@aiotest
async def test_once(q):
    ns = kv_ns()
    assert await q.kv.once(ns, "evt:1", ttl_seconds=60) is True
    assert await q.kv.once(ns, "evt:1", ttl_seconds=60) is False
    got = await q.kv.get(ns, "evt:1")
    assert got["found"] is True and got["value"] is True
    assert await q.kv.once(ns, "evt:2", forever=True, value={"who": "me"}) is True
    assert (await q.kv.get(ns, "evt:2"))["value"] == {"who": "me"}


@aiotest
async def test_expect_semantics(q):
    ns = kv_ns()
    # expect 0: must not exist.
    created = await q.kv.put(ns, "k", 1, forever=True, expect=0)
    assert_write(created, op="put", key="k", applied=True)
    v1 = created["version"]
    exists = await q.kv.put(ns, "k", 2, forever=True, expect=0)
    assert_write(exists, op="put", key="k", applied=False, reason="exists")
    assert exists["value"] == 1 and exists["version"] == v1

    # expect N: a fenced update.
    updated = await q.kv.put(ns, "k", 3, forever=True, expect=v1)
    assert_write(updated, op="put", key="k", applied=True)
    v2 = updated["version"]
    assert v2 > v1
    stale = await q.kv.put(ns, "k", 4, forever=True, expect=v1)
    assert_write(stale, op="put", key="k", applied=False, reason="version")
    assert stale["value"] == 3 and stale["version"] == v2
    assert (await q.kv.get(ns, "k"))["value"] == 3

    # expect N > 0 on an absent key creates nothing.
    absent = await q.kv.put(ns, "ghost", 1, forever=True, expect=v2)
    assert_write(absent, op="put", key="ghost", applied=False, reason="absent")
    assert absent["version"] == 0
    assert absent["value"] is None
    assert (await q.kv.get(ns, "ghost"))["found"] is False

    # delete with expect.
    wrong = await q.kv.delete(ns, "k", expect=v1)
    assert_write(wrong, op="delete", key="k", applied=False, reason="version")
    right = await q.kv.delete(ns, "k", expect=v2)
    assert_write(right, op="delete", key="k", applied=True)
    assert (await q.kv.get(ns, "k"))["found"] is False


@aiotest
async def test_expect_none_is_refused_client_side(q):
    with pytest.raises(ValueError):
        await q.kv.put(kv_ns(), "k", 1, forever=True, expect=None)
    with pytest.raises(ValueError):
        await q.kv.put(kv_ns(), "k", 1)  # no expiry: kv_expiry_not_specified, local
    assert q.recorder.matching("POST", "/api/v1/kv") == []


# ---------------------------------------------------------------------------
# delete / check
# ---------------------------------------------------------------------------


@aiotest
async def test_delete(q):
    ns = kv_ns()
    gone = await q.kv.delete(ns, "absent")
    assert_write(gone, op="delete", key="absent", applied=False, reason="absent")
    assert gone["version"] == 0
    assert q.recorder.matching("POST", "/api/v1/kv")[-1].status == 200

    put = await q.kv.put(ns, "d", {"x": 1}, forever=True)
    deleted = await q.kv.delete(ns, "d")
    assert_write(deleted, op="delete", key="d", applied=True)
    assert deleted["value"] == {"x": 1}
    assert deleted["version"] == put["version"]
    assert (await q.kv.get(ns, "d"))["found"] is False
    again = await q.kv.delete(ns, "d")
    assert again["reason"] == "absent"


@aiotest
async def test_check(q):
    ns = kv_ns()
    put = await q.kv.put(ns, "c", "val", forever=True)
    v = put["version"]
    held = await q.kv.check(ns, "c", expect=v)
    assert_write(held, op="check", key="c", applied=True)
    assert held["version"] == v

    mismatch = await q.kv.check(ns, "c", expect=v + 1000000)
    assert_write(mismatch, op="check", key="c", applied=False, reason="version")
    assert mismatch["value"] == "val" and mismatch["version"] == v

    live = await q.kv.check(ns, "c", expect=0)
    assert_write(live, op="check", key="c", applied=False, reason="exists")
    assert live["value"] == "val"

    not_there = await q.kv.check(ns, "nope", expect=0)
    assert not_there["applied"] is True
    absent = await q.kv.check(ns, "nope", expect=7)
    assert_write(absent, op="check", key="nope", applied=False, reason="absent")
    assert absent["version"] == 0

    # check writes nothing.
    after = await q.kv.get(ns, "c")
    assert after["version"] == v
    assert (await q.kv.get(ns, "nope"))["found"] is False

    with pytest.raises(ValueError):
        await q.kv.check(ns, "c")  # expect is mandatory (client side)


# ---------------------------------------------------------------------------
# incr
# ---------------------------------------------------------------------------


@aiotest
async def test_incr_with_limits(q):
    ns = kv_ns()
    first = await q.kv.incr(ns, "ctr", forever=True)
    assert_write(first, op="incr", key="ctr", applied=True)
    assert first["value"] == 1
    five = await q.kv.incr(ns, "ctr", delta=5, max=10, forever=True)
    assert five["applied"] is True and five["value"] == 6
    assert five["version"] > first["version"]

    over = await q.kv.incr(ns, "ctr", delta=10, max=10, forever=True)
    assert_write(over, op="incr", key="ctr", applied=False, reason="limit")
    assert over["value"] == 6
    under = await q.kv.incr(ns, "ctr", delta=-7, min=0, forever=True)
    assert_write(under, op="incr", key="ctr", applied=False, reason="limit")
    assert under["value"] == 6
    down = await q.kv.incr(ns, "ctr", delta=-6, min=0, forever=True)
    assert down["applied"] is True and down["value"] == 0
    assert (await q.kv.get(ns, "ctr"))["value"] == 0


@aiotest
async def test_incr_create_branch_refusal(q):
    ns = kv_ns()
    refused = await q.kv.incr(ns, "fresh", delta=10, max=5, ttl_seconds=60)
    assert_write(refused, op="incr", key="fresh", applied=False, reason="limit")
    assert refused["value"] == 0
    assert (await q.kv.get(ns, "fresh"))["found"] is False


@aiotest
async def test_incr_type_refusal(q):
    ns = kv_ns()
    await q.kv.put(ns, "word", "hello", forever=True)
    res = await q.kv.incr(ns, "word", forever=True)
    assert_write(res, op="incr", key="word", applied=False, reason="type")
    assert (await q.kv.get(ns, "word"))["value"] == "hello"


@aiotest
async def test_incr_ttl_applies_only_on_create(q):
    ns = kv_ns()
    await q.kv.incr(ns, "win", ttl_seconds=60)
    e1 = (await q.kv.get(ns, "win"))["expiresAt"]
    assert isinstance(e1, str) and e1
    await asyncio.sleep(1.1)
    res = await q.kv.incr(ns, "win", ttl_seconds=3600)
    assert res["value"] == 2
    e2 = (await q.kv.get(ns, "win"))["expiresAt"]
    assert e2 == e1


@aiotest
async def test_incr_big_integers_keep_every_digit(q):
    ns = kv_ns()
    big = 10**30
    res = await q.kv.incr(ns, "big", delta=big, forever=True)
    assert res["applied"] is True and res["value"] == big
    res = await q.kv.incr(ns, "big", delta=1, forever=True)
    assert res["value"] == big + 1


# ---------------------------------------------------------------------------
# TTL
# ---------------------------------------------------------------------------


@aiotest
async def test_ttl_expiry(q):
    ns = kv_ns()
    t0 = time.monotonic()
    put = await q.kv.put(ns, "short", {"t": 1}, ttl_seconds=1)
    assert put["applied"] is True
    alive = await q.kv.get(ns, "short")
    if time.monotonic() - t0 < 0.8:
        assert alive["found"] is True
    await asyncio.sleep(max(0.0, 1.6 - (time.monotonic() - t0)))
    dead = await q.kv.get(ns, "short")
    assert dead["found"] is False, f"1 s TTL still alive at {time.monotonic() - t0:.2f}s"
    # Dead for every operation, even if the sweeper has not pruned it yet.
    assert (await q.kv.put(ns, "short", 1, forever=True, expect=put["version"]))["reason"] == "absent"
    pia = await q.kv.put_if_absent(ns, "short", {"t": 2}, forever=True)
    assert pia["applied"] is True
    assert pia["version"] > put["version"]
    assert (await q.kv.get(ns, "short"))["value"] == {"t": 2}


# ---------------------------------------------------------------------------
# getPrefix / listAll / getMany
# ---------------------------------------------------------------------------

WALK_KEYS = ["walk:B", "walk:a", "walk:_", "walk:0", "walk:~", "walk:\u00e9", "walk:aa"]


@aiotest
async def test_get_prefix_paging(q):
    ns = kv_ns()
    for k in WALK_KEYS + ["walkX", "other:1", "walk"]:
        await q.kv.put(ns, k, {"k": k}, forever=True)
    expected = sorted(WALK_KEYS, key=lambda s: s.encode())

    page = await q.kv.get_prefix(ns, "walk:", limit=2)
    assert page["op"] == "getPrefix"
    assert [r["key"] for r in page["rows"]] == expected[:2]
    assert page["truncated"] is True
    assert page["nextAfter"] == page["rows"][-1]["key"]
    assert page["rows"][0]["value"] == {"k": expected[0]}
    assert page["rows"][0]["version"] > 0

    nxt = await q.kv.get_prefix(ns, "walk:", after=page["nextAfter"], limit=2)
    assert [r["key"] for r in nxt["rows"]] == expected[2:4]

    everything = await q.kv.get_prefix(ns, "walk:", limit=100)
    assert [r["key"] for r in everything["rows"]] == expected
    assert everything["truncated"] is False
    assert everything["nextAfter"] is None

    keys_only = await q.kv.get_prefix(ns, "walk:", keys_only=True)
    assert [r["key"] for r in keys_only["rows"]] == expected
    assert all("value" not in r for r in keys_only["rows"])

    # after need not be an existing key; limit is clamped, never refused.
    mid = await q.kv.get_prefix(ns, "walk:", after="walk:a", limit=100)
    assert [r["key"] for r in mid["rows"]] == [k for k in expected if k.encode() > b"walk:a"]
    clamped = await q.kv.get_prefix(ns, "walk:", limit=0)
    assert len(clamped["rows"]) == 1 and clamped["truncated"] is True
    huge = await q.kv.get_prefix(ns, "walk:", limit=5000)
    assert len(huge["rows"]) == len(expected)

    # An unknown prefix reads empty.
    none = await q.kv.get_prefix(ns, "zzz:")
    assert none["rows"] == [] and none["truncated"] is False


@aiotest
async def test_get_prefix_is_literal_not_like(q):
    ns = kv_ns()
    for k in ["walk%_:1", "walkXY:1", "walk%_:2", "walk%a:1"]:
        await q.kv.put(ns, k, 1, forever=True)
    page = await q.kv.get_prefix(ns, "walk%_:")
    assert [r["key"] for r in page["rows"]] == ["walk%_:1", "walk%_:2"]


@aiotest
async def test_list_all_walks_everything_in_byte_order(q):
    ns = kv_ns()
    keys = [f"item:{i:03d}" for i in range(7)] + ["item:Z", "item:z"]
    for k in reversed(keys):
        await q.kv.put(ns, k, k, forever=True)
    await q.kv.put(ns, "itemz", "not in prefix", forever=True)
    rows = await q.kv.list_all(ns, "item:", limit=2)
    assert [r["key"] for r in rows] == sorted(keys, key=lambda s: s.encode())
    assert all(r["value"] == r["key"] for r in rows)
    assert len(q.recorder.matching("POST", "/api/v1/kv")) >= 1 + len(keys) + 5
    capped = await q.kv.list_all(ns, "item:", limit=2, max_rows=3)
    assert len(capped) == 3


@aiotest
async def test_get_many_with_missing_keys(q):
    ns = kv_ns()
    await q.kv.put(ns, "many:b", "B", forever=True)
    await q.kv.put(ns, "many:a", "A", forever=True)
    res = await q.kv.get_many(ns, ["many:b", "many:nope", "many:a", "many:zzz", "many:b"])
    assert res["op"] == "getMany"
    keys = [r["key"] for r in res["rows"]]
    assert sorted(set(keys)) == ["many:a", "many:b"]
    assert keys == sorted(keys)
    assert {r["key"]: r["value"] for r in res["rows"]} == {"many:a": "A", "many:b": "B"}
    assert all(r["version"] > 0 for r in res["rows"])
    assert res["missing"] == ["many:nope", "many:zzz"]
    assert res["truncated"] is False


# ---------------------------------------------------------------------------
# batch
# ---------------------------------------------------------------------------


@aiotest
async def test_batch_is_index_aligned(q):
    ns = kv_ns()
    op = q.kv.op
    res = await q.kv.batch(
        [
            op.put(ns, "b:1", "one", forever=True),
            op.get(ns, "b:0"),
            op.incr(ns, "b:n", delta=3, forever=True),
            op.put_if_absent(ns, "b:2", "two", ttl_seconds=60),
            op.delete(ns, "b:nope"),
        ]
    )
    assert [r["index"] for r in res] == [0, 1, 2, 3, 4]
    assert [r["op"] for r in res] == ["put", "get", "incr", "putIfAbsent", "delete"]
    assert res[0]["applied"] is True
    assert res[1]["found"] is False
    assert res[2]["value"] == 3
    assert res[3]["applied"] is True
    assert res[4]["applied"] is False and res[4]["reason"] == "absent"
    assert (await q.kv.get(ns, "b:2"))["value"] == "two"


@aiotest
async def test_batch_reads_and_writes_of_one_call(q):
    ns = kv_ns()
    op = q.kv.op
    await q.kv.put(ns, "rw:k", "old", forever=True)
    res = await q.kv.batch(
        [
            op.get(ns, "rw:k"),
            op.put(ns, "rw:k", "new", forever=True),
            op.get_many(ns, ["rw:k"]),
            op.get_prefix(ns, "rw:"),
        ]
    )
    # A get sees the state before the call's write of that key; multi-key
    # reads run after the writes and see them.
    assert res[0]["value"] == "old"
    assert res[1]["applied"] is True
    assert res[2]["rows"][0]["value"] == "new"
    assert res[3]["rows"][0]["value"] == "new"


@aiotest
async def test_batch_required_loss_aborts_whole_call(q):
    ns = kv_ns()
    op = q.kv.op
    await q.kv.put(ns, "req:taken", "winner", forever=True)
    res = await q.kv.batch(
        [
            op.put(ns, "req:a", "should not exist", forever=True),
            op.put_if_absent(ns, "req:taken", "loser", forever=True, required=True),
        ]
    )
    assert res == []  # HTTP 200 {ok:false, reason:kv_precondition, ...} has no results
    assert q.recorder.matching("POST", "/api/v1/kv")[-1].status == 200
    assert (await q.kv.get(ns, "req:a"))["found"] is False
    assert (await q.kv.get(ns, "req:taken"))["value"] == "winner"
    # A single-op helper that gets no results raises kv_result_missing.
    with pytest.raises(KvError) as excinfo:
        await q.kv.put(ns, "req:taken", "x", forever=True, expect=0, required=True)
    assert excinfo.value.code == "kv_result_missing"
    # Not required: the loser just does not apply and the rest commits.
    res = await q.kv.batch(
        [
            op.put(ns, "req:b", "exists now", forever=True),
            op.put_if_absent(ns, "req:taken", "loser", forever=True),
        ]
    )
    assert res[0]["applied"] is True
    assert res[1]["applied"] is False and res[1]["reason"] == "exists"
    assert res[1]["value"] == "winner"


@aiotest
async def test_batch_empty_is_local(q):
    assert await q.kv.batch([]) == []
    assert q.recorder.matching("POST", "/api/v1/kv") == []


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------


@aiotest
async def test_bad_namespace_raises_kv_bad_request(q):
    with pytest.raises(KvError) as excinfo:
        await q.kv.put("NOT A NAMESPACE", "k", 1, forever=True)
    e = excinfo.value
    assert e.status == 400
    assert e.code == "kv_bad_request"
    assert e.reason == "kv_bad_namespace"
    body = e.response.json()
    assert body["error"] == "kv_bad_request"
    assert body.get("code") in (None, "kv_bad_request")


@aiotest
async def test_duplicate_key_in_one_call_is_bad_request(q):
    ns = kv_ns()
    op = q.kv.op
    with pytest.raises(KvError) as excinfo:
        await q.kv.batch(
            [op.put(ns, "dup", 1, forever=True), op.put(ns, "dup", 2, forever=True)]
        )
    assert excinfo.value.status == 400
    assert excinfo.value.code == "kv_bad_request"
    assert excinfo.value.reason == "kv_duplicate_key_in_call"
    assert (await q.kv.get(ns, "dup"))["found"] is False


@aiotest
async def test_value_and_key_too_large(q):
    ns = kv_ns()
    with pytest.raises(KvError) as excinfo:
        await q.kv.put(ns, "big", "x" * (70 * 1024), forever=True)
    assert excinfo.value.status == 413
    assert excinfo.value.code == "payload_too_large"
    assert excinfo.value.reason == "kv_value_too_large"
    with pytest.raises(KvError) as excinfo:
        await q.kv.put(ns, "k" * 513, 1, forever=True)
    assert excinfo.value.status == 413
    assert excinfo.value.reason == "kv_key_too_large"
    # 512 bytes exactly is fine (bytes, not characters: 256 x 2-byte char).
    ok = await q.kv.put(ns, "\u00e9" * 256, 1, forever=True)
    assert ok["applied"] is True
