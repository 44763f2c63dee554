"""A holder never writes under a permit the leader may have passed on (issue 34).

In-process, on loopback: a permit service and robots on one event loop, the robots'
clocks injected so that a freeze (SIGSTOP, a suspended VM, CPU starvation) can be
made exactly: the robot's clock jumps, the leader's does not.
"""

from __future__ import annotations

import asyncio
import socket
import time

from coorp.runtime import LeaderSettings, PermitService, TeamKey, TeamSettings, ajoin
from coorp.runtime.robot import BulkSettings, Coordinator, Pacer, Progress

KEY = TeamKey(b"l" * 32)
ROBOTS = ["r1", "r2"]


class JumpClock:
    """Real monotonic time plus an offset a test moves forward (a freeze)."""

    def __init__(self) -> None:
        self.offset = 0

    def __call__(self) -> int:
        return time.monotonic_ns() + self.offset


def test_a_frozen_holders_lease_is_over_when_it_wakes_and_renewed_by_a_heartbeat() -> None:
    async def main() -> None:
        service = PermitService(ROBOTS, KEY, LeaderSettings(heartbeat_ns=100_000_000))
        host, port = await service.start(("127.0.0.1", 0))
        clock = JumpClock()
        team = await ajoin(f"{host}:{port}", "r1", KEY, settings=TeamSettings(), clock=clock)
        try:
            coord = team.coordinator
            coord.stall_ns = 10**12  # the lease alone must refuse: no stall detection
            coord.begin()
            assert await coord.wait_permitted(2.0)
            lease = team.link.lease_ends_ns() if team.link is not None else None
            assert lease is not None and lease > clock()
            ends = coord.permit_ends_ns()
            assert ends is not None and ends <= lease
            # Frozen for a second on the robot's clock: longer than the lease (2.5
            # heartbeats). The leader has not dropped it (its clock did not move), but
            # the robot cannot know that: it must not write.
            clock.offset += 1_000_000_000
            assert not coord.permitted(clock())
            # The next answered heartbeat renews it; the permit itself was never lost.
            assert await coord.wait_permitted(2.0)
            renewed = team.link.lease_ends_ns() if team.link is not None else None
            assert renewed is not None and renewed > clock()
            assert coord.counters["grants"] == 1
            coord.end()
            coord.release_now()
        finally:
            await team.close()
            await service.close()

    asyncio.run(main())


class _Permits(Coordinator):
    """A coordinator whose permit the test switches off and on."""

    def __init__(self) -> None:
        super().__init__("r1", time.monotonic_ns)
        self.allow = True
        self.refused_at: list[int] = []

    def permitted(self, now_ns: int) -> bool:
        if not self.allow:
            self.refused_at.append(now_ns)
        return self.allow

    async def wait_permitted(self, max_wait_s: float) -> bool:
        await asyncio.sleep(0.001)
        return self.allow


def test_a_chunk_half_written_when_the_permit_ends_waits_for_the_next_one() -> None:
    """The permit is asked before every write to the socket, not only before a chunk:
    bytes the socket could not take at once wait for the next permit."""

    async def main() -> tuple[int, int, int]:
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        a.setblocking(False)
        b.setblocking(False)
        coord = _Permits()
        pacer = Pacer(name="t", coordinator=coord, planner=None, settings=BulkSettings())
        pacer.attach(a)
        data = bytes(range(256)) * 1024  # 256 KiB: far more than the socket takes at once
        writer = asyncio.create_task(pacer.write([data], None))
        loop = asyncio.get_running_loop()
        got = bytearray()
        for _ in range(10_000):  # read until the writer is blocked on a full socket
            await asyncio.sleep(0.001)
            try:
                got += b.recv(65536)
            except BlockingIOError:
                if len(got) > 0:
                    break
        coord.allow = False  # the permit ends while the chunk is half written
        stopped_at = len(got)
        for _ in range(200):  # drain whatever the kernel already held
            await asyncio.sleep(0.001)
            try:
                got += b.recv(1 << 20)
            except BlockingIOError:
                continue
        held = len(got)
        # Nothing more while not permitted: the writer waits for the permit.
        await asyncio.sleep(0.05)
        with_no_permit = len(got) + _pending(b)
        coord.allow = True
        deadline = loop.time() + 10
        while len(got) < len(data) and loop.time() < deadline:
            await asyncio.sleep(0.001)
            try:
                got += b.recv(1 << 20)
            except BlockingIOError:
                continue
        await asyncio.wait_for(writer, 5)
        assert bytes(got) == data  # every byte once, in order
        pacer.detach()
        a.close()
        b.close()
        return stopped_at, held, with_no_permit

    stopped_at, held, with_no_permit = asyncio.run(main())
    assert stopped_at < held or stopped_at == held  # what the kernel held still came
    assert with_no_permit == held  # nothing written while refused


