"""The gate's value types and run records (see :mod:`coorp.control._gate`): its
decisions and counters, Algorithm 2's test against one window, and the records of
packets handed to the NIC together, with the fast store's bookkeeping on them.
Compiled with the gate (``coorp._accel.MODULES``): the records are touched per run of
packets.

The gate knows which packets are pending, each with the run it was enqueued with
(when, behind how many, its lead to the next window, the first LS send after it, the
window's end): one :class:`_Enqueued` record per run, shared by its packets. Two
stores give the same answers (``tests/control/test_gate_store.py`` checks them
against a plain dict of every packet):

* fast (while every run enqueued has ids above every pending id, as a driver
  numbering its packets in order gives): the records in id order, each with the ids
  of its run still pending (``lo``..``end`` less ``gone``); one append per run,
  completions of the oldest packets found at the front;
* dict (ids reused or out of order, or the ``max_pending`` bound reached): packet id
  -> record, in enqueue order (the oldest is evicted first).

The fast store turns into the dict when its rule would break (:func:`runs_to_dict`),
and back once nothing is pending.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from coorp._errors import UsageError
from coorp.control._ctt import CompletionTimeTable
from coorp.control._interval import Interval

__all__ = [
    "ALLOW", "GateDecision", "GateStats", "credit_send", "decide_against", "drop_from_run",
    "runs_to_dict",
]  # fmt: skip


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


_ALLOW = 0
_EXPLORE = 1
_DENY = 2


class _Enqueued:
    """Packets handed to the NIC together: when, the first one behind how many others,
    its lead to the next window (-1: none), the first LS send after it (-1: none yet;
    at most the window's end) and the window's end; ``live``: how many still pending
    (``end``, ``lo``, ``gone``: which, in the gate's fast store)."""

    def __init__(self, enq_ns: int, pid: int, depth: int, lead: int, until: int) -> None:
        self.enq_ns = enq_ns
        self.pid = pid
        self.depth = depth
        self.lead = lead
        self.send = -1
        self.until = until
        self.live = 0
        # Fast store (see Gate): the run's ids are pid .. end - 1, of which those below
        # ``lo`` and those in ``gone`` are no longer pending.
        self.end = pid
        self.lo = pid
        self.gone: set[int] | None = None


class _Done:
    """Realized mode: ``count`` packets completed at ``completed_ns`` before any LS send,
    behind ``depth``, ``depth + 1``, … others (their lead, window's start and end)."""

    def __init__(
        self, completed_ns: int, depth: int, count: int, lead: int, start: int, until: int
    ) -> None:
        self.completed_ns = completed_ns
        self.depth = depth
        self.count = count
        self.lead = lead
        self.start = start
        self.until = until


def credit_send(
    ctt: CompletionTimeTable,
    awaiting: deque[_Done],
    runs: list[_Enqueued],
    now_ns: int,
    in_window: bool,
) -> tuple[deque[_Done], int, list[_Enqueued]]:
    """Realized mode, a protected LS send at ``now_ns``: the packets that completed
    before it are recorded against it, the ones still pending learn it was their send
    (see :meth:`Gate.on_ls_send`). ``in_window``: a send before the window a packet
    was enqueued ahead of is not the send it had to clear (none was predicted there:
    a tail send after its own window ended); the packet waits for the next one.
    Returns the awaiting completions left, their packets, and the live records."""
    left: deque[_Done] = deque()
    packets = 0
    for done in awaiting:
        if in_window and now_ns < done.start:
            left.append(done)
            packets += done.count
            continue
        credited = min(now_ns, done.until)
        ctt.record_run(
            done.depth, done.count, max(0, done.completed_ns - credited + done.lead),
            done.lead, at_ns=now_ns,
        )  # fmt: skip
    live: list[_Enqueued] = []
    for record in runs:
        if record.live <= 0:
            continue  # every packet of it completed, was discarded or replaced
        live.append(record)
        if record.send < 0 and record.lead >= 0 and record.enq_ns <= now_ns:
            if in_window and now_ns < record.enq_ns + record.lead:
                continue
            record.send = min(now_ns, record.until)
    return left, packets, live


def _check_depth(queue_depth: int) -> None:
    if queue_depth < 0:
        raise UsageError(f"depth={queue_depth}: queue depths must be >= 0")


def _lead(window: Interval | None, now_ns: int) -> int | None:
    """How long before the next window's start ``now_ns`` is (None: no window ahead)."""
    if window is None or now_ns >= window.start_ns:
        return None
    return window.start_ns - now_ns


def runs_to_dict(queue: list[_Enqueued], qhead: int, pending: dict[object, _Enqueued]) -> None:
    """The fast store's pending packets (records ``queue[qhead:]``, in id order) into
    ``pending`` (packet id -> record, in enqueue order); ``queue`` is emptied."""
    for j in range(qhead, len(queue)):
        record = queue[j]
        if record.live <= 0:
            continue
        gone = record.gone
        for pid in range(record.lo, record.end):
            if gone is None or pid not in gone:
                pending[pid] = record
        record.gone = None
    del queue[:]


def drop_from_run(record: _Enqueued, pid: int) -> None:
    """The fast store: ``pid`` (pending, of ``record``'s run) is no longer pending."""
    gone = record.gone
    if pid == record.lo:
        lo = pid + 1
        if gone is not None:
            while lo in gone:
                gone.discard(lo)
                lo += 1
            if not gone:
                record.gone = None
        record.lo = lo
    elif gone is None:
        record.gone = {pid}
    else:
        gone.add(pid)


def early_completion(pid: int, record: _Enqueued, now_ns: int) -> UsageError:
    """The error for packet ``pid`` (of ``record``) reported complete before it was
    enqueued."""
    return UsageError(
        f"now_ns={now_ns}: packet {pid} completes before it was enqueued ({record.enq_ns})"
    )
