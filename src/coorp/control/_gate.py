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

from coorp._errors import InvariantError, UsageError
from coorp.control._ctt import CompletionTimeTable
from coorp.control._gate_types import (
    _ALLOW,
    _DENY,
    _EXPLORE,
    ALLOW,
    GateDecision,
    GateStats,
    _check_depth,
    _Done,
    _Enqueued,
    _lead,
    credit_send,
    decide_against,
    drop_from_run,
    early_completion,
    runs_to_dict,
)
from coorp.control._interval import Interval
from coorp.control._windows import WindowSource

__all__ = ["Gate", "GateDecision", "GateStats", "decide_against"]

DEFAULT_MAX_PENDING = 65_536
#: At most this many gaps between probes while probes keep running into windows.
DEFAULT_MAX_EXPLORE_BACKOFF = 64


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
    next on-time send then found them in the NIC. ``realized_in_window=True``: nor is a
    send that came before that window (outside every predicted window: the late tail
    of an earlier one) a packet's send; it waits for the next send. Such sends are the
    ring budget's to bound, not every packet's to price.

    **Runs.** :meth:`admit_run`, :meth:`on_enqueue_run` and :meth:`on_complete_run`
    do what the per-packet calls do for consecutive packet ids, in order, with the
    same results; they ask the planner once per run and keep one record per run of
    packets enqueued together, which is what makes a simulated NIC fed packet by
    packet affordable (``coorp.sim.RunHooks``).
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
        realized_in_window: bool = False,
    ) -> None:
        if max_pending < 1:
            raise UsageError(f"max_pending={max_pending}: must be >= 1 packet")
        if max_explore_backoff < 0:
            raise UsageError(f"max_explore_backoff={max_explore_backoff}: must be >= 0 gaps")
        self._planner = planner
        self._ctt = ctt
        self._edges = ctt.lead_edges_ns
        self._max_pending = max_pending
        # Which packets are pending, one record per run: two stores with the same
        # answers (coorp.control._gate_types says how they work).
        self._fast = True
        self._fast_allowed = True  # (False: the dict store only; a test compares them)
        self._queue: list[_Enqueued] = []  # fast: records from _qhead on, in id order
        self._qhead = 0
        self._npending = 0  # fast: packets pending
        # (Keys typed object: a packet id boxed once serves several dict operations.)
        self._pending: dict[object, _Enqueued] = {}
        # The records with packets still pending, in enqueue order (realized mode).
        self._runs: list[_Enqueued] = []
        self._realized = realized
        self._in_window = realized_in_window
        # Realized mode: completed before any LS send, in completion order, one entry
        # per run of consecutive packets (at most max_pending packets in all).
        self._awaiting: deque[_Done] = deque()
        self._awaiting_packets = 0
        self._explore = explore
        self._max_backoff = max_explore_backoff
        # First instant of the next gap: the resume time of the last denial (-1: none).
        self._gap_start_ns = -1
        # Lead buckets: the instant a denial asked to be asked again (a bucket crossing);
        # the first decision from then on may probe that bucket (-1: none).
        self._crossing_ns = -1
        self._probe_armed: Interval | None = None  # probe decided, not yet enqueued
        self._probe_pid = -1  # the probe's packet id (-1: no probe in flight)
        self._probe_start = 0  # the start of the probe's window
        self._backoff = 0  # gaps skipped after the last late probe
        self._skip = 0  # gaps still to skip before the next probe
        # The last denial's resume time (see _decide_at).
        self._resume = 0
        self._allowed = 0
        self._denied_ahead = 0
        self._denied_inside = 0
        self._completions = 0
        self._unknown_completions = 0
        self._evicted_pending = 0
        self._replaced_pending = 0
        self._explored = 0
        self._explore_late = 0

    @property
    def planner(self) -> WindowSource:
        return self._planner

    @property
    def ctt(self) -> CompletionTimeTable:
        return self._ctt

    @property
    def pending(self) -> int:
        """Bulk packets enqueued to the NIC whose completion is not yet known."""
        return self._npending if self._fast else len(self._pending)

    def holds(self, packet_id: int) -> bool:
        """Whether ``packet_id`` is pending here (enqueued, not completed)."""
        return (self._find(packet_id) if self._fast else self._pending.get(packet_id)) is not None

    @property
    def stats(self) -> GateStats:
        return GateStats(
            allowed=self._allowed,
            denied_ahead=self._denied_ahead,
            denied_inside=self._denied_inside,
            completions=self._completions,
            unknown_completions=self._unknown_completions,
            evicted_pending=self._evicted_pending,
            replaced_pending=self._replaced_pending,
            explored=self._explored,
            explore_late=self._explore_late,
        )

    def window(self, now_ns: int) -> Interval | None:
        """The protection window the gate is currently guarding against."""
        return self._planner.next_window(now_ns)

    def admits(self, now_ns: int, queue_depth: int) -> bool:
        """Whether Algorithm 2 alone would admit a packet now behind ``queue_depth``
        others. A pure query (no counters, no exploration state): a driver paused ahead
        of a window asks it as its NIC drains, since a shallower queue may fit the gap
        that a deeper one did not."""
        return self.admits_run(now_ns, 1, queue_depth) == 1

    def admits_run(self, now_ns: int, count: int, queue_depth: int) -> int:
        """:meth:`admits` for ``queue_depth``, ``queue_depth + 1``, … in turn: how many
        packets Algorithm 2 alone would admit now before the first it would not (a pure
        query): for packets the gate only holds back, never explores with (TCP acks)."""
        _check_depth(queue_depth)
        if count <= 0:
            return 0
        window = self._planner.next_window(now_ns)
        table = self._ctt._table(_lead(window, now_ns), now_ns)
        if window is None:
            return count
        t1, t2 = window
        if t1 <= now_ns <= t2:
            return 0
        if now_ns > t2:
            return count
        gap = t1 - now_ns
        n = 0
        while n < count and table._answer(queue_depth + n) < gap:
            n += 1
        return n

    @property
    def exploring(self) -> bool:
        """A probe is in flight (admitted by the exploration rule, not completed)."""
        return self._probe_pid >= 0

    @property
    def probe_armed(self) -> bool:
        """The last decision admitted a probe that is not yet enqueued: the next
        :meth:`on_enqueue_run` makes its first packet the probe (a caller that decides
        with :meth:`decide_run` and announces the packets afterwards asks this before
        deciding anything else, which would disarm it)."""
        return self._probe_armed is not None

    def decide(self, now_ns: int, queue_depth: int) -> GateDecision:
        """Whether the driver may dequeue one bulk packet with ``queue_depth`` bulk
        packets already in the NIC. Before any window is known: allow."""
        _check_depth(queue_depth)
        window = self._planner.next_window(now_ns)
        table = self._ctt._table(_lead(window, now_ns), now_ns)
        verdict = self._decide_at(window, table, now_ns, queue_depth)
        if verdict == _ALLOW:
            return ALLOW
        return GateDecision(verdict == _EXPLORE, self._resume, verdict == _EXPLORE)

    def admit_run(self, now_ns: int, packet_id: int, count: int, queue_depth: int) -> int:
        """:meth:`decide` then, if allowed, :meth:`on_enqueue` for packets
        ``packet_id + i`` behind ``queue_depth + i`` others, ``i = 0, 1, …`` in turn,
        until one is denied; returns how many were admitted (and enqueued). After a
        denial, :attr:`resume_ns` is the denial's resume time."""
        return self._admit_run(now_ns, packet_id, count, queue_depth, True)

    def decide_run(self, now_ns: int, count: int, queue_depth: int) -> int:
        """:meth:`decide` for ``queue_depth + i``, ``i = 0, 1, …`` in turn until one is
        denied (packets the caller hands over but does not announce with
        :meth:`on_enqueue`); returns how many were allowed."""
        return self._admit_run(now_ns, -1, count, queue_depth, False)

    @property
    def resume_ns(self) -> int:
        """The resume time of the last denial of :meth:`admit_run`/:meth:`decide_run`."""
        return self._resume

    def _admit_run(
        self, now_ns: int, packet_id: int, count: int, queue_depth: int, enqueue: bool
    ) -> int:
        if count <= 0:
            return 0
        _check_depth(queue_depth)
        # Nothing between these decisions can change the windows or the table: the
        # planner is asked once, the table chosen once.
        window = self._planner.next_window(now_ns)
        lead = _lead(window, now_ns)
        table = self._ctt._table(lead, now_ns)
        if self._decide_at(window, table, now_ns, queue_depth) == _DENY:
            return 0
        # The packets after the first see the state an admission leaves (no gap start,
        # no bucket crossing, no probe pending a decision, a probe in flight only if it
        # is this run's first packet, whose window has not begun): for them Algorithm 2
        # alone decides, and exploration only ever applies to a denial. So the allowed
        # prefix is found by comparing the table's answers with the gap, and only a
        # denial goes through _decide_at again.
        n = 1
        if window is None or now_ns > window.end_ns:
            n = count  # no window ahead: every decision allows
        else:
            gap = window.start_ns - now_ns  # > 0: the first packet was admitted ahead
            while n < count and table._answer(queue_depth + n) < gap:
                n += 1
        if n > 1:
            self._allowed += n - 1
            self._gap_start_ns = -1  # (set by a first decision that explored)
        if enqueue:
            # A probe armed by the first decision becomes the first packet's.
            self._enqueue_run(
                packet_id, n, self._record_for(window, now_ns, packet_id, queue_depth)
            )
        elif n > 1:
            self._probe_armed = None  # the second decision cleared it
        if n < count and self._decide_at(window, table, now_ns, queue_depth + n) != _DENY:
            raise InvariantError("gate: a decision after an admission must deny here")
        return n

    def _decide_at(
        self, window: Interval | None, table: CompletionTimeTable, now_ns: int, depth: int
    ) -> int:
        """Algorithm 2 plus exploration for one packet: _ALLOW, _EXPLORE (allowed as a
        probe) or _DENY; the resume time of a denial or probe is left in ``_resume``."""
        self._probe_armed = None
        if self._probe_pid >= 0 and now_ns > self._probe_start:
            self._probe_late()
        gap_start = 0 <= self._gap_start_ns <= now_ns
        if 0 <= self._crossing_ns <= now_ns:
            gap_start = True  # the lead entered a new bucket: its samples may be stale
        self._crossing_ns = -1
        if window is None:
            self._gap_start_ns = -1
            self._allowed += 1
            return _ALLOW
        t1, t2 = window
        # Algorithm 2 line 5: deny if T < t1 ∧ t1 − T ≤ t_n or t1 ≤ T ≤ t2.
        if not (t1 <= now_ns <= t2 or (now_ns < t1 and t1 - now_ns <= table._answer(depth))):
            self._gap_start_ns = -1
            self._allowed += 1
            return _ALLOW
        resume = t2 + 1
        self._gap_start_ns = resume
        self._resume = resume
        if now_ns >= t1:
            self._denied_inside += 1
            return _DENY
        if gap_start and self._explore and depth == 0 and self._probe_pid < 0:
            if self._skip == 0:
                self._probe_armed = window
                self._explored += 1
                return _EXPLORE
            self._skip -= 1
        self._denied_ahead += 1
        edges = self._edges
        if edges:
            # With a lead-conditioned table a nearer lead may answer differently (the
            # air just before a window is often quieter): ask again when the lead
            # enters the next bucket, not only after the window.
            below = bisect_right(edges, t1 - now_ns) - 1
            if below >= 0:
                crossing = t1 - edges[below] + 1
                if now_ns < crossing < resume:
                    self._crossing_ns = crossing
                    self._resume = crossing
        return _DENY

    def on_enqueue(self, packet_id: int, now_ns: int, queue_depth: int) -> None:
        """A bulk packet entered the NIC behind ``queue_depth`` others."""
        self.on_enqueue_run(packet_id, 1, now_ns, queue_depth)

    def on_enqueue_run(self, packet_id: int, count: int, now_ns: int, queue_depth: int) -> None:
        """:meth:`on_enqueue` for packets ``packet_id + i`` behind ``queue_depth + i``
        others, in turn."""
        if queue_depth < 0:
            raise UsageError(f"queue_depth={queue_depth}: must be >= 0")
        if count <= 0:
            return
        window = None
        if self._realized or self._edges:
            window = self._planner.next_window(now_ns)
        self._enqueue_run(
            packet_id, count, self._record_for(window, now_ns, packet_id, queue_depth)
        )

    def _record_for(
        self, window: Interval | None, now_ns: int, packet_id: int, queue_depth: int
    ) -> _Enqueued:
        """The record of a run enqueued now (``window``: the next window, asked only in
        realized mode or with lead buckets)."""
        lead = -1
        until = 0
        if self._realized or self._edges:
            lead_or_none = _lead(window, now_ns)
            lead = -1 if lead_or_none is None else lead_or_none
            if window is not None:
                until = window.end_ns
        record = _Enqueued(now_ns, packet_id, queue_depth, lead, until)
        if self._realized:
            self._runs.append(record)
        return record

    def _enqueue_run(self, packet_id: int, count: int, record: _Enqueued) -> None:
        """Packets ``packet_id .. packet_id + count - 1`` (count >= 1) entered the NIC with
        ``record``, in turn."""
        if not self._fast and not self._pending and self._fast_allowed:
            self._fast = True  # nothing pending: the fast store's rule holds again
        if self._fast:
            queue = self._queue
            if self._npending == 0:
                del queue[:]  # only dead records left
                self._qhead = 0
            if self._npending + count <= self._max_pending and (
                not queue or packet_id >= queue[-1].end
            ):
                record.end = packet_id + count
                record.live += count
                queue.append(record)
                self._npending += count
                armed = self._probe_armed
                if armed is not None:  # the first packet is the probe
                    self._probe_pid = packet_id
                    self._probe_start = armed.start_ns
                    self._probe_armed = None
                elif packet_id <= self._probe_pid < packet_id + count:
                    self._probe_pid = -1  # the probe's id was reused: its completion was lost
                return
            self._to_dict()
        for i in range(count):
            self._enqueue_at(packet_id + i, record)

    def _to_dict(self) -> None:
        """Move the fast store's pending packets into the dict, in enqueue order."""
        runs_to_dict(self._queue, self._qhead, self._pending)
        self._qhead = 0
        self._npending = 0
        self._fast = False

    def _enqueue_at(self, packet_id: int, record: _Enqueued) -> None:
        """The dict store's enqueue of one packet."""
        pending = self._pending
        key: object = packet_id  # boxed once for both dict operations (compiled)
        old = pending.pop(key, None)
        if old is not None:
            # Ids may be recycled (a kernel reuses buffers) after a lost completion.
            old.live -= 1
            self._replaced_pending += 1
        elif len(pending) >= self._max_pending:
            oldest = next(iter(pending))
            pending.pop(oldest).live -= 1
            self._evicted_pending += 1
        pending[key] = record
        record.live += 1
        armed = self._probe_armed
        if armed is not None:
            self._probe_pid = packet_id
            self._probe_start = armed.start_ns
            self._probe_armed = None
        elif self._probe_pid == packet_id:
            self._probe_pid = -1  # the probe's id was reused: its completion was lost

    def _find(self, pid: int) -> _Enqueued | None:
        """Fast store: the record whose run holds ``pid``, if ``pid`` is pending."""
        queue = self._queue
        n = len(queue)
        h = self._qhead
        while h < n and queue[h].live <= 0:
            h += 1  # completed runs at the front
        if h > 64 and 2 * h > n:
            del queue[:h]  # keep the list short
            n -= h
            h = 0
        self._qhead = h
        if h == n:
            return None
        record = queue[h]
        if pid >= record.end:  # not the oldest run: the last record starting at or before it
            lo, hi = h + 1, n
            while lo < hi:
                mid = (lo + hi) // 2
                if queue[mid].pid <= pid:
                    lo = mid + 1
                else:
                    hi = mid
            record = queue[lo - 1]
            if pid >= record.end:
                return None
        if pid < record.lo or record.live <= 0:
            return None
        gone = record.gone
        if gone is not None and pid in gone:
            return None
        return record

    def _take(self, pid: int) -> _Enqueued | None:
        """Remove ``pid`` from the pending packets: its record, None if not pending (the
        caller updates ``record.live``)."""
        if not self._fast:
            return self._pending.pop(pid, None)
        record = self._find(pid)
        if record is None:
            return None
        self._npending -= 1
        drop_from_run(record, pid)
        return record

    def on_complete(self, packet_id: int, now_ns: int) -> None:
        """The NIC reported the packet done: record ``t_comp − t_enq`` in ``CTT[n]``."""
        self.on_complete_run(packet_id, 1, now_ns)

    def on_complete_run(self, packet_id: int, count: int, now_ns: int) -> None:
        """:meth:`on_complete` for packets ``packet_id .. packet_id + count - 1`` in
        turn (consecutive packets of one run record one sample each, in one call)."""
        group: _Enqueued | None = None  # the record of the packets gathered so far
        first_depth = gathered = 0
        pid, end = packet_id, packet_id + count
        while pid < end:
            k = 1
            record = self._find(pid) if self._fast else None
            if record is not None and record.gone is None and record.lo == pid:
                # The oldest pending packets of one run, as many as complete now (an
                # A-MPDU often carries several runs): taking them one by one, in one step.
                if now_ns < record.enq_ns:
                    self._take(pid)  # as taking them one by one leaves it
                    raise early_completion(pid, record, now_ns)
                k = min(end, record.end) - pid
                record.lo = pid + k
                self._npending -= k
            else:
                record = self._take(pid)
                if record is None:
                    self._unknown_completions += 1
                    pid += 1
                    continue
                if now_ns < record.enq_ns:
                    raise early_completion(pid, record, now_ns)
            record.live -= k
            depth = record.depth + (pid - record.pid)
            if group is record and depth == first_depth + gathered:
                gathered += k
            else:
                if group is not None:
                    self._completed(group, first_depth, gathered, now_ns)
                group, first_depth, gathered = record, depth, k
            self._completions += k
            if pid <= self._probe_pid < pid + k:
                if now_ns < self._probe_start:
                    self._probe_pid = -1
                    self._backoff = self._skip = 0  # it fit: explore freely again
                else:
                    self._probe_late()
            pid += k
        if group is not None:
            self._completed(group, first_depth, gathered, now_ns)

    def _completed(self, record: _Enqueued, depth: int, count: int, now_ns: int) -> None:
        """``count`` packets of ``record`` behind ``depth``, ``depth + 1``, … others
        completed at ``now_ns``: their samples (the same for all of them)."""
        lead = record.lead
        if not self._realized or lead < 0:
            self._ctt.record_run(
                depth, count, now_ns - record.enq_ns, None if lead < 0 else lead, at_ns=now_ns
            )
        elif record.send >= 0:
            self._ctt.record_run(
                depth, count, max(0, now_ns - record.send + lead), lead, at_ns=now_ns
            )
        else:
            start = record.enq_ns + lead
            self._awaiting.append(_Done(now_ns, depth, count, lead, start, record.until))
            self._awaiting_packets += count
            excess = self._awaiting_packets - self._max_pending
            while excess > 0:  # at most max_pending packets wait: drop the oldest
                head = self._awaiting[0]
                if head.count <= excess:
                    self._awaiting.popleft()
                    self._awaiting_packets -= head.count
                    excess -= head.count
                else:
                    head.depth += excess
                    head.count -= excess
                    self._awaiting_packets -= excess
                    excess = 0

    def on_ls_send(self, now_ns: int) -> None:
        """A protected LS message was handed to the stack (realized mode; otherwise
        ignored). Packets enqueued before it now know the send they had to clear
        (with ``realized_in_window``, only those whose window it came in or after)."""
        if self._realized:
            self._awaiting, self._awaiting_packets, self._runs = credit_send(
                self._ctt, self._awaiting, self._runs, now_ns, self._in_window
            )

    def on_discard(self, packet_id: int) -> None:
        """Forget a packet that will never complete (dropped, queue flushed)."""
        record = self._take(packet_id)
        if record is not None:
            record.live -= 1
        if self._probe_pid == packet_id:
            self._probe_pid = -1  # no verdict: the next gap may probe again

    def _probe_late(self) -> None:
        """The outstanding probe did not complete before its window opened."""
        self._probe_pid = -1
        self._explore_late += 1
        self._backoff = min(max(1, 2 * self._backoff), self._max_backoff)
        self._skip = self._backoff