def _pending(sock: socket.socket) -> int:
    try:
        return len(sock.recv(1 << 20, socket.MSG_PEEK))
    except BlockingIOError:
        return 0


def test_write_progress_is_recorded_per_write_with_its_grant() -> None:
    coord = Coordinator("r1", time.monotonic_ns)
    coord.note_write(1_000, 2_000)
    coord.note_write(2_500, 3_000)  # within 50 ms of the last: one stretch
    coord.note_write(100_000_000, 100_000_100)
    assert coord.intervals == [[1_000, 3_000, -1], [100_000_000, 100_000_100, -1]]
    assert Progress().permit_wait_ns == 0


class _FakeKernel:
    """A :class:`~coorp.runtime.wire.KernelLease` without the kernel: it records the
    deadlines asked and applies them when the test says."""

    mark = 7

    def __init__(self) -> None:
        self.applied: int | None = None
        self.asked: list[int | None] = []
        self.on_applied: object = None
        self.hold = False

    def allows(self, now_ns: int) -> bool:
        return self.applied is None or now_ns < self.applied

    def request(self, deadline_ns: int | None) -> None:
        self.asked.append(deadline_ns)
        if not self.hold:
            self.applied = deadline_ns

    def close(self) -> None:
        self.hold = True


def test_the_kernel_gets_the_permits_deadline_keeps_it_after_a_freeze_and_lifts_it_on_release() -> (
    None
):
    async def main() -> None:
        service = PermitService(ROBOTS, KEY, LeaderSettings(heartbeat_ns=100_000_000))
        host, port = await service.start(("127.0.0.1", 0))
        clock = JumpClock()
        team = await ajoin(f"{host}:{port}", "r1", KEY, settings=TeamSettings(), clock=clock)
        kernel = _FakeKernel()
        try:
            coord = team.coordinator
            coord.stall_ns = 10**12
            coord.attach_guard(kernel)  # type: ignore[arg-type]
            assert kernel.applied is None  # no permit yet: nothing to enforce
            coord.begin()
            assert await coord.wait_permitted(2.0)
            first = kernel.applied
            ends = coord.permit_ends_ns()
            assert first is not None and ends is not None and first >= ends  # a deadline
            # Frozen past the lease: whatever the process notices, the kernel keeps the
            # deadline it had (what was written after it waits for the next permit).
            clock.offset += 1_000_000_000
            coord.on_stall(1_000_000_000)
            coord._notify()
            assert kernel.applied == first  # kept, not lifted
            # A renewed lease moves the deadline; while the kernel still has a past
            # one, no write.
            kernel.hold = True
            kernel.applied = clock() - 1
            assert not await coord.wait_permitted(0.5)
            lease = team.link.lease_ends_ns() if team.link is not None else None
            assert lease is not None and lease > clock()  # renewed: the kernel held it
            kernel.hold = False
            coord._notify()
            assert await coord.wait_permitted(2.0)
            assert kernel.applied is not None and kernel.applied > clock()
            # Released while the deadline still runs: every write was in time; lifted.
            coord.end()
            coord.release_now()
            assert kernel.applied is None
        finally:
            await team.close()
            await service.close()

    asyncio.run(main())


def test_a_downlink_of_its_own_holds_a_second_permit_beside_the_teams() -> None:
    """``LeaderSettings.downlink``: a leader host whose bulk leaves through a queue of
    its own (split queues) holds its permit while a robot holds the team's; the robots
    still take turns among themselves."""

    async def main() -> None:
        robots = ["ld", "r1", "r2"]
        service = PermitService(robots, KEY, LeaderSettings(downlink=("ld",)))
        host, port = await service.start(("127.0.0.1", 0))
        teams = [await ajoin(f"{host}:{port}", r, KEY) for r in robots]
        ld, r1, r2 = (t.coordinator for t in teams)
        try:
            r1.begin()
            assert await r1.wait_permitted(2.0)
            ld.begin()
            assert await ld.wait_permitted(2.0)  # at once: another queue
            r2.begin()
            assert not await r2.wait_permitted(0.3)  # the team's permit is r1's
            assert service.stats()["holders"] == 2
            assert service.stats()["max_holders"] == 1  # per queue
            r1.end()
            assert await r2.wait_permitted(2.0)
            ld.end()
            r2.end()
        finally:
            for t in teams:
                await t.close()
            await service.close()

    asyncio.run(main())
