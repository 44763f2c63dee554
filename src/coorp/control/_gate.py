"""The virtual-preemption layer (paper §IV-C, Algorithm 2): may the driver feed the
NIC one more bulk packet now?

The :class:`Gate` wraps the three driver operations: the dequeue decision (deny and
pause the bulk queue when the packet would still be on air at the next protection
window), and the enqueue/complete events that feed the completion-time table.
"""

from __future__ import annotations

from dataclasses import dataclass

from coorp._errors import UsageError
from coorp.control._ctt import CompletionTimeTable
from coorp.control._interval import Interval
from coorp.control._windows import WindowSource

__all__ = ["Gate", "GateDecision", "GateStats", "decide_against"]

DEFAULT_MAX_PENDING = 65_536


@dataclass(frozen=True, slots=True)
class GateDecision:
    """``allow``: hand the packet to the NIC. When denied, pause the bulk queue and
    ask again at ``resume_ns`` (the first instant after the window, ``t2 + 1``)."""

    allow: bool
    resume_ns: int | None = None


ALLOW = GateDecision(True, None)


def decide_against(window: Interval | None, now_ns: int, completion_ns: int) -> GateDecision:
    """Algorithm 2 line 5: deny if ``T < t1 ∧ t1 − T ≤ t_n`` or ``t1 ≤ T ≤ t2``."""
    if window is None:
        return ALLOW
    t1, t2 = window
    if t1 <= now_ns <= t2 or (now_ns < t1 and t1 - now_ns <= completion_ns):
        return GateDecision(False, t2 + 1)
    return ALLOW


@dataclass(frozen=True, slots=True)
class GateStats:
    allowed: int = 0
    denied_ahead: int = 0  # the packet would not finish before t1
    denied_inside: int = 0  # now is inside the window
    completions: int = 0
    unknown_completions: int = 0
    evicted_pending: int = 0
    replaced_pending: int = 0


class Gate:
    """Algorithm 2 over any window source (COORP's planner, SchedWiFi's schedule).

    ``on_enqueue`` remembers when each bulk packet entered the NIC and behind how many
    others; ``on_complete`` turns that into a ``CTT[n]`` sample. Completions of
    packets never enqueued through the gate are counted and ignored; packets the NIC
    dropped without a completion should be passed to :meth:`on_discard`. An id enqueued
    again before completing replaces the old entry (counted). At most ``max_pending``
    packets are tracked; beyond that the oldest is forgotten (counted).
    """

    def __init__(
        self,
        planner: WindowSource,
        ctt: CompletionTimeTable,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        if max_pending < 1:
            raise UsageError(f"max_pending={max_pending}: must be >= 1 packet")
        self._planner = planner
        self._ctt = ctt
        self._max_pending = max_pending
        self._pending: dict[int, tuple[int, int]] = {}
        self._counts = {name: 0 for name in GateStats.__dataclass_fields__}

    @property
    def planner(self) -> WindowSource:
        return self._planner

    @property
    def ctt(self) -> CompletionTimeTable:
        return self._ctt

    @property
    def pending(self) -> int:
        """Bulk packets enqueued to the NIC whose completion is not yet known."""
        return len(self._pending)

    @property
    def stats(self) -> GateStats:
        return GateStats(**self._counts)

    def window(self, now_ns: int) -> Interval | None:
        """The protection window the gate is currently guarding against."""
        return self._planner.next_window(now_ns)

    def decide(self, now_ns: int, queue_depth: int) -> GateDecision:
        """Whether the driver may dequeue one bulk packet with ``queue_depth`` bulk
        packets already in the NIC. Before any window is known: allow."""
        window = self._planner.next_window(now_ns)
        decision = decide_against(window, now_ns, self._ctt.query(queue_depth))
        if decision.allow:
            self._counts["allowed"] += 1
        elif window is not None and now_ns >= window.start_ns:
            self._counts["denied_inside"] += 1
        else:
            self._counts["denied_ahead"] += 1
        return decision

    def on_enqueue(self, packet_id: int, now_ns: int, queue_depth: int) -> None:
        """A bulk packet entered the NIC behind ``queue_depth`` others."""
        if queue_depth < 0:
            raise UsageError(f"queue_depth={queue_depth}: must be >= 0")
        if self._pending.pop(packet_id, None) is not None:
            # Ids may be recycled (a kernel reuses buffers) after a lost completion.
            self._counts["replaced_pending"] += 1
        elif len(self._pending) >= self._max_pending:
            del self._pending[next(iter(self._pending))]
            self._counts["evicted_pending"] += 1
        self._pending[packet_id] = (now_ns, queue_depth)

    def on_complete(self, packet_id: int, now_ns: int) -> None:
        """The NIC reported the packet done: record ``t_comp − t_enq`` in ``CTT[n]``."""
        entry = self._pending.pop(packet_id, None)
        if entry is None:
            self._counts["unknown_completions"] += 1
            return
        enqueued_ns, depth = entry
        if now_ns < enqueued_ns:
            raise UsageError(
                f"now_ns={now_ns}: packet {packet_id} completes before it was enqueued "
                f"({enqueued_ns})"
            )
        self._ctt.record(depth, now_ns - enqueued_ns)
        self._counts["completions"] += 1

    def on_discard(self, packet_id: int) -> None:
        """Forget a packet that will never complete (dropped, queue flushed)."""
        self._pending.pop(packet_id, None)
