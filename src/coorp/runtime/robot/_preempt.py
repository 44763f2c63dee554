"""Local preemption in user space: the driver view that :mod:`coorp.control` expects,
built from what a Linux TCP socket tells us.

The paper hooks the WNIC driver; an application cannot. What it can see is how many
bytes it wrote to a BH socket that are not yet acknowledged (``SIOCOUTQ``): they sit
in the kernel, the qdisc, the NIC or the air. So here

* the "hardware-queue depth" is the bytes outstanding in buckets of ``bucket_bytes``
  (one bucket ~ one bulk "packet", the unit the gate admits);
* a chunk "enters the NIC" when it is written, and "completes" when the bytes
  outstanding drop below what was written up to its end (it was acknowledged); that
  interval, keyed by the depth at write time, is the completion-time table's sample;
* before each chunk the :class:`~coorp.control.Gate` decides against the robot's
  protection window (from the LS channels' observed send times); when denied, the
  stream stops writing until the window has passed, and since the unsent backlog is
  bounded (``TCP_NOTSENT_LOWAT``), what was outstanding drains before the window.

:class:`SharedPlanner` makes the one :class:`~coorp.control.ProtectionPlanner` of a
robot safe to use from LS senders on application threads and BH streams on the
event loop (the control objects are single-threaded and need monotone time).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from coorp.control import CompletionTimeTable, Gate, Interval, ProtectionPlanner

__all__ = [
    "DrainTracker",
    "SharedPlanner",
    "TolerantWindows",
    "new_gate",
    "queueing_ns",
    "within_budget",
]


class SharedPlanner:
    """A lock around one robot's protection planner (a ``WindowSource`` for gates).

    A flow silent for ``restart_after_ns`` starts a fresh time model at its next send:
    a loop that stopped and resumed (a restarted node, a new phase) has nothing to do
    with the phase it had, and a model still predicting the old one would protect the
    wrong instants while it re-learns (bulk paused for nothing). Until the new model
    has its first few sends it predicts no window; the in-flight budget still bounds
    what the LS datagram waits behind. None: keep models across silences.
    """

    def __init__(
        self,
        planner: ProtectionPlanner,
        clock: Callable[[], int],
        *,
        restart_after_ns: int | None = 1_000_000_000,
    ) -> None:
        self._planner = planner
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, int] = {}
        self.restart_after_ns = restart_after_ns
        self.restarts = 0

    @property
    def planner(self) -> ProtectionPlanner:
        return self._planner

    def observe_now(self, flow: str) -> int:
        """Record a send of ``flow`` at the current time; returns that time.

        The time is read under the lock, so observations reach the planner in time
        order even when several threads send on the same channel.
        """
        with self._lock:
            now = self._clock()
            self._observe(flow, now)
            return now

    def observe_at(self, flow: str, send_ns: int) -> None:
        """Record a send of ``flow`` at ``send_ns`` (a kernel timestamp): clamped to the
        flow's previous send, so a timestamp converted between clocks never runs
        backwards."""
        with self._lock:
            last = self._last.get(flow)
            self._observe(flow, send_ns if last is None else max(send_ns, last))

    def _observe(self, flow: str, send_ns: int) -> None:
        last = self._last.get(flow)
        if (
            last is not None
            and self.restart_after_ns is not None
            and send_ns - last > self.restart_after_ns
        ):
            self._planner.forget(flow)
            self.restarts += 1
        self._last[flow] = send_ns
        self._planner.observe(flow, send_ns)

    def has_flows(self) -> bool:
        with self._lock:
            return bool(self._planner.flows)

    def forget(self, flow: str) -> None:
        with self._lock:
            self._planner.forget(flow)
            self._last.pop(flow, None)

    def next_window(self, now_ns: int) -> Interval | None:
        with self._lock:
            return self._planner.next_window(now_ns)


#: Completion-time samples are forgotten this long after they were measured.
CTT_MAX_AGE_NS = 2_000_000_000
#: Depth-0 completions :attr:`DrainTracker.base_ns` is the shortest of.
BASE_SAMPLES = 32
#: :attr:`DrainTracker.chunk_ns` is measured over windows in which this many chunks'
#: bytes were acknowledged, and is the shortest of the last :data:`DRAIN_WINDOWS`.
DRAIN_WINDOW_CHUNKS = 16
DRAIN_WINDOWS = 8
#: The percentile :attr:`DrainTracker.queueing` answers with: the median.
QUEUEING_PERCENTILE = 50.0


class TolerantWindows:
    """The planner's windows with their start moved ``tolerance_ns`` later (never past
    their end): a gate over it admits a chunk that would still be in flight up to
    ``tolerance_ns`` after the window opens, i.e. lets this robot's own LS datagram
    wait at most that long behind its own bulk bytes. 0: the paper's rule."""

    def __init__(self, planner: SharedPlanner, tolerance_ns: int) -> None:
        self._planner = planner
        self.tolerance_ns = tolerance_ns

    def next_window(self, now_ns: int) -> Interval | None:
        w = self._planner.next_window(now_ns)
        if w is None or self.tolerance_ns <= 0:
            return w
        return Interval(min(w.start_ns + self.tolerance_ns, w.end_ns), w.end_ns)


