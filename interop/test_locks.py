"""Locks and semaphores (POST /api/v1/locks), and the lock guard of a
transaction bundle.

Spec: shared/spec/queen2-wire.md §3.11 (locks), §2.3 (a lost required KV op
is returned, not raised), §1.3 (check results).
Client: queen/locks/locks.py, queen/builders/transaction_builder.py (guard).

Every test uses its own uuid-suffixed lock name (and queues / KV namespace),
so the suite runs in any order against one long-lived broker.
"""

import asyncio

import pytest

from queen import LockNotHeldError

from qhelpers import aiotest, create_queue, kv_ns, pop, push, qname, uid

pytestmark = pytest.mark.locks

LOCK_NS = "queen-locks"


def lock_name(tag: str = "lock") -> str:
    # No '#' (the client refuses it: it separates name and slot in the row key).
    return f"it-{tag}-{uid(12)}"


def guard_of(name: str, slot: int, token: int) -> dict:
    return {"op": "check", "ns": LOCK_NS, "key": f"{name}#{slot}", "expect": token, "required": True}


def assert_granted(res, *, name, owner, slot=0, already=False):
    assert res["acquired"] is True, res
    assert bool(res) is True
    assert res["index"] == 0
    assert res["op"] == "acquire"
    assert res["name"] == name
    assert res["slot"] == slot
    assert res["owner"] == owner
    token = res["token"]
    assert isinstance(token, int) and not isinstance(token, bool) and token > 0, res
    assert res["guard"] == guard_of(name, slot, token), res
    if already:
        assert res.get("already") is True, res
    else:
        assert not res.get("already"), res
    return token


# ---------------------------------------------------------------------------
# the four ops, stateless (client.locks)
# ---------------------------------------------------------------------------


@aiotest
async def test_acquire_get_renew_release_round_trip(q):
    name = lock_name()
    owner = f"owner-{uid()}"

    acq = await q.locks.acquire(name, ttl_seconds=30, owner=owner)
    t1 = assert_granted(acq, name=name, owner=owner)

    got = await q.locks.get(name)
    assert got["held"] is True and bool(got) is True
    [h] = got["holders"]
    assert h["slot"] == 0 and h["owner"] == owner and h["token"] == t1
    for field in ("since", "expiresAt", "renewedAt"):
        assert field in h, h
    assert isinstance(h["expiresAt"], str) and h["expiresAt"]

    # The permit is a KV row: ns queen-locks, key "<name>#<slot>", version =
    # token, value holds the owner.
    row = await q.kv.get(LOCK_NS, f"{name}#0")
    assert row["found"] is True, row
    assert row["version"] == t1
    assert isinstance(row["value"], dict) and row["value"]["owner"] == owner
    assert isinstance(row["expiresAt"], str) and row["expiresAt"]  # never forever

    # renew issues a NEW, higher token and a guard at that token.
    ren = await q.locks.renew(name, token=t1, ttl_seconds=30, owner=owner)
    assert ren["renewed"] is True and bool(ren) is True, ren
    assert ren["slot"] == 0
    t2 = ren["token"]
    assert isinstance(t2, int) and t2 > t1
    assert ren["guard"] == guard_of(name, 0, t2)
    row = await q.kv.get(LOCK_NS, f"{name}#0")
    assert row["version"] == t2 and row["value"]["owner"] == owner

    # The same renew sent again with the OLD token by the same owner (its answer
    # was lost) still renews, with a newer token still.
    again = await q.locks.renew(name, token=t1, ttl_seconds=30, owner=owner)
    assert again["renewed"] is True, again
    t3 = again["token"]
    assert t3 > t2
    assert again["slot"] == 0
    assert (await q.locks.get(name))["holders"][0]["token"] == t3

    # release with a superseded token is lost and removes nothing.
    stale = await q.locks.release(name, token=t1)
    assert stale["released"] is False and bool(stale) is False, stale
    assert stale["reason"] == "lost"
    assert (await q.locks.get(name))["held"] is True

    rel = await q.locks.release(name, token=t3)
    assert rel["released"] is True and bool(rel) is True, rel

    gone = await q.locks.get(name)
    assert gone["held"] is False and bool(gone) is False
    assert gone["holders"] == []
    assert (await q.kv.get(LOCK_NS, f"{name}#0"))["found"] is False

    # Released twice: lost, HTTP 200.
    twice = await q.locks.release(name, token=t3)
    assert twice["released"] is False and twice["reason"] == "lost"
    assert all(e.status == 200 for e in q.recorder.matching("POST", "/api/v1/locks"))


