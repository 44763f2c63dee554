"""An inbox's LS sessions: who may send which channel, anti-replay windows, per-flow
loss and reorder counts, and what one member may hold.

A session is handed out over an authenticated connection (``LsOpen`` ->
``LsAccept``) for one (sender robot, channel) and lives in a :class:`SessionTable`:

* **per-member quota** — a robot holds at most ``per_member`` sessions at this inbox.
  To open one more, its own oldest *detached* session (one whose connection has ended)
  is dropped; if all of them are attached the new one is refused
  (:class:`~._errors.LimitedError`). Other robots' sessions are never touched, so one
  member opening thousands of sessions costs only itself. A global bound
  (``max_sessions``) drops the oldest detached session of anyone, else refuses;
* **liveness** — a session replaced (the same robot and channel opened again) or
  dropped calls its ``on_gone`` (the inbox ends its connection), and every keep-alive
  asks :meth:`SessionTable.report`, which says whether the session still exists;
* **anti-replay window** (:class:`ReplayWindow`, as IPsec's and WireGuard's): each
  sequence number is accepted once; one below the highest accepted is accepted if it
  is inside the window and was not seen (``reordered``, not a replay);
* **loss** — the sender's keep-alive says how many datagrams it sent in the session up
  to which sequence number; lost = that count minus those accepted up to it. The
  count is exact once everything in flight has arrived (a datagram still on its way
  when a keep-alive arrives is counted lost until it arrives).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from .._errors import LimitedError, ReplayError

__all__ = ["FlowCounts", "LsSession", "ReplayWindow", "SessionTable"]

#: Sequence numbers an anti-replay window spans (WireGuard: 8,192 − 64; IPsec ≥ 32).
DEFAULT_WINDOW = 1024


class ReplayWindow:
    """Which sequence numbers of one session were accepted: the highest, and a bitmap
    of the ``size`` below it (bit ``i``: ``top − i`` accepted)."""

    __slots__ = ("_mask", "bits", "received", "reordered", "replayed", "size", "top")

    def __init__(self, size: int = DEFAULT_WINDOW) -> None:
        if size < 1:
            raise ValueError("window size must be >= 1")
        self.size = size
        self._mask = (1 << size) - 1
        self.top = 0
        self.bits = 0
        self.received = 0
        self.reordered = 0
        self.replayed = 0

    def check(self, seq: int) -> None:
        """:class:`ReplayError` if ``seq`` was accepted before or is older than the
        window (which no longer says); nothing is recorded."""
        if seq > self.top:
            return
        d = self.top - seq
        if seq == 0 or d >= self.size:
            self.replayed += 1
            raise ReplayError(
                f"sequence {seq} is older than the anti-replay window "
                f"({self.size} below {self.top})"
            )
        if (self.bits >> d) & 1:
            self.replayed += 1
            raise ReplayError(f"sequence {seq} was accepted before (highest {self.top})")

    def commit(self, seq: int) -> None:
        """Record ``seq`` as accepted (after :meth:`check` passed)."""
        self.received += 1
        if seq > self.top:
            shift = seq - self.top
            self.bits = ((self.bits << shift) | 1) & self._mask if shift < self.size else 1
            self.top = seq
        else:
            self.bits |= 1 << (self.top - seq)
            self.reordered += 1

    def accepted_above(self, seq: int) -> int:
        """How many accepted sequence numbers are above ``seq``."""
        if seq >= self.top:
            return 0
        d = self.top - seq
        bits = self.bits if d >= self.size else self.bits & ((1 << d) - 1)
        return bits.bit_count()


@dataclass(slots=True)
class FlowCounts:
    """Counts of one flow (robot, channel) at this receiver, over all its sessions."""

    received: int = 0
    lost: int = 0
    reordered: int = 0
    replayed: int = 0
    sessions: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "received": self.received,
            "lost": self.lost,
            "reordered": self.reordered,
            "replayed": self.replayed,
            "sessions": self.sessions,
        }


@dataclass(slots=True)
class LsSession:
    robot: str
    channel: str
    session: int
    offset_ns: int
    """receiver clock − sender clock, an upper bound (refreshed by keep-alives and
    lowered by every datagram: a datagram never arrives before it was sent)."""
    window: ReplayWindow
    prefix: bytes = b""
    """The constant start of its datagrams as this robot's senders encode them."""
    lost: int = 0
    """As of the sender's last keep-alive."""
    attached: bool = True
    """Its session connection is open."""
    on_gone: Callable[[], None] | None = field(default=None, repr=False)