def new_gate(
    planner: SharedPlanner,
    *,
    default_ns: int,
    max_depth: int = 256,
    max_age_ns: int | None = CTT_MAX_AGE_NS,
    tolerance_ns: int = 0,
) -> Gate:
    """A gate with its own completion-time table (one per BH socket: each has its own
    path and queue) over the robot's shared planner.

    The table ages its samples (``max_age_ns``, 2 s): the gate learns only at the
    depths it admits, so samples measured while other robots sent at the same time
    (an uncoordinated stretch, a leader outage) would otherwise keep it denying — and
    bulk crawling at the starvation guard's one chunk per 100 ms — long after the
    contention ended. Streams also start a fresh table whenever the robot switches
    into or out of uncoordinated mode (:attr:`Coordinator.regime`)."""
    ctt = CompletionTimeTable(max_depth=max_depth, default_ns=default_ns, max_age_ns=max_age_ns)
    source = planner if tolerance_ns <= 0 else TolerantWindows(planner, tolerance_ns)
    return Gate(source, ctt)


def within_budget(
    ctt: CompletionTimeTable,
    depth: int,
    now_ns: int,
    budget_ns: int | None,
    base_ns: int = 0,
    chunk_ns: int = 0,
) -> bool:
    """May a chunk be written at ``depth`` under an in-flight budget?

    Yes if nothing is in flight (``depth == 0``: a stream always makes progress, and
    the table keeps learning depth 0) or if a packet queued behind the bytes in flight
    once it is written would wait, *because of them*, no longer than ``budget_ns``
    (:func:`queueing_ns` at ``depth + 1``).
    """
    if budget_ns is None or depth == 0:
        return True
    return queueing_ns(ctt, depth + 1, now_ns, base_ns, chunk_ns) <= budget_ns


#: Samples a depth needs before :func:`queueing_ns` takes its answer for measured: a
#: few samples are a few chunks' luck (with the gate's 95th percentile, below 20 the
#: largest sample: one chunk that met a stall would stand for the depth and hold the
#: stream back there until it aged out).
MEASURED_SAMPLES = 20


def queueing_ns(
    ctt: CompletionTimeTable, n: int, now_ns: int, base_ns: int = 0, chunk_ns: int = 0
) -> int:
    """How much longer than a chunk with nothing ahead a chunk behind ``n`` chunks
    takes to complete: the wait those ``n`` chunks cause, from ``ctt``'s answers
    (:attr:`DrainTracker.queueing`: the median of each depth).

    A completion time (write to acknowledgement) is the path's own time — the chunk's
    transmission, waiting for the channel, the acknowledgement's way back — plus a
    chunk's drain time for each chunk ahead. Only the second part is queueing caused
    by our bytes, and only it delays a packet queued behind them. So at a measured
    depth the wait is ``CTT[n] − CTT[0]``: the *same* statistic at both depths, so that
    what varies at every depth alike (channel access on WiFi: several ms at the 95th
    percentile for a chunk with nothing ahead, against 0.3 ms of airtime) cancels.
    (Until issue 35's rework this subtracted the *shortest* depth-0 completion from the
    gate's 95th percentile, so that jitter counted as queueing, and the unmeasured
    depths were the table's own answer, which scales the whole completion time —
    latency and jitter included — with depth: on crl-5's emulated air the holder then
    kept one or two chunks in flight, 54 Mb/s at the default 6 ms.)

    A depth is measured once it holds :data:`MEASURED_SAMPLES` samples. One that is not
    extends the deepest measured one shallower than it by ``chunk_ns`` per chunk
    (:attr:`DrainTracker.chunk_ns`, the measured drain time of a chunk: at least its
    time at the bottleneck, so an upper bound on what each chunk adds), so the stream
    explores step by step beyond what it measured. Before both are known (the stream's
    first chunks, or everything aged out), the table's own answer at ``n`` minus
    ``base_ns`` (:attr:`DrainTracker.base_ns`), the rule before: never the shortest
    depth-0 completion per chunk, which a token bucket's burst makes far shorter than a
    chunk's time at the bottleneck.
    """
    ctt.query(0, now_ns=now_ns)  # forget what aged out
    if chunk_ns <= 0 or ctt.count(0) < MEASURED_SAMPLES:
        return ctt.query(n) - base_ns
    ref = ctt.query(0)
    m = n
    while m > 0 and ctt.count(m) < MEASURED_SAMPLES:
        m -= 1
    measured = max(ctt.query(m) - ref, 0) if m > 0 else 0
    return measured + (n - m) * chunk_ns


