"""A fleet's cell leaders on loopback: two `CellService`s of one channel peer over the
authenticated wire; one permit for the channel in request order across cells; a dead
peer leaves each cell coordinating its own robots (per-team, never none); bad peers are
refused or dropped with clear errors. And an agent's cell follower woken by its watch
socket (the kernel's route-change notification) without waiting for its next look.

Every wait is bounded (``asyncio.timeout``); conditions are polled on the services'
own state, never slept for.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from rt_helpers import KEY

from coorp.runtime import (
    CellService,
    LeaderSettings,
    RefusedError,
    Roaming,
    RoamingCell,
    TeamKey,
    route_changes,
)
from coorp.runtime.robot._roam import CellFollower
from coorp.runtime.wire import (
    FramedConnection,
    Granted,
    PeerFrame,
    Release,
    Request,
    Welcome,
    client_handshake,
    connect_framed,
    recv_first_reply,
)

ROBOTS = ["r1", "r2", "r3"]
SETTINGS = LeaderSettings(limit=1, timeslice_ns=60_000_000_000, heartbeat_ns=200_000_000)
HB_NS, TIMEOUT_NS = 50_000_000, 200_000_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cells(names: list[str]) -> tuple[dict[str, CellService], dict[str, tuple[str, int]]]:
    ports = {n: ("127.0.0.1", free_port()) for n in names}
    svcs = {
        n: CellService(ROBOTS, KEY, SETTINGS, cell=n, peers=ports,
                       peer_heartbeat_ns=HB_NS, peer_timeout_ns=TIMEOUT_NS)
        for n in names
    }  # fmt: skip
    return svcs, ports


async def until(what: str, cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait (bounded) until ``cond()`` holds, yielding to the services meanwhile."""
    try:
        async with asyncio.timeout(timeout_s):
            while not cond():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"never: {what}") from None


async def agent(
    address: tuple[str, int], robot: str, *, key: Any = KEY, role: str = "agent"
) -> FramedConnection:
    conn = await connect_framed(address, timeout_s=2.0)
    await client_handshake(conn, key, robot=robot, role=role, service="leader")
    reply = await recv_first_reply(conn, 2.0)
    assert isinstance(reply, Welcome)
    return conn


async def next_grant(conn: FramedConnection) -> Granted:
    for _ in range(20):
        msg = await conn.recv()
        if isinstance(msg, Granted):
            return msg
    raise AssertionError("no grant among 20 frames")


def both_alive(a: CellService, b: CellService) -> bool:
    return bool(a.stats()["alive_peers"] == 1 and b.stats()["alive_peers"] == 1)


Scenario = Callable[[dict[str, CellService], dict[str, tuple[str, int]]], Awaitable[None]]


def run(scenario: Scenario, names: list[str]) -> None:
    async def main() -> None:
        svcs, ports = cells(names)
        try:
            for n, s in svcs.items():
                await s.start(ports[n])
            async with asyncio.timeout(30):
                await scenario(svcs, ports)
        finally:
            for s in svcs.values():
                await s.close()

    asyncio.run(main())


def test_one_permit_per_channel_in_request_order_across_cells() -> None:
    async def scenario(svcs: dict[str, CellService], at: dict[str, tuple[str, int]]) -> None:
        a, b = svcs["cell-a"], svcs["cell-b"]
        await until("the leaders hear each other", lambda: both_alive(a, b))
        assert a.cell_leader.is_coordinator and b.cell_leader.coordinator == "cell-a"
        r1, r2 = await agent(at["cell-a"], "r1"), await agent(at["cell-b"], "r2")
        await r1.send(Request())
        g1 = await next_grant(r1)
        await r2.send(Request())
        await until("r2 waits at the coordinator", lambda: "r2" in a.cell_leader._ctl.waiting)  # type: ignore[union-attr]
        # r2 is queued behind r1 on the channel: cell-b granted nothing.
        assert b.cell_leader.holders == () and b.stats()["relayed"] >= 1
        await r1.send(Release(g1.grant_id))
        g2 = await next_grant(r2)
        assert g2.grant_id >= 1
        await until("r2 holds", lambda: [g.robot for g in a.cell_leader.channel_holders] == ["r2"])
        assert a.stats()["max_channel_holders"] == 1
        r1.close()
        r2.close()

    run(scenario, ["cell-a", "cell-b"])


