"""Global preemption (paper §IV-A, Algorithm 1): who may send bulk traffic, and when.

The :class:`GlobalController` runs on the leader: a FIFO ``Q`` of robots that asked to
send bandwidth-hungry (BH) data, a set ``S`` of current holders (at most ``limit``),
and a ``timeslice`` after which a holder is revoked. The :class:`BulkClient` is the
robot side ("BH controller"): it remembers whether it asked, what it holds, and until
when it may send.

Both are pure state machines: each call takes ``now_ns`` and returns what must be
sent (a :class:`PermitUpdate` of grants and revocations, or a grant id to release).
Transport, retries and timers belong to the caller, which must call
:meth:`GlobalController.tick` no later than :meth:`GlobalController.next_deadline_ns`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from coorp._errors import UsageError
from coorp.control._errors import ForeignGrantError, UnknownRobotError
from coorp.control._interval import MonotoneClock

__all__ = ["BulkClient", "GlobalController", "Grant", "PermitStats", "PermitUpdate"]

DEFAULT_TIMESLICE_NS = 5_000_000_000


@dataclass(frozen=True, slots=True)
class Grant:
    """Permission for ``robot`` to send BH data on ``[granted_ns, expires_ns)``.

    Both times are on the controller's clock; a :class:`BulkClient` converts the
    length of the slice to its own clock (robots need no synchronized clock).
    """

    robot: str
    grant_id: int
    granted_ns: int
    expires_ns: int

    @property
    def timeslice_ns(self) -> int:
        return self.expires_ns - self.granted_ns


@dataclass(frozen=True, slots=True)
class PermitUpdate:
    """What the controller must tell robots after one call.

    ``granted``: new permits, in the order they were issued (request order).
    ``revoked``: permits the controller took away (timeslice expired or robot
    removed). Grants a robot released itself never appear here.
    """

    granted: tuple[Grant, ...] = ()
    revoked: tuple[Grant, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.granted or self.revoked)


@dataclass(frozen=True, slots=True)
class PermitStats:
    """Counters of a :class:`GlobalController`; anomalies are counted, never fatal."""

    requests: int = 0
    grants: int = 0
    releases: int = 0
    duplicate_requests: int = 0
    stale_releases: int = 0
    unknown_robots: int = 0
    revocations: int = 0
    removals: int = 0


class GlobalController:
    """Algorithm 1 ``schedule()``: FIFO permits for at most ``limit`` BH senders.

    Every public call that takes ``now_ns`` first revokes the holders whose timeslice
    ended at or before ``now_ns`` and hands the freed permits to waiting robots, so
    the state never lags the injected time. ``now_ns`` must never decrease.
    """

    def __init__(
        self,
        robots: Iterable[str],
        *,
        limit: int = 1,
        timeslice_ns: int = DEFAULT_TIMESLICE_NS,
    ) -> None:
        if isinstance(robots, str):
            raise UsageError(f"robots={robots!r}: expected an iterable of robot names, not a str")
        if limit < 1:
            raise UsageError(f"limit={limit}: must be an integer >= 1 (concurrent BH senders)")
        if timeslice_ns < 1:
            raise UsageError(f"timeslice_ns={timeslice_ns}: must be an integer >= 1 nanosecond")
        self._limit = limit
        self._timeslice_ns = timeslice_ns
        self._robots: set[str] = set()
        for robot in robots:
            self.add_robot(robot)
        self._queue: deque[str] = deque()
        # Insertion order is grant order, which keeps holders and expiries deterministic.
        self._holders: dict[str, Grant] = {}
        self._next_grant_id = 1
        self._clock = MonotoneClock("GlobalController")
        self._counts = {name: 0 for name in PermitStats.__dataclass_fields__}
        # Timeslices per grant, by robot (1 unless set): see set_weight.
        self._weights: dict[str, int] = {}

    # -- read-only views -------------------------------------------------------------
    @property
    def limit(self) -> int:
        return self._limit

    @property
    def timeslice_ns(self) -> int:
        return self._timeslice_ns

    @property
    def robots(self) -> frozenset[str]:
        return frozenset(self._robots)

    @property
    def holders(self) -> tuple[Grant, ...]:
        """Current grants, oldest first."""
        return tuple(self._holders.values())

    @property
    def waiting(self) -> tuple[str, ...]:
        """Robots waiting for a permit, in request (FIFO) order."""
        return tuple(self._queue)

    @property
    def stats(self) -> PermitStats:
        return PermitStats(**self._counts)

    def next_deadline_ns(self) -> int | None:
        """The earliest holder expiry: call :meth:`tick` at this time (None if no holder)."""
        if not self._holders:
            return None
        return min(g.expires_ns for g in self._holders.values())

    def set_weight(self, robot: str, weight: int) -> None:
        """Grant ``robot`` ``weight`` timeslices at a time from its next grant on (1:
        the paper's rule). A robot sending for several flows at once (a server
        answering four clients) then holds the air as long as their senders would in
        turn, so each flow gets about the same share. Grants already issued keep their
        length."""
        if not isinstance(weight, int) or weight < 1:
            raise UsageError(f"weight={weight!r}: must be an integer >= 1 (timeslices per grant)")
        if weight == 1:
            self._weights.pop(robot, None)
        else:
            self._weights[robot] = weight

    def weight(self, robot: str) -> int:
        return self._weights.get(robot, 1)

    # -- membership --------------------------------------------------------------------
    def add_robot(self, robot: str) -> None:
        """Start managing ``robot``; adding a known robot again is a no-op."""
        if not isinstance(robot, str) or not robot:
            raise UsageError(f"robot={robot!r}: robot names must be non-empty strings")
        self._robots.add(robot)

    def remove_robot(self, robot: str, now_ns: int) -> PermitUpdate:
        """Forget ``robot``: drop its request, revoke its grant, pass the permit on.

        Removing a robot that is not managed is a no-op (removal is idempotent, so a
        lost robot can be removed by several code paths).
        """
        # The robot leaves before the freed permits are handed out, so it can never
        # be granted and revoked within one update.
        self._clock.advance(now_ns)
        revoked: list[Grant] = []
        if robot in self._robots:
            self._robots.discard(robot)
            self._weights.pop(robot, None)
            self._count("removals")
            if robot in self._queue:
                self._queue.remove(robot)
            grant = self._holders.pop(robot, None)
            if grant is not None:
                revoked.append(grant)
                self._count("revocations")
        granted, expired = self._expire(now_ns)
        return PermitUpdate(tuple(granted), tuple(revoked + expired))

    # -- Algorithm 1 ---------------------------------------------------------------------
    def request(self, robot: str, now_ns: int) -> PermitUpdate:
        """A robot asks to send BH data (Algorithm 1 line 2-3).

        Granted at once if fewer than ``limit`` robots hold a permit and nobody is
        ahead in the queue; otherwise queued. A robot that already waits or holds is a
        duplicate (counted, no-op). An unmanaged robot raises :class:`UnknownRobotError`.
        """
        self._reject_unknown(robot, now_ns)
        granted, revoked = self._expire(now_ns)
        self._count("requests")
        if robot in self._holders or robot in self._queue:
            self._count("duplicate_requests")
        else:
            self._queue.append(robot)
            granted += self._fill(now_ns)
        return PermitUpdate(tuple(granted), tuple(revoked))

    def release(self, robot: str, grant_id: int, now_ns: int) -> PermitUpdate:
        """``robot`` finished early and returns grant ``grant_id`` (line 5-6).

        Only the exact (robot, grant id) pair currently held frees a permit; anything
        else (expired, already released, someone else's id) is counted as stale and
        ignored, so a delayed or replayed release can never free another grant.
        """
        self._reject_unknown(robot, now_ns)
        granted, revoked = self._expire(now_ns)
        held = self._holders.get(robot)
        if held is None or held.grant_id != grant_id:
            self._count("stale_releases")
        else:
            del self._holders[robot]
            self._count("releases")
            granted += self._fill(now_ns)
        return PermitUpdate(tuple(granted), tuple(revoked))

    def tick(self, now_ns: int) -> PermitUpdate:
        """Revoke expired holders (line 4) and grant the next robots in FIFO order."""
        granted, revoked = self._expire(now_ns)
        return PermitUpdate(tuple(granted), tuple(revoked))

    # -- internals -------------------------------------------------------------------------
    def _count(self, name: str) -> None:
        self._counts[name] += 1

    def _reject_unknown(self, robot: str, now_ns: int) -> None:
        # Checked before expiries are applied: raising after them would lose the
        # grants they issue. The expiries stay due and go out with the next call.
        self._clock.advance(now_ns)
        if robot not in self._robots:
            self._count("unknown_robots")
            raise UnknownRobotError(robot)

    def _expire(self, now_ns: int) -> tuple[list[Grant], list[Grant]]:
        self._clock.advance(now_ns)
        revoked = [g for g in self._holders.values() if g.expires_ns <= now_ns]
        for grant in revoked:
            del self._holders[grant.robot]
            self._count("revocations")
        return self._fill(now_ns), revoked

    def _fill(self, now_ns: int) -> list[Grant]:
        # Line 7-10: strictly FIFO, so a robot never overtakes an earlier requester.
        granted: list[Grant] = []
        while self._queue and len(self._holders) < self._limit:
            robot = self._queue.popleft()
            length = self._timeslice_ns * self._weights.get(robot, 1)
            grant = Grant(robot, self._next_grant_id, now_ns, now_ns + length)
            self._next_grant_id += 1
            self._holders[robot] = grant
            self._count("grants")
            granted.append(grant)
        return granted


class BulkClient:
    """Algorithm 1 ``send()`` on a robot: request, send while permitted, release.

    The client measures its permit on its *own* clock: a grant received at local time
    ``t`` lets it send until ``t + (expires_ns − granted_ns)``. Leader and robots
    therefore need no common clock; the slice is late by at most the grant's one-way
    delivery delay. ``now_ns`` must never decrease.
    """

    def __init__(self, robot: str) -> None:
        if not isinstance(robot, str) or not robot:
            raise UsageError(f"robot={robot!r}: robot names must be non-empty strings")
        self._robot = robot
        self._clock = MonotoneClock(f"BulkClient({robot!r})")
        self._requested = False
        self._wants = False
        self._grant: Grant | None = None
        self._local_expires_ns = 0
        # Grant ids only increase, so anything not newer is a duplicate or reordered.
        self._last_grant_id = 0

    @property
    def robot(self) -> str:
        return self._robot

    @property
    def grant(self) -> Grant | None:
        """The grant currently held (possibly already expired on the local clock)."""
        return self._grant

    @property
    def requested(self) -> bool:
        """A request was sent and neither a grant nor a failure has come back."""
        return self._requested

    @property
    def local_expires_ns(self) -> int | None:
        """End of the current permit on this robot's clock (None if none held)."""
        return self._local_expires_ns if self._grant is not None else None

    def want(self, now_ns: int) -> bool:
        """The robot has BH data. True means: send a request now (exactly once).

        False while a request is outstanding or a still-valid permit is held. An
        expired permit is dropped first, so a revoked robot requests again and joins
        the back of the queue.
        """
        self._clock.advance(now_ns)
        self._wants = True
        self._drop_if_expired(now_ns)
        if self._requested or self._grant is not None:
            return False
        self._requested = True
        return True

    def on_request_lost(self, now_ns: int) -> None:
        """The request could not be delivered; the next :meth:`want` asks again."""
        self._clock.advance(now_ns)
        self._requested = False

    def on_grant(self, grant: Grant, now_ns: int) -> int | None:
        """A permit arrived. Returns a grant id to release at once, else None.

        The id is returned when the robot no longer wants to send (it called
        :meth:`finished` while the request was queued), so the permit is not wasted.
        Duplicate or out-of-date grants are ignored.
        """
        self._clock.advance(now_ns)
        if grant.robot != self._robot:
            raise ForeignGrantError(self._robot, grant.robot)
        if grant.grant_id <= self._last_grant_id:
            return None
        self._last_grant_id = grant.grant_id
        self._requested = False
        if not self._wants:
            return grant.grant_id
        self._grant = grant
        self._local_expires_ns = now_ns + grant.timeslice_ns
        return None

    def on_revoke(self, grant_id: int, now_ns: int) -> None:
        """The controller took permit ``grant_id`` away; other ids are ignored."""
        self._clock.advance(now_ns)
        if self._grant is not None and self._grant.grant_id == grant_id:
            self._grant = None

    def finished(self, now_ns: int) -> int | None:
        """No more BH data: the grant id to release if a valid permit is held."""
        self._clock.advance(now_ns)
        self._wants = False
        self._drop_if_expired(now_ns)
        if self._grant is None:
            return None
        grant_id = self._grant.grant_id
        self._grant = None
        return grant_id

    def may_send(self, now_ns: int) -> bool:
        """Holding a permit whose slice has not ended on the local clock."""
        self._clock.advance(now_ns)
        return self._grant is not None and now_ns < self._local_expires_ns

    def _drop_if_expired(self, now_ns: int) -> None:
        if self._grant is not None and now_ns >= self._local_expires_ns:
            self._grant = None
