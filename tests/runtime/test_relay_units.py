"""The relay's units without the kernel's queue (issue 33): what a queued SYN says, the
budgets (fds, buffers), the gatekeeper's decisions, and how a relayed connection ends."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import socket
import struct
from typing import Any

import pytest
from test_transparent_units import Sink, _relay, _until

from coorp.runtime._counters import LogLimiter
from coorp.runtime.robot._coordination import Coordinator
from coorp.runtime.robot._link import LinkState
from coorp.runtime.transparent import _relay as relay_module
from coorp.runtime.transparent._admission import Gatekeeper, is_local_destination
from coorp.runtime.transparent._budget import FDS_PER_FLOW, BufferPool, fd_plan
from coorp.runtime.transparent._endings import REFUSALS, REJECTS, refusal_for
from coorp.runtime.transparent._identity import Identity, IdentityFactory
from coorp.runtime.transparent._nfqueue import ACCEPT, DROP, REPEAT, QueuedSyn, parse_syn


# -- what the kernel says about a queued SYN --------------------------------------------------
def _syn_attrs(src: str, sport: int, dst: str, dport: int) -> dict[int, bytes]:
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 60, 1, 0, 64, 6, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))  # fmt: skip
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 7, 0, 0xA0, 0x02, 64240, 0, 0)
    return {10: ip + tcp, 16: struct.pack("!I", 1000), 17: struct.pack("!I", 1001)}


def test_a_queued_syn_names_its_connection_and_owner() -> None:
    syn = parse_syn(42, _syn_attrs("10.0.0.11", 40000, "10.0.0.1", 9000))
    assert syn == QueuedSyn(42, "10.0.0.11", 40000, "10.0.0.1", 9000, 1000, 1001, 0)
    assert syn.key == ("10.0.0.11", 40000, "10.0.0.1", 9000)
    udp = _syn_attrs("10.0.0.11", 1, "10.0.0.1", 2)
    udp[10] = udp[10][:9] + b"\x11" + udp[10][10:]
    assert parse_syn(1, udp) is None  # not TCP: not ours to judge
    assert parse_syn(1, {10: b"\x45" + bytes(10)}) is None  # cut short


# -- budgets ----------------------------------------------------------------------------------
def test_the_flow_cap_leaves_the_reserve_to_everything_else() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    plan = fd_plan(configured=10**6, inbox_connections=256)
    assert plan.reserve == 256 + 64
    assert plan.max_flows == max(0, (soft - plan.reserve) // FDS_PER_FLOW)
    assert plan.reserve + FDS_PER_FLOW * plan.max_flows <= soft
    small = fd_plan(configured=8, inbox_connections=256)
    assert small.max_flows == min(8, plan.max_flows)
    assert "relayed connections at once" in plan.describe()


def test_the_buffer_pool_holds_at_most_its_budget_first_come_first_served() -> None:
    async def go() -> None:
        pool = BufferPool(budget_bytes=3 * 1024, buffer_bytes=1024)
        held = [await pool.get() for _ in range(3)]
        order: list[int] = []

        async def taker(i: int) -> None:
            buf = await pool.get()
            order.append(i)
            pool.put(buf)

        waiting = [asyncio.create_task(taker(i)) for i in range(5)]
        await asyncio.sleep(0)
        assert pool.in_use == 3 and order == []  # nobody gets a 4th buffer
        waiting[1].cancel()  # a waiter that gives up keeps nobody waiting
        for buf in held:
            pool.put(buf)
        await asyncio.gather(*waiting, return_exceptions=True)
        assert order == [0, 2, 3, 4]
        assert pool.in_use == 0 and pool.allocated_bytes == 3 * 1024  # reused, not grown
        assert pool.counters["in_use_max"] == 3

    asyncio.run(go())


# -- the gatekeeper ----------------------------------------------------------------------------
class _Queue:
    def __init__(self) -> None:
        self.verdicts: list[tuple[int, int, int | None]] = []

    def verdict(self, packet_id: int, verdict: int, mark: int | None = None) -> None:
        self.verdicts.append((packet_id, verdict, mark))


def _gate(open_flows: int, max_flows: int) -> tuple[Gatekeeper, _Queue]:
    gate = Gatekeeper(
        queue_num=1,
        relay_mark=0xC0F,
        identities=IdentityFactory(cgroup_root=None, own_cgroup=None),
        prepare=lambda s: None,
        max_flows=lambda: max_flows,
        open_flows=lambda: open_flows,
        limiter=LogLimiter(__import__("logging").getLogger("t"), lambda: 0),
    )
    q = _Queue()
    gate.queue = q  # type: ignore[assignment]
    return gate, q


def test_a_syn_to_this_host_or_over_the_cap_is_refused_with_the_kernels_reject() -> None:
    async def go() -> None:
        gate, q = _gate(open_flows=0, max_flows=1)
        gate._on_syn(QueuedSyn(1, "10.0.0.11", 1, "127.0.0.1", 7409, 0, 0, 0))
        assert q.verdicts == [(1, REPEAT, 0xC0F + REJECTS["admin-prohibited"][0])]
        assert gate.counters["refused_destination"] == 1 and not gate._pending
        full, q2 = _gate(open_flows=1, max_flows=1)
        full._on_syn(QueuedSyn(2, "10.0.0.11", 2, "192.0.2.1", 9000, 0, 0, 0))
        assert q2.verdicts == [(2, REPEAT, 0xC0F + REJECTS["reset"][0])]  # ECONNREFUSED
        assert full.counters["over_limit"] == 1 and not full._pending

    asyncio.run(go())


def test_only_an_approved_connection_is_claimed_once() -> None:
    gate, _ = _gate(open_flows=0, max_flows=10)
    assert gate.claim(("10.0.0.11", 1), None) is None  # addressed to the relay itself
    assert gate.claim(("10.0.0.11", 1), ("10.0.0.1", 9000)) is None  # nobody approved it
    assert gate.counters["not_redirected"] == 1 and gate.counters["unapproved"] == 1


def test_local_destinations_are_recognised() -> None:
    assert is_local_destination("127.0.0.1") and is_local_destination("127.9.9.9")
    assert is_local_destination("0.0.0.0")
    assert not is_local_destination("192.0.2.1")  # TEST-NET-1: never this host


def test_refusals_map_the_relays_error_to_the_programs() -> None:
    assert refusal_for(errno.ECONNREFUSED).program_sees == errno.ECONNREFUSED
    assert refusal_for(errno.EHOSTUNREACH).reject == "host-unreachable"
    assert refusal_for(errno.ETIMEDOUT).reject is None  # dropped: the program times out
    assert refusal_for(errno.EPERM).note  # where a proxy cannot say what the kernel says
    assert all(r.reject is None or r.reject in REJECTS for r in REFUSALS.values())
    assert len({off for off, _, _, _ in REJECTS.values()}) == len(REJECTS)  # one mark each


def test_a_socket_made_here_carries_the_programs_uid_and_gid() -> None:
    if os.geteuid() != 0:
        pytest.skip("setfsuid needs root (CAP_SETUID)")

    async def go() -> None:
        f = IdentityFactory(cgroup_root=None, own_cgroup=None)
        s = await f.new_socket(Identity(65534, 65533, None))
        st = os.fstat(s.fileno())
        assert (st.st_uid, st.st_gid) == (65534, 65533)  # sk_uid and the file's fsgid
        s.close()
        with open("/proc/self/status") as status:
            ids = [ln.split()[1:] for ln in status if ln.startswith(("Uid:", "Gid:"))]
        assert ids == [["0"] * 4] * 2  # this thread's own ids are back (fsuid, fsgid too)

    asyncio.run(go())


# -- endings ------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["the relay closes", "the agent dies"])
def test_an_upload_closed_before_its_permit_came_ends_in_a_reset_not_an_eof(how: str) -> None:
    """A program writes 1 MB and closes while another robot holds the permit, and the
    agent ends: the receiver must see a reset, not a clean end after 0 bytes. "Dies" is
    what the kernel does at ``kill -9``: it closes the process's descriptors as
    ``close()`` would, with whatever linger they have, and nothing of the relay runs."""

    async def go() -> None:
        sink = Sink()
        coord = Coordinator("r1", lambda: 0)
        coord.state = LinkState.PENDING  # no permit
        relay = await _relay(coord, await sink.start())
        sock = socket.create_connection(("127.0.0.1", relay.port))
        sock.sendall(bytes(1_000_000))
        sock.close()  # the program is done, as far as it knows
        await asyncio.wait_for(_until(lambda: coord._active == 1), 10)
        if how == "the relay closes":
            await relay.close()
            assert relay.counters["resets"] == 1 and relay.counters["completed"] == 0
        else:
            for up in relay.admission.upstreams:  # type: ignore[attr-defined]
                os.close(up.detach())
        await asyncio.wait_for(sink.done.wait(), 10)
        assert sink.digest == "" and sink.nbytes == 0  # reset, never an end-of-stream
        with contextlib.suppress(OSError):
            await relay.close()

    asyncio.run(go())


def test_a_complete_relay_closes_cleanly_both_ways() -> None:
    async def go() -> None:
        sink = Sink()
        relay = await _relay(Coordinator("r1", lambda: 0), await sink.start())
        r, w = await asyncio.open_connection("127.0.0.1", relay.port)
        w.write(b"x" * 100_000)
        w.write_eof()
        reply: Any = await asyncio.wait_for(r.read(), 10)  # the digest, then a clean EOF
        assert len(reply) == 64 and sink.nbytes == 100_000
        await asyncio.wait_for(_until(lambda: not relay.flows), 10)
        assert relay.counters["completed"] == 1 and relay.counters["resets"] == 0
        assert relay.pool.in_use == 0  # every buffer given back
        w.close()
        await relay.close()

    asyncio.run(go())


def test_an_idle_connection_stops_counting_towards_the_permit_and_costs_nothing() -> None:
    """A program that sent a little and waits (its connection open) no longer holds the
    robot's permit after ``idle_release_ns``, and its flow stops waking up."""

    async def go() -> None:
        sink = Sink()
        coord = Coordinator("r1", lambda: 0)
        relay = await _relay(coord, await sink.start())
        sock = socket.create_connection(("127.0.0.1", relay.port))
        sock.sendall(b"x" * 1000)
        await asyncio.wait_for(_until(lambda: sink.nbytes == 1000), 10)
        await asyncio.wait_for(_until(lambda: coord._active == 0), 10)
        (flow,) = relay.flows.values()
        assert not flow.active
        woke = [0]
        orig = relay_module._inq

        def counting(s: socket.socket) -> int:
            woke[0] += 1
            return orig(s)

        relay_module._inq = counting  # type: ignore[assignment]
        try:
            for _ in range(20):  # 20 idle_release periods of the loop running
                await asyncio.sleep(0.005)
        finally:
            relay_module._inq = orig  # type: ignore[assignment]
        assert woke[0] == 0 and len(relay.flows) == 1
        sock.close()
        await relay.close()

    asyncio.run(go())


