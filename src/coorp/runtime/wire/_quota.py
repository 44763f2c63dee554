"""Per-member quotas at one service: connections held and frames per second.

A team member holds a key, so it can do everything the protocol allows — as itself.
What it must not do is spend what the other members need. Every service (the leader's
permit service, every inbox) therefore accounts each authenticated member separately:

* **connections** — at most ``connections_per_member`` authenticated connections of one
  member at once; one more is refused (``quota_refused``) and closed;
* **frames per second** — one token bucket per member (``frames_per_s``, burst
  ``frame_burst``), shared by all its connections, charged for its handshake and for
  every frame the service handles for it (bulk payload frames at an inbox excepted:
  their rate is the data rate). A member over its rate is not cut off: the service
  simply reads its next frame later (``throttled_frames``, ``throttled_ms``), so the
  frames wait in *its* socket buffer and *its* sender blocks, while the other members'
  frames are served as usual.

Members are tracked by authenticated name (bounded: a member with no connection is
forgotten first).

**Known hosts** (:class:`KnownHosts`): an address a member authenticated from is
*known* to the service, and connections from it skip the pre-authentication budget
and its early drop (a robot must get back in during a flood). That privilege is the
member's, so it is bounded per member: at most ``known_hosts_per_member`` addresses
(a member that authenticates from a new one forgets its least recently used), each for
``known_host_ttl_s`` after the last authentication from it. A member that
authenticates once from each of 150 addresses cannot turn them into 150 known hosts
whose flood then skips the limits (issue 33: the leader sat at 960/960 connections and
other robots' joins fell back).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .._errors import LimitedError

__all__ = ["KnownHosts", "MemberQuotas", "QuotaSettings"]

#: Members remembered at once (their buckets); beyond, idle ones are forgotten.
_MAX_MEMBERS = 4096


@dataclass(frozen=True, slots=True)
class QuotaSettings:
    connections_per_member: int = 8
    frames_per_s: float = 200.0
    frame_burst: int = 400
    known_hosts_per_member: int = 4
    """Addresses one member may be known from at once (see :class:`KnownHosts`)."""
    known_host_ttl_s: float = 3600.0
    """How long an address stays known after the last authentication from it."""


@dataclass(slots=True)
class _Member:
    connections: int = 0
    tokens: float = 0.0
    last_ns: int = 0


class MemberQuotas:
    """The quotas of every member at one service (see the module docstring)."""

    def __init__(self, settings: QuotaSettings, clock: Callable[[], int]) -> None:
        if settings.connections_per_member < 1 or settings.frames_per_s <= 0:
            raise ValueError(f"invalid quotas {settings}")
        self.settings = settings
        self._clock = clock
        self._members: dict[str, _Member] = {}
        self.counters = {"quota_refused": 0, "throttled_frames": 0, "throttled_ms": 0}

    def connections(self, robot: str) -> int:
        m = self._members.get(robot)
        return 0 if m is None else m.connections

    def _member(self, robot: str) -> _Member:
        m = self._members.get(robot)
        if m is None:
            if len(self._members) >= _MAX_MEMBERS:
                for name in [n for n, x in self._members.items() if x.connections == 0]:
                    del self._members[name]
            m = self._members[robot] = _Member(
                tokens=float(self.settings.frame_burst), last_ns=self._clock()
            )
        return m

    def open(self, robot: str) -> None:
        """One more authenticated connection of ``robot``; :class:`LimitedError` if it
        already holds its quota."""
        m = self._member(robot)
        if m.connections >= self.settings.connections_per_member:
            self.counters["quota_refused"] += 1
            raise LimitedError(
                f"robot {robot!r} already holds {m.connections} connections here (quota "
                f"connections_per_member = {self.settings.connections_per_member})"
            )
        m.connections += 1

    def close(self, robot: str) -> None:
        m = self._members.get(robot)
        if m is not None and m.connections > 0:
            m.connections -= 1

    def charge(self, robot: str, frames: int = 1) -> float:
        """Take ``frames`` tokens from ``robot``'s bucket; the seconds its next frame
        must wait (0 within its rate). The bucket may go into debt: every connection of
        the member waits its turn, so together they stay within the rate."""
        s = self.settings
        m = self._member(robot)
        now = self._clock()
        m.tokens = min(float(s.frame_burst), m.tokens + (now - m.last_ns) * s.frames_per_s / 1e9)
        m.last_ns = now
        m.tokens -= frames
        if m.tokens >= 0:
            return 0.0
        self.counters["throttled_frames"] += frames
        return -m.tokens / s.frames_per_s

    async def pace(self, robot: str, frames: int = 1) -> None:
        """:meth:`charge`, then wait as long as it says."""
        wait = self.charge(robot, frames)
        if wait > 0:
            self.counters["throttled_ms"] += round(wait * 1e3)
            await asyncio.sleep(wait)


class KnownHosts:
    """Addresses members authenticated from, bounded per member and in time (see the
    module docstring)."""

    def __init__(
        self,
        *,
        per_member: int,
        ttl_s: float,
        clock: Callable[[], int],
        max_members: int = _MAX_MEMBERS,
    ) -> None:
        if per_member < 1 or ttl_s <= 0:
            raise ValueError("known hosts: per_member >= 1 and ttl_s > 0")
        self.per_member = per_member
        self.ttl_ns = round(ttl_s * 1e9)
        self._clock = clock
        self._max_members = max_members
        self._by_member: OrderedDict[str, OrderedDict[str, int]] = OrderedDict()
        self._refs: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self.counters = {"known_hosts_forgotten": 0}

    def add(self, host: str, member: str) -> None:
        """``member`` authenticated from ``host`` now."""
        now = self._clock()
        mine = self._by_member.get(member)
        if mine is None:
            while len(self._by_member) >= self._max_members:
                _, old = self._by_member.popitem(last=False)
                for h in old:
                    self._unref(h)
            mine = self._by_member[member] = OrderedDict()
        self._by_member.move_to_end(member)
        if host not in mine:
            self._refs[host] = self._refs.get(host, 0) + 1
        mine[host] = now
        mine.move_to_end(host)
        self._last[host] = now
        while len(mine) > self.per_member:
            old_host, _ = mine.popitem(last=False)
            self.counters["known_hosts_forgotten"] += 1
            self._unref(old_host)

    def _unref(self, host: str) -> None:
        n = self._refs.get(host, 0) - 1
        if n > 0:
            self._refs[host] = n
        else:
            self._refs.pop(host, None)
            self._last.pop(host, None)

    def __contains__(self, host: object) -> bool:
        last = self._last.get(host) if isinstance(host, str) else None
        return last is not None and self._clock() - last <= self.ttl_ns

    def __len__(self) -> int:
        now = self._clock()
        return sum(1 for t in self._last.values() if now - t <= self.ttl_ns)

    def of(self, member: str) -> list[str]:
        """The addresses ``member`` is known from now, most recent last."""
        now = self._clock()
        return [h for h, t in self._by_member.get(member, {}).items() if now - t <= self.ttl_ns]
