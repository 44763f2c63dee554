"""The completion-time table (paper §IV-C, Algorithm 2 lines 11-21).

``CTT[n]`` holds the most recent samples of how long a bulk packet took from being
enqueued to the NIC behind ``n`` others until its completion was reported. The gate
asks for a high percentile of ``CTT[n]`` to decide whether a packet handed to the NIC
now would still be on air when the next LS message arrives.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import deque
from fractions import Fraction
from itertools import pairwise
from typing import cast

from coorp._errors import UsageError

__all__ = ["CompletionTimeTable"]

#: aPPDUMaxTime of VHT (IEEE 802.11-2016 Table 21-28): the longest one packet (an
#: A-MPDU) can occupy the air, the per-packet guess before anything was measured.
DEFAULT_PER_PACKET_NS = 5_484_000


class CompletionTimeTable:
    """Bounded rings of completion times per hardware-queue depth, queried by percentile.

    Depths run from 0 to ``max_depth``; deeper depths are clamped to ``max_depth``
    both when recording and when querying.

    Before ``CTT[n]`` has any sample, :meth:`query` derives an answer from the nearest
    sampled depths, assuming that a packet behind more packets does not finish sooner
    and that each packet ahead adds about the same time:

    1. from the nearest shallower sampled depth ``m``, scaled by depth:
       ``⌈CTT(m)·(n + 1)/(m + 1)⌉`` (the measured time per packet ahead);
    2. but never more than ``CTT`` of the nearest deeper sampled depth (which bounds
       it), and never less than ``CTT(m)``;
    3. only deeper samples: ``CTT`` of the nearest deeper depth;
    4. no sample at all: ``(n + 1)·default_ns``.

    Scaling what was measured (rather than assuming ``default_ns`` per packet, a
    worst case) keeps unmeasured depths admissible when the measured ones say they
    fit, so they get measured. A depth whose guess is still too large is sampled by
    the gate's exploration (:class:`~coorp.control.Gate`).

    **Cost.** Recording is O(1), never a sorted insertion per sample: each depth keeps
    its ring as a circular buffer and, once asked for a high percentile, the few
    largest samples it needs (kept up to date as samples come and go, found again by a
    pass over the ring only when too many of them left); a low percentile sorts the
    ring when asked after a change. :meth:`record_run` records one value at
    consecutive depths (packets enqueued together that took the same time) in one call.

    **Lead conditioning** (``lead_edges_ns``, empty by default: the paper's table).
    How long a packet takes depends on what the air does while it waits, and on a
    team whose LS traffic is periodic that depends on *where in the period* it was
    enqueued: a packet handed to the NIC just after the robot's own window sits
    through the other robots' LS bursts, one handed over just before the next window
    usually does not. The gate's question is always about a packet enqueued
    ``lead_ns`` before the next window, so with edges ``e_1 < … < e_k`` each sample
    is also kept in the sub-table of its lead's bucket (``[0, e_1)``, ``[e_1, e_2)``,
    …, ``[e_k, ∞)``), and :meth:`query` with a ``lead_ns`` answers from that bucket's
    sub-table (same depth rules) once it has any sample, and from the whole table
    before. A query or record without a lead uses the whole table only.

    **Ageing** (``max_age_ns``, None by default: the paper's table). The gate only
    learns at the depths it admits, so a depth whose samples say "too slow" is never
    admitted again and never re-measured: samples from a congested moment (four
    senders, say) hold the last sender back long after the others finished. With
    ``max_age_ns`` every sample is forgotten that long after it was recorded
    (``record(..., at_ns=)``; a ``query(..., now_ns=)`` drops what expired), and a
    depth left without samples falls back to the rules above, i.e. to what the
    depths still measured say.

    **Physical floor** (``min_per_packet_ns``, None by default: the paper's table). The
    depth rules scale a measured answer, which is right for bare completion times but
    not for samples that are not proportional to the queue ahead (a realized sample,
    see :class:`~coorp.control.Gate`, subtracts how late the LS send came, and is often
    0 for a shallow queue): scaling 0 gives 0 at every deeper depth, and the gate then
    admits a full ring. With a floor, a depth without samples is never answered below
    the nearest shallower measured answer plus ``min_per_packet_ns`` per packet
    between them, whatever the deeper depths say (each packet ahead occupies the air
    for at least its own transmission).
    """

    def __init__(
        self,
        *,
        max_depth: int = 256,
        samples_per_depth: int = 64,
        percentile: float = 95.0,
        default_ns: int = DEFAULT_PER_PACKET_NS,
        lead_edges_ns: tuple[int, ...] = (),
        max_age_ns: int | None = None,
        min_per_packet_ns: int | None = None,
    ) -> None:
        if max_depth < 0:
            raise UsageError(f"max_depth={max_depth}: must be >= 0 (hardware-queue depth)")
        if samples_per_depth < 1:
            raise UsageError(f"samples_per_depth={samples_per_depth}: must be >= 1")
        if not 0.0 <= percentile <= 100.0:
            raise UsageError(f"percentile={percentile}: must lie in [0, 100]")
        if default_ns < 1:
            raise UsageError(f"default_ns={default_ns}: must be >= 1 nanosecond")
        self._max_depth = max_depth
        self._size = samples_per_depth
        self._percentile = percentile
        self._default_ns = default_ns
        # One ring per depth, made when the depth is first recorded or asked.
        self._rings: list[_Ring | None] = [None] * (max_depth + 1)
        self._sampled = 0  # depths holding at least one sample
        # Those depths, ascending: where a depth without samples finds its neighbours.
        self._depths: list[int] = []
        p = Fraction(percentile) / 100
        self._p_num, self._p_den = p.numerator, p.denominator
        # A high percentile needs only the ring's k largest samples, k at most ``_need``
        # at any fill; a ring asked for one keeps its largest samples (up to ``_keep``:
        # some slack, so that one leaving rarely leaves fewer than needed). A low
        # percentile (more needed than _SELECT_MAX): the ring is sorted when asked.
        self._need = max(
            n - (n - 1) * self._p_num // self._p_den for n in range(1, samples_per_depth + 1)
        )
        self._keep = self._need + _SLACK if self._need <= _SELECT_MAX else 0
        # Depths without samples borrow their answer from their neighbours: any record
        # may change those answers.
        self._fallbacks: list[_Ring] = []
        edges = tuple(lead_edges_ns)
        if any(e <= 0 for e in edges) or any(a >= b for a, b in pairwise(edges)):
            raise UsageError(
                f"lead_edges_ns={edges}: must be strictly increasing and > 0 nanoseconds"
            )
        self._edges = edges
        if max_age_ns is not None and max_age_ns < 1:
            raise UsageError(f"max_age_ns={max_age_ns}: must be >= 1 nanosecond or None")
        self._max_age = max_age_ns if max_age_ns is not None else -1
        if min_per_packet_ns is not None and min_per_packet_ns < 0:
            raise UsageError(
                f"min_per_packet_ns={min_per_packet_ns}: must be >= 0 nanoseconds or None"
            )
        self._floor = min_per_packet_ns if min_per_packet_ns is not None else -1
        # Ageing: every sample's (time, depth) in recording order (the rings keep each
        # sample's time too).
        self._born: deque[tuple[int, int]] = deque()
        self._by_lead: list[CompletionTimeTable] = [
            CompletionTimeTable(
                max_depth=max_depth,
                samples_per_depth=samples_per_depth,
                percentile=percentile,
                default_ns=default_ns,
                max_age_ns=max_age_ns,
                min_per_packet_ns=min_per_packet_ns,
            )
            for _ in range(len(edges) + 1 if edges else 0)
        ]

    @property
    def max_depth(self) -> int:
        return self._max_depth

    def set_percentile(self, percentile: float) -> None:
        """Answer with another percentile from now on (the lead tables too); the samples
        stay, every answer is computed afresh when next asked."""
        if not 0.0 <= percentile <= 100.0:
            raise UsageError(f"percentile={percentile}: must lie in [0, 100]")
        if percentile == self._percentile:
            return
        self._percentile = percentile
        p = Fraction(percentile) / 100
        self._p_num, self._p_den = p.numerator, p.denominator
        self._need = max(n - (n - 1) * self._p_num // self._p_den for n in range(1, self._size + 1))
        self._keep = self._need + _SLACK if self._need <= _SELECT_MAX else 0
        for ring in self._rings:
            if ring is not None:
                ring.cache = -1
                ring.top = []
                ring.keeping = False
        self._fallbacks.clear()
        for table in self._by_lead:
            table.set_percentile(percentile)

    @property
    def percentile(self) -> float:
        return self._percentile

    @property
    def default_ns(self) -> int:
        return self._default_ns

    @property
    def min_per_packet_ns(self) -> int | None:
        return self._floor if self._floor >= 0 else None

    @property
    def lead_edges_ns(self) -> tuple[int, ...]:
        return self._edges

    @property
    def max_age_ns(self) -> int | None:
        return self._max_age if self._max_age >= 0 else None

    def _bucket(self, lead_ns: int | None) -> CompletionTimeTable | None:
        if lead_ns is None or not self._edges:
            return None
        return self._by_lead[bisect_right(self._edges, lead_ns)]

    def _ring(self, d: int) -> _Ring:
        """The ring of depth ``d`` (0 <= d <= max_depth), made if need be."""
        ring = self._rings[d]
        if ring is None:
            ring = self._rings[d] = _Ring(self._size, self._max_age >= 0)
        return ring

    def samples(self, depth: int) -> tuple[int, ...]:
        """The ring of ``CTT[depth]`` (after clamping), oldest first."""
        ring = self._ring(self._clamp(depth))
        size = self._size
        return tuple(cast(int, ring.buf[(ring.head + i) % size]) for i in range(ring.n))

    def count(self, depth: int) -> int:
        """How many samples ``CTT[depth]`` (after clamping) holds (0: its answer is
        derived from its neighbours). Samples expire only when a ``query`` with
        ``now_ns`` drops them."""
        ring = self._rings[self._clamp(depth)]
        return ring.n if ring is not None else 0

    def record(
        self,
        depth: int,
        duration_ns: int,
        lead_ns: int | None = None,
        *,
        at_ns: int | None = None,
    ) -> None:
        """Add one completion time for a packet enqueued behind ``depth`` others
        (``lead_ns`` before the next protection window, if one was known), recorded
        at ``at_ns`` (required with ``max_age_ns``)."""
        self.record_run(depth, 1, duration_ns, lead_ns, at_ns=at_ns)

    def record_run(
        self,
        depth: int,
        count: int,
        duration_ns: int,
        lead_ns: int | None = None,
        *,
        at_ns: int | None = None,
    ) -> None:
        """:meth:`record` of ``duration_ns`` at depths ``depth, depth + 1, …,
        depth + count - 1`` in turn (``count`` packets enqueued together, one behind
        the other, that took the same time)."""
        if duration_ns < 0:
            raise UsageError(f"duration_ns={duration_ns}: completion times must be >= 0")
        if self._max_age >= 0 and at_ns is None:
            raise UsageError("at_ns is required: this table ages its samples (max_age_ns)")
        if count < 0:
            raise UsageError(f"count={count}: must be >= 0")
        at = at_ns if at_ns is not None else -1
        # One object shared by every slot it fills (compiled, an int stored in a list
        # is otherwise boxed anew for each slot).
        value: object = duration_ns
        if lead_ns is not None and self._edges:
            bucket = self._by_lead[bisect_right(self._edges, lead_ns)]
            bucket._add(depth, count, value, duration_ns, at)
        self._add(depth, count, value, duration_ns, at)

    def _add(self, depth: int, count: int, value: object, v: int, at: int) -> None:
        """Record ``value`` (the int ``v``) at depths ``depth .. depth + count - 1``."""
        if depth < 0:
            raise UsageError(f"depth={depth}: queue depths must be >= 0")
        rings = self._rings
        size = self._size
        ageing = self._max_age >= 0
        last = self._max_depth
        keep = self._keep
        end = depth + count
        d = depth
        while d < end:
            dd = d if d <= last else last
            d += 1
            ring = rings[dd]
            if ring is None:
                ring = rings[dd] = _Ring(size, ageing)
            buf = ring.buf
            if not buf:  # a ring made to hold an answer only
                buf = ring.buf = [0] * size
                if ageing:
                    ring.times = [0] * size
            prev = ring.n  # samples before this one (once the oldest has left)
            if prev < size:
                idx = ring.head + prev
                if idx >= size:
                    idx -= size
                ring.n = prev + 1
                if prev == 0:
                    self._sampled += 1
                    insort(self._depths, dd)
            else:  # full: the newest sample takes the oldest one's place
                idx = ring.head
                ring.head = idx + 1 if idx + 1 < size else 0
                prev -= 1
                if ring.keeping:
                    old = cast(int, buf[idx])
                    if old >= ring.top0:  # one of the largest leaves
                        self._leave(ring, old, prev)
            buf[idx] = value
            if ring.keeping:
                # ``top`` holds the largest len(top) of the ``prev`` samples before
                # this one; every other sample is <= top[0].
                top = ring.top
                if v >= ring.top0 or len(top) == prev:
                    _insert(top, value)
                    if len(top) > keep:
                        del top[0]
                    ring.top0 = cast(int, top[0])
            if ageing:
                ring.times[idx] = at
                self._born.append((at, dd))
            # Only this depth's answer and fallback answers (depths with no samples,
            # which borrow from neighbours) can change; sampled depths keep theirs.
            ring.cache = -1
        if self._fallbacks:
            for other in self._fallbacks:
                other.cache = -1
            self._fallbacks.clear()

    def _leave(self, ring: _Ring, x: int, left: int) -> None:
        """Sample ``x`` (>= ``ring.top0``) left ``ring``, which holds ``left`` samples
        now: its largest samples lose it, or the ring stops keeping them when too few
        are left known."""
        top = ring.top
        j = len(top) - 1
        while j >= 0 and cast(int, top[j]) != x:
            j -= 1
        if j < 0:
            return
        del top[j]
        if len(top) < self._need and len(top) < left:
            ring.keeping = False  # too few known: found again when asked
        elif top:
            ring.top0 = cast(int, top[0])

    def query(self, depth: int, lead_ns: int | None = None, *, now_ns: int | None = None) -> int:
        """``percentile(CTT[depth], p_prot)`` in ns, rounded up; see the class docstring
        for depths without samples, ``lead_ns`` and ``now_ns``."""
        return self._table(lead_ns, now_ns if now_ns is not None else -1)._answer(depth)

    def _table(self, lead_ns: int | None, now_ns: int) -> CompletionTimeTable:
        """The table that answers for ``lead_ns`` at ``now_ns`` (-1: no time given),
        after forgetting what expired by then: this one or the lead's sub-table."""
        if now_ns >= 0 and self._max_age >= 0:
            self._expire(now_ns - self._max_age)
        if lead_ns is None or not self._edges:
            return self
        bucket = self._by_lead[bisect_right(self._edges, lead_ns)]
        if now_ns >= 0 and self._max_age >= 0:
            bucket._expire(now_ns - self._max_age)
        return bucket if bucket._sampled else self

    def _answer(self, depth: int) -> int:
        """The answer for ``depth`` from this table alone (cached)."""
        if depth < 0:
            raise UsageError(f"depth={depth}: queue depths must be >= 0")
        d = depth if depth <= self._max_depth else self._max_depth
        ring = self._rings[d]
        if ring is None:
            # Nothing recorded here yet: a ring without buffers holds the answer.
            ring = self._rings[d] = _Ring(0, False)
        cached = ring.cache
        if cached < 0:
            cached = ring.cache = self._compute(
                depth if depth <= self._max_depth else self._max_depth
            )
            if not ring.n:
                self._fallbacks.append(ring)
        return cached

    def _expire(self, before_ns: int) -> None:
        """Forget every sample recorded before ``before_ns``."""
        born = self._born
        size = self._size
        while born and born[0][0] < before_ns:
            t, d = born.popleft()
            ring = self._ring(d)
            n = ring.n
            head = ring.head
            if not n or ring.times[head] != t:
                continue  # already pushed out of its ring by newer samples
            if ring.keeping:
                old = cast(int, ring.buf[head])
                if old >= ring.top0:
                    self._leave(ring, old, n - 1)
            ring.head = head + 1 if head + 1 < size else 0
            ring.n = n - 1
            if n == 1:
                ring.head = 0
                self._sampled -= 1
                depths = self._depths
                del depths[bisect_left(depths, d)]
                # Every fallback may have leaned on this depth.
                for other in self._rings:
                    if other is not None:
                        other.cache = -1
                self._fallbacks.clear()
            else:
                ring.cache = -1
                for other in self._fallbacks:
                    other.cache = -1
                self._fallbacks.clear()

    def _compute(self, d: int) -> int:
        n = self._ring(d).n
        if n:
            return self._percentile_of(d, n)
        # The nearest sampled depths on either side (``d`` itself has no sample).
        depths = self._depths
        i = bisect_right(depths, d)
        deeper = depths[i] if i < len(depths) else -1
        shallower = depths[i - 1] if i else -1
        if shallower < 0:
            return self._answer(deeper) if deeper >= 0 else (d + 1) * self._default_ns
        m = shallower
        at_m = self._answer(m)
        scaled = -(-at_m * (d + 1) // (m + 1))
        if deeper >= 0:
            scaled = min(scaled, self._answer(deeper))
        if self._floor >= 0:
            return max(scaled, at_m + (d - m) * self._floor)
        return max(scaled, at_m)

    def _percentile_of(self, d: int, n: int) -> int:
        # numpy.percentile's default ("linear") rule: interpolate between order
        # statistics at rank (n − 1)·P/100, P/100 = p_num/p_den exactly. Integer
        # arithmetic, rounded up, so the answer never undercuts the true percentile by
        # a float rounding error. For a high percentile both order statistics are among
        # the largest samples, which the ring keeps once asked.
        num = (n - 1) * self._p_num
        den = self._p_den
        lo = num // den
        hi = min(lo + 1, n - 1)
        rest = num - lo * den
        ring = self._ring(d)
        if self._keep:
            if not ring.keeping:
                ring.top = self._largest(ring)
                ring.keeping = True
                ring.top0 = cast(int, ring.top[0])
            top = ring.top
            j = len(top) - (n - lo)  # values[lo] is the (n - lo)-th largest
            v_lo = cast(int, top[j])
            v_hi = cast(int, top[j + 1]) if hi > lo else v_lo
        else:
            buf, head, size = ring.buf, ring.head, self._size
            values = sorted(cast(int, buf[(head + i) % size]) for i in range(n))
            v_lo = values[lo]
            v_hi = values[hi]
        return v_lo + -((-(v_hi - v_lo) * rest) // den)

    def _largest(self, ring: _Ring) -> list[object]:
        """The ``_keep`` largest samples of ``ring`` (all if fewer), ascending."""
        k = self._keep
        buf, head, size = ring.buf, ring.head, self._size
        top: list[object] = []
        for i in range(ring.n):
            j = head + i
            x = buf[j if j < size else j - size]
            if len(top) < k:
                _insert(top, x)
            elif cast(int, x) > cast(int, top[0]):
                _insert(top, x)
                del top[0]
        return top

    def _clamp(self, depth: int) -> int:
        if depth < 0:
            raise UsageError(f"depth={depth}: queue depths must be >= 0")
        return min(depth, self._max_depth)


class _Ring:
    """One depth's samples: a circular buffer, the index of the oldest and how many
    there are, their times (ageing only), the answer (-1: not known) and, once asked
    for a high percentile, its largest samples (``keeping``: kept up to date;
    ascending, every other sample <= ``top[0]``, whose value is ``top0``)."""

    def __init__(self, size: int, ageing: bool) -> None:
        # Samples are ints, kept as shared objects (see record_run); size 0: no buffers
        # until the first sample (a depth only asked for borrows its answer).
        self.buf: list[object] = [0] * size
        self.times: list[int] = [0] * size if ageing else []
        self.head = 0
        self.n = 0
        self.cache = -1
        self.top: list[object] = []
        self.top0 = 0
        self.keeping = False


#: Percentiles whose order statistics lie among this many largest samples are kept
#: incrementally; lower ones are found by sorting the ring when asked.
_SELECT_MAX = 8
#: How many more of the largest samples a ring keeps than it needs.
_SLACK = 3


def _insert(top: list[object], x: object) -> None:
    """Insert the int ``x`` into the short ascending list ``top``, keeping it sorted."""
    j = len(top)
    top.append(x)
    xi = cast(int, x)
    while j > 0 and cast(int, top[j - 1]) > xi:
        top[j] = top[j - 1]
        j -= 1
    top[j] = x