class SessionTable:
    """The open LS sessions of one receiver (see the module docstring). Thread-safe:
    datagrams are checked on the receiving thread, sessions opened on the loop."""

    def __init__(
        self, *, per_member: int = 64, max_sessions: int = 4096, window: int = DEFAULT_WINDOW
    ) -> None:
        if per_member < 1 or max_sessions < 1:
            raise ValueError("session quotas must be >= 1")
        self.per_member = per_member
        self.max_sessions = max_sessions
        self.window = window
        self.lock = threading.Lock()
        self._sessions: OrderedDict[tuple[str, str], LsSession] = OrderedDict()
        self._by_robot: dict[str, OrderedDict[str, LsSession]] = {}
        self._done: dict[tuple[str, str], FlowCounts] = {}
        self.refused = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, robot: str, channel: str) -> LsSession | None:
        return self._sessions.get((robot, channel))

    def open(
        self,
        robot: str,
        channel: str,
        session: int,
        offset_ns: int,
        prefix: bytes,
        on_gone: Callable[[], None] | None = None,
    ) -> tuple[LsSession, list[LsSession]]:
        """Install a session (replacing the robot's session of ``channel``); returns it
        and the sessions it ended (the caller calls their ``on_gone``, outside the
        lock). :class:`LimitedError` if over quota with nothing detached to drop."""
        ended: list[LsSession] = []
        with self.lock:
            old = self._sessions.get((robot, channel))
            if old is not None:
                ended.append(self._remove(old))
            own = self._by_robot.get(robot)
            if own is not None and len(own) >= self.per_member:
                victim = next((s for s in own.values() if not s.attached), None)
                if victim is None:
                    self.refused += 1
                    raise LimitedError(
                        f"robot {robot!r} holds {len(own)} LS sessions at this inbox, all in "
                        f"use (quota ls_sessions_per_member = {self.per_member})"
                    )
                self.evicted += 1
                ended.append(self._remove(victim))
            if len(self._sessions) >= self.max_sessions:
                victim = next((s for s in self._sessions.values() if not s.attached), None)
                if victim is None:
                    self.refused += 1
                    raise LimitedError(
                        f"this inbox holds {len(self._sessions)} LS sessions, all in use "
                        f"(max_ls_sessions = {self.max_sessions})"
                    )
                self.evicted += 1
                ended.append(self._remove(victim))
            s = LsSession(
                robot,
                channel,
                session,
                offset_ns,
                ReplayWindow(self.window),
                prefix,
                on_gone=on_gone,
            )
            self._sessions[(robot, channel)] = s
            self._by_robot.setdefault(robot, OrderedDict())[channel] = s
            self._flow(robot, channel).sessions += 1
        return s, ended

    def _flow(self, robot: str, channel: str) -> FlowCounts:
        f = self._done.get((robot, channel))
        if f is None:
            if len(self._done) >= 4 * self.max_sessions:  # bounded: forget idle flows
                for k in [k for k in self._done if k not in self._sessions]:
                    del self._done[k]
            f = self._done[(robot, channel)] = FlowCounts()
        return f

    def _remove(self, s: LsSession) -> LsSession:
        """Under the lock: drop ``s``, adding its counts to its flow's."""
        del self._sessions[(s.robot, s.channel)]
        own = self._by_robot[s.robot]
        del own[s.channel]
        if not own:
            del self._by_robot[s.robot]
        f = self._flow(s.robot, s.channel)
        w = s.window
        f.received += w.received
        f.lost += s.lost
        f.reordered += w.reordered
        f.replayed += w.replayed
        return s

    def detach(self, robot: str, channel: str, session: int) -> None:
        """The session's connection ended: it stays valid for datagrams, but is the
        first to go when its robot needs room."""
        with self.lock:
            s = self._sessions.get((robot, channel))
            if s is not None and s.session == session:
                s.attached = False

    def report(
        self, robot: str, channel: str, session: int, offset_ns: int, sent: int, last_seq: int
    ) -> LsSession | None:
        """A keep-alive: the session (its counts updated), or None if it is gone."""
        with self.lock:
            s = self._sessions.get((robot, channel))
            if s is None or s.session != session:
                return None
            s.offset_ns = offset_ns
            w = s.window
            s.lost = max(0, sent - (w.received - w.accepted_above(last_seq)))
            return s

    def flows(self) -> dict[str, dict[str, int]]:
        """Counts per flow ``"robot/channel"``: ended sessions plus the open one."""
        with self.lock:
            out = {}
            for (robot, channel), f in self._done.items():
                c = FlowCounts(f.received, f.lost, f.reordered, f.replayed, f.sessions)
                s = self._sessions.get((robot, channel))
                if s is not None:
                    c.received += s.window.received
                    c.lost += s.lost
                    c.reordered += s.window.reordered
                    c.replayed += s.window.replayed
                out[f"{robot}/{channel}"] = c.as_dict()
            return out
