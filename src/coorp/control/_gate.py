"""The virtual-preemption layer (paper §IV-C, Algorithm 2): may the driver feed the
NIC one more bulk packet now?

The :class:`Gate` wraps the three driver operations: the dequeue decision (deny and
pause the bulk queue when the packet would still be on air at the next protection
window), and the enqueue/complete events that feed the completion-time table.

One addition to Algorithm 2, *exploration*: the table only learns from packets the
gate admits, so an estimate that is too large for every gap between windows (a
guess for a depth never measured, or samples from a congested moment) would deny
every packet forever and never be corrected. A bounded rule breaks that loop; see
:class:`Gate`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

from coorp._errors import UsageError
from coorp.control._ctt import CompletionTimeTable
from coorp.control._interval import Interval
from coorp.control._windows import WindowSource

__all__ = ["Gate", "GateDecision", "GateStats", "decide_against"]

DEFAULT_MAX_PENDING = 65_536
#: At most this many gaps between probes while probes keep running into windows.
DEFAULT_MAX_EXPLORE_BACKOFF = 64


@dataclass(frozen=True, slots=True)
class GateDecision:
    """``allow``: hand the packet to the NIC. When denied, pause the bulk queue and
    ask again at ``resume_ns`` (the first instant after the window, ``t2 + 1``).
    ``explore``: allowed as an exploration probe although the table predicts it
    would not finish before the window (see :class:`Gate`); ``resume_ns`` is then
    the first instant after that window."""

    allow: bool
    resume_ns: int | None = None
    explore: bool = False


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
    explored: int = 0  # probes admitted by the exploration rule
    explore_late: int = 0  # probes that had not completed when their window opened


class Gate:
    """Algorithm 2 over any window source (COORP's planner, SchedWiFi's schedule).

    ``on_enqueue`` remembers when each bulk packet entered the NIC and behind how many
    others; ``on_complete`` turns that into a ``CTT[n]`` sample. Completions of
    packets never enqueued through the gate are counted and ignored; packets the NIC
    dropped without a completion should be passed to :meth:`on_discard`. An id enqueued
    again before completing replaces the old entry (counted). At most ``max_pending``
    packets are tracked; beyond that the oldest is forgotten (counted).

    **Exploration** (``explore=True``, the default). The table learns only from
    admitted packets, so a completion time estimated larger than every gap between
    windows would starve bulk traffic for good. When Algorithm 2 denies ahead of a
    window, the gate still admits one packet — a *probe* — if all hold:

    * it is the first decision at or after the end of the window the previous
      denial paused for, i.e. the whole gap to the next window lies ahead (a caller
      that pauses until ``resume_ns`` asks exactly then);
    * the NIC holds no bulk packet (``queue_depth == 0``): the probe has the gap to
      itself, and its completion time is a fresh ``CTT[0]`` sample;
    * no earlier probe is outstanding (one completes, is discarded, or its window
      opens first);
    * the backoff allows it: a probe that had not completed when its window opened
      doubles the number of gaps skipped before the next one (1, 2, 4… up to
      ``max_explore_backoff``); a probe that finished in time resets it.

    So probes never go out inside a window, at most one is in flight, at most one
    is sent per gap, and while they keep running into windows they become
    exponentially rarer; when gaps are long enough for one packet, every gap admits
    at least one, and the table converges to what packets really take.

    With a lead-conditioned table (``CompletionTimeTable(lead_edges_ns=...)``) a
    denial ahead of a window resumes when the lead enters the next bucket, and the
    first decision there counts as a gap start for the rule above (one probe per
    bucket and gap at most), so a bucket holding stale samples is re-measured too.

    ``realized=True``: each sample is the packet's completion measured against the
    LS send it had to clear (``completion − send + lead``, at least 0; the driver
    reports sends through :meth:`on_ls_send`) instead of its bare duration, so the
    table's percentile bounds channel delay and prediction slack together
    (docs/control.md, "Beyond the paper"). The slack credited is at most the window
    the packet was enqueued ahead of: a send that came after that window's end (a
    late loop, a stalled thread) counts as if it came at the end. Crediting all of a
    late send's delay taught the table that deep queues clear in no time, and the
    next on-time send then found them in the NIC.
    """

    def __init__(
        self,
        planner: WindowSource,
        ctt: CompletionTimeTable,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        explore: bool = True,
        max_explore_backoff: int = DEFAULT_MAX_EXPLORE_BACKOFF,
        realized: bool = False,
    ) -> None:
        if max_pending < 1:
            raise UsageError(f"max_pending={max_pending}: must be >= 1 packet")
        if max_explore_backoff < 0:
            raise UsageError(f"max_explore_backoff={max_explore_backoff}: must be >= 0 gaps")
        self._planner = planner
        self._ctt = ctt
        self._max_pending = max_pending
        # packet id -> (enqueued at, depth, lead to the next window or None, the first
        # LS send after its enqueue (at most the window's end) or None, the window's end)
        self._pending: dict[int, tuple[int, int, int | None, int | None, int]] = {}
        self._realized = realized
        # Realized mode: completed before any LS send, (completion, depth, lead, the
        # window's end).
        self._awaiting: deque[tuple[int, int, int, int]] = deque(maxlen=max_pending)
        self._counts = {name: 0 for name in GateStats.__dataclass_fields__}
        self._explore = explore
        self._max_backoff = max_explore_backoff
        # First instant of the next gap: the resume time of the last denial.
        self._gap_start_ns: int | None = None
        # Lead buckets: the instant a denial asked to be asked again (a bucket crossing);
        # the first decision from then on may probe that bucket.
        self._crossing_ns: int | None = None
        self._probe_armed: Interval | None = None  # probe decided, not yet enqueued
        self._probe: tuple[int, Interval] | None = None  # (packet id, its window)
        self._backoff = 0  # gaps skipped after the last late probe
        self._skip = 0  # gaps still to skip before the next probe

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

    def admits(self, now_ns: int, queue_depth: int) -> bool:
        """Whether Algorithm 2 alone would admit a packet now behind ``queue_depth``
        others. A pure query (no counters, no exploration state): a driver paused ahead
        of a window asks it as its NIC drains, since a shallower queue may fit the gap
        that a deeper one did not."""
        window = self._planner.next_window(now_ns)
        return decide_against(window, now_ns, self._completion(window, now_ns, queue_depth)).allow

    def _completion(self, window: Interval | None, now_ns: int, queue_depth: int) -> int:
        return self._ctt.query(queue_depth, _lead(window, now_ns), now_ns=now_ns)

    @property
    def exploring(self) -> bool:
        """A probe is in flight (admitted by the exploration rule, not completed)."""
        return self._probe is not None

    def decide(self, now_ns: int, queue_depth: int) -> GateDecision:
        """Whether the driver may dequeue one bulk packet with ``queue_depth`` bulk
        packets already in the NIC. Before any window is known: allow."""
        window = self._planner.next_window(now_ns)
        self._probe_armed = None
        if self._probe is not None and now_ns > self._probe[1].start_ns:
            self._probe_late()
        decision = decide_against(window, now_ns, self._completion(window, now_ns, queue_depth))
        gap_start = self._gap_start_ns is not None and now_ns >= self._gap_start_ns
        if self._crossing_ns is not None and now_ns >= self._crossing_ns:
            gap_start = True  # the lead entered a new bucket: its samples may be stale
        self._crossing_ns = None
        if decision.allow:
            self._gap_start_ns = None
            self._counts["allowed"] += 1
            return decision
        assert window is not None
        self._gap_start_ns = decision.resume_ns
        if now_ns >= window.start_ns:
            self._counts["denied_inside"] += 1
            return decision
        if gap_start and self._explore and queue_depth == 0 and self._probe is None:
            if self._skip == 0:
                self._probe_armed = window
                self._counts["explored"] += 1
                return GateDecision(True, decision.resume_ns, explore=True)
            self._skip -= 1
        self._counts["denied_ahead"] += 1
        edges = self._ctt.lead_edges_ns
        if edges:
            # With a lead-conditioned table a nearer lead may answer differently (the
            # air just before a window is often quieter): ask again when the lead
            # enters the next bucket, not only after the window.
            below = bisect_right(edges, window.start_ns - now_ns) - 1
            if below >= 0:
                crossing = window.start_ns - edges[below] + 1
                assert decision.resume_ns is not None
                if now_ns < crossing < decision.resume_ns:
                    self._crossing_ns = crossing
                    return GateDecision(False, crossing)
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
        lead = None
        until = 0
        if self._realized or self._ctt.lead_edges_ns:
            window = self._planner.next_window(now_ns)
            lead = _lead(window, now_ns)
            if window is not None:
                until = window.end_ns
        self._pending[packet_id] = (now_ns, queue_depth, lead, None, until)
        if self._probe_armed is not None:
            self._probe = (packet_id, self._probe_armed)
            self._probe_armed = None
        elif self._probe is not None and self._probe[0] == packet_id:
            self._probe = None  # the probe's id was reused: its completion was lost

    def on_complete(self, packet_id: int, now_ns: int) -> None:
        """The NIC reported the packet done: record ``t_comp − t_enq`` in ``CTT[n]``."""
        entry = self._pending.pop(packet_id, None)
        if entry is None:
            self._counts["unknown_completions"] += 1
            return
        enqueued_ns, depth, lead, send_ns, until = entry
        if now_ns < enqueued_ns:
            raise UsageError(
                f"now_ns={now_ns}: packet {packet_id} completes before it was enqueued "
                f"({enqueued_ns})"
            )
        if not self._realized or lead is None:
            self._ctt.record(depth, now_ns - enqueued_ns, lead, at_ns=now_ns)
        elif send_ns is not None:
            self._ctt.record(depth, max(0, now_ns - send_ns + lead), lead, at_ns=now_ns)
        else:
            self._awaiting.append((now_ns, depth, lead, until))
        self._counts["completions"] += 1
        if self._probe is not None and self._probe[0] == packet_id:
            if now_ns < self._probe[1].start_ns:
                self._probe = None
                self._backoff = self._skip = 0  # it fit: explore freely again
            else:
                self._probe_late()

    def on_ls_send(self, now_ns: int) -> None:
        """A protected LS message was handed to the stack (realized mode; otherwise
        ignored). Packets enqueued before it now know the send they had to clear."""
        if not self._realized:
            return
        for completed_ns, done_depth, done_lead, done_until in self._awaiting:
            credited = min(now_ns, done_until)
            self._ctt.record(
                done_depth, max(0, completed_ns - credited + done_lead), done_lead, at_ns=now_ns
            )
        self._awaiting.clear()
        pending = self._pending
        for pid, (enq, depth, lead, send, until) in pending.items():
            if send is None and lead is not None and enq <= now_ns:
                pending[pid] = (enq, depth, lead, min(now_ns, until), until)

    def on_discard(self, packet_id: int) -> None:
        """Forget a packet that will never complete (dropped, queue flushed)."""
        self._pending.pop(packet_id, None)
        if self._probe is not None and self._probe[0] == packet_id:
            self._probe = None  # no verdict: the next gap may probe again

    def _probe_late(self) -> None:
        """The outstanding probe did not complete before its window opened."""
        self._probe = None
        self._counts["explore_late"] += 1
        self._backoff = min(max(1, 2 * self._backoff), self._max_backoff)
        self._skip = self._backoff


def _lead(window: Interval | None, now_ns: int) -> int | None:
    """How long before the next window's start ``now_ns`` is (None: no window ahead)."""
    if window is None or now_ns >= window.start_ns:
        return None
    return window.start_ns - now_ns
