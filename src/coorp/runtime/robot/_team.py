"""A robot's membership in a team: the object applications hold.

:class:`AsyncTeam` is the implementation and the asyncio API; :class:`Team` is the
threaded API, which runs an :class:`AsyncTeam` on a private event-loop thread. LS
channels are the same object in both (``send`` never blocks and is thread-safe, so
it runs on the caller's thread with no hop through the loop).

A team owns the robot's one protection planner (fed by every LS channel), its one
permit (shared by every bulk stream) and its link to the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Self

from coorp._errors import PeerError
from coorp.control import ProtectionPlanner

from .._errors import MalformedFrameError, RefusedError, RuntimeUsageError
from ..inbox import AsyncInbox, LatencyBook
from ..wire import (
    Address,
    FramedConnection,
    KernelLease,
    Keyring,
    LsAccept,
    LsKeepAlive,
    LsOpen,
    LsStatus,
    PeerClosed,
    TeamKey,
    client_handshake,
    connect_framed,
    format_address,
    mark_socket,
    parse_address,
    probe_marking,
    recv_first_reply,
    resolve,
)
from ._bulk import AsyncBulkStream
from ._coordination import Coordinator
from ._latency import LatencySensitiveChannel
from ._link import ControlLink, LinkState
from ._preempt import SharedPlanner
from ._report import Reporter, ReportPart
from ._roam import CellFollower
from ._settings import TeamSettings

__all__ = ["AsyncTeam", "TeamSettings", "ajoin"]

log = logging.getLogger("coorp.runtime.agent")
_LS_MIN_BACKOFF_S = 0.05
_LS_MAX_BACKOFF_S = 2.0


class AsyncTeam:
    """This robot's runtime on the running asyncio loop. Create with :func:`ajoin`."""

    def __init__(
        self,
        robot: str,
        key: Keyring,
        *,
        leader: Address | None,
        settings: TeamSettings,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        key.check_identity(robot)
        self.robot = robot
        self.leader = leader
        self.settings = settings
        self._key = key
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._ls_tasks: dict[str, asyncio.Task[None]] = {}
        self._ls_ready: dict[str, asyncio.Event] = {}
        self.planner = SharedPlanner(
            ProtectionPlanner(margin_ns=settings.protection_margin_ns), clock
        )
        self.coordinator = Coordinator(robot, clock, release_linger_ns=settings.release_linger_ns)
        if leader is not None or settings.roaming is not None:
            self.coordinator.state = LinkState.PENDING  # nothing permitted before the join
        self.link: ControlLink | None = None
        #: Follows the robot from cell to cell (a fleet, ``settings.roaming``).
        self.follower: CellFollower | None = None
        self._ls: dict[str, LatencySensitiveChannel] = {}
        self._bulk: dict[str, AsyncBulkStream] = {}
        self._inboxes: list[AsyncInbox] = []
        #: What this robot's inboxes measured of each sender's LS latency.
        self._latency_books: list[LatencyBook] = []
        #: Sources of this robot's reports to the leader (``coorp top``); transparent
        #: mode adds its own.
        self.report_sources: list[Callable[[], ReportPart]] = [self._report_part]
        self.reporter: Reporter | None = None
        self.marking = {
            "ls": probe_marking("ls", ls_category=self.settings.ls_category),
            "bh": probe_marking("bh"),
        }

    async def enable_kernel_lease(self, mark: int) -> KernelLease:
        """Enforce this robot's permits in the kernel too (:class:`KernelLease`; needs
        CAP_NET_ADMIN and pyroute2): its paced bulk sockets carry ``mark`` and the
        kernel drops their packets sent after the permit's deadline, closing the window
        between the pacer's last check and its syscall (a frozen holder). Raises
        :class:`~coorp.runtime.wire.KernelLeaseUnavailableError`."""
        guard = KernelLease(self.robot, mark, clock=self._clock)
        await guard.install()
        self.coordinator.attach_guard(guard)
        log.info("%s: permits enforced in the kernel too (table ip %s)", self.robot, guard.table)
        return guard

    async def _start(self) -> None:
        if self.settings.kernel_lease_mark is not None and self.coordinator.guard is None:
            await self.enable_kernel_lease(self.settings.kernel_lease_mark)
        for m in self.marking.values():
            (log.info if m.uses_priority else log.warning)("%s: %s", self.robot, m.describe())
        roaming = self.settings.roaming
        cell = None
        if self.leader is None and roaming is not None:
            gateway = roaming.locate()
            cell = roaming.cell_at(gateway)
            if cell is None:
                cell = roaming.cells[0]
                log.warning("%s: %s %s is no cell of the fleet; joining cell %s first",
                            self.robot, roaming.by, gateway, cell.name)  # fmt: skip
            self.leader = cell.leader
        if self.leader is None:
            log.info(
                "%s: no leader configured: BH is not coordinated (marking%s only)",
                self.robot,
                " + local preemption" if self.settings.local_preemption else "",
            )
            return
        link = ControlLink(
            self.leader,
            self.robot,
            self._key,
            on_message=self.coordinator.on_message,
            on_state=self.coordinator.on_state,
            clock=self._clock,
            fallback_ns=self.settings.fallback_ns,
            on_stall=self.coordinator.on_stall,
        )
        self.link = link
        self.coordinator.attach(link)
        link.start()
        if roaming is not None and cell is not None:
            self.follower = CellFollower(link, roaming, cell, clock=self._clock)
            self.follower.start()
        self.reporter = Reporter(
            mode=lambda: self.mode,
            ls_flows=lambda: len(self.planner.planner.flows),
            books=self._latency_books,
            sources=self.report_sources,
            send=link.send,
            interval_s=self.settings.report_interval_s,
        )
        if self.settings.report_interval_s > 0:
            self.reporter.start()
        await link.wait_settled(self.settings.join_timeout_s)
        if link.refused is not None and link.state is not LinkState.JOINED:
            await self.close()
            raise RefusedError(f"leader refused {self.robot}: {link.refused}")

    # -- state ----------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        """``coordinated``, ``reconnecting``, ``uncoordinated`` or ``no leader``."""
        state = self.coordinator.state
        return "no leader" if state is None else state.value

    async def wait_mode(self, mode: str, timeout_s: float) -> bool:
        """Wait until :attr:`mode` is ``mode`` (at most ``timeout_s``); True if it is."""
        states = {s.value: s for s in LinkState}
        if mode not in states:
            return self.mode == mode
        return await self.coordinator.wait_state(states[mode], timeout_s)

    async def sync_leader(self, timeout_s: float = 5.0) -> bool:
        """Wait until the leader has handled every permit message this robot sent so
        far (a release after a finished bulk message, for instance): one round trip
        on the control connection. False with no leader, or none within
        ``timeout_s``."""
        return await self.coordinator.sync(timeout_s)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "robot": self.robot,
            "mode": self.mode,
            "permits": dict(self.coordinator.counters),
        }
        if self.link is not None:
            out["link"] = dict(self.link.counters)
        if self.follower is not None:
            out["cell"] = self.follower.cell.name
            out["moves"] = [list(m) for m in self.follower.moves]
        out["ls"] = {name: ch.stats for name, ch in self._ls.items()}
        out["bulk"] = {name: dict(b.counters) for name, b in self._bulk.items()}
        return out

    # -- channels -------------------------------------------------------------------------------
    def latency_sensitive(
        self, name: str, dest: str, *, deadline_ms: float, period_ms: float | None = None
    ) -> LatencySensitiveChannel:
        """An LS channel to the inbox at ``dest`` ("host:port"), marked for AC_VO (or
        AC_VI: ``TeamSettings.ls_category``).

        ``period_ms`` is informational (the period is learnt from actual sends);
        ``deadline_ms`` bounds how long a message may wait for the socket.
        """
        if name in self._ls:
            raise RuntimeUsageError(f"LS channel {name!r} already exists")
        addr = parse_address(dest, what="dest")
        family, sockaddr = resolve(addr, socket.SOCK_DGRAM)
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            marking = mark_socket(sock, "ls", ls_category=self.settings.ls_category)
            sock.setblocking(False)
            sock.connect(sockaddr)
        except BaseException:
            sock.close()
            raise
        observe: Callable[[str], int] = (
            self.planner.observe_now if self.settings.local_preemption else _no_observe
        )
        ch = LatencySensitiveChannel(
            name=name,
            robot=self.robot,
            dest=addr,
            sock=sock,
            marking=marking,
            period_ns=None if period_ms is None else round(period_ms * 1e6),
            deadline_ns=round(deadline_ms * 1e6),
            observe=observe,
            clock=self._clock,
            arm_writer=self._arm_writer,
        )
        self._ls[name] = ch
        self._ls_ready[name] = asyncio.Event()
        self._ls_tasks[name] = self._loop.create_task(
            self._ls_session(ch), name=f"coorp-ls-session-{name}"
        )
        return ch

    async def ls_ready(self, name: str, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until the receiver of LS channel ``name`` opened
        its session; messages sent before are parked (keep-last) until then."""
        ev = self._ls_ready.get(name)
        if ev is None:
            raise RuntimeUsageError(f"no LS channel {name!r}")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await ev.wait()
        return ev.is_set()

    async def _ls_session(self, ch: LatencySensitiveChannel) -> None:
        """Keep an LS session with the channel's receiver: open it, keep it alive,
        re-open it when the connection breaks (a restarted receiver) or when a
        keep-alive's answer says the receiver no longer has it (at once)."""
        backoff = _LS_MIN_BACKOFF_S
        peer = format_address(ch.dest)
        warned = False
        for _ in iter(int, 1):  # until the channel closes (cancelled)
            try:
                async with contextlib.AsyncExitStack() as stack:
                    conn = await connect_framed(ch.dest, timeout_s=self.settings.ls_keepalive_s)
                    stack.callback(conn.close)
                    hello = await client_handshake(
                        conn, self._key, robot=self.robot, role="ls", service="receiver"
                    )
                    await conn.send(LsOpen(ch.name, self._clock()))
                    reply = await recv_first_reply(conn)
                    if not isinstance(reply, LsAccept):
                        raise MalformedFrameError(f"expected LsAccept, got {type(reply).__name__}")
                    ch.set_session(
                        reply.session, hello.robot, self._key.mac(self.robot, hello.robot)
                    )
                    self._ls_ready[ch.name].set()
                    backoff = _LS_MIN_BACKOFF_S
                    warned = False
                    await self._ls_keepalive(conn, ch)
                    log.info(
                        "LS channel %s: %s no longer has the session; reopening", ch.name, peer
                    )
                    continue  # the receiver dropped the session: reopen now
            except asyncio.CancelledError:
                raise
            except RefusedError as exc:
                if not warned:
                    log.error("LS channel %s: receiver %s refused: %s", ch.name, peer, exc)
                    warned = True
                backoff = _LS_MAX_BACKOFF_S
            except (PeerError, PeerClosed, OSError, TimeoutError) as exc:
                log.debug("LS channel %s: session with %s: %s", ch.name, peer, exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _LS_MAX_BACKOFF_S)

    async def _ls_keepalive(self, conn: FramedConnection, ch: LatencySensitiveChannel) -> None:
        """Keep-alives with this session's counts; returns when the receiver answers
        that the session is gone (raises when the connection fails)."""
        period = self.settings.ls_keepalive_s
        conn.read_timeout_s = 3 * period

        async def pings() -> None:
            while True:
                await asyncio.sleep(period)
                await conn.send(LsKeepAlive(self._clock(), *ch.keepalive_counts()))

        async def pongs() -> None:
            while True:
                msg = await conn.recv()
                if not isinstance(msg, LsStatus):
                    raise MalformedFrameError(f"unexpected {type(msg).__name__} on an LS session")
                if not msg.alive:
                    return
                ch.on_status(msg.received, msg.lost, msg.reordered, msg.replayed)

        tasks = [asyncio.create_task(pings()), asyncio.create_task(pongs())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def bulk(self, name: str, dest: str, *, chunk_bytes: int | None = None) -> AsyncBulkStream:
        """A BH stream to the inbox at ``dest`` ("host:port")."""
        if name in self._bulk:
            raise RuntimeUsageError(f"bulk stream {name!r} already exists")
        settings = self.settings.bulk
        if chunk_bytes is not None:
            settings = replace(settings, chunk_bytes=chunk_bytes)
        stream = AsyncBulkStream(
            name=name,
            robot=self.robot,
            dest=parse_address(dest, what="dest"),
            key=self._key,
            coordinator=self.coordinator,
            planner=self.planner if self.settings.local_preemption else None,
            settings=settings,
            clock=self._clock,
        )
        self._bulk[name] = stream
        return stream

    async def listen(self, address: str = "0.0.0.0:0", *, maxsize: int = 1024) -> AsyncInbox:
        """Receive LS and bulk messages sent to ``address`` (port 0: any free port)."""
        inbox = await AsyncInbox.open(
            parse_address(address, what="listen"),
            self._key,
            robot=self.robot,
            clock=self._clock,
            maxsize=maxsize,
            limits=self.settings.receiver,
        )
        self._inboxes.append(inbox)
        self._latency_books.append(inbox.latency)
        return inbox

    def _report_part(self) -> ReportPart:
        """The API's share of a report: its LS channels and bulk streams."""
        part = ReportPart(ls_sends=sum(ch.stats.sent for ch in self._ls.values()))
        for stream in self._bulk.values():
            c = stream.counters
            part.bulk_bytes += c["bytes"] + stream.progress_bytes
            part.gate_pause_ns += c["gate_pause_ns"]
            part.permit_wait_ns += c["permit_wait_ns"]
        return part

    async def close(self) -> None:
        if self.reporter is not None:
            await self.reporter.close()
        if self.follower is not None:
            await self.follower.close()
        for task in self._ls_tasks.values():
            task.cancel()
        await asyncio.gather(*self._ls_tasks.values(), return_exceptions=True)
        for ch in self._ls.values():
            self._disarm(ch)
            ch.close()
        for stream in self._bulk.values():
            await stream.close()
        for inbox in self._inboxes:
            await inbox.close()
        if self.link is not None:
            # A release queued by a stream that just finished goes out first, so the
            # leader hands the permit on at once instead of noticing a disconnect.
            await self.coordinator.flush(1.0)
            await self.link.close()
        self.coordinator.close()
        if self.coordinator.guard is not None:
            self.coordinator.guard.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- parked LS messages ------------------------------------------------------------------------
    def _arm_writer(self, ch: LatencySensitiveChannel, deadline_ns: int) -> None:
        # May be called from any thread: hop onto the loop.
        self._loop.call_soon_threadsafe(self._arm, ch, deadline_ns)

    def _arm(self, ch: LatencySensitiveChannel, deadline_ns: int) -> None:
        try:
            self._loop.add_writer(ch.fileno, self._flush, ch)
        except (ValueError, OSError):  # closed meanwhile
            return
        delay = max(deadline_ns - self._clock(), 0) / 1e9
        self._loop.call_later(delay + 1e-4, self._flush, ch)

    def _flush(self, ch: LatencySensitiveChannel) -> None:
        # Without a session the socket's writability is no news: only the session's
        # arrival (which arms again) or the deadline timer may flush.
        if ch.flush() or not ch.has_session:
            self._disarm(ch)

    def _disarm(self, ch: LatencySensitiveChannel) -> None:
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_writer(ch.fileno)


def _no_observe(flow: str) -> int:
    return 0


async def ajoin(
    leader: str | None,
    robot: str,
    key: Keyring | bytes | str,
    *,
    settings: TeamSettings | None = None,
    clock: Callable[[], int] = time.monotonic_ns,
    prepare: Callable[[AsyncTeam], Awaitable[None]] | None = None,
) -> AsyncTeam:
    """Join a team from asyncio code (see :func:`join`).

    ``prepare`` runs first, before the leader hears of this robot: what can fail
    locally (an inbox's port, kernel rules, a control socket) fails there, and the
    leader never sees a join that is undone at once (which would also drop the robot's
    running agent, if there is one). Bulk waits meanwhile: nothing is permitted before
    the join."""
    team = AsyncTeam(
        robot,
        TeamKey.coerce(key),
        leader=None if leader is None else parse_address(leader, what="leader"),
        settings=settings or TeamSettings(),
        clock=clock,
    )
    if prepare is not None:
        try:
            await prepare(team)
        except BaseException:
            await team.close()
            raise
    await team._start()
    return team
