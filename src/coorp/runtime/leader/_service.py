"""The permit service (global controller daemon): :class:`~coorp.control.GlobalController`
on asyncio sockets.

One authenticated TCP connection per robot. Requests and releases go to the
controller; its :class:`~coorp.control.PermitUpdate` answers go out as
``Granted``/``Revoked`` frames; a timer calls ``tick`` at the controller's next
deadline, so a holder that vanishes without a word loses its permit when its
timeslice ends. A holder whose connection closes, or stays silent for three
heartbeats, is removed at once (and may come back: it re-requests and resumes).

Peers that send malformed, oversized, unauthenticated or replayed frames are
dropped, counted and logged with their address; the service keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from coorp._errors import PeerError
from coorp.control import GlobalController, Grant, PermitUpdate, UnknownRobotError

from .._config import TeamConfig
from .._counters import DropLog
from .._errors import (
    LimitedError,
    MalformedFrameError,
    RefusedError,
    RuntimeUsageError,
)
from ..wire import (
    AcceptLoop,
    Address,
    AgentReport,
    FramedConnection,
    Granted,
    PeerClosed,
    Ping,
    Pong,
    Queued,
    QuotaSettings,
    Refused,
    Release,
    Request,
    Revoked,
    StatsQuery,
    StatsReply,
    TeamKey,
    TeamQuery,
    TeamReply,
    Welcome,
    format_address,
    greeting,
    open_tcp_listener,
    server_handshake,
    tune_tcp,
)
from ._board import TeamBoard

__all__ = ["LeaderSettings", "PermitService", "leader_settings"]

log = logging.getLogger("coorp.runtime.leader")


@dataclass(frozen=True, slots=True)
class LeaderSettings:
    limit: int = 1
    timeslice_ns: int = 5_000_000_000
    heartbeat_ns: int = 200_000_000
    handshake_timeout_s: float = 2.0
    write_timeout_s: float = 2.0
    max_connections: int = 1024
    """Open connections at most (bounded further by the fd limit); at the bound the
    service stops accepting until one closes."""
    max_preauth_per_source: int = 8
    """Connections from one host still in their handshake at once; more are closed."""
    preauth_budget: int = 256
    """Connections in their handshake from hosts no member authenticated from, across
    all of them; above half of it the oldest are dropped early (see :mod:`._accept`)."""
    member_reserve: int = 64
    """Connections kept out of that budget for known members' hosts."""
    connections_per_member: int = 8
    """Authenticated connections one robot (or observer name) may hold: its agent's
    plus observers; one more is refused."""
    frames_per_s_per_member: float = 200.0
    """Frames (and handshakes) one robot may have handled per second; beyond, its
    frames are read later (an agent sends about 5 per second)."""
    frame_burst_per_member: int = 400
    downlink: tuple[str, ...] = ()
    """Robots whose bulk leaves through a queue no other robot's bulk enters (a
    leader host's downlink on a wired or split link; never robots on one WiFi channel):
    they take turns among themselves under a permit of their own, at the same time as
    the others'. Empty: one permit for the whole team (one shared medium)."""
    max_weight: int = 8
    """A robot sending for several flows at once gets up to this many timeslices per
    grant (one per flow): a server answering four clients holds the air about as long
    as four robots would in turn. 1: every grant one timeslice (the paper)."""

    @property
    def silence_timeout_s(self) -> float:
        """An agent silent for three heartbeats is considered gone."""
        return 3 * self.heartbeat_ns / 1e9