class DrainTracker:
    """Turns chunk writes and ``SIOCOUTQ`` readings into the gate's driver events.

    ``outstanding()`` returns the socket's bytes written but not acknowledged. All
    bytes written to the socket must be reported through :meth:`on_write` (framing
    included) so that "acknowledged" can be computed; only chunks written with a
    ``depth`` become CTT samples.

    **What the gate's samples measure** (``departure=True``, the default). The
    simulator's driver reports a bulk packet complete when it has left the NIC (its
    block ack); that is what the robot's own LS datagram waits for in a shared ring.
    A socket shows only the TCP acknowledgement, which comes a return path later: the
    receiver's acks (which Linux sends when the receiving program reads, or a
    delayed-ack timer later), their own wait for the air, the way back. On crl-5's
    emulated air that was 5-8 ms at the median and 10-16 ms at the 95th percentile for
    a chunk with nothing ahead, whose own drain took 0.2 ms, so a gate fed
    acknowledgements stopped the holder ~13 ms ahead of each of its own LS windows
    where its queue needed a few. So each chunk is reported to the gate as done at its
    acknowledgement less :attr:`return_ns` (never before it was written, nor before the
    chunk ahead of it). :attr:`return_ns` is the gate's own percentile of the chunks
    with nothing ahead, less one chunk's drain: a constant shift moves a percentile by
    itself, so the gate's answer at depth ``n`` becomes ``P95(n) − P95(0)`` plus a
    chunk's drain — the *same* statistic at both depths, as the in-flight budget
    compares medians (:func:`queueing_ns`): what varies at every depth alike (the
    receiver's reads, the acks' wait for the air) cancels, the bytes queued ahead do
    not. The budget's :attr:`queueing` table keeps the acknowledgement times, and so
    does :attr:`base_ns`. ``departure=False``: the gate gets the acknowledgement times
    (the rule before).
    """

    def __init__(
        self,
        gate: Gate,
        outstanding: Callable[[], int],
        *,
        bucket_bytes: int,
        departure: bool = True,
    ) -> None:
        self.gate = gate
        self._outstanding = outstanding
        self.bucket_bytes = bucket_bytes
        self._written = 0
        self._next_id = 1
        # (packet id, stream offset of the chunk's last byte, written at, depth), oldest
        # first.
        self._pending: deque[tuple[int, int, int, int]] = deque()
        # Completion times of the last chunks written with nothing in flight.
        self._base: deque[int] = deque(maxlen=BASE_SAMPLES)
        self._base_ns = 0
        # The drain rate while chunks are in flight: the current window's time and
        # bytes acknowledged, where the last poll left off, recent windows' chunk times.
        self._drain_at: int | None = None
        self._drain_acked = 0
        self._drain_ns = 0
        self._drained = 0
        self._chunk_times: deque[int] = deque(maxlen=DRAIN_WINDOWS)
        self._chunk_ns = 0
        self._return = 0
        self._left_ns = 0
        self.departure = departure
        self.queueing = self._queueing_table()
        self._lone = self._lone_table()

    def _queueing_table(self) -> CompletionTimeTable:
        """The same completion times as the gate's table, answered at their median
        (:func:`within_budget`'s table). Bytes queued ahead delay every chunk behind
        them, the fastest included, so they move the whole distribution; what moves
        only its tail at one depth and not at another — a chunk that met the other
        robots' LS burst, a stall of the receiver — is not queueing behind our bytes,
        and the 95th percentile of a few dozen samples is made of exactly those (on the
        emulated air under load: chunks at depths 1-3 at 19 ms in 5-10% of cases, at
        depth 0 never, so a 95th percentile held the holder at one chunk in flight)."""
        ctt = self.gate.ctt
        return CompletionTimeTable(
            max_depth=ctt.max_depth,
            percentile=QUEUEING_PERCENTILE,
            default_ns=ctt.default_ns,
            max_age_ns=ctt.max_age_ns,
        )

    def _lone_table(self) -> CompletionTimeTable:
        """Acknowledgement times of chunks written with nothing in flight, answered at
        the gate's own percentile (:attr:`return_ns`)."""
        ctt = self.gate.ctt
        return CompletionTimeTable(
            max_depth=0,
            percentile=ctt.percentile,
            default_ns=ctt.default_ns,
            max_age_ns=ctt.max_age_ns,
        )

    @property
    def base_ns(self) -> int:
        """The path's own latency: the shortest completion time of the last
        :data:`BASE_SAMPLES` chunks written with nothing in flight (0 before one was
        measured). See :func:`within_budget`."""
        return self._base_ns

    @property
    def chunk_ns(self) -> int:
        """One chunk's drain time: the time chunks were in flight over the bytes
        acknowledged meanwhile, per chunk, in windows of :data:`DRAIN_WINDOW_CHUNKS`
        chunks; the shortest of the last :data:`DRAIN_WINDOWS` (0 before one). What was
        acknowledged is at most what the bottleneck drained, so this is at least the
        chunk's time there: on a wire its transmission, on WiFi its share of the
        air's rate (0.2-0.35 ms for 16 KB on crl-5's emulated air, where chunks with
        nothing ahead took 0.5-1.2 ms at the fastest and 2-4 ms at the median)."""
        return self._chunk_ns

    def _return_ns(self, now_ns: int) -> int:
        """The path's own return latency now (see :attr:`return_ns`)."""
        self._return = 0
        if self.departure and self._chunk_ns > 0:
            lone = self._lone
            lone.query(0, now_ns=now_ns)  # forget what aged out
            if lone.count(0) >= MEASURED_SAMPLES:
                self._return = max(0, lone.query(0) - self._chunk_ns)
        return self._return

    @property
    def return_ns(self) -> int:
        """How long after a chunk's last byte left this host its acknowledgement
        arrives, as last estimated: the completion time of a chunk with nothing ahead
        at the gate's percentile (of :data:`MEASURED_SAMPLES` such chunks at least,
        aged as the gate's) less one chunk's drain time (:attr:`chunk_ns`); 0 before
        both are measured, or with ``departure=False``. The gate's samples leave it
        out (see the class docstring)."""
        return self._return

    def depth(self) -> int:
        """Bulk "packets" (buckets) ahead of one written now."""
        return self._outstanding() // self.bucket_bytes

    def on_write(self, nbytes: int, enqueued_ns: int, depth: int | None) -> None:
        self._written += nbytes
        if depth is None:
            return
        pid = self._next_id
        self._next_id += 1
        self._pending.append((pid, self._written, enqueued_ns, depth))
        self.gate.on_enqueue(pid, enqueued_ns, depth)

    def poll(self, now_ns: int) -> None:
        """Report completions of every chunk whose last byte has been acknowledged."""
        if not self._pending:
            self._drain_at = None  # nothing in flight: the drain rate pauses
            return
        acked = self._written - self._outstanding()
        if self._drain_at is not None:
            self._drain_ns += now_ns - self._drain_at
            self._drained += acked - self._drain_acked
            if self._drained >= DRAIN_WINDOW_CHUNKS * self.bucket_bytes:
                self._chunk_times.append(self._drain_ns * self.bucket_bytes // self._drained)
                self._chunk_ns = min(self._chunk_times)
                self._drain_ns = self._drained = 0
        self._drain_at, self._drain_acked = now_ns, acked
        lag = self._return_ns(now_ns) if self._pending[0][1] <= acked else 0
        while self._pending and self._pending[0][1] <= acked:
            pid, _, enqueued_ns, depth = self._pending.popleft()
            # The gate's sample ends when the chunk left this host (estimated), never
            # before it was written nor before the previous one left (in order).
            left = max(enqueued_ns, now_ns - lag, self._left_ns)
            self._left_ns = left
            self.gate.on_complete(pid, left)
            self.queueing.record(depth, now_ns - enqueued_ns, at_ns=now_ns)
            if depth == 0:
                self._lone.record(0, now_ns - enqueued_ns, at_ns=now_ns)
                self._base.append(now_ns - enqueued_ns)
                self._base_ns = min(self._base)

    def settle(self, now_ns: int) -> None:
        """The receiver confirmed the message: report what the socket shows acknowledged,
        and forget (no sample) chunks it does not yet. Left pending, they would complete
        when the next message's first bytes are acknowledged, and the idle time between
        messages would become their completion time (seconds), which holds the stream."""
        self.poll(now_ns)
        for pid, *_ in self._pending:
            self.gate.on_discard(pid)
        self._pending.clear()

    def rebind(self, gate: Gate) -> None:
        """Report to ``gate`` from now on; chunks in flight are no longer sampled
        (they were written under the old regime)."""
        self.gate = gate
        self._pending.clear()
        self._drain_at = None
        self.queueing = self._queueing_table()
        self._lone = self._lone_table()

    @property
    def tracking(self) -> int:
        return len(self._pending)

    def reset(self) -> None:
        """The connection was replaced: nothing written on the old one will complete."""
        for pid, *_ in self._pending:
            self.gate.on_discard(pid)
        self._pending.clear()
        self._written = 0
        self._drain_at = None
