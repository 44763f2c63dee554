"""The time model of one latency-sensitive flow (paper §IV-B): ``T_k ≈ p·k + q + N(0, σ²)``.

:class:`SendTimeModel` records when a periodic LS flow sends, fits period ``p`` and
offset ``q`` by least squares over the recent sends, takes ``σ`` from the residuals,
and predicts the interval ``[T̂_k − Δ, T̂_k + Δ]`` (``Δ = z(C)·σ``) of the next send.

State is integer nanoseconds; floats live only inside one fit and are rounded back.
The fit is anchored at the newest sample (``k = 0`` there, older sends negative), so
extrapolating with an integer period adds at most half a nanosecond per period since
the last refit.

A phase jump (a late MPC loop delays every later send) starts a new *segment* of the
history. Segments share the period but each has its own offset: the period is fitted
on all recent sends (pooled within-segment least squares), the offset on the newest
segment only. A false alarm (two chance outliers in a row) therefore costs little.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from statistics import NormalDist

from coorp._errors import UsageError
from coorp.control._interval import Interval

__all__ = ["SendTimeModel"]


class SendTimeModel:
    """Least-squares time model of one periodic flow, refitted when it goes stale.

    Before ``min_samples`` sends nothing is predicted. The first fit numbers the sends
    consecutively. Later fits number each send by rounding its distance from the
    previous one in periods (at least one), so skipped sends leave a hole instead of
    bending the line; if every gap is a multiple ``g > 1`` of the period, the numbering
    is divided by ``g`` (the flow slowed down rather than skipping).

    A refit happens when a send misses its nearest prediction by more than
    ``miss_sigmas·σ`` or when ``refit_interval_ns`` has passed since the last fit.
    ``jump_after`` consecutive misses mean the phase jumped: those sends open a new
    segment, and the model is refitted on every send until that segment holds
    ``min_samples`` sends.

    A send consumes its prediction: :meth:`predict` never returns the interval of a
    send index that has already been observed. A flow that fell silent stops being
    protected: nothing is predicted more than ``idle_periods`` periods after its last
    send (it is picked up again, as a phase jump, when it resumes).
    """

    def __init__(
        self,
        *,
        history: int = 32,
        confidence: float = 0.95,
        refit_interval_ns: int = 1_000_000_000,
        min_samples: int = 4,
        miss_sigmas: float = 2.0,
        min_sigma_ns: int = 50_000,
        jump_after: int = 2,
        idle_periods: int = 8,
    ) -> None:
        if min_samples < 3:
            raise UsageError(
                f"min_samples={min_samples}: must be >= 3 (two to fit p and q, one for σ)"
            )
        if history < min_samples:
            raise UsageError(f"history={history}: must be >= min_samples ({min_samples})")
        if not 0.0 < confidence < 1.0:
            raise UsageError(f"confidence={confidence}: must lie strictly between 0 and 1")
        if refit_interval_ns < 1:
            raise UsageError(f"refit_interval_ns={refit_interval_ns}: must be >= 1 nanosecond")
        if not miss_sigmas > 0.0:
            raise UsageError(f"miss_sigmas={miss_sigmas}: must be > 0")
        if min_sigma_ns < 1:
            raise UsageError(f"min_sigma_ns={min_sigma_ns}: must be >= 1 nanosecond")
        if jump_after < 1:
            raise UsageError(f"jump_after={jump_after}: must be >= 1 consecutive miss")
        if idle_periods < 1:
            raise UsageError(f"idle_periods={idle_periods}: must be >= 1 period")
        # (send_ns, segment) pairs, oldest first.
        self._history: deque[tuple[int, int]] = deque(maxlen=history)
        self._segment = 0
        # Two-sided: P(|X| ≤ z·σ) = C, so C = 95% gives z ≈ 1.96 ≈ 2 as in the paper.
        self._z = NormalDist().inv_cdf((1.0 + confidence) / 2.0)
        self._refit_interval_ns = refit_interval_ns
        self._min_samples = min_samples
        self._miss_sigmas = miss_sigmas
        self._min_sigma_ns = min_sigma_ns
        self._jump_after = jump_after
        self._idle_periods = idle_periods
        self._period_ns: int | None = None
        self._offset_ns: int | None = None
        self._sigma_ns: int | None = None
        self._fitted_at_ns = 0
        self._last_index = 0  # index of the newest observed send under the current fit
        self._consecutive_misses = 0
        self.refits = 0
        self.misses = 0

    # -- read-only views ---------------------------------------------------------------------
    @property
    def period_ns(self) -> int | None:
        """Fitted period ``p`` (None before the first fit)."""
        return self._period_ns

    @property
    def offset_ns(self) -> int | None:
        """``q``: predicted time of send ``k = 0``, the newest send at the last fit."""
        return self._offset_ns

    @property
    def sigma_ns(self) -> int | None:
        """Residual standard deviation ``σ``, at least ``min_sigma_ns``."""
        return self._sigma_ns

    @property
    def delta_ns(self) -> int | None:
        """Half-width ``Δ = z(C)·σ`` of every predicted interval."""
        if self._sigma_ns is None:
            return None
        return math.ceil(self._z * self._sigma_ns)

    @property
    def samples(self) -> tuple[int, ...]:
        """The recent sends the next fit will use, oldest first."""
        return tuple(t for t, _ in self._history)

    @property
    def last_send_ns(self) -> int | None:
        return self._history[-1][0] if self._history else None

    # -- observe / predict ---------------------------------------------------------------------
    def observe(self, send_ns: int) -> None:
        """Record one send of the flow; sends must come in non-decreasing time order."""
        last = self.last_send_ns
        if last is not None and send_ns < last:
            raise UsageError(
                f"send_ns={send_ns} is earlier than the previous send ({last}); "
                "a flow's sends must be observed in time order"
            )
        self._history.append((send_ns, self._segment))
        p, q, sigma = self._period_ns, self._offset_ns, self._sigma_ns
        if p is None or q is None or sigma is None:
            if len(self._history) >= self._min_samples:
                self._fit(send_ns, consecutive=True)
            return
        k = _round_div(send_ns - q, p)
        if abs(send_ns - (q + p * k)) > self._miss_sigmas * sigma:
            self.misses += 1
            self._consecutive_misses = self._agreeing_misses(self._consecutive_misses + 1)
            if self._consecutive_misses >= self._jump_after:
                self._start_segment(self._consecutive_misses)
                self._consecutive_misses = 0
            self._fit(send_ns)
            return
        self._consecutive_misses = 0
        self._last_index = max(self._last_index, k)
        young = self._segment_size() < self._min_samples
        if young or send_ns - self._fitted_at_ns >= self._refit_interval_ns:
            self._fit(send_ns)

    def predict(self, after_ns: int) -> Interval | None:
        """The earliest not-yet-observed send interval ``[T̂_k − Δ, T̂_k + Δ]`` ending
        at or after ``after_ns``; None until the model has been fitted."""
        p, q, delta = self._period_ns, self._offset_ns, self.delta_ns
        if p is None or q is None or delta is None:
            return None
        # Smallest k with q + p·k + Δ >= after_ns, and never an index already sent.
        k = max(-((q + delta - after_ns) // p), self._last_index + 1)
        if k - self._last_index > self._idle_periods:
            return None
        centre = q + p * k
        return Interval(centre - delta, centre + delta)

    # -- fitting -------------------------------------------------------------------------------
    def _segment_size(self) -> int:
        return sum(1 for _, seg in self._history if seg == self._segment)

    def _agreeing_misses(self, misses: int) -> int:
        """How many of the newest ``misses`` sends agree on one phase with the newest.

        A chance outlier just before a real jump must not join the new segment, so a
        run of misses counts only while each send lies on the newest one's phase.
        """
        p, sigma = self._period_ns, self._sigma_ns
        assert p is not None and sigma is not None
        newest = self._history[-1][0]
        run = 1
        for i in range(2, min(misses, len(self._history)) + 1):
            gap = newest - self._history[-i][0]
            if abs(gap - p * _round_div(gap, p)) > self._miss_sigmas * sigma:
                break
            run += 1
        return run

    def _start_segment(self, newest: int) -> None:
        self._segment += 1
        for i in range(len(self._history) - newest, len(self._history)):
            self._history[i] = (self._history[i][0], self._segment)

    def _fit(self, now_ns: int, *, consecutive: bool = False) -> None:
        segments: dict[int, list[int]] = {}
        for t, seg in self._history:
            segments.setdefault(seg, []).append(t)
        runs = list(segments.values())
        old_p = self._period_ns
        if consecutive or old_p is None:
            numbered = [list(range(len(run))) for run in runs]
        else:
            numbered = [_number(run, old_p) for run in runs]
            steps = [b - a for ks in numbered for a, b in itertools.pairwise(ks)]
            g = math.gcd(*steps) if steps else 1
            if g > 1:
                numbered = [[k // g for k in ks] for ks in numbered]
        # Pooled within-segment least squares: one slope, one intercept per segment.
        # Times and indices are taken relative to each run's first sample so the floats
        # stay small whatever the absolute clock value.
        sxx = sxy = 0.0
        means: list[tuple[float, float]] = []
        for run, ks in zip(runs, numbered, strict=True):
            k_rel = [float(k - ks[0]) for k in ks]
            t_rel = [float(t - run[0]) for t in run]
            k_mean, t_mean = sum(k_rel) / len(run), sum(t_rel) / len(run)
            means.append((k_mean, t_mean))
            sxx += sum((k - k_mean) ** 2 for k in k_rel)
            sxy += sum((k - k_mean) * (t - t_mean) for k, t in zip(k_rel, t_rel, strict=True))
        if sxx > 0.0:
            slope = sxy / sxx
        elif old_p is not None:
            slope = float(old_p)  # only single-send segments: nothing new about p
        else:
            return
        p = round(slope)
        if p < 1:
            # Sends bunched at one instant are not periodic: keep the previous model.
            return
        ssr = 0.0
        for run, ks, (k_mean, t_mean) in zip(runs, numbered, means, strict=True):
            for k, t in zip(ks, run, strict=True):
                ssr += ((t - run[0]) - t_mean - slope * ((k - ks[0]) - k_mean)) ** 2
        dof = len(self._history) - len(runs) - 1
        if dof > 0:
            sigma = round(math.sqrt(ssr / dof))
        elif self._sigma_ns is not None:
            sigma = self._sigma_ns
        else:
            sigma = self._min_sigma_ns
        run, ks = runs[-1], numbered[-1]
        k_mean, t_mean = means[-1]
        # Offset at the newest send's index, from the newest segment's own line.
        q = run[0] + round(t_mean + slope * ((ks[-1] - ks[0]) - k_mean))
        self._period_ns = p
        self._offset_ns = q
        self._sigma_ns = max(sigma, self._min_sigma_ns)
        self._fitted_at_ns = now_ns
        # The newest send is index 0 of the new fit: its interval is consumed.
        self._last_index = _round_div(run[-1] - q, p)
        self.refits += 1


def _number(samples: list[int], period_ns: int) -> list[int]:
    """Send indices from the gaps between sends: a gap of about m periods is m steps
    (at least one), so a skipped send leaves a hole instead of bending the fit."""
    indices = [0]
    for prev, cur in itertools.pairwise(samples):
        indices.append(indices[-1] + max(1, _round_div(cur - prev, period_ns)))
    return indices


def _round_div(num: int, den: int) -> int:
    """``round(num / den)`` in exact integers, halves rounded up (den > 0)."""
    return (2 * num + den) // (2 * den)
