"""Per-channel coordination of co-channel teams: cell leaders that elect a coordinator.

A fleet has one leader per cell (an access point's team). Teams whose APs share a
channel share the air, so "at most ``limit`` bulk senders" must hold per channel, not
per team. Each leader runs a :class:`CellLeader`:

* The leaders of one channel know each other (a list, from the team file or the
  scenario) and send each other heartbeats over the wired backbone. The **coordinator**
  is the leader with the smallest name among those alive (heard from within
  ``timeout_ns``, itself always): every leader computes it from what it hears, no
  voting round. The coordinator runs Algorithm 1 (:class:`GlobalController`, the same
  code as a team's) for every robot of the channel; the other leaders relay their
  robots' requests and releases to it and its grants and revocations back, and give
  their robots grants of their own numbering (the coordinator may change; a robot's
  grant ids only increase).
* When a leader's view of the coordinator changes (the coordinator went silent, a
  leader with a smaller name came back, or it lost every peer), it reports its cell —
  the robots holding a permit, with the time left, and those waiting, in order — to
  the new coordinator, which **adopts** the holders (they count against ``limit``,
  beyond it if need be: nobody new is granted until enough of them are gone) and
  queues the waiting ones.
* A leader that hears nobody is its own coordinator: **per-team** coordination, Algorithm
  1 for its own robots. So a failed link or leader costs the channel its one-sender
  bound (each side of a partition keeps ``limit`` senders of its own, the channel may
  then carry ``limit`` per partition), never the protection itself: every team still
  has one bulk sender at a time and every robot's local gate keeps its windows. The
  bound comes back when the partition heals, at most one timeslice later (the adopted
  holders run out).
* Robots that leave a cell (a hand-over) give up their permit and their place in the
  queue; they ask their new cell's leader afresh.

``CellLeader(..., alone=True)`` never peers: per-team coordination, the baseline that
shows what co-channel teams cost. Everything here is pure: every call takes ``now_ns``
and returns what to send (:class:`CellActions`); timers, transport and retries belong to
the caller, who calls :meth:`CellLeader.tick` by :meth:`CellLeader.next_deadline_ns`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from coorp._errors import UsageError
from coorp.control._errors import UnknownRobotError
from coorp.control._permits import GlobalController, Grant, PermitUpdate

__all__ = ["CellActions", "CellLeader", "CellStats", "PeerKind", "PeerMessage"]


class PeerKind(StrEnum):
    """What one leader tells another over the backbone."""

    HEARTBEAT = "heartbeat"
    REQUEST = "request"  # a robot of the sender's cell asks for a permit
    RELEASE = "release"  # it gives back grant ``grant_id`` (the coordinator's)
    LEAVE = "leave"  # it left the sender's cell
    STATE = "state"  # the sender's cell, for a new coordinator: holders and waiting
    GRANT = "grant"  # coordinator -> cell: ``robot`` holds ``grant_id`` for ``remaining_ns``
    ADOPTED = "adopted"  # coordinator -> cell: the holder it reported now holds ``grant_id``
    REVOKE = "revoke"  # coordinator -> cell: ``grant_id`` of ``robot`` is over


@dataclass(frozen=True, slots=True)
class PeerMessage:
    kind: PeerKind
    src: str
    dst: str
    robot: str = ""
    grant_id: int = 0
    remaining_ns: int = 0
    #: STATE: the sender's robots holding a permit (robot, time left) and those waiting.
    holders: tuple[tuple[str, int], ...] = ()
    waiting: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CellActions:
    """What a leader must send after one call: grants and revocations to its own robots
    (its own numbering), messages to other leaders."""

    granted: tuple[Grant, ...] = ()
    revoked: tuple[Grant, ...] = ()
    to_peers: tuple[PeerMessage, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.granted or self.revoked or self.to_peers)


@dataclass(slots=True)
class CellStats:
    requests: int = 0
    grants: int = 0
    relayed: int = 0  # requests sent to another leader (the coordinator)
    coordinator_changes: int = 0
    adopted: int = 0  # holders taken over as the coordinator
    #: Time spent as a coordinator of this cell only (every peer silent), ns.
    alone_ns: int = 0


@dataclass(slots=True)
class _Held:
    local: Grant  # what the robot holds (this leader's numbering, this leader's clock)
    coord_id: int  # the coordinator's grant id (0: not known yet, adopted in flight)


@dataclass(slots=True)
class _Out:
    granted: list[Grant] = field(default_factory=list)
    revoked: list[Grant] = field(default_factory=list)
    peers: list[PeerMessage] = field(default_factory=list)

    def done(self) -> CellActions:
        return CellActions(tuple(self.granted), tuple(self.revoked), tuple(self.peers))


class CellLeader:
    """One cell's leader in a channel's coordination (see the module docstring).

    ``peers``: the leaders of this channel, this one included. ``limit`` and
    ``timeslice_ns`` are the channel's Algorithm 1 parameters; ``heartbeat_ns`` how
    often to tell every peer it is alive, ``timeout_ns`` after how long a silent peer is
    taken as down. ``alone``: never peer (per-team coordination).
    """

    def __init__(
        self,
        cell: str,
        peers: Iterable[str],
        *,
        limit: int = 1,
        timeslice_ns: int = 5_000_000_000,
        heartbeat_ns: int = 100_000_000,
        timeout_ns: int = 300_000_000,
        alone: bool = False,
        now_ns: int = 0,
    ) -> None:
        others = sorted(set(peers) - {cell})
        if timeout_ns < 2 * heartbeat_ns or heartbeat_ns < 1:
            raise UsageError(
                f"timeout_ns={timeout_ns}, heartbeat_ns={heartbeat_ns}: need heartbeat_ns >= 1 "
                "and timeout_ns >= 2 * heartbeat_ns"
            )
        self.cell = cell
        self.alone = alone
        self.peers: tuple[str, ...] = () if alone else tuple(others)
        self.limit = limit
        self.timeslice_ns = timeslice_ns
        self.heartbeat_ns = heartbeat_ns
        self.timeout_ns = timeout_ns
        self.members: set[str] = set()
        self.stats = CellStats()
        self._heard = dict.fromkeys(self.peers, now_ns)  # every peer alive at the start
        self._next_heartbeat = now_ns
        self._held: dict[str, _Held] = {}
        self._waiting: list[str] = []  # this cell's robots waiting, request order
        self._next_local_id = 1
        self._coordinator = self._elect(now_ns)
        self._alone_since: int | None = now_ns if self._coordinator == cell and self.peers else None
        # The coordinator's state (only while this leader is the coordinator).
        self._ctl: GlobalController | None = None
        self._cell_of: dict[str, str] = {}
        if self._coordinator == cell:
            self._ctl = self._new_controller()

    # -- views -------------------------------------------------------------------------------
    @property
    def coordinator(self) -> str:
        return self._coordinator

    @property
    def is_coordinator(self) -> bool:
        return self._coordinator == self.cell

    @property
    def isolated(self) -> bool:
        """Coordinating only its own cell because every peer is silent (per-team)."""
        return bool(self.peers) and not self.alive_peers()

    @property
    def channel_holders(self) -> tuple[Grant, ...]:
        """The coordinator's holders (every cell's), empty on another leader."""
        return self._ctl.holders if self._ctl is not None else ()

    @property
    def holders(self) -> tuple[Grant, ...]:
        """This cell's robots holding a permit (this leader's grants)."""
        return tuple(h.local for h in self._held.values())

    @property
    def waiting(self) -> tuple[str, ...]:
        return tuple(self._waiting)

    def alive_peers(self, now_ns: int | None = None) -> tuple[str, ...]:
        if now_ns is None:
            return tuple(p for p in self.peers if self._alive(p, self._last_now))
        return tuple(p for p in self.peers if self._alive(p, now_ns))

    def next_deadline_ns(self) -> int | None:
        """When :meth:`tick` must run next: a heartbeat, a peer's timeout, a grant's end."""
        times: list[int] = []
        if self.peers:
            times.append(self._next_heartbeat)
            # A peer alive now goes silent at heard + timeout (one already silent: never).
            times += [
                t + self.timeout_ns
                for t in self._heard.values()
                if t + self.timeout_ns > self._last_now
            ]
        if self._ctl is not None:
            d = self._ctl.next_deadline_ns()
            if d is not None:
                times.append(d)
        times += [h.local.expires_ns for h in self._held.values()]
        return min(times) if times else None

    # -- robots --------------------------------------------------------------------------------
    def join(self, robot: str, now_ns: int) -> CellActions:
        """``robot`` associated with this cell."""
        self._advance(now_ns)
        self.members.add(robot)
        return self._maybe_reelect(now_ns, _Out()).done()

    def leave(self, robot: str, now_ns: int) -> CellActions:
        """``robot`` left this cell: its request and permit are gone (nothing is sent to
        it); the coordinator hands its permit on."""
        self._advance(now_ns)
        out = _Out()
        self.members.discard(robot)
        if robot in self._waiting:
            self._waiting.remove(robot)
        self._held.pop(robot, None)
        self._to_coordinator(PeerKind.LEAVE, robot, 0, now_ns, out)
        return self._maybe_reelect(now_ns, out).done()

    def request(self, robot: str, now_ns: int) -> CellActions:
        """A robot of this cell asks for a permit."""
        self._advance(now_ns)
        if robot not in self.members:
            raise UnknownRobotError(robot)
        out = _Out()
        self.stats.requests += 1
        if robot not in self._held and robot not in self._waiting:
            self._waiting.append(robot)
            if not self.is_coordinator:
                self.stats.relayed += 1
            self._to_coordinator(PeerKind.REQUEST, robot, 0, now_ns, out)
        return self._maybe_reelect(now_ns, out).done()

    def release(self, robot: str, grant_id: int, now_ns: int) -> CellActions:
        """A robot gives back its permit (this leader's ``grant_id``); anything else is
        ignored, as :meth:`GlobalController.release` ignores it."""
        self._advance(now_ns)
        out = _Out()
        held = self._held.get(robot)
        if held is not None and held.local.grant_id == grant_id:
            del self._held[robot]
            self._to_coordinator(PeerKind.RELEASE, robot, held.coord_id, now_ns, out)
        return self._maybe_reelect(now_ns, out).done()

    # -- peers and time --------------------------------------------------------------------------
    def on_peer(self, msg: PeerMessage, now_ns: int) -> CellActions:
        """A message from another leader arrived."""
        self._advance(now_ns)
        out = _Out()
        if msg.src in self._heard:
            self._heard[msg.src] = now_ns
        out = self._maybe_reelect(now_ns, out)
        kind = msg.kind
        if kind in (PeerKind.REQUEST, PeerKind.RELEASE, PeerKind.LEAVE, PeerKind.STATE):
            if self._ctl is None:
                return out.done()  # not the coordinator (any more): the sender will re-elect
            self._as_coordinator(msg, now_ns, out)
        elif kind is PeerKind.GRANT:
            self._granted(msg.robot, msg.grant_id, msg.remaining_ns, now_ns, out)
        elif kind is PeerKind.ADOPTED:
            held = self._held.get(msg.robot)
            if held is not None and held.coord_id == 0:
                held.coord_id = msg.grant_id
        elif kind is PeerKind.REVOKE:
            self._revoked(msg.robot, msg.grant_id, out)
        return out.done()

    def tick(self, now_ns: int) -> CellActions:
        """Heartbeats due, peers gone silent, the coordinator's expired grants."""
        self._advance(now_ns)
        out = self._maybe_reelect(now_ns, _Out())
        if self.peers and now_ns >= self._next_heartbeat:
            for p in self.peers:
                out.peers.append(PeerMessage(PeerKind.HEARTBEAT, self.cell, p))
            self._next_heartbeat = now_ns + self.heartbeat_ns
            if not self.is_coordinator:
                # A request may have met a peer that no longer saw itself as the
                # coordinator: ask again (a duplicate is a no-op there).
                for robot in self._waiting:
                    self._to_coordinator(PeerKind.REQUEST, robot, 0, now_ns, out)
        if self._ctl is not None:
            self._apply(self._ctl.tick(now_ns), now_ns, out)
        # A grant whose slice ended on this leader's clock is over whatever the
        # coordinator said (its revocation may never come: a partition).
        for robot in [r for r, h in self._held.items() if h.local.expires_ns <= now_ns]:
            del self._held[robot]
        return out.done()

    # -- election ------------------------------------------------------------------------------
    _last_now = 0

    def _advance(self, now_ns: int) -> None:
        if now_ns < self._last_now:
            raise UsageError(
                f"CellLeader({self.cell!r}): now_ns went back ({now_ns} < {self._last_now})"
            )
        self._last_now = now_ns

    def _alive(self, peer: str, now_ns: int) -> bool:
        return now_ns - self._heard[peer] < self.timeout_ns

    def _elect(self, now_ns: int) -> str:
        return min([self.cell, *(p for p in self.peers if self._alive(p, now_ns))])

    def _maybe_reelect(self, now_ns: int, out: _Out) -> _Out:
        new = self._elect(now_ns)
        if self.peers:
            alone = new == self.cell and not self.alive_peers(now_ns)
            if alone and self._alone_since is None:
                self._alone_since = now_ns
            elif not alone and self._alone_since is not None:
                self.stats.alone_ns += now_ns - self._alone_since
                self._alone_since = None
        if new == self._coordinator:
            if self._ctl is not None:
                self._drop_silent_cells(now_ns, out)
            return out
        self.stats.coordinator_changes += 1
        self._coordinator = new
        self._ctl = None
        self._cell_of = {}
        report = PeerMessage(
            PeerKind.STATE, self.cell, new,
            holders=tuple((r, max(1, h.local.expires_ns - now_ns)) for r, h in self._held.items()),
            waiting=tuple(self._waiting),
        )  # fmt: skip
        for h in self._held.values():
            h.coord_id = 0  # the new coordinator numbers them (ADOPTED)
        if new == self.cell:
            self._ctl = self._new_controller()
            self._as_coordinator(report, now_ns, out)
        else:
            out.peers.append(report)
        return out

    def _drop_silent_cells(self, now_ns: int, out: _Out) -> None:
        """As the coordinator: a cell gone silent cannot be granted; its waiting robots
        leave the queue (they are reported again when it is back). Its holders keep
        their permit until it ends: they may still be sending."""
        assert self._ctl is not None
        silent = {p for p in self.peers if not self._alive(p, now_ns)}
        if not silent:
            return
        for robot in [r for r in self._ctl.waiting if self._cell_of.get(r) in silent]:
            self._apply(self._ctl.remove_robot(robot, now_ns), now_ns, out)
            self._cell_of.pop(robot, None)

    def _new_controller(self) -> GlobalController:
        return GlobalController((), limit=self.limit, timeslice_ns=self.timeslice_ns)

    # -- the coordinator's side ---------------------------------------------------------------
    def _as_coordinator(self, msg: PeerMessage, now_ns: int, out: _Out) -> None:
        ctl = self._ctl
        assert ctl is not None
        cell, robot = msg.src, msg.robot
        if msg.kind is PeerKind.REQUEST:
            if self._cell_of.get(robot, cell) != cell:
                # It moved cells faster than its old cell's LEAVE arrived: that one first.
                self._apply(ctl.remove_robot(robot, now_ns), now_ns, out)
            self._cell_of[robot] = cell
            ctl.add_robot(robot)
            self._apply(ctl.request(robot, now_ns), now_ns, out)
        elif msg.kind is PeerKind.RELEASE:
            if self._cell_of.get(robot) == cell and robot in ctl.robots:
                self._apply(ctl.release(robot, msg.grant_id, now_ns), now_ns, out)
        elif msg.kind is PeerKind.LEAVE:
            if self._cell_of.get(robot) == cell:
                self._cell_of.pop(robot)
                self._apply(ctl.remove_robot(robot, now_ns), now_ns, out)
        elif msg.kind is PeerKind.STATE:
            self._apply(ctl.tick(now_ns), now_ns, out)
            for r, remaining in msg.holders:
                self._cell_of[r] = cell
                grant = ctl.adopt(r, now_ns + remaining, now_ns)
                self.stats.adopted += 1
                self._send_to_cell(cell, PeerKind.ADOPTED, r, grant.grant_id, 0, out)
            for r in msg.waiting:
                self._cell_of[r] = cell
                ctl.add_robot(r)
                self._apply(ctl.request(r, now_ns), now_ns, out)

    def _apply(self, update: PermitUpdate, now_ns: int, out: _Out) -> None:
        for g in update.revoked:
            cell = self._cell_of.get(g.robot)
            if cell is not None:
                self._send_to_cell(cell, PeerKind.REVOKE, g.robot, g.grant_id, 0, out)
        for g in update.granted:
            cell = self._cell_of.get(g.robot)
            if cell is not None:
                self._send_to_cell(cell, PeerKind.GRANT, g.robot, g.grant_id,
                                   g.expires_ns - now_ns, out)  # fmt: skip

    def _send_to_cell(
        self, cell: str, kind: PeerKind, robot: str, grant_id: int, remaining: int, out: _Out
    ) -> None:
        if cell == self.cell:
            now = self._last_now
            if kind is PeerKind.GRANT:
                self._granted(robot, grant_id, remaining, now, out)
            elif kind is PeerKind.REVOKE:
                self._revoked(robot, grant_id, out)
            elif kind is PeerKind.ADOPTED:
                held = self._held.get(robot)
                if held is not None and held.coord_id == 0:
                    held.coord_id = grant_id
            return
        out.peers.append(PeerMessage(kind, self.cell, cell, robot, grant_id, remaining))

    # -- this cell's side --------------------------------------------------------------------------
    def _to_coordinator(
        self, kind: PeerKind, robot: str, grant_id: int, now_ns: int, out: _Out
    ) -> None:
        msg = PeerMessage(kind, self.cell, self._coordinator, robot, grant_id)
        if self.is_coordinator:
            self._as_coordinator(msg, now_ns, out)
        else:
            out.peers.append(msg)

    def _granted(self, robot: str, coord_id: int, remaining: int, now_ns: int, out: _Out) -> None:
        if robot not in self.members or robot not in self._waiting:
            # It left (or stopped wanting) meanwhile: give the permit straight back.
            self._to_coordinator(PeerKind.RELEASE, robot, coord_id, now_ns, out)
            return
        self._waiting.remove(robot)
        grant = Grant(robot, self._next_local_id, now_ns, now_ns + max(1, remaining))
        self._next_local_id += 1
        self._held[robot] = _Held(grant, coord_id)
        self.stats.grants += 1
        out.granted.append(grant)

    def _revoked(self, robot: str, coord_id: int, out: _Out) -> None:
        held = self._held.get(robot)
        if held is not None and held.coord_id in (coord_id, 0):
            del self._held[robot]
            out.revoked.append(held.local)
