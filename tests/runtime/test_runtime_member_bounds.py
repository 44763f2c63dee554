"""Per-member bounds added for issue 33, on loopback: a member's share of an inbox's
buffer space for partial bulk messages, and how many addresses (for how long) a member
may make "known" — the privilege that lets a host skip the pre-authentication budget."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from rt_helpers import KEY, RawClient

from coorp.runtime import ReceiverLimits, Team, TeamSettings, TransferError, join
from coorp.runtime.wire._accept import AcceptLoop
from coorp.runtime.wire._format import BulkAccept, BulkData, BulkOpen, BulkReject
from coorp.runtime.wire._quota import KnownHosts, QuotaSettings

MB = 1 << 20


@pytest.fixture
def teams() -> Iterator[list[Team]]:
    made: list[Team] = []
    try:
        yield made
    finally:
        for t in made:
            t.close()


def _open(dest: str, robot: str, stream: str, nbytes: int) -> tuple[RawClient, Any]:
    c = RawClient(dest)
    c.handshake(robot, role="sender")
    c.send(BulkOpen(stream, 1, 1, nbytes, 0))
    return c, c.recv()


def test_a_hogging_member_cannot_make_others_bulk_to_an_inbox_fail(teams: list[Team]) -> None:
    """r1 opens messages at sink's inbox and sends nothing; r2's bulk still goes in."""
    limits = ReceiverLimits(max_message_bytes=MB, max_partial_bytes=2 * MB,
                            max_partial_bytes_per_member=MB)  # fmt: skip
    sink = join(None, "sink", KEY, settings=TeamSettings(receiver=limits))
    r2 = join(None, "r2", KEY)
    teams += [sink, r2]
    inbox = sink.listen("127.0.0.1:0")
    dest = f"127.0.0.1:{inbox.address[1]}"
    hog, first = _open(dest, "r1", "hog", MB)
    assert isinstance(first, BulkAccept)
    hog2, second = _open(dest, "r1", "hog2", MB)  # over r1's share: its own loss
    assert isinstance(second, BulkReject) and "share" in second.reason
    data = bytes(range(256)) * (MB // 256)
    r2.bulk("data", dest).send(data, timeout_s=20)  # the other half is still there for r2
    msg = inbox.recv(timeout=10)
    assert (msg.robot, bytes(msg.payload) == data) == ("r2", True)
    stats = inbox.stats()
    assert stats["bulk_partials_refused_member"] == 1 and stats["bulk_partials_refused_full"] == 0
    for c in (hog, hog2):
        c.close()


def test_a_stalled_member_above_its_fair_share_makes_room_for_another(teams: list[Team]) -> None:
    """With one member allowed the whole space, r1 fills it and stalls: r2's message
    drops r1's (above the fair half, not advancing) instead of failing; r1's next bytes
    are refused, so it starts over, while r2's message arrives."""
    limits = ReceiverLimits(max_message_bytes=2 * MB, max_partial_bytes=2 * MB,
                            max_partial_bytes_per_member=2 * MB, partial_stall_s=0.0)  # fmt: skip
    sink = join(None, "sink", KEY, settings=TeamSettings(receiver=limits))
    r2 = join(None, "r2", KEY)
    teams += [sink, r2]
    inbox = sink.listen("127.0.0.1:0")
    dest = f"127.0.0.1:{inbox.address[1]}"
    hog, first = _open(dest, "r1", "hog", 2 * MB)
    assert isinstance(first, BulkAccept)
    r2.bulk("data", dest).send(bytes(MB), timeout_s=20)
    assert inbox.recv(timeout=10).robot == "r2"
    hog.send(BulkData(1, 0, 1000))
    hog.sock.sendall(bytes(1000))
    reply = hog.recv()
    assert isinstance(reply, BulkReject) and "room" in reply.reason
    assert inbox.stats()["bulk_partials_dropped_for_others"] == 1
    hog.close()


