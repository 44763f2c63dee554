"""Algorithm 1: the global controller and the bulk client."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorp import PeerError, UsageError
from coorp.control import (
    BulkClient,
    ForeignGrantError,
    GlobalController,
    Grant,
    PermitUpdate,
    UnknownRobotError,
)

S = 1_000_000_000


def robots_of(update: PermitUpdate) -> list[str]:
    return [g.robot for g in update.granted]


# -- constructor validation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"limit": 0}, "limit=0"),
        ({"limit": -3}, "limit=-3"),
        ({"timeslice_ns": 0}, "timeslice_ns=0"),
    ],
)
def test_bad_constructor_arguments_name_the_parameter(kwargs: dict[str, int], name: str) -> None:
    with pytest.raises(UsageError, match=name):
        GlobalController(["a"], **kwargs)


def test_robots_must_be_an_iterable_of_names() -> None:
    with pytest.raises(UsageError, match="robots="):
        GlobalController("abc")
    with pytest.raises(UsageError, match="robot="):
        GlobalController(["a", ""])


# -- basic protocol -------------------------------------------------------------------------


def test_first_request_is_granted_immediately_with_a_full_timeslice() -> None:
    c = GlobalController(["a", "b"], timeslice_ns=5 * S)
    update = c.request("a", 100)
    assert update.granted == (Grant("a", update.granted[0].grant_id, 100, 100 + 5 * S),)
    assert update.revoked == ()
    assert c.holders == update.granted
    assert c.next_deadline_ns() == 100 + 5 * S


def test_second_request_waits_and_is_granted_on_release() -> None:
    c = GlobalController(["a", "b"])
    g_a = c.request("a", 0).granted[0]
    assert not c.request("b", 10)
    assert c.waiting == ("b",)
    update = c.release("a", g_a.grant_id, 20)
    assert robots_of(update) == ["b"]
    assert update.granted[0].granted_ns == 20
    assert update.revoked == ()  # a released itself; nobody needs to be told
    assert c.waiting == ()
    assert c.stats.releases == 1


def test_timeslice_expiry_revokes_and_grants_next_in_fifo_order() -> None:
    c = GlobalController(["a", "b", "c"], timeslice_ns=1_000)
    g_a = c.request("a", 0).granted[0]
    c.request("c", 1)
    c.request("b", 2)
    assert c.tick(999) == PermitUpdate()  # one nanosecond before the slice ends
    update = c.tick(1_000)
    assert update.revoked == (g_a,)
    assert robots_of(update) == ["c"]
    assert c.waiting == ("b",)
    assert c.stats.revocations == 1


def test_expiries_are_applied_by_every_call_not_only_tick() -> None:
    c = GlobalController(["a", "b"], timeslice_ns=1_000)
    g_a = c.request("a", 0).granted[0]
    c.request("b", 1)
    # The caller was late: the expiry at t=1000 is discovered by a request at 5000.
    update = c.request("a", 5_000)
    assert update.revoked == (g_a,)
    assert robots_of(update) == ["b"]
    assert c.waiting == ("a",)  # a asked again after revocation: back of the queue


def test_revoked_robot_goes_to_the_back_of_the_queue() -> None:
    c = GlobalController(["a", "b", "c"], timeslice_ns=100)
    c.request("a", 0)
    c.request("b", 1)
    c.tick(100)  # a revoked, b granted
    c.request("c", 101)
    c.request("a", 102)
    assert c.waiting == ("c", "a")


def test_limit_two_grants_two_concurrently() -> None:
    c = GlobalController(["a", "b", "c"], limit=2)
    assert robots_of(c.request("a", 0)) == ["a"]
    assert robots_of(c.request("b", 0)) == ["b"]
    assert robots_of(c.request("c", 0)) == []
    assert [g.robot for g in c.holders] == ["a", "b"]


def test_duplicate_requests_are_counted_no_ops() -> None:
    c = GlobalController(["a", "b"])
    c.request("a", 0)
    c.request("b", 0)
    assert c.request("a", 1) == PermitUpdate()  # holding
    assert c.request("b", 1) == PermitUpdate()  # waiting
    assert c.waiting == ("b",)
    assert len(c.holders) == 1
    assert c.stats.duplicate_requests == 2


def test_stale_releases_never_free_anybody_elses_grant() -> None:
    c = GlobalController(["a", "b", "c"], timeslice_ns=100)
    g_a = c.request("a", 0).granted[0]
    c.request("b", 1)
    c.request("c", 2)
    g_b = c.tick(100).granted[0]
    # a's grant has expired; its late release must not free b's permit.
    assert c.release("a", g_a.grant_id, 101) == PermitUpdate()
    # a cannot release b's grant by quoting b's id either.
    assert c.release("a", g_b.grant_id, 102) == PermitUpdate()
    # b quoting a made-up id does nothing.
    assert c.release("b", 12345, 103) == PermitUpdate()
    assert c.holders == (g_b,)
    assert c.stats.stale_releases == 3
    # The real release still works, and releasing twice is stale.
    assert robots_of(c.release("b", g_b.grant_id, 104)) == ["c"]
    assert c.release("b", g_b.grant_id, 105) == PermitUpdate()
    assert c.stats.stale_releases == 4


def test_unknown_robot_raises_a_peer_error_and_is_counted() -> None:
    c = GlobalController(["a"])
    with pytest.raises(UnknownRobotError, match="'zed'") as info:
        c.request("zed", 0)
    assert isinstance(info.value, PeerError)
    with pytest.raises(UnknownRobotError):
        c.release("zed", 1, 0)
    assert c.stats.unknown_robots == 2


def test_unknown_robot_does_not_swallow_due_expiries() -> None:
    c = GlobalController(["a", "b"], timeslice_ns=10)
    c.request("a", 0)
    c.request("b", 0)
    with pytest.raises(UnknownRobotError):
        c.request("zed", 50)
    # The expiry at t=10 is still reported by the next call.
    update = c.tick(50)
    assert [g.robot for g in update.revoked] == ["a"]
    assert robots_of(update) == ["b"]


def test_time_must_not_go_backwards() -> None:
    c = GlobalController(["a"])
    c.tick(100)
    c.tick(100)  # equal is fine
    with pytest.raises(UsageError, match="now_ns=99"):
        c.request("a", 99)


def test_grant_ids_are_unique_and_increasing() -> None:
    c = GlobalController(["a", "b"], timeslice_ns=10)
    ids = []
    for t in range(0, 200, 5):
        for r in ("a", "b"):
            ids += [g.grant_id for g in c.request(r, t).granted]
        ids += [g.grant_id for g in c.tick(t).granted]
    assert len(ids) > 5
    assert ids == sorted(set(ids))


def test_remove_robot_revokes_its_grant_and_drops_its_request() -> None:
    c = GlobalController(["a", "b", "c"])
    g_a = c.request("a", 0).granted[0]
    c.request("b", 1)
    c.request("c", 2)
    update = c.remove_robot("a", 3)
    assert update.revoked == (g_a,)
    assert robots_of(update) == ["b"]
    c.remove_robot("c", 4)
    assert c.waiting == ()
    assert c.robots == frozenset({"b"})
    assert c.remove_robot("c", 5) == PermitUpdate()  # idempotent
    with pytest.raises(UnknownRobotError):
        c.request("a", 6)
    c.add_robot("a")
    c.add_robot("a")  # idempotent
    assert c.request("a", 7) == PermitUpdate()
    assert c.waiting == ("a",)


def test_next_deadline_tracks_the_earliest_holder() -> None:
    c = GlobalController(["a", "b"], limit=2, timeslice_ns=100)
    assert c.next_deadline_ns() is None
    c.request("a", 10)
    c.request("b", 30)
    assert c.next_deadline_ns() == 110
    c.tick(110)
    assert c.next_deadline_ns() == 130


# -- random operation sequences -------------------------------------------------------------

ROBOTS = ["r0", "r1", "r2", "r3"]
op = st.one_of(
    st.tuples(st.just("request"), st.sampled_from(ROBOTS), st.integers(0, 40)),
    st.tuples(st.just("release"), st.sampled_from(ROBOTS), st.integers(0, 40)),
    st.tuples(st.just("bogus_release"), st.sampled_from(ROBOTS), st.integers(0, 40)),
    st.tuples(st.just("tick"), st.just(""), st.integers(0, 120)),
    st.tuples(st.just("remove_add"), st.sampled_from(ROBOTS), st.integers(0, 5)),
)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 3), ops=st.lists(op, max_size=80))
def test_random_operations_keep_every_invariant(
    limit: int, ops: list[tuple[str, str, int]]
) -> None:
    timeslice = 50
    c = GlobalController(ROBOTS, limit=limit, timeslice_ns=timeslice)
    now = 0
    pending: list[str] = []  # model: accepted, not yet granted requests, in order
    held: dict[str, Grant] = {}  # model: who holds what
    last_id = 0

    for kind, robot, dt in ops:
        now += dt
        due = {g for g in held.values() if g.expires_ns <= now}
        released: str | None = None
        if kind == "request":
            still_holding = robot in held and held[robot] not in due
            if not still_holding and robot not in pending:
                pending.append(robot)
            update = c.request(robot, now)
        elif kind == "release":
            grant = held.get(robot)
            gid = grant.grant_id if grant else 999_999
            if grant is not None and grant not in due:
                released = robot
            update = c.release(robot, gid, now)
        elif kind == "bogus_release":
            update = c.release(robot, last_id + 1 + dt, now)
        elif kind == "tick":
            update = c.tick(now)
        else:
            if robot in pending:
                pending.remove(robot)
            if robot in held and held[robot] not in due:
                due.add(held[robot])
            update = c.remove_robot(robot, now)
            c.add_robot(robot)
        # Exactly the due grants (and a removed robot's) are revoked.
        assert set(update.revoked) == due
        for g in update.revoked:
            del held[g.robot]
        if released is not None:
            del held[released]
        for g in update.granted:
            # Grants follow request order, ids only increase.
            assert pending and pending[0] == g.robot
            pending.pop(0)
            assert g.grant_id > last_id
            last_id = g.grant_id
            assert g.granted_ns == now and g.expires_ns == now + timeslice
            held[g.robot] = g
            # Never more than `limit` holders, even mid-update.
            assert len(held) <= limit
        # After every call: the controller agrees with the model.
        assert len(c.holders) <= limit
        assert {g.robot: g for g in c.holders} == held
        assert list(c.waiting) == pending
        assert all(g.expires_ns > now for g in c.holders)
        # Work-conserving: nobody waits while a permit is free.
        assert not (c.waiting and len(c.holders) < limit)


# -- bulk client ------------------------------------------------------------------------------


def test_client_full_cycle_with_controller() -> None:
    ctl = GlobalController(["a"], timeslice_ns=1_000)
    cli = BulkClient("a")
    assert not cli.may_send(0)
    assert cli.want(0) is True
    assert cli.want(1) is False  # request outstanding
    (grant,) = ctl.request("a", 2).granted
    assert cli.on_grant(grant, 5) is None
    assert cli.may_send(5)
    assert cli.local_expires_ns == 1_005  # slice measured on the robot's clock
    assert cli.want(6) is False  # still holding
    gid = cli.finished(10)
    assert gid == grant.grant_id
    assert not cli.may_send(10)
    assert ctl.release("a", gid, 12) == PermitUpdate()
    assert ctl.holders == ()


def test_client_permit_ends_on_its_local_clock() -> None:
    cli = BulkClient("a")
    cli.want(0)
    # The leader's clock is far from ours: only the slice length matters.
    cli.on_grant(Grant("a", 7, 10**15, 10**15 + 500), 100)
    assert cli.may_send(599)
    assert not cli.may_send(600)
    assert cli.finished(601) is None  # expired: nothing to release


def test_client_requests_again_after_revocation_or_expiry() -> None:
    cli = BulkClient("a")
    cli.want(0)
    cli.on_grant(Grant("a", 1, 0, 100), 0)
    cli.on_revoke(99, 10)  # someone else's id: ignored
    assert cli.may_send(10)
    cli.on_revoke(1, 20)
    assert not cli.may_send(20)
    assert cli.want(21) is True
    cli.on_grant(Grant("a", 2, 30, 130), 30)
    assert cli.want(200) is True  # expired locally: ask again


def test_client_ignores_duplicate_and_stale_grants() -> None:
    cli = BulkClient("a")
    cli.want(0)
    cli.on_grant(Grant("a", 5, 0, 100), 0)
    cli.on_revoke(5, 1)
    assert cli.on_grant(Grant("a", 5, 0, 100), 2) is None  # replayed
    assert cli.on_grant(Grant("a", 3, 0, 100), 3) is None  # older
    assert not cli.may_send(3)


def test_client_releases_a_grant_that_arrives_after_it_finished() -> None:
    cli = BulkClient("a")
    cli.want(0)
    assert cli.finished(5) is None
    assert cli.on_grant(Grant("a", 4, 6, 106), 6) == 4
    assert not cli.may_send(7)


def test_client_rejects_foreign_grants_and_lost_requests_are_retried() -> None:
    cli = BulkClient("a")
    with pytest.raises(ForeignGrantError, match="'b'"):
        cli.on_grant(Grant("b", 1, 0, 1), 0)
    assert cli.want(1) is True
    cli.on_request_lost(2)
    assert cli.want(3) is True
    with pytest.raises(UsageError, match="now_ns=2"):
        cli.may_send(2)
    with pytest.raises(UsageError, match="robot="):
        BulkClient("")


def test_a_removed_robot_is_never_granted_while_being_removed() -> None:
    # r0's slice ends exactly when r1 (next in line) is removed: the freed permit
    # must not go to r1 and be revoked again in the same update.
    c = GlobalController(["r0", "r1", "r2"], timeslice_ns=50)
    g0 = c.request("r0", 0).granted[0]
    c.request("r1", 40)
    c.request("r2", 45)
    update = c.remove_robot("r1", 50)
    assert update.revoked == (g0,)
    assert robots_of(update) == ["r2"]


def test_a_weighted_robot_holds_as_many_timeslices_from_its_next_grant() -> None:
    c = GlobalController(["srv", "r1"], timeslice_ns=100)
    g0 = c.request("srv", 0).granted[0]
    c.set_weight("srv", 4)  # it serves four flows now: the grant it holds keeps its length
    assert g0.expires_ns == 100 and c.weight("srv") == 4
    c.request("r1", 10)
    g1 = c.tick(100).granted[0]  # srv's slice ended: r1 (weight 1) is next
    assert (g1.robot, g1.expires_ns - g1.granted_ns) == ("r1", 100)
    c.request("srv", 150)
    g2 = c.release("r1", g1.grant_id, 160).granted[0]
    assert (g2.robot, g2.expires_ns - g2.granted_ns) == ("srv", 400)
    c.remove_robot("srv", 170)  # a robot that leaves forgets its weight
    c.add_robot("srv")
    assert c.weight("srv") == 1
    with pytest.raises(UsageError, match="weight=0"):
        c.set_weight("srv", 0)
