"""Ephemeral queues through client.ephemeral (queen2-wire.md §3.12): in the
owning broker's memory, fan-out per group, per-message leases, bounds."""

import asyncio

import pytest

from queen import Queen
from queen.errors import EphemeralError, EphemeralQueueNotFoundError

from qhelpers import QUEEN_URL, aiotest, qname

pytestmark = pytest.mark.ephemeral


@aiotest
async def test_push_pop_ack_in_order_with_verbatim_payloads(q):
    E, n = q.ephemeral, qname("eph")
    res = await E.push(n, [{"a": 1}, "s", 3, [1, 2], {"payload": None}])
    assert res["pushed"] == 5
    got = await E.pop(n, batch=10)
    assert [m["payload"] for m in got["messages"]] == [{"a": 1}, "s", 3, [1, 2], None]
    assert all(m["attempts"] == 1 and m["partition"] == "Default" for m in got["messages"])
    res = await E.ack(n, got["messages"])
    assert [r["outcome"] for r in res["results"]] == ["acked"] * 5
    assert (await E.pop(n, batch=10))["messages"] == []


@aiotest
async def test_groups_fan_out_nacks_redeliver_and_depth_knows_missing_queues(q):
    E, n = q.ephemeral, qname("ephg")
    await E.push(n, [1, 2, 3])
    a = await E.pop(n, batch=10, group="g1")
    b = await E.pop(n, batch=10, group="g2")
    assert [m["payload"] for m in a["messages"]] == [m["payload"] for m in b["messages"]] == [1, 2, 3]
    res = await E.ack(n, a["messages"][0], group="g1", status=False)
    assert res["results"][0]["outcome"] == "redelivered"
    again = await E.pop(n, batch=10, group="g1")
    assert again["messages"][0]["attempts"] == 2
    with pytest.raises(EphemeralQueueNotFoundError):
        await E.depth(qname("never"))


@aiotest
async def test_a_full_queue_refuses_the_whole_push_and_a_long_poll_wakes(q):
    strict = Queen(QUEEN_URL, retry_attempts=1, retry_429={"max_attempts": 1})
    try:
        E, n = strict.ephemeral, qname("ephfull")
        await E.configure(n, max_length=2, policy="reject")
        with pytest.raises(EphemeralError) as err:
            await E.push(n, [1, 2, 3])
        assert err.value.status == 429
        assert (await E.depth(n))["pending"] == 0
        waiter = asyncio.create_task(E.pop(n, wait=True, timeout=5000))
        await asyncio.sleep(0.2)
        await E.push(n, ["woke"])
        got = await waiter
        assert [m["payload"] for m in got["messages"]] == ["woke"]
    finally:
        await strict.close()