@aiotest
async def test_acquire_is_idempotent_by_owner(q):
    name = lock_name()
    owner = f"owner-{uid()}"
    first = await q.locks.acquire(name, ttl_seconds=30, owner=owner)
    token = assert_granted(first, name=name, owner=owner)

    # Sent again (its answer was lost): the same permit, not a second one.
    second = await q.locks.acquire(name, ttl_seconds=30, owner=owner)
    assert_granted(second, name=name, owner=owner, already=True)
    assert second["token"] == token

    # Another owner is refused, with the holder named.
    other = await q.locks.acquire(name, ttl_seconds=30, owner=f"other-{uid()}")
    assert other["acquired"] is False and bool(other) is False, other
    assert other["reason"] in ("held", "contended"), other
    assert [h["owner"] for h in other["holders"]] == [owner]
    assert other["holders"][0]["token"] == token

    got = await q.locks.get(name)
    assert [(h["slot"], h["owner"], h["token"]) for h in got["holders"]] == [(0, owner, token)]


@aiotest
async def test_renew_by_another_owner_is_lost(q):
    name = lock_name()
    owner = f"owner-{uid()}"
    intruder = f"intruder-{uid()}"
    t1 = assert_granted(await q.locks.acquire(name, ttl_seconds=30, owner=owner), name=name, owner=owner)
    t2 = (await q.locks.renew(name, token=t1, ttl_seconds=30, owner=owner))["token"]

    # Another owner never renews it: not with a stale token ...
    stale = await q.locks.renew(name, token=t1, ttl_seconds=30, owner=intruder)
    assert stale["renewed"] is False and bool(stale) is False, stale
    assert stale["reason"] == "lost"
    assert stale["holders"][0]["owner"] == owner
    assert stale["holders"][0]["token"] == t2

    # ... and not with the current one either.
    current = await q.locks.renew(name, token=t2, ttl_seconds=30, owner=intruder)
    assert current["renewed"] is False and current["reason"] == "lost", current
    assert current["holders"][0]["owner"] == owner

    # Nothing moved: the real holder's token is still t2.
    got = await q.locks.get(name)
    assert [(h["owner"], h["token"]) for h in got["holders"]] == [(owner, t2)]
    assert (await q.kv.get(LOCK_NS, f"{name}#0"))["version"] == t2


@aiotest
async def test_semaphore_of_three_with_five_owners(q):
    name = lock_name("sem")
    owners = [f"o{i}-{uid()}" for i in range(5)]
    results = await asyncio.gather(
        *[q.locks.acquire(name, ttl_seconds=30, owner=o, limit=3) for o in owners]
    )
    granted = [r for r in results if r["acquired"]]
    refused = [r for r in results if not r["acquired"]]
    assert len(granted) == 3, results
    assert len(refused) == 2, results
    assert sorted(r["slot"] for r in granted) == [0, 1, 2]
    assert len({r["token"] for r in granted}) == 3
    for r in granted:
        assert r["guard"] == guard_of(name, r["slot"], r["token"])
    for r in refused:
        assert r["reason"] in ("held", "contended"), r
        assert isinstance(r["holders"], list) and len(r["holders"]) <= 3

    got = await q.locks.get(name)
    assert got["held"] is True
    assert sorted(h["slot"] for h in got["holders"]) == [0, 1, 2]
    by_slot = {r["slot"]: r for r in granted}
    for h in got["holders"]:
        assert h["owner"] == by_slot[h["slot"]]["owner"]
        assert h["token"] == by_slot[h["slot"]]["token"]
    for slot, r in by_slot.items():
        row = await q.kv.get(LOCK_NS, f"{name}#{slot}")
        assert row["version"] == r["token"] and row["value"]["owner"] == r["owner"]
    assert (await q.kv.get(LOCK_NS, f"{name}#3"))["found"] is False

    # A released slot goes to the next acquirer, and it is the freed one.
    freed = by_slot[1]
    assert (await q.locks.release(name, token=freed["token"]))["released"] is True
    late_owner = next(o for o, r in zip(owners, results) if not r["acquired"])
    nxt = await q.locks.acquire(name, ttl_seconds=30, owner=late_owner, limit=3)
    assert nxt["acquired"] is True, nxt
    assert nxt["slot"] == 1
    assert nxt["token"] > freed["token"]


