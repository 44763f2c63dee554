"""The event loop: a heap of callbacks keyed ``(time_ns, priority, seq)``.

Ties are broken first by priority (lower runs first) and then by insertion order, so a
run is a pure function of the scenario and the seed. Cancellation is lazy: a cancelled
event stays in the heap and is skipped when popped.

Beside the heap, *slots*: an owner (a channel) with at most one pending event at a time,
replaced rather than cancelled, keeps it in a slot of its own, ordered exactly as if it
were in the heap but without an :class:`Event`, a heap entry or a callback object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from coorp._errors import InvariantError

if TYPE_CHECKING:
    from mypy_extensions import i64

__all__ = [
    "PRIO_ACCESS", "PRIO_CONTROL", "PRIO_MEDIUM", "PRIO_TRAFFIC", "Event", "EventLoop", "Slot",
    "SlotOwner",
]  # fmt: skip

#: The end of a medium exchange is processed before anything else at the same instant.
PRIO_MEDIUM: Final = 0
#: Policy timers (pause/resume, permits).
PRIO_CONTROL: Final = 1
#: Traffic arrivals.
PRIO_TRAFFIC: Final = 2
#: Channel access runs last, so every arrival at the same instant can contend.
PRIO_ACCESS: Final = 3


class Event:
    """A scheduled callback; ``cancel()`` makes the loop skip it. Ordered by
    ``(time_ns, priority, seq)``: the heap holds the events themselves (no key tuple,
    no boxed key per event when compiled)."""

    __slots__ = ("args", "callback", "cancelled", "prio", "seq", "time_ns")

    def __init__(
        self,
        time_ns: int,
        callback: Callable[..., Any],
        args: tuple[Any, ...],
        prio: int = 0,
        seq: int = 0,
    ) -> None:
        self.time_ns = time_ns
        self.callback = callback
        self.args = args
        self.cancelled = False
        self.prio = prio
        self.seq = seq

    def __lt__(self, other: Event) -> bool:
        if self.time_ns != other.time_ns:
            return self.time_ns < other.time_ns
        if self.prio != other.prio:
            return self.prio < other.prio
        return self.seq < other.seq

    def cancel(self) -> None:
        self.cancelled = True


def _before(a: Event, b: Event) -> bool:
    """``a < b``, as ``Event.__lt__``: a direct native call where ``heapq`` compares
    through the generic rich comparison."""
    if a.time_ns != b.time_ns:
        return a.time_ns < b.time_ns
    if a.prio != b.prio:
        return a.prio < b.prio
    return a.seq < b.seq


# The heap: ``heapq``'s algorithm (the same sifts), compiled with the events' own
# comparison. ``heapq`` called ``Event.__lt__`` through the rich comparison protocol, a
# few hundred thousand generic calls per simulated second of a fleet. Keys are unique
# (``seq``), so any correct heap pops the same order: tests/sim/test_events.py checks it
# against ``heapq`` under random pushes and pops.
def _heappush(heap: list[Event], ev: Event) -> None:
    heap.append(ev)
    _rise(heap, len(heap) - 1, ev)


def _heappop(heap: list[Event]) -> Event:
    last = heap.pop()
    if not heap:
        return last
    top = heap[0]
    n: i64 = len(heap)
    # heapq's ``_siftup``: the hole goes down to a leaf along the smaller children, then
    # the last event rises from there (fewer comparisons than stopping on the way down).
    pos: i64 = 0
    child: i64 = 1
    right: i64
    while child < n:
        right = child + 1
        if right < n and not _before(heap[child], heap[right]):
            child = right
        heap[pos] = heap[child]
        pos = child
        child = 2 * pos + 1
    _rise(heap, pos, last)
    return top


def _rise(heap: list[Event], pos: i64, ev: Event) -> None:
    """Put ``ev`` in the hole at ``pos``, moving it up past later parents (heapq's
    ``_siftdown``; native 64-bit indexes: no tagged-integer arithmetic per step)."""
    up: i64
    while pos > 0:
        up = (pos - 1) >> 1
        parent = heap[up]
        if not _before(ev, parent):
            break
        heap[pos] = parent
        pos = up
    heap[pos] = ev


class SlotOwner:
    """Something with one pending event at a time, kept in a :class:`Slot` of the loop:
    the loop calls ``on_slot(kind, arg)`` with what was set (a direct method call when
    compiled: no bound method, no argument tuple)."""

    def on_slot(self, kind: int, arg: object) -> None:
        raise NotImplementedError


class Slot:
    """One owner's pending event: ``time_ns`` (-1: none), its priority and ``seq`` (taken
    from the loop's counter like every event), and what to call back with."""

    __slots__ = ("arg", "kind", "owner", "prio", "seq", "time_ns")

    def __init__(self, owner: SlotOwner) -> None:
        self.owner = owner
        self.time_ns = -1
        self.prio = 0
        self.seq = 0
        self.kind = 0
        self.arg: object = None