def test_a_dead_peer_leaves_each_cell_coordinating_its_own_robots() -> None:
    async def scenario(svcs: dict[str, CellService], at: dict[str, tuple[str, int]]) -> None:
        a, b = svcs["cell-a"], svcs["cell-b"]
        await until("the leaders hear each other", lambda: both_alive(a, b))
        r1, r2, r3 = (
            await agent(at["cell-a"], "r1"),
            await agent(at["cell-b"], "r2"),
            await agent(at["cell-b"], "r3"),
        )
        await r1.send(Request())
        await next_grant(r1)
        await r2.send(Request())
        await until("r2 waits on the channel", lambda: "r2" in a.cell_leader._ctl.waiting)  # type: ignore[union-attr]
        await a.close()  # the coordinator's leader dies (its robot r1 may still send)
        g2 = await next_grant(r2)  # cell-b alone: per-team coordination
        s = b.stats()
        assert s["isolated"] == 1 and s["is_coordinator"] == 1 and s["coordinator_changes"] >= 1
        # ...which still gives one permit at a time within the cell: never none.
        await r3.send(Request())
        await until("r3 waits in cell-b", lambda: b.cell_leader.waiting == ("r3",))
        assert [g.robot for g in b.cell_leader.holders] == ["r2"]
        await r2.send(Release(g2.grant_id))
        await next_grant(r3)
        for c in (r1, r2, r3):
            c.close()

    run(scenario, ["cell-a", "cell-b"])


def test_bad_peers_are_refused_or_dropped_with_clear_errors() -> None:
    async def scenario(svcs: dict[str, CellService], at: dict[str, tuple[str, int]]) -> None:
        a = svcs["cell-a"]
        # A robot's name as a leader, and a cell of another channel: refused, named.
        for name, why in (
            ("r1", "'r1' is not a cell on the channel"),
            ("cell-z", "'cell-z' is not a cell"),
        ):
            with pytest.raises(RefusedError, match=why):
                await agent(at["cell-a"], name, role="leader")
        # A robot's own key cannot speak for a cell at all.
        r1_key = KEY.robot_key("r1", ROBOTS)
        with pytest.raises(Exception, match=r"cannot act as|no key"):
            await agent(at["cell-a"], "cell-b", key=r1_key, role="leader")
        # An authenticated peer sending frames that lie about their sender or name
        # strangers: dropped and counted; the link stays up.
        peer = await agent(at["cell-a"], "cell-b", key=TeamKey(KEY._secret), role="leader")
        before = a.stats().get("dropped_malformed", 0)
        await peer.send(PeerFrame(kind="request", src="cell-c", dst="cell-a", robot="r2"))
        await peer.send(PeerFrame(kind="request", src="cell-b", dst="cell-a", robot="ghost"))
        await peer.send(Request())
        await peer.send(PeerFrame(kind="heartbeat", src="cell-b", dst="cell-a"))
        await until(
            "three frames dropped", lambda: a.stats().get("dropped_malformed", 0) == before + 3
        )
        peer.close()

    run(scenario, ["cell-a", "cell-b"])


def test_the_follower_looks_at_once_when_its_watch_turns_readable() -> None:
    # The kernel's route-change notification (route_changes) wakes the follower
    # without waiting for its next periodic look (here an hour away).
    a = RoamingCell("cell-a", "10.0.1.1", ("10.0.1.2", 7400))
    b = RoamingCell("cell-b", "10.0.2.1", ("10.0.2.2", 7400))
    where = ["10.0.1.1"]
    ours, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ours.setblocking(False)
    roaming = Roaming((a, b), every_s=3600, locate=lambda: where[0], watch=lambda: ours)
    moved = asyncio.Event()

    class Link:
        robot = "r1"

        def __init__(self) -> None:
            self.moved_to: list[tuple[str, int]] = []

        def move_to(self, leader: tuple[str, int]) -> None:
            self.moved_to.append(leader)
            moved.set()

    async def go() -> list[tuple[str, int]]:
        link = Link()
        follower = CellFollower(link, roaming, a)  # type: ignore[arg-type]
        follower.start()
        try:
            where[0] = "10.0.2.1"
            kernel.send(b"route changed")
            async with asyncio.timeout(10):
                await moved.wait()
        finally:
            await follower.close()
        return link.moved_to

    assert asyncio.run(go()) == [b.leader]
    assert ours.fileno() == -1  # closed with the follower
    kernel.close()
    watch = route_changes()  # a netlink socket here (None where netlink is closed)
    if watch is not None:
        assert watch.family == socket.AF_NETLINK
        watch.close()