@aiotest
async def test_semaphore_handles(q):
    name = lock_name("semh")
    handles = [q.semaphore(name, 3, ttl_seconds=30, auto_renew=False) for _ in range(5)]
    verdicts = [await h.acquire() for h in handles]
    assert verdicts.count(True) == 3
    held = [h for h, v in zip(handles, verdicts) if v]
    assert sorted(h.slot for h in held) == [0, 1, 2]
    for h in held:
        assert h.guard() == guard_of(name, h.slot, h.token)
    for h, v in zip(handles, verdicts):
        if not v:
            assert h.held is False and h.token is None
            with pytest.raises(LockNotHeldError):
                h.guard()
    for h in held:
        assert await h.release() is True
    assert (await q.locks.get(name))["held"] is False


@aiotest
async def test_expired_permit_passes_to_next_acquirer(q):
    name = lock_name("exp")
    first, second = f"first-{uid()}", f"second-{uid()}"
    t1 = assert_granted(await q.locks.acquire(name, ttl_seconds=1, owner=first), name=name, owner=first)
    refused = await q.locks.acquire(name, ttl_seconds=30, owner=second)
    assert refused["acquired"] is False

    await asyncio.sleep(2.2)  # the 1 s permit is over; nobody renewed it

    assert (await q.locks.get(name))["held"] is False
    took = await q.locks.acquire(name, ttl_seconds=30, owner=second)
    t2 = assert_granted(took, name=name, owner=second)
    assert t2 > t1
    row = await q.kv.get(LOCK_NS, f"{name}#0")
    assert row["version"] == t2 and row["value"]["owner"] == second

    # The first holder's renew (by token or by owner) is lost now.
    late = await q.locks.renew(name, token=t1, ttl_seconds=30, owner=first)
    assert late["renewed"] is False and late["reason"] == "lost", late
    assert late["holders"][0]["owner"] == second
    # ... and its release changes nothing.
    assert (await q.locks.release(name, token=t1))["released"] is False
    assert (await q.locks.get(name))["holders"][0]["token"] == t2


@aiotest
async def test_bad_name_refused_locally(q):
    with pytest.raises(ValueError):
        await q.locks.acquire("has#hash", ttl_seconds=30)
    with pytest.raises(ValueError):
        await q.locks.acquire(lock_name(), ttl_seconds=0)
    assert q.recorder.matching("POST", "/api/v1/locks") == []


# ---------------------------------------------------------------------------
# handles (client.lock)
# ---------------------------------------------------------------------------


@aiotest
async def test_lock_handle_acquire_renew_release(q):
    name = lock_name("h")
    lock = q.lock(name, ttl_seconds=30, auto_renew=False)
    assert lock.held is False and lock.token is None
    assert await lock.acquire() is True
    t1 = lock.token
    assert lock.slot == 0 and lock.held is True
    assert lock.guard() == guard_of(name, 0, t1)
    got = await q.locks.get(name)
    assert got["holders"][0]["owner"] == lock.owner  # the handle sent its minted owner

    assert await lock.renew() is True
    assert lock.token > t1
    assert lock.guard() == guard_of(name, 0, lock.token)
    assert (await q.kv.get(LOCK_NS, f"{name}#0"))["version"] == lock.token

    # A second handle (another owner) cannot have it.
    other = q.lock(name, ttl_seconds=30, auto_renew=False)
    assert await other.acquire() is False
    assert other.held is False

    assert await lock.release() is True
    assert lock.held is False and lock.token is None
    assert await other.acquire() is True
    assert other.token > t1
    assert await other.release() is True


@aiotest
async def test_async_with_lock(q):
    name = lock_name("with")
    lock = q.lock(name, ttl_seconds=30)
    async with lock as held:
        assert held is lock
        assert lock.held is True and lock.token is not None
        got = await q.locks.get(name)
        assert [h["owner"] for h in got["holders"]] == [lock.owner]
        # Somebody else's `async with` raises instead of running unlocked.
        with pytest.raises(LockNotHeldError):
            async with q.lock(name, ttl_seconds=30):
                raise AssertionError("ran without the lock")
    assert lock.held is False
    assert (await q.locks.get(name))["held"] is False
    assert (await q.kv.get(LOCK_NS, f"{name}#0"))["found"] is False


# ---------------------------------------------------------------------------
# the guard in a transaction bundle
# ---------------------------------------------------------------------------