class EventLoop:
    """Runs callbacks in ``(time_ns, priority, seq)`` order; time only moves forward.

    Besides the heap there are the *slots* (``new_slot``): each holds its owner's single
    pending event (a channel's next access, or the end of the exchange on the air),
    ordered exactly as if it were in the heap (it takes a ``seq`` like every event) but
    costing no heap operation and no :class:`Event`; it is replaced instead of cancelled.
    The loop keeps the earliest pending slot at hand (``_best``), found again among the
    few slots (one per channel) whenever it may have changed.
    """

    def __init__(self) -> None:
        self.now_ns = 0
        self.events_processed = 0
        self._heap: list[Event] = []
        self._seq = 0
        self._slots: list[Slot] = []
        #: The pending slot that runs first, or None if no slot is pending.
        self._best: Slot | None = None

    def call_at(
        self, time_ns: int, priority: int, callback: Callable[..., Any], *args: Any
    ) -> Event:
        return self.schedule(time_ns, priority, callback, args)

    def schedule(
        self, time_ns: int, priority: int, callback: Callable[..., Any], args: tuple[Any, ...]
    ) -> Event:
        """:meth:`call_at` with the arguments as a tuple: what a caller with ``*args`` of
        its own passes on (compiled, a native call; forwarding ``*args`` is a generic one
        that builds the arguments twice)."""
        if time_ns < self.now_ns:
            raise InvariantError(f"event scheduled in the past: {time_ns} < now {self.now_ns}")
        self._seq += 1
        ev = Event(time_ns, callback, args, priority, self._seq)
        _heappush(self._heap, ev)
        return ev

    def new_slot(self, owner: SlotOwner) -> Slot:
        """A slot of ``owner``'s (empty)."""
        slot = Slot(owner)
        self._slots.append(slot)
        return slot

    def set_slot(self, slot: Slot, time_ns: int, priority: int, kind: int, arg: object) -> None:
        """Schedule ``slot.owner.on_slot(kind, arg)`` at ``time_ns``, replacing the slot's
        pending event (if any)."""
        if time_ns < self.now_ns:
            raise InvariantError(f"event scheduled in the past: {time_ns} < now {self.now_ns}")
        self._seq += 1
        slot.time_ns = time_ns
        slot.prio = priority
        slot.seq = self._seq
        slot.kind = kind
        slot.arg = arg
        best = self._best
        if best is None:
            self._best = slot
        elif best is slot:
            self._find_best()
        elif time_ns < best.time_ns or (time_ns == best.time_ns and priority < best.prio):
            self._best = slot  # (its seq is the newest: a tie in priority leaves ``best``)

    def clear_slot(self, slot: Slot) -> None:
        slot.time_ns = -1
        slot.arg = None
        if self._best is slot:
            self._find_best()

    def _find_best(self) -> None:
        best: Slot | None = None
        for s in self._slots:
            t = s.time_ns
            if t >= 0 and (
                best is None
                or t < best.time_ns
                or (
                    t == best.time_ns
                    and (s.prio < best.prio or (s.prio == best.prio and s.seq < best.seq))
                )
            ):
                best = s
        self._best = best

    def next_time(self) -> int:
        """The time of the earliest pending event (cancelled ones included: a caller
        waking for it finds nothing to do), or -1 if none is pending."""
        t = self._heap[0].time_ns if self._heap else -1
        best = self._best
        if best is not None and (t < 0 or best.time_ns < t):
            t = best.time_ns
        return t

    def run(self, until_ns: int, on_progress: Callable[[int], None] | None = None) -> None:
        """Process events with time <= ``until_ns``; then set ``now_ns = until_ns``.

        A horizon earlier than ``now_ns`` is refused: time never goes back.
        """
        if until_ns < self.now_ns:
            raise InvariantError(f"run(until={until_ns}) is before now ({self.now_ns})")
        heap = self._heap
        progress_step = max(until_ns // 200, 1)
        next_progress = progress_step
        processed = 0
        top: Event | None
        while True:
            slot = self._best
            if heap:
                top = heap[0]
                t = top.time_ns
                if slot is not None:
                    st = slot.time_ns
                    if st < t or (
                        st == t
                        and (slot.prio < top.prio or (slot.prio == top.prio and slot.seq < top.seq))
                    ):
                        t = st
                        top = None
                    else:
                        slot = None
            elif slot is not None:
                t = slot.time_ns
                top = None
            else:
                break
            if t > until_ns:
                break
            if slot is not None:
                kind = slot.kind
                arg = slot.arg
                slot.time_ns = -1
                slot.arg = None
                self._find_best()
                self.now_ns = t
                slot.owner.on_slot(kind, arg)
            else:
                assert top is not None
                _heappop(heap)
                ev = top
                if ev.cancelled:
                    continue
                self.now_ns = t
                ev.callback(*ev.args)
            processed += 1
            if on_progress is not None and t >= next_progress:
                on_progress(t)
                next_progress = t + progress_step
        self.events_processed += processed
        self.now_ns = until_ns
        if on_progress is not None:
            on_progress(until_ns)
