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
        self._samples_per_depth = samples_per_depth
        self._percentile = percentile
        self._default_ns = default_ns
        self._rings: dict[int, deque[int]] = {}
        # The same samples in order, kept in step with the rings: a percentile is then
        # an index, not a sort per query.
        self._sorted: dict[int, list[int]] = {}
        p = Fraction(percentile) / 100
        self._p_num, self._p_den = p.numerator, p.denominator
        # query() runs on every dequeue decision; recording is rarer, so cache answers.
        self._cache: dict[int, int] = {}
        self._fallbacks: set[int] = set()
        edges = tuple(lead_edges_ns)
        if any(e <= 0 for e in edges) or any(a >= b for a, b in pairwise(edges)):
            raise UsageError(
                f"lead_edges_ns={edges}: must be strictly increasing and > 0 nanoseconds"
            )
        self._edges = edges
        if max_age_ns is not None and max_age_ns < 1:
            raise UsageError(f"max_age_ns={max_age_ns}: must be >= 1 nanosecond or None")
        self._max_age = max_age_ns
        if min_per_packet_ns is not None and min_per_packet_ns < 0:
            raise UsageError(
                f"min_per_packet_ns={min_per_packet_ns}: must be >= 0 nanoseconds or None"
            )
        self._floor = min_per_packet_ns
        # Ageing: when each sample of a depth was recorded (in step with its ring), and
        # every sample's (time, depth) in recording order.
        self._times: dict[int, deque[int]] = {}
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

    @property
    def percentile(self) -> float:
        return self._percentile

    @property
    def default_ns(self) -> int:
        return self._default_ns

    @property
    def min_per_packet_ns(self) -> int | None:
        return self._floor

    @property
    def lead_edges_ns(self) -> tuple[int, ...]:
        return self._edges

    def _bucket(self, lead_ns: int | None) -> CompletionTimeTable | None:
        if lead_ns is None or not self._edges:
            return None
        return self._by_lead[bisect_right(self._edges, lead_ns)]

    def samples(self, depth: int) -> tuple[int, ...]:
        """The ring of ``CTT[depth]`` (after clamping), oldest first."""
        ring = self._rings.get(self._clamp(depth))
        return tuple(ring) if ring is not None else ()

    @property
    def max_age_ns(self) -> int | None:
        return self._max_age

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
        if duration_ns < 0:
            raise UsageError(f"duration_ns={duration_ns}: completion times must be >= 0")
        if self._max_age is not None and at_ns is None:
            raise UsageError("at_ns is required: this table ages its samples (max_age_ns)")
        bucket = self._bucket(lead_ns)
        if bucket is not None:
            bucket.record(depth, duration_ns, at_ns=at_ns)
        d = self._clamp(depth)
        ring = self._rings.get(d)
        if ring is None:
            ring = self._rings[d] = deque(maxlen=self._samples_per_depth)
            self._sorted[d] = []
            self._times[d] = deque(maxlen=self._samples_per_depth)
        ordered = self._sorted[d]
        if len(ring) == ring.maxlen:
            del ordered[bisect_left(ordered, ring[0])]  # the sample append() evicts
        ring.append(duration_ns)
        insort(ordered, duration_ns)
        if self._max_age is not None:
            assert at_ns is not None
            self._times[d].append(at_ns)
            self._born.append((at_ns, d))
        # Only this depth's answer and fallback answers (depths with no ring, which
        # borrow from neighbours) can change; sampled depths keep their cache.
        self._cache.pop(d, None)
        if self._fallbacks:
            for k in self._fallbacks:
                self._cache.pop(k, None)
            self._fallbacks.clear()

    def query(self, depth: int, lead_ns: int | None = None, *, now_ns: int | None = None) -> int:
        """``percentile(CTT[depth], p_prot)`` in ns, rounded up; see the class docstring
        for depths without samples, ``lead_ns`` and ``now_ns``."""
        if now_ns is not None and self._max_age is not None:
            self._expire(now_ns - self._max_age)
        bucket = self._bucket(lead_ns)
        if bucket is not None:
            if now_ns is not None and self._max_age is not None:
                bucket._expire(now_ns - self._max_age)
            if bucket._rings:
                return bucket.query(depth)
        d = self._clamp(depth)
        cached = self._cache.get(d)
        if cached is None:
            cached = self._cache[d] = self._compute(d)
            if d not in self._rings:
                self._fallbacks.add(d)
        return cached

    def _expire(self, before_ns: int) -> None:
        """Forget every sample recorded before ``before_ns``."""
        born = self._born
        while born and born[0][0] < before_ns:
            t, d = born.popleft()
            times = self._times.get(d)
            if not times or times[0] != t:
                continue  # already pushed out of its ring by newer samples
            times.popleft()
            ring = self._rings[d]
            ordered = self._sorted[d]
            del ordered[bisect_left(ordered, ring.popleft())]
            if not ring:
                del self._rings[d], self._sorted[d], self._times[d]
                self._cache.clear()  # every fallback may have leaned on this depth
                self._fallbacks.clear()
            else:
                self._cache.pop(d, None)
                for k in self._fallbacks:
                    self._cache.pop(k, None)
                self._fallbacks.clear()

    def _compute(self, d: int) -> int:
        ordered = self._sorted.get(d)
        if ordered:
            return _percentile_ceil(ordered, self._p_num, self._p_den)
        deeper = [k for k in self._rings if k > d]
        shallower = [k for k in self._rings if k < d]
        if not shallower:
            return self.query(min(deeper)) if deeper else (d + 1) * self._default_ns
        m = max(shallower)
        at_m = self.query(m)
        scaled = -(-at_m * (d + 1) // (m + 1))
        if deeper:
            scaled = min(scaled, self.query(min(deeper)))
        if self._floor is not None:
            return max(scaled, at_m + (d - m) * self._floor)
        return max(scaled, at_m)

    def _clamp(self, depth: int) -> int:
        if depth < 0:
            raise UsageError(f"depth={depth}: queue depths must be >= 0")
        return min(depth, self._max_depth)


def _percentile_ceil(values: list[int], p_num: int, p_den: int) -> int:
    # numpy.percentile's default ("linear") rule: interpolate between order statistics
    # at rank (n − 1)·P/100, P/100 = p_num/p_den exactly. Integer arithmetic, rounded
    # up, so the answer never undercuts the true percentile by a float rounding error.
    num = (len(values) - 1) * p_num
    den = p_den
    lo = num // den
    hi = min(lo + 1, len(values) - 1)
    rest = num - lo * den
    return values[lo] + -((-(values[hi] - values[lo]) * rest) // den)