@aiotest
async def test_guard_rolls_back_zombie_and_commits_live_holder(q):
    name = lock_name("guard")
    src, dst = qname("lock-src"), qname("lock-dst")
    ns = kv_ns("lock")
    await create_queue(q, src)
    await create_queue(q, dst)
    await push(q, src, [{"job": 1}])
    [m] = await pop(q, src)

    zombie = q.lock(name, ttl_seconds=30, auto_renew=False)
    assert await zombie.acquire() is True
    zt = zombie.token
    # Behind the zombie's back its permit is released and taken by another
    # holder: the zombie still believes it holds the lock (its lifetime has
    # not run out on this clock), but its token is superseded.
    assert (await q.locks.release(name, token=zt))["released"] is True
    live = q.lock(name, ttl_seconds=30, auto_renew=False)
    assert await live.acquire() is True
    assert live.token > zt
    assert zombie.held is True and zombie.token == zt

    n_tx = len(q.recorder.matching("POST", "/api/v1/transaction"))
    res = await (
        q.transaction()
        .guard(zombie)
        .queue(dst)
        .push([{"data": {"by": "zombie"}}])
        .ack(m)
        .kv.put(ns, "state", "zombie", forever=True)
        .commit()
    )
    # Returned, not raised. Flat index: 1 push item + 1 ack + kv[0] (the guard).
    assert res["success"] is False and bool(res) is False, res
    assert res["reason"] == "kv_precondition", res
    assert res["failedIndex"] == 2, res
    assert res["kvReason"] == "version", res
    assert res["version"] == live.token
    assert isinstance(res["value"], dict) and res["value"]["owner"] == live.owner
    assert res.get("results") in ([], None), res
    # Lost to another holder: sent once (no own-renewal retry), handle lost.
    assert len(q.recorder.matching("POST", "/api/v1/transaction")) == n_tx + 1
    assert q.recorder.matching("POST", "/api/v1/transaction")[-1].status == 200
    assert zombie.lost.is_set()
    assert zombie.held is False and zombie.token is None

    # Rolled back whole: nothing pushed, no KV write, m still leased to us.
    assert await pop(q, dst) == []
    assert (await q.kv.get(ns, "state"))["found"] is False
    assert await pop(q, src) == []

    # The live holder's same bundle commits.
    ok = await (
        q.transaction()
        .guard(live)
        .queue(dst)
        .push([{"data": {"by": "live"}}])
        .ack(m)
        .kv.put(ns, "state", "live", forever=True)
        .commit()
    )
    assert ok["success"] is True and bool(ok) is True, ok
    results = ok["results"]
    assert [r["type"] for r in results] == ["push", "ack", "kv", "kv"]
    assert results[2]["op"] == "check" and results[2]["applied"] is True
    assert results[2]["version"] == live.token
    assert results[3]["op"] == "put" and results[3]["applied"] is True
    assert live.held is True

    got = await pop(q, dst, batch=10)
    assert [x["data"] for x in got] == [{"by": "live"}]
    assert (await q.kv.get(ns, "state"))["value"] == "live"
    assert await pop(q, src) == []
    # A guard only checks: the permit row is unchanged.
    assert (await q.kv.get(LOCK_NS, f"{name}#0"))["version"] == live.token
    assert await live.release() is True


@aiotest
async def test_guard_of_released_permit_rolls_back(q):
    name = lock_name("gexp")
    dst = qname("lock-gexp")
    await create_queue(q, dst)
    holder = q.lock(name, ttl_seconds=30, auto_renew=False)
    assert await holder.acquire() is True
    # Gone from under the handle (released by its token, as an expiry would
    # leave it): the row is absent, so the check answers "absent".
    assert (await q.locks.release(name, token=holder.token))["released"] is True
    res = await q.transaction().guard(holder).queue(dst).push([{"data": {"x": 1}}]).commit()
    assert res["success"] is False and res["reason"] == "kv_precondition", res
    assert res["failedIndex"] == 1
    assert res["kvReason"] == "absent", res
    assert holder.lost.is_set()
    assert await pop(q, dst) == []


@aiotest
async def test_guard_without_a_held_lock_raises_locally(q):
    dst = qname("lock-none")
    lock = q.lock(lock_name("none"), ttl_seconds=30)
    with pytest.raises(LockNotHeldError):
        await q.transaction().guard(lock).queue(dst).push([{"data": {"x": 1}}]).commit()
    assert q.recorder.matching("POST", "/api/v1/transaction") == []
