"""The event loop: a heap of callbacks keyed ``(time_ns, priority, seq)``.

Ties are broken first by priority (lower runs first) and then by insertion order, so a
run is a pure function of the scenario and the seed. Cancellation is lazy: a cancelled
event stays in the heap and is skipped when popped.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from coorp._errors import InvariantError

__all__ = ["PRIO_ACCESS", "PRIO_CONTROL", "PRIO_MEDIUM", "PRIO_TRAFFIC", "Event", "EventLoop"]

#: The end of a medium exchange is processed before anything else at the same instant.
PRIO_MEDIUM = 0
#: Policy timers (pause/resume, permits).
PRIO_CONTROL = 1
#: Traffic arrivals.
PRIO_TRAFFIC = 2
#: Channel access runs last, so every arrival at the same instant can contend.
PRIO_ACCESS = 3


class Event:
    """A scheduled callback; ``cancel()`` makes the loop skip it."""

    __slots__ = ("args", "callback", "cancelled", "time_ns")

    def __init__(self, time_ns: int, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.time_ns = time_ns
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class EventLoop:
    """Runs callbacks in ``(time_ns, priority, seq)`` order; time only moves forward.

    Besides the heap there is one *slot* for the channel's single pending event (the next
    access, or the end of the exchange on the air): it is ordered exactly as if it were
    in the heap (it takes a ``seq`` like every event) but costs no heap operation and no
    :class:`Event`, and it is replaced instead of cancelled.
    """

    def __init__(self) -> None:
        self.now_ns = 0
        self.events_processed = 0
        self._heap: list[tuple[int, int, int, Event]] = []
        self._seq = 0
        self.slot_time = -1  # -1: the slot is empty
        self._slot_prio = 0
        self._slot_seq = 0
        self._slot_cb: Callable[..., Any] | None = None
        self._slot_args: tuple[Any, ...] = ()

    def call_at(
        self, time_ns: int, priority: int, callback: Callable[..., Any], *args: Any
    ) -> Event:
        if time_ns < self.now_ns:
            raise InvariantError(f"event scheduled in the past: {time_ns} < now {self.now_ns}")
        ev = Event(time_ns, callback, args)
        self._seq += 1
        heapq.heappush(self._heap, (time_ns, priority, self._seq, ev))
        return ev

    def set_slot(
        self, time_ns: int, priority: int, callback: Callable[..., Any], *args: Any
    ) -> None:
        """Schedule the slot's event, replacing the one it held (if any)."""
        if time_ns < self.now_ns:
            raise InvariantError(f"event scheduled in the past: {time_ns} < now {self.now_ns}")
        self._seq += 1
        self.slot_time = time_ns
        self._slot_prio = priority
        self._slot_seq = self._seq
        self._slot_cb = callback
        self._slot_args = args

    def clear_slot(self) -> None:
        self.slot_time = -1
        self._slot_cb = None
        self._slot_args = ()

    def next_time(self) -> int:
        """The time of the earliest pending event (cancelled ones included: a caller
        waking for it finds nothing to do), or -1 if none is pending."""
        t = self._heap[0][0] if self._heap else -1
        st = self.slot_time
        if st >= 0 and (t < 0 or st < t):
            t = st
        return t

    def run(self, until_ns: int, on_progress: Callable[[int], None] | None = None) -> None:
        """Process events with time <= ``until_ns``; then set ``now_ns = until_ns``.

        A horizon earlier than ``now_ns`` is refused: time never goes back.
        """
        if until_ns < self.now_ns:
            raise InvariantError(f"run(until={until_ns}) is before now ({self.now_ns})")
        heap = self._heap
        pop = heapq.heappop
        progress_step = max(until_ns // 200, 1)
        next_progress = progress_step
        processed = 0
        top: tuple[int, int, int, Event] | None
        while True:
            st = self.slot_time
            if heap:
                top = heap[0]
                t = top[0]
                if st >= 0 and (
                    st < t or (st == t and (self._slot_prio, self._slot_seq) < (top[1], top[2]))
                ):
                    t = st
                    top = None
            elif st >= 0:
                t = st
                top = None
            else:
                break
            if t > until_ns:
                break
            if top is None:
                cb = self._slot_cb
                args = self._slot_args
                self.slot_time = -1
                self._slot_cb = None
                self.now_ns = t
                assert cb is not None
                cb(*args)
            else:
                pop(heap)
                ev = top[3]
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
