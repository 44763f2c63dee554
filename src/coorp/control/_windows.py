"""Protection windows (paper §IV-B): when a robot's LS sends must find the NIC idle.

This module owns the merge rule (take the earliest interval, absorb every later one
that starts inside it, extend the end by a margin) and the :class:`ProtectionPlanner`,
which keeps one :class:`~coorp.control.SendTimeModel` per LS flow of a robot and
answers "which protection window (PW) contains now, or comes next?".
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from coorp._errors import UsageError
from coorp.control._errors import UnknownFlowError
from coorp.control._interval import Interval
from coorp.control._timemodel import SendTimeModel

__all__ = ["ProtectionPlanner", "WindowSource", "first_window", "merge_intervals"]

DEFAULT_MARGIN_NS = 2_000_000

#: Cap on how many successive intervals one window may absorb. Only reached when the
#: intervals tile time (no gap at all); the window then ends early and the next query,
#: made at its end, continues it, so protection is never lost.
MAX_CHAIN = 256


class WindowSource(Protocol):
    """Anything that says which protected window contains ``now_ns`` or comes next."""

    def next_window(self, now_ns: int) -> Interval | None: ...


def merge_intervals(intervals: Iterable[Interval], margin_ns: int = 0) -> list[Interval]:
    """Merge closed intervals into protection windows.

    Sorted by start; the earliest opens a window ``[t1, t2 + margin]``; every later
    interval starting inside the window (``t1 ≤ t1' ≤ end``) is absorbed and extends
    the end to ``max(end, t2' + margin)``; the first one starting after the end opens
    the next window. The result is sorted, pairwise disjoint, and covers every input.
    """
    if margin_ns < 0:
        raise UsageError(f"margin_ns={margin_ns}: must be >= 0")
    items = sorted(_checked(i) for i in intervals)
    merged: list[Interval] = []
    for start, end in items:
        if merged and start <= merged[-1].end_ns:
            last = merged[-1]
            merged[-1] = Interval(last.start_ns, max(last.end_ns, end + margin_ns))
        else:
            merged.append(Interval(start, end + margin_ns))
    return merged


def first_window(
    sources: Sequence[Callable[[int], Interval | None]], now_ns: int, margin_ns: int = 0
) -> Interval | None:
    """The merged window that contains ``now_ns`` or starts next.

    Each source maps ``t`` to its earliest interval ending at or after ``t`` (its
    following one is found by asking again just after that end). Sources are asked
    from ``now_ns − margin_ns`` so a window whose margin tail covers ``now_ns`` is
    still found. Later intervals of every source are absorbed for as long as they
    start inside the window, so the answer is the whole merged PW, not a prefix. When
    ``now_ns`` is already inside a window, its start may be reported later than where
    the merge really began (intervals over before ``now_ns`` are not revisited), but
    never after ``now_ns``.
    """
    return _first_window(sources, now_ns, margin_ns)[0]


def _first_window(
    sources: Sequence[Callable[[int], Interval | None]], now_ns: int, margin_ns: int
) -> tuple[Interval | None, bool]:
    """:func:`first_window`, and whether the chain stopped at ``MAX_CHAIN`` (the
    window's end is then where the cap cut it, not where the intervals do)."""
    heap: list[tuple[Interval, int]] = []
    for i, source in enumerate(sources):
        interval = source(now_ns - margin_ns)
        if interval is not None:
            heap.append((_checked(interval), i))
    if not heap:
        return None, False
    heapq.heapify(heap)
    (start, end), i = heapq.heappop(heap)
    window_end = end + margin_ns
    for _ in range(MAX_CHAIN):
        following = sources[i](end + 1)
        if following is not None:
            heapq.heappush(heap, (_checked(following), i))
        if not heap or heap[0][0].start_ns > window_end:
            return Interval(start, window_end), False
        (_, end), i = heapq.heappop(heap)
        window_end = max(window_end, end + margin_ns)
    return Interval(start, window_end), True


_FOREVER_NS = 2**63 - 1


class ProtectionPlanner:
    """The preemption controller of one robot: a time model per LS flow, merged PWs.

    ``model_kwargs`` are passed to every flow's :class:`SendTimeModel`. A flow exists
    from its first observed send; flows without a fitted model yet contribute
    nothing, so before any model is ready :meth:`next_window` returns None and the
    gate lets bulk traffic through (nothing is known to protect yet).
    """

    def __init__(self, *, margin_ns: int = DEFAULT_MARGIN_NS, **model_kwargs: Any) -> None:
        if margin_ns < 0:
            raise UsageError(f"margin_ns={margin_ns}: must be >= 0 (PW extension after t2)")
        try:
            SendTimeModel(**model_kwargs)  # fail now, not at the first send of some flow
        except TypeError as exc:
            raise UsageError(
                f"model_kwargs={sorted(model_kwargs)}: {exc}; allowed: history, confidence, "
                "refit_interval_ns, min_samples, miss_sigmas, min_sigma_ns, jump_after, "
                "idle_periods, window, residual_history, fit, protect_tail"
            ) from None
        self._margin_ns = margin_ns
        self._model_kwargs = dict(model_kwargs)
        self._models: dict[str, SendTimeModel] = {}
        # flow -> (its next send's instant at the earliest, whether exactly then, the
        # least time from any instant to it while the hint stands).
        self._hints: dict[str, tuple[int, bool, int]] = {}
        # flow -> since when it is protected through its next send (see resume).
        self._resumes: dict[str, int] = {}
        # The hinted sources with a moving bound (min_lead_ns > 0): see next_window.
        self._moving: list[_Hinted] = []
        # (models version, valid from, valid through, answer): see next_window.
        self._version = 0
        self._cached: tuple[int, int, int, Interval | None] | None = None
        # Whether the cached window may answer for instants inside it (see next_window).
        self._inside_ok = False
        # The sources of the windows (a predict per flow, hinted or not) and the
        # version they were made at.
        self._sources: list[Callable[[int], Interval | None]] = []
        self._sources_version = -1

    @property
    def margin_ns(self) -> int:
        return self._margin_ns

    @property
    def flows(self) -> tuple[str, ...]:
        return tuple(self._models)

    def observe(self, flow: str, send_ns: int) -> None:
        """Record an LS send of ``flow`` (creates the flow's model on first use)."""
        model = self._models.get(flow)
        if model is None:
            model = self._models[flow] = SendTimeModel(**self._model_kwargs)
        model.observe(send_ns)
        self._hints.pop(flow, None)
        self._resumes.pop(flow, None)
        self._version += 1

    def expect(self, flow: str, at_ns: int, *, exact: bool = False, min_lead_ns: int = 0) -> None:
        """The application's word on ``flow``'s next send: not before ``at_ns``, or
        (``exact``) at that instant. Valid until the flow's next :meth:`observe` or
        :meth:`expect`. ``min_lead_ns`` (not with ``exact``): nor, at any later instant
        ``now`` while the hint stands, before ``now + min_lead_ns`` (a moving bound).

        The time model only sees sends; an application often knows more. The leader
        of an MPC loop, say, sends its controls ``inference`` after the last
        perception arrives: while perceptions are missing its next send is not before
        ``now + inference``, and once the last one is in it is exactly then.

        * A lower bound moves the model's interval for that send to start no earlier
          than ``at_ns`` (and end no earlier); the model still says how late the send
          may come. Without a prediction (no fitted model yet) it protects
          ``[at_ns, at_ns]``.
        * An exact instant replaces the interval by ``[at_ns, at_ns]`` (extended by
          the margin like any other); once ``at_ns`` has passed without the send, the
          model predicts the sends after it.
        * A moving bound: the leader of an MPC loop cannot send its controls while
          perceptions are missing, and each that comes in is at least ``inference``
          before them, so the controls are never nearer than ``inference`` until the
          last one is in. Hinted once, at a perception's arrival, the bound stayed
          there while the later perceptions were late, and the window opened.
        """
        if min_lead_ns < 0 or (exact and min_lead_ns):
            raise UsageError(f"min_lead_ns={min_lead_ns}: must be >= 0, and 0 with exact=True")
        self._hints[flow] = (at_ns, exact, min_lead_ns)
        self._resumes.pop(flow, None)
        self._version += 1

    def resume(self, flow: str, since_ns: int) -> None:
        """After a gap in what this robot saw of ``flow`` that says nothing of its phase
        (a hand-over: what it sampled off the air never left), protect from
        ``since_ns`` through the model's interval of the flow's first send due then,
        instead of trusting that interval's early edge alone: the first send after the
        gap is protected wherever it lands before the interval's end. Valid until the
        flow's next :meth:`observe` or :meth:`expect`; later sends get the model's
        intervals. A flow with no fitted model yet is not protected (as before: nothing
        is known of it), and neither is one the model gave up on (``idle_periods``)."""
        if flow in self._models:
            self._hints.pop(flow, None)
            self._resumes[flow] = since_ns
            self._version += 1

    def model(self, flow: str) -> SendTimeModel:
        try:
            return self._models[flow]
        except KeyError:
            raise UnknownFlowError(flow) from None

    def forget(self, flow: str) -> None:
        """Stop protecting ``flow`` (unknown flows are ignored)."""
        self._models.pop(flow, None)
        self._hints.pop(flow, None)
        self._resumes.pop(flow, None)
        self._version += 1

    def next_window(self, now_ns: int) -> Interval | None:
        """The PW ``[t1, t2]`` containing ``now_ns``, else the next one, else None.

        The gate asks this for every bulk packet, so the answer is reused while it
        cannot change: with no new observation, every flow's chosen interval ends at
        or after ``t1``, so for any later ``now <= t1`` each flow predicts the same
        interval (and a flow with no prediction still has none). Inside the window
        (``t1 <= now <= t2``) it is reused too, when no flow has a hint and the merge
        was not cut at ``MAX_CHAIN``: asked again, each model would skip only its
        intervals over before ``now − margin`` (a model's next interval only moves
        later as the time asked does), which end the window no later than ``now``, so
        ``t2`` stays and ``t1`` could only move up to ``now`` (a later start that no
        caller inside a window reads). A hint is not monotone in that way: past its
        instant it hands over to the model.
        """
        c = self._cached
        if self._moving and self._sources_version == self._version:
            # A moving bound depends on now itself: only an answer for this very
            # instant is reused (the gate asks several times per instant).
            if c is not None and c[0] == self._version and c[1] == now_ns:
                return c[3]
            for hinted in self._moving:
                hinted.now = now_ns
            c = None
        if c is not None and c[0] == self._version and c[1] <= now_ns:
            if now_ns <= c[2]:
                return c[3]
            inside = c[3]
            if self._inside_ok and inside is not None and now_ns <= inside.end_ns:
                return inside  # inside.start_ns <= c[2] < now_ns
        if self._sources_version != self._version:
            # The sources change only with the models and hints (the version).
            hints, resumes = self._hints, self._resumes
            sources: list[Callable[[int], Interval | None]] = [
                _Resumed(resumes[f], m)
                if f in resumes
                else (m.predict if f not in hints else _Hinted(*hints[f], m))
                for f, m in self._models.items()
            ]
            sources.extend(_Hinted(*hints[f], None) for f in hints if f not in self._models)
            self._moving = [h for h in sources if isinstance(h, _Hinted) and h.min_lead]
            for hinted in self._moving:
                hinted.now = now_ns
            self._sources = sources
            self._sources_version = self._version
        window, cut = _first_window(self._sources, now_ns, self._margin_ns)
        through = window.start_ns if window is not None else _FOREVER_NS
        self._cached = (self._version, now_ns, max(through, now_ns), window)
        self._inside_ok = not cut and not self._hints and not self._resumes
        return window


class _Hinted:
    """A flow's intervals with the application's hint applied (see
    :meth:`ProtectionPlanner.expect`): a source for :func:`first_window`."""

    def __init__(self, at: int, exact: bool, min_lead: int, model: SendTimeModel | None) -> None:
        self.at = at
        self.exact = exact
        self.min_lead = min_lead
        #: The instant the planner is asked about (a moving bound's reference).
        self.now = 0
        self.model = model

    def __call__(self, after_ns: int) -> Interval | None:
        at, model = self.at, self.model
        if self.min_lead:
            at = max(at, self.now + self.min_lead)
        if model is None or (iv := model.predict(after_ns)) is None:
            return Interval(at, at) if at >= after_ns else None
        if not self.exact:
            return Interval(max(iv.start_ns, at), max(iv.end_ns, at))
        if at >= after_ns:
            return Interval(at, at)
        # Past the announced instant: the model's interval for that same send (the
        # next unobserved one) is not protected a second time.
        if iv == model.predict(0):
            return model.predict(iv.end_ns + 1)
        return iv


class _Resumed:
    """A flow's intervals after :meth:`ProtectionPlanner.resume`: the first one due at
    or after ``since`` reaches back to ``since``; the later ones are the model's."""

    def __init__(self, since: int, model: SendTimeModel) -> None:
        self.since = since
        self.model = model

    def __call__(self, after_ns: int) -> Interval | None:
        model = self.model
        first = model.predict(self.since)
        if first is not None and after_ns <= first.end_ns:
            return Interval(min(first.start_ns, self.since), first.end_ns)
        return model.predict(after_ns)


def _checked(interval: Interval) -> Interval:
    start, end = interval
    if start > end:
        raise UsageError(f"interval={tuple(interval)}: start_ns must be <= end_ns")
    # A source's own Interval is returned as it is (no copy per query).
    return interval if isinstance(interval, Interval) else Interval(start, end)