def test_a_members_own_share_is_what_it_may_hold(teams: list[Team]) -> None:
    limits = ReceiverLimits(max_message_bytes=MB, max_partial_bytes=4 * MB,
                            max_partial_bytes_per_member=MB)  # fmt: skip
    sink = join(None, "sink", KEY, settings=TeamSettings(receiver=limits))
    r1 = join(None, "r1", KEY)
    teams += [sink, r1]
    inbox = sink.listen("127.0.0.1:0")
    dest = f"127.0.0.1:{inbox.address[1]}"
    hog, first = _open(dest, "r1", "stalled", MB)
    assert isinstance(first, BulkAccept)
    with pytest.raises(TransferError, match="share"):
        r1.bulk("data", dest).send(bytes(1000), timeout_s=20)
    hog.close()


# -- known hosts --------------------------------------------------------------------------------
def test_known_hosts_are_bounded_per_member_and_in_time() -> None:
    now = [0]
    known = KnownHosts(per_member=4, ttl_s=10, clock=lambda: now[0])
    for i in range(150):  # r2 authenticates once from each of 150 addresses
        known.add(f"10.9.0.{i}", "r2")
    known.add("10.0.0.1", "r1")
    assert len(known) == 5 and known.of("r2") == [f"10.9.0.{i}" for i in range(146, 150)]
    assert "10.9.0.3" not in known and "10.9.0.149" in known
    assert known.counters["known_hosts_forgotten"] == 146
    known.add("10.9.0.149", "r1")  # a host shared by two members stays while either has it
    for i in range(4):
        known.add(f"10.8.0.{i}", "r2")
    assert "10.9.0.149" in known
    now[0] += 11 * 10**9  # nobody authenticated from them for longer than the ttl
    assert "10.0.0.1" not in known and len(known) == 0


def test_a_laundered_flood_is_held_to_the_unknown_hosts_budget() -> None:
    """r2 authenticates once from each of 150 addresses, then floods from all of them
    with connections that never speak: at most 4 of its addresses skip the pre-auth
    budget, so unknown connections stay within it and r1's host still gets in at the
    bound."""

    async def scenario() -> dict[str, Any]:
        listener = socket.socket()
        waiting = asyncio.Event()
        now = [0]
        launder = {"on": True}

        async def handler(sock: socket.socket, peer: str, slot: AcceptLoop) -> None:
            async with slot.handshake_deadline(peer):
                if peer.startswith("10.0.0.1:"):
                    await slot.authenticated("r1")
                elif launder["on"]:
                    await slot.authenticated("r2")
                    return  # authenticated once, then gone
                else:
                    await waiting.wait()  # the flood never speaks
            await waiting.wait()  # r1 stays

        loop = AcceptLoop(
            listener, handler, name="t", logger=logging.getLogger("coorp.runtime.test"),
            max_connections=64, max_preauth_per_source=4, handshake_timeout_s=60,
            preauth_budget=16, member_reserve=8, quotas=QuotaSettings(1000),
            clock=lambda: now[0], rng=random.Random(5),
        )  # fmt: skip
        pairs: list[socket.socket] = []

        async def batch(peers: list[str]) -> None:
            out = []
            for peer in peers:
                a, b = socket.socketpair()
                pairs.append(b)
                out.append((a, peer))
            loop._triage(out)
            for _ in range(3):
                await asyncio.sleep(0)

        await batch(["10.0.0.1:1"])
        for k in range(15):  # laundering: one authentication from each address
            now[0] += 100_000_000
            await batch([f"10.9.0.{i}:{500 + i}" for i in range(10 * k, 10 * k + 10)])
        launder["on"] = False
        known_after_laundering = loop.stats()["known_hosts"]
        peak = 0
        for k in range(12):  # the flood from the same 150 addresses
            now[0] += 100_000_000
            await batch([f"10.9.0.{i % 150}:{1000 + i}" for i in range(50 * k, 50 * k + 50)])
            peak = max(peak, len(loop._unknown))
        for i in range(8):  # r1's host at the bound
            await batch([f"10.0.0.1:{2000 + i}"])
        st = loop.stats()
        st["known_after_laundering"] = known_after_laundering
        st["peak_unknown"] = peak
        await loop.close()
        for s in pairs:
            s.close()
        listener.close()
        return st

    st = asyncio.run(scenario())
    assert st["known_after_laundering"] == 1 + 4  # r1's host and 4 of r2's 150
    assert st["known_hosts_forgotten"] == 146
    assert st["peak_unknown"] <= 16  # the 146 others share the unknown hosts' budget
    assert st["dropped_early"] > 0
    assert st["dropped_full"] == 0  # r1's connections got in at the bound
