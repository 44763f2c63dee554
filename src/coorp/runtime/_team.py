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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from coorp._errors import PeerError
from coorp.control import ProtectionPlanner

from ._auth import Keyring, TeamKey
from ._bulk import AsyncBulkStream, BulkReceipt, BulkSettings
from ._config import TeamConfig, load_team_config, resolve_team_key
from ._coordination import Coordinator
from ._errors import MalformedFrameError, RefusedError, RuntimeUsageError
from ._framing import (
    FramedConnection,
    PeerClosed,
    client_handshake,
    connect_framed,
    recv_first_reply,
)
from ._inbox import AsyncInbox, Inbox, bind_endpoints
from ._latency import LatencySensitiveChannel
from ._link import ControlLink, LinkState
from ._marking import Marking, mark_socket, probe_marking
from ._preempt import SharedPlanner
from ._receiver import ReceiverLimits
from ._sockets import Address, format_address, parse_address, resolve
from ._wire import LsAccept, LsKeepAlive, LsOpen, LsStatus

__all__ = ["AsyncTeam", "BulkStream", "Team", "TeamSettings", "ajoin", "join", "join_config"]

log = logging.getLogger("coorp.runtime.agent")
_LS_MIN_BACKOFF_S = 0.05
_LS_MAX_BACKOFF_S = 2.0


@dataclass(frozen=True, slots=True)
class TeamSettings:
    """Tuning of a robot's runtime; the defaults suit a WiFi team."""

    local_preemption: bool = True
    """Pause BH ahead of this robot's predicted LS sends (the gate)."""
    protection_margin_ns: int = 2_000_000
    fallback_ns: int = 900_000_000
    """Leader silent this long: BH goes uncoordinated (must stay under 1 s)."""
    join_timeout_s: float = 2.0
    """How long :func:`join` waits for the leader before going on uncoordinated."""
    ls_keepalive_s: float = 1.0
    """Keep-alive period of an LS channel's session with its receiver (also how often
    the receiver re-measures the clock offset for its freshness check)."""
    ls_session_wait_s: float = 1.0
    """How long the threaded ``Team.latency_sensitive`` waits for the receiver to open
    the channel's session (sends before that are parked, keep-last)."""
    bulk: BulkSettings = field(default_factory=BulkSettings)
    receiver: ReceiverLimits = field(default_factory=ReceiverLimits)


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
        self.coordinator = Coordinator(robot, clock)
        self.link: ControlLink | None = None
        self._ls: dict[str, LatencySensitiveChannel] = {}
        self._bulk: dict[str, AsyncBulkStream] = {}
        self._inboxes: list[AsyncInbox] = []
        self.marking = {"ls": probe_marking("ls"), "bh": probe_marking("bh")}

    async def _start(self) -> None:
        for m in self.marking.values():
            (log.info if m.uses_priority else log.warning)("%s: %s", self.robot, m.describe())
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
        out["ls"] = {name: ch.stats for name, ch in self._ls.items()}
        out["bulk"] = {name: dict(b.counters) for name, b in self._bulk.items()}
        return out

    # -- channels -------------------------------------------------------------------------------
    def latency_sensitive(
        self, name: str, dest: str, *, deadline_ms: float, period_ms: float | None = None
    ) -> LatencySensitiveChannel:
        """An LS channel to the inbox at ``dest`` ("host:port"), marked for AC_VO.

        ``period_ms`` is informational (the period is learnt from actual sends);
        ``deadline_ms`` bounds how long a message may wait for the socket.
        """
        if name in self._ls:
            raise RuntimeUsageError(f"LS channel {name!r} already exists")
        addr = parse_address(dest, what="dest")
        family, sockaddr = resolve(addr, socket.SOCK_DGRAM)
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            marking = mark_socket(sock, "ls")
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
        return inbox

    async def close(self) -> None:
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
) -> AsyncTeam:
    """Join a team from asyncio code (see :func:`join`)."""
    team = AsyncTeam(
        robot,
        TeamKey.coerce(key),
        leader=None if leader is None else parse_address(leader, what="leader"),
        settings=settings or TeamSettings(),
        clock=clock,
    )
    await team._start()
    return team