def test_a_program_that_does_not_read_cannot_stall_other_connections() -> None:
    """The relay's buffers are held only across non-blocking calls: a download nobody
    reads keeps its bytes in the destination's socket, and another connection's upload
    goes through even with a pool of one buffer."""

    async def go() -> None:
        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                if await r.readexactly(1) == b"D":
                    for _ in range(3200):  # 200 MB: far more than the sockets hold
                        w.write(bytes(65536))
                        await w.drain()
                    return
                data = await r.read()
                w.write(str(len(data)).encode())
                await w.drain()
                w.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        relay = await _relay(Coordinator("r1", lambda: 0), port)
        relay.pool = BufferPool(budget_bytes=64 << 10, buffer_bytes=64 << 10)  # one buffer
        _, stalled = await asyncio.open_connection("127.0.0.1", relay.port)
        stalled.write(b"D")  # ...and never reads
        await asyncio.wait_for(_until(lambda: relay.counters["bytes_down"] > 1 << 20), 10)
        # Until the download is stuck (the program's socket full): its count stops.
        seen, still = -1, 0
        for _ in range(500):
            now = relay.counters["bytes_down"]
            still = still + 1 if now == seen else 0
            if still >= 10:
                break
            seen = now
            await asyncio.sleep(0.02)
        assert still >= 10, "the download never stalled"
        r, w = await asyncio.open_connection("127.0.0.1", relay.port)
        w.write(b"U" + bytes(1_000_000))
        w.write_eof()
        assert await asyncio.wait_for(r.read(), 20) == b"1000000"
        w.close()
        stalled.close()
        await relay.close()
        server.close()

    asyncio.run(go())


def test_verdict_constants_are_netfilters() -> None:
    assert (DROP, ACCEPT, REPEAT) == (0, 1, 4)  # include/uapi/linux/netfilter.h