class PermitService:
    """The leader's permit service for one team."""

    def __init__(
        self,
        robots: Iterable[str],
        key: TeamKey,
        settings: LeaderSettings = LeaderSettings(),
        *,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if not isinstance(key, TeamKey):
            raise RuntimeUsageError(
                f"the permit service needs the team key, got {key!r} (a robot's key "
                "cannot authenticate the other robots)"
            )
        self._key = key
        self.settings = settings
        self._clock = clock
        robots = list(robots)
        self.team = frozenset(robots)
        #: The robots' latest reports (``coorp top``), in team-file order.
        self.board = TeamBoard(list(dict.fromkeys(robots)))
        down = sorted(self.team & set(settings.downlink))
        up = sorted(self.team - set(down)) or down
        self.controller = GlobalController(
            up, limit=settings.limit, timeslice_ns=settings.timeslice_ns
        )
        #: One permit per queue: the team's, and the downlink's (``downlink``).
        self.controllers = [self.controller]
        self._queue_of = dict.fromkeys(up, self.controller)
        if down and down != up:
            downlink = GlobalController(
                down, limit=settings.limit, timeslice_ns=settings.timeslice_ns
            )
            self.controllers.append(downlink)
            self._queue_of.update(dict.fromkeys(down, downlink))
        #: Identifies this run of the leader: agents see a restart as a new epoch.
        self.epoch = int.from_bytes(os.urandom(8), "big") >> 1
        self.drops = DropLog(log, clock)
        self._log = self.drops.limiter
        self._agents: dict[str, FramedConnection] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        #: What each holder was last told of the queue: (grant id, robots waiting).
        self._told: dict[str, tuple[int, int]] = {}
        self._listener: socket.socket | None = None
        self._accept: AcceptLoop | None = None
        self._counts = {
            "joins": 0,
            "frames": 0,
            "max_holders": 0,
            "disconnect_revocations": 0,
        }

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self, listen: Address) -> Address:
        """Listen on ``listen`` (port 0 picks one); returns the bound address."""
        # A long listen queue: a burst of connections is triaged by the accept loop
        # (fast), instead of SYNs being dropped by the kernel (a 1 s retransmission).
        self._listener = open_tcp_listener(listen, backlog=4096)
        bound = self._listener.getsockname()
        s = self.settings
        self._accept = AcceptLoop(
            self._listener,
            self._handle,
            name="permit service",
            logger=log,
            max_connections=s.max_connections,
            max_preauth_per_source=s.max_preauth_per_source,
            handshake_timeout_s=s.handshake_timeout_s,
            preauth_budget=s.preauth_budget,
            member_reserve=s.member_reserve,
            quotas=QuotaSettings(
                s.connections_per_member, s.frames_per_s_per_member, s.frame_burst_per_member
            ),
            limiter=self.drops.limiter,
            greeting=lambda: greeting("leader", self.epoch),
            on_limited=self._limited,
            clock=self._clock,
        )
        self._accept.start()
        log.info(
            "permit service for %d robots on %s: limit %d, timeslice %.0f ms",
            len(self.team),
            format_address(bound),
            self.settings.limit,
            self.settings.timeslice_ns / 1e6,
        )
        return bound[0], bound[1]

    async def serve_forever(self) -> None:
        if self._accept is None:
            raise RuntimeError("start() first")
        await self._accept.wait()

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for conn in list(self._agents.values()):
            conn.close()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._accept is not None:
            await self._accept.close()
        if self._listener is not None:
            self._listener.close()

    def health(self) -> str:
        """One line: is the service accepting, how many connections, what it refused."""
        accept = self._accept.health() if self._accept is not None else "not started"
        return f"{accept}; {self.drops.summary()}"

    # -- observability ----------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        cs = [c.stats for c in self.controllers]
        out = dict(self._counts)
        out.update(
            requests=sum(c.requests for c in cs),
            grants=sum(c.grants for c in cs),
            releases=sum(c.releases for c in cs),
            revocations=sum(c.revocations for c in cs),
            stale_releases=sum(c.stale_releases for c in cs),
            duplicate_requests=sum(c.duplicate_requests for c in cs),
            holders=len(self._holder_grants()),
            waiting=len(self._waiting_robots()),
            agents=len(self._agents),
        )
        for kind, n in self.drops.counts.items():
            out[f"dropped_{kind}"] = n
        out["dropped"] = self.drops.total()
        out["drop_log_lines"] = self.drops.lines
        out["log_lines_held_back"] = sum(self.drops.limiter.held_back.values())
        if self._accept is not None:
            out.update(self._accept.stats())
        return out

    # -- connections --------------------------------------------------------------------------
    def _limited(self, peer: str) -> None:
        self.drops.drop(peer, LimitedError("too many connections in handshake from this host"))

    def _spawn(self, coro: object, name: str) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[call-overload]
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, sock: socket.socket, peer: str, slot: AcceptLoop) -> None:
        s = self.settings
        tune_tcp(sock)
        conn = FramedConnection(
            sock, peer=peer, read_timeout_s=s.handshake_timeout_s, write_timeout_s=s.write_timeout_s
        )
        robot: str | None = None
        try:
            async with slot.handshake_deadline(peer):
                join = await server_handshake(
                    conn,
                    self._key,
                    service="leader",
                    epoch=self.epoch,
                    greeted=slot.greeted_nonce(),
                )
            try:
                await slot.authenticated(join.robot)
            except LimitedError as exc:
                await conn.send(Refused(str(exc)))
                raise
            if join.role == "observer":
                await self._observer_loop(conn, join.robot, slot)
                return
            if join.role == "leader":
                await self._peer_loop(conn, join.robot, slot)
                return
            if join.role != "agent" or join.robot not in self.team:
                why = (
                    f"robot {join.robot!r} is not in the team"
                    if join.role == "agent"
                    else f"role {join.role!r} is not served by the leader"
                )
                await conn.send(Refused(why))
                raise RefusedError(why)
            robot = join.robot
            self._attach(robot, conn)
            await conn.send(Welcome(self.epoch, s.limit, s.timeslice_ns, s.heartbeat_ns))
            conn.read_timeout_s = s.silence_timeout_s
            await self._agent_loop(robot, conn, slot)
        except PeerClosed:
            pass
        except PeerError as exc:
            self.drops.drop(peer, exc)
        except OSError as exc:
            log.debug("connection %s failed: %s", peer, exc)
        finally:
            conn.close()
            if robot is not None:
                self._detach(robot, conn)

    def _attach(self, robot: str, conn: FramedConnection) -> None:
        old = self._agents.get(robot)
        if old is not None:
            # The robot reconnected before we noticed the old connection die.
            self._log.log(
                "join",
                logging.INFO,
                "%s rejoined from %s; dropping its old connection",
                robot,
                conn.peer,
            )
            self._forget_robot(robot)
            old.close()
        self._agents[robot] = conn
        self._counts["joins"] += 1
        self._permit_join(robot)
        self._log.log("join", logging.INFO, "%s joined from %s", robot, conn.peer)

    def _detach(self, robot: str, conn: FramedConnection) -> None:
        if self._agents.get(robot) is not conn:
            return  # already replaced by a newer connection of the same robot
        del self._agents[robot]
        self._log.log("join", logging.INFO, "%s left (%s)", robot, conn.peer)
        self._forget_robot(robot)

    def _forget_robot(self, robot: str) -> None:
        """Drop the robot's request and permit (it re-requests when it comes back)."""
        now = self._clock()
        held = any(g.robot == robot for g in self._holder_grants())
        update = self._permit_forget(robot, now)
        if held:
            self._counts["disconnect_revocations"] += 1
        self._apply(update, reason="holder disconnected")

    # -- the permit authority (a subclass coordinates a fleet's cell: ._cell) ---------------
    def _permit_join(self, robot: str) -> None:
        """``robot``'s agent connected (a team's leader knows its robots already)."""

    def _permit_forget(self, robot: str, now: int) -> PermitUpdate:
        ctl = self._queue_of[robot]
        update = ctl.remove_robot(robot, now)
        ctl.add_robot(robot)
        return update

    def _permit_request(self, robot: str, flows: int, now: int) -> PermitUpdate:
        weight = min(flows, self.settings.max_weight)
        ctl = self._queue_of[robot]
        changed = weight != ctl.weight(robot)
        ctl.set_weight(robot, weight)
        queued = robot in ctl.waiting or any(g.robot == robot for g in ctl.holders)
        if changed and queued:
            return PermitUpdate()  # only its weight changed
        return self._controller_call(ctl.request, robot, now)

    def _permit_release(self, robot: str, grant_id: int, now: int) -> PermitUpdate:
        return self._controller_call(self._queue_of[robot].release, robot, grant_id, now)

    def _permit_tick(self, now: int) -> PermitUpdate:
        updates = [c.tick(now) for c in self.controllers]
        return PermitUpdate(
            tuple(g for u in updates for g in u.granted),
            tuple(g for u in updates for g in u.revoked),
        )

    def _permit_deadline(self) -> int | None:
        deadlines = [d for c in self.controllers if (d := c.next_deadline_ns()) is not None]
        return min(deadlines, default=None)

    def _holder_grants(self) -> tuple[Grant, ...]:
        return tuple(g for c in self.controllers for g in c.holders)

    def _waiting_robots(self) -> list[str]:
        return [r for c in self.controllers for r in c.waiting]

    def _queue_key(self, robot: str) -> object:
        """Which permit ``robot`` takes turns under: the team's, or the downlink's
        (``downlink``). Holders and waiters are counted per queue."""
        return self._queue_of.get(robot)

    async def _peer_loop(self, conn: FramedConnection, name: str, slot: AcceptLoop) -> None:
        why = f"{name!r} joined as a leader, but this leader is not in a fleet"
        await conn.send(Refused(why))
        raise RefusedError(why)

    async def _agent_loop(self, robot: str, conn: FramedConnection, slot: AcceptLoop) -> None:
        while True:
            msg = await conn.recv()
            self._counts["frames"] += 1
            await slot.pace(robot)
            now = self._clock()
            if isinstance(msg, Ping):
                await conn.send(Pong(msg.token))
            elif isinstance(msg, Request):
                self._apply(self._permit_request(robot, msg.flows, now))
            elif isinstance(msg, Release):
                self._apply(self._permit_release(robot, msg.grant_id, now))
            elif isinstance(msg, StatsQuery):
                await conn.send(self._stats_reply())
            elif isinstance(msg, AgentReport):
                self.board.record(robot, now, msg)
            elif isinstance(msg, TeamQuery):
                await conn.send(self._team_reply(msg.offset))
            else:
                # Authenticated but out of place: a confused team member. Count it and
                # carry on; the framing is intact.
                self.drops.drop(
                    conn.peer,
                    MalformedFrameError(f"unexpected {type(msg).__name__} from agent {robot}"),
                )

    def _controller_call(self, call: Callable[..., PermitUpdate], *args: object) -> PermitUpdate:
        try:
            return call(*args)
        except UnknownRobotError:  # cannot happen for a joined robot; never fatal
            return PermitUpdate()

    async def _observer_loop(self, conn: FramedConnection, name: str, slot: AcceptLoop) -> None:
        conn.read_timeout_s = max(self.settings.silence_timeout_s, 5.0)
        while True:
            msg = await conn.recv()
            await slot.pace(name)
            if isinstance(msg, StatsQuery):
                await conn.send(self._stats_reply())
            elif isinstance(msg, TeamQuery):
                await conn.send(self._team_reply(msg.offset))
            elif isinstance(msg, Ping):
                await conn.send(Pong(msg.token))
            else:
                raise MalformedFrameError(f"unexpected {type(msg).__name__} from an observer")

    def _team_reply(self, offset: int) -> TeamReply:
        return self.board.page(
            offset,
            self._clock(),
            set(self._agents),
            [g.robot for g in self._holder_grants()],
            self._waiting_robots(),
        )

    def _stats_reply(self) -> StatsReply:
        return StatsReply(
            self.stats(),
            [g.robot for g in self._holder_grants()],
            self._waiting_robots(),
        )

    # -- permits ---------------------------------------------------------------------------------
    def _apply(self, update: PermitUpdate, *, reason: str = "timeslice over") -> None:
        for g in update.revoked:
            log.debug("revoked grant %d of %s (%s)", g.grant_id, g.robot, reason)
            self._send_to(g.robot, Revoked(g.grant_id, reason))
        for g in update.granted:
            log.debug("granted %d to %s", g.grant_id, g.robot)
            self._send_to(g.robot, Granted(g.grant_id, g.granted_ns, g.expires_ns))
        # Holders at once on one queue (each queue has its own permit).
        per_queue = Counter(self._queue_key(g.robot) for g in self._holder_grants())
        holders = max(per_queue.values(), default=0)
        self._counts["max_holders"] = max(self._counts["max_holders"], holders)
        self._tell_holders()
        self._reschedule()

    def _tell_holders(self) -> None:
        """Tell each holder how many robots wait whenever that changed (a fresh grant
        starts at none): one with nothing left to send then releases at once."""
        waiting_in = Counter(self._queue_key(r) for r in self._waiting_robots())
        told: dict[str, tuple[int, int]] = {}
        for g in self._holder_grants():
            waiting = waiting_in[self._queue_key(g.robot)]
            gid, last = self._told.get(g.robot, (g.grant_id, 0))
            if gid != g.grant_id:
                last = 0
            if waiting != last:
                self._send_to(g.robot, Queued(waiting))
            told[g.robot] = (g.grant_id, waiting)
        self._told = told

    def _send_to(self, robot: str, msg: Granted | Revoked | Queued) -> None:
        conn = self._agents.get(robot)
        if conn is None:
            return
        self._spawn(self._send_or_close(conn, msg), f"coorp-leader-send-{robot}")

    async def _send_or_close(self, conn: FramedConnection, msg: Granted | Revoked | Queued) -> None:
        try:
            await conn.send(msg)
        except (PeerError, OSError) as exc:
            # The reader of this connection will notice and detach the robot.
            log.debug("cannot send to %s: %s", conn.peer, exc)
            conn.close()

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self._permit_deadline()
        if deadline is None:
            return
        delay_s = max(deadline - self._clock(), 0) / 1e9
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._apply(self._permit_tick(self._clock()))


def leader_settings(config: TeamConfig) -> LeaderSettings:
    """The permit service's :class:`LeaderSettings` from a team file's ``[leader]``."""
    ld = config.leader
    return LeaderSettings(
        limit=ld.limit,
        timeslice_ns=ld.timeslice_ns,
        heartbeat_ns=ld.heartbeat_ns,
        preauth_budget=ld.preauth_budget,
        member_reserve=ld.member_reserve,
        connections_per_member=ld.connections_per_member,
        frames_per_s_per_member=ld.frames_per_s_per_member,
        max_weight=ld.max_weight,
        downlink=tuple(ld.downlink),
    )