class _LoopThread:
    """A private event loop on a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Any, timeout: float | None = None) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except BaseException:
            fut.cancel()
            raise

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        async def wrapper() -> Any:
            return fn()

        return self.run(wrapper(), timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


class BulkStream:
    """Threaded face of a BH stream; ``send`` blocks until the receiver has it all."""

    def __init__(self, stream: AsyncBulkStream, runner: _LoopThread) -> None:
        self._stream = stream
        self._runner = runner
        self.name = stream.name

    @property
    def counters(self) -> dict[str, int]:
        return dict(self._stream.counters)

    @property
    def marking(self) -> Marking | None:
        return self._stream.marking

    def send(
        self, data: bytes | bytearray | memoryview, *, timeout_s: float | None = None
    ) -> BulkReceipt:
        """Acquire a permit, send ``data`` in chunks under local preemption, resume
        after preemption or reconnects, release; returns a :class:`BulkReceipt`."""
        result: BulkReceipt = self._runner.run(self._stream.send(data, timeout_s=timeout_s))
        return result


class Team:
    """This robot's runtime for threaded code. Create with :func:`join`."""

    def __init__(self, runner: _LoopThread, team: AsyncTeam) -> None:
        self._runner = runner
        self._team = team
        self._inboxes: list[Inbox] = []
        self._closed = False

    @property
    def robot(self) -> str:
        return self._team.robot

    @property
    def mode(self) -> str:
        return self._team.mode

    @property
    def marking(self) -> dict[str, Marking]:
        return dict(self._team.marking)

    @property
    def asyncio_team(self) -> AsyncTeam:
        return self._team

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._runner.call(self._team.stats)
        return result

    def wait_mode(self, mode: str, timeout_s: float) -> bool:
        """Block until :attr:`mode` is ``mode`` (at most ``timeout_s``); True if it is."""
        ok: bool = self._runner.run(self._team.wait_mode(mode, timeout_s), timeout_s + 5)
        return ok

    def sync_leader(self, timeout_s: float = 5.0) -> bool:
        """Block until the leader has handled every permit message this robot sent so
        far (see :meth:`AsyncTeam.sync_leader`)."""
        ok: bool = self._runner.run(self._team.sync_leader(timeout_s), timeout_s + 5)
        return ok

    def latency_sensitive(
        self, name: str, dest: str, *, deadline_ms: float, period_ms: float | None = None
    ) -> LatencySensitiveChannel:
        ch: LatencySensitiveChannel = self._runner.call(
            lambda: self._team.latency_sensitive(
                name, dest, deadline_ms=deadline_ms, period_ms=period_ms
            )
        )
        # Bounded: if the receiver is not up yet, messages park until it is.
        ch.ready.wait(self._team.settings.ls_session_wait_s)
        return ch

    def bulk(self, name: str, dest: str, *, chunk_bytes: int | None = None) -> BulkStream:
        stream: AsyncBulkStream = self._runner.call(
            lambda: self._team.bulk(name, dest, chunk_bytes=chunk_bytes)
        )
        return BulkStream(stream, self._runner)

    def listen(self, address: str = "0.0.0.0:0", *, maxsize: int = 1024) -> Inbox:
        listener, udp, bound = bind_endpoints(parse_address(address, what="listen"))
        inbox = Inbox(
            listener,
            udp,
            bound,
            self._team._key,
            self._runner.loop,
            robot=self._team.robot,
            clock=self._team._clock,
            maxsize=maxsize,
            limits=self._team.settings.receiver,
        )
        self._inboxes.append(inbox)
        return inbox

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for inbox in self._inboxes:
            inbox.close()
        try:
            self._runner.run(self._team.close(), timeout=10)
        finally:
            self._runner.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def join(
    leader: str | None,
    robot: str,
    key: Keyring | bytes | str,
    *,
    settings: TeamSettings | None = None,
    clock: Callable[[], int] = time.monotonic_ns,
) -> Team:
    """Join the team whose leader listens at ``leader`` ("host:port") as ``robot``.

    Waits up to ``settings.join_timeout_s`` for the leader; if it cannot be reached
    the team runs uncoordinated (logged) and joins when the leader appears. Raises
    :class:`RefusedError` if the leader refuses (unknown robot, wrong key).
    ``leader=None`` runs without permits (marking and local preemption only).
    """
    runner = _LoopThread(f"coorp-{robot}")
    try:
        team: AsyncTeam = runner.run(ajoin(leader, robot, key, settings=settings, clock=clock))
    except BaseException:
        runner.stop()
        raise
    return Team(runner, team)


def join_config(
    config: TeamConfig | str | Path, robot: str, *, key: Keyring | bytes | str | None = None
) -> Team:
    """:func:`join` with the leader address and timings from a team file."""
    source: str | Path | None = None
    if not isinstance(config, TeamConfig):
        source = config
        config = load_team_config(config)
    if robot not in config.team.robots:
        raise RuntimeUsageError(f"robot {robot!r} is not in team.robots of the team file")
    k = TeamKey.coerce(key) if key is not None else resolve_team_key(config, source, robot=robot)
    return join(config.agent.leader, robot, k, settings=team_settings(config))


def team_settings(config: TeamConfig) -> TeamSettings:
    """An agent's :class:`TeamSettings` from the team file's ``[agent]`` section."""
    a = config.agent
    budget = a.inflight_budget_ms
    return TeamSettings(
        local_preemption=a.local_preemption,
        protection_margin_ns=round(a.protection_margin_ms * 1e6),
        fallback_ns=round(a.fallback_ms * 1e6),
        bulk=BulkSettings(
            chunk_bytes=a.chunk_bytes,
            inflight_budget_ns=round(budget * 1e6) if budget > 0 else None,
        ),
        receiver=ReceiverLimits(
            connections_per_member=a.inbox_connections_per_member,
            ls_sessions_per_member=a.inbox_ls_sessions_per_member,
            frames_per_s_per_member=a.inbox_frames_per_s_per_member,
            preauth_budget=a.inbox_preauth_budget,
        ),
    )
