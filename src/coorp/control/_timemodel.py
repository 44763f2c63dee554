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
segment only. A false alarm (two chance outliers in a row) therefore costs little,
and the next fit merges segments that one line explains as well.
"""

from __future__ import annotations

import math
from collections import deque
from statistics import NormalDist

from coorp._errors import UsageError
from coorp.control._interval import Interval
from coorp.control._linefit import IRREGULAR_COST, fit_runs, round_div
from coorp.control._residuals import assign_send, empirical_bounds, robust_scale, theil_sen

__all__ = ["SendTimeModel"]


class SendTimeModel:
    """Least-squares time model of one periodic flow, refitted when it goes stale.

    Before ``min_samples`` sends nothing is predicted. Each fit assigns every recent
    send a slot (its index ``k``) and fits the line through them. Consecutive sends
    in consecutive slots is the default; a numbering with empty slots (skipped
    sends) or shared slots (a burst after a stall) must pay for itself in residuals,
    and each send is placed against the fitted line, not against its predecessor, so
    one late send never shifts the indices of all later ones (see
    :func:`~coorp.control._linefit.fit_runs`). A flow that slowed down or sped up is
    numbered in its new period.

    A refit happens when a send misses its nearest prediction by more than
    ``miss_sigmas·σ`` or when ``refit_interval_ns`` has passed since the last fit.
    ``jump_after`` consecutive misses mean the phase jumped: those sends open a new
    segment, and the model is refitted on every send until that segment holds
    ``min_samples`` sends (segments found to lie on one line after all are merged
    again). A fit on a short history is rough, so the model also refits each time the
    history doubled, and once it is full.

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
        window: str = "gaussian",
        residual_history: int = 64,
        fit: str = "least-squares",
        protect_tail: bool = True,
    ) -> None:
        if min_samples < 3:
            raise UsageError(f"min_samples={min_samples}: must be >= 3 (p, q and σ)")
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
        if fit not in ("least-squares", "robust"):
            raise UsageError(f"fit={fit!r}: allowed: 'least-squares' or 'robust'")
        if window not in ("gaussian", "empirical", "conformal"):
            raise UsageError(f"window={window!r}: allowed: 'gaussian', 'empirical' or 'conformal'")
        if residual_history < _MIN_RESIDUALS:
            raise UsageError(f"residual_history={residual_history}: must be >= {_MIN_RESIDUALS}")
        # (send_ns, segment) pairs, oldest first.
        self._history: deque[tuple[int, int]] = deque(maxlen=history)
        self._segment = 0
        # Kept beside the history, read on every send (a deque read is a generic call
        # when compiled): its length, its newest send, and how many of its newest sends
        # are in the current segment (a suffix of it: see _segment_shorter_than).
        self._n = 0
        self._max_n = history
        self._last_ns = 0
        self._seg_len = 0
        # Two-sided: P(|X| ≤ z·σ) = C, so C = 95% gives z ≈ 1.96 ≈ 2 as in the paper.
        self._z = NormalDist().inv_cdf((1.0 + confidence) / 2.0)
        self._confidence = confidence
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
        self._fitted_samples = 0  # history size at the last fit
        self._period_error = math.inf  # standard error of the last fitted period
        self._last_index = 0  # index of the newest observed send under the current fit
        self._consecutive_misses = 0
        self._offcore = 0  # consecutive sends off the core (conformal windows)
        self.refits = 0
        self.misses = 0
        # window = "empirical": the out-of-sample residuals of recent sends (each send
        # against the prediction made before it came) and the window they give.
        self._empirical = window != "gaussian"
        # window = "conformal": the above from a Theil–Sen line, each send scored against
        # the slot it was predicted for, misses outside the window (see the docs).
        self._conformal = window == "conformal"
        # fit = "robust": offsets from the median, σ from the median absolute residual.
        self._robust = fit == "robust"
        self._residuals: deque[int] = deque(maxlen=residual_history)
        self._bounds: tuple[int, int] | None = None
        # protect_tail=False: predicted intervals stop at the core (±miss_sigmas·σ); the
        # window's tail still scores sends (misses, jumps) but is left to the ring budget.
        self._protect_tail = protect_tail

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
        return self._last_ns if self._n else None

    # -- observe / predict ---------------------------------------------------------------------
    def observe(self, send_ns: int) -> None:
        """Record one send of the flow; sends must come in non-decreasing time order."""
        n = self._n
        if n and send_ns < self._last_ns:
            raise UsageError(
                f"send_ns={send_ns} is earlier than the previous send ({self._last_ns}); "
                "a flow's sends must be observed in time order"
            )
        self._history.append((send_ns, self._segment))
        self._last_ns = send_ns
        if n < self._max_n:
            n = self._n = n + 1
        if self._seg_len < n:
            self._seg_len += 1
        p, q, sigma = self._period_ns, self._offset_ns, self._sigma_ns
        if p is None or q is None or sigma is None:
            if n >= self._min_samples:
                self._fit(send_ns)
            return
        if self._conformal:
            early = round(self._miss_sigmas * sigma)
            k = assign_send(send_ns, q, p, self._last_index + 1, early)
        else:
            k = round_div(send_ns - q, p)
        residual = send_ns - (q + p * k)
        if self._empirical:
            self._residuals.append(residual)
            self._bounds = None
        # Conformal windows: a send inside its window but off the core (beyond
        # miss_sigmas·σ) is a tail send, or a phase jump smaller than the tail; twice
        # jump_after of them in a row on one phase is the jump.
        offcore = self._conformal and abs(residual) > self._miss_sigmas * sigma
        self._offcore = self._agreeing_misses(self._offcore + 1) if offcore else 0
        jumped = self._offcore >= 2 * self._jump_after
        if jumped or self._missed(residual, sigma):
            self.misses += 1
            misses = self._consecutive_misses = self._agreeing_misses(self._consecutive_misses + 1)
            if jumped or misses >= self._jump_after:
                self._start_segment(max(misses, self._offcore))
                self._consecutive_misses = self._offcore = 0
            self._fit(send_ns)
            return
        self._consecutive_misses = 0
        self._last_index = max(self._last_index, k)
        young = self._segment_shorter_than(self._min_samples)
        # A fit on few sends is rough (the period's error shrinks as n^-1.5): refit
        # each time the history has doubled since the last fit, and once it is full.
        size = self._n
        grown = self._fitted_samples < size and (
            size >= 2 * self._fitted_samples or size == self._max_n
        )
        if young or grown or send_ns - self._fitted_at_ns >= self._refit_interval_ns:
            self._fit(send_ns)

    def _missed(self, residual: int, sigma: int) -> bool:
        """By more than ``miss_sigmas·σ``; conformal, with residuals: outside the window."""
        if self._conformal and len(self._residuals) > _MIN_RESIDUALS:
            lo, hi = self.window_bounds_ns or (0, 0)
            return not lo <= residual <= hi
        return abs(residual) > self._miss_sigmas * sigma

    @property
    def window_bounds_ns(self) -> tuple[int, int] | None:
        """``(lo, hi)``: every predicted interval is ``[T̂_k + lo, T̂_k + hi]``:
        ``(−Δ, Δ)``, or with ``window = "empirical"`` and enough residuals the
        ``(1 − C)/2`` and ``(1 + C)/2`` quantiles of the recent out-of-sample residuals
        (split-conformal ranks), never narrower than ``±min_sigma_ns``."""
        delta = self.delta_ns
        if delta is None:
            return None
        if not self._empirical or len(self._residuals) < _MIN_RESIDUALS:
            return -delta, delta
        if self._bounds is None:
            self._bounds = empirical_bounds(self._residuals, self._confidence, self._min_sigma_ns)
        return self._bounds

    def predict(self, after_ns: int) -> Interval | None:
        """The earliest not-yet-observed send interval ``[T̂_k − Δ, T̂_k + Δ]`` (see
        :attr:`window_bounds_ns`) ending at or after ``after_ns``; None until the model
        has been fitted."""
        p, q = self._period_ns, self._offset_ns
        bounds = self.window_bounds_ns
        if p is None or q is None or bounds is None:
            return None
        lo, hi = bounds
        if not self._protect_tail and self._sigma_ns is not None:
            core = round(self._miss_sigmas * self._sigma_ns)
            lo, hi = max(lo, -core), min(hi, core)
        # Smallest k with q + p·k + hi >= after_ns, and never an index already sent.
        k = max(-((q + hi - after_ns) // p), self._last_index + 1)
        if k - self._last_index > self._idle_periods:
            return None
        centre = q + p * k
        return Interval(centre + lo, centre + hi)

    # -- fitting -------------------------------------------------------------------------------
    def _segment_shorter_than(self, n: int) -> bool:
        """Whether fewer than ``n`` sends of the history belong to the current segment.

        O(1), on every observed send: segment numbers only grow and are only ever
        written as the current one, to the newest send, to a run of the newest sends
        (a jump) or to all of them (a merge), so the current segment is a suffix of the
        history, whose length is counted as those writes happen (``_seg_len``).
        """
        return self._seg_len < n

    def _agreeing_misses(self, misses: int) -> int:
        """How many of the newest ``misses`` sends agree on one phase with the newest.

        A chance outlier just before a real jump must not join the new segment, so a
        run of misses counts only while each send lies on the newest one's phase.
        """
        p, sigma = self._period_ns, self._sigma_ns
        assert p is not None and sigma is not None
        newest = self._last_ns
        run = 1
        for i in range(2, min(misses, self._n) + 1):
            gap = newest - self._history[-i][0]
            if abs(gap - p * round_div(gap, p)) > self._miss_sigmas * sigma:
                break
            run += 1
        return run

    def _start_segment(self, newest: int) -> None:
        self._segment += 1
        # Residuals measured against the old phase say nothing about the new one; with
        # conformal windows only the sends that moved say so (the rest measured the
        # jitter, which a phase jump does not change).
        residuals = self._residuals
        if self._conformal:
            for _ in range(min(newest, len(residuals))):
                residuals.pop()
        else:
            residuals.clear()
        self._bounds = None
        for i in range(self._n - newest, self._n):
            self._history[i] = (self._history[i][0], self._segment)
        self._seg_len = newest

    def _fit(self, now_ns: int) -> None:
        segments: dict[int, list[int]] = {}
        for t, seg in self._history:
            segments.setdefault(seg, []).append(t)
        runs = list(segments.values())
        old_p = self._period_ns
        fitted = fit_runs(runs, old_p, self._period_error, self._min_sigma_ns)
        if len(runs) > 1:
            # Was a phase jump real? Under heavy jitter two chance misses in a row
            # look like one; if one line explains all segments about as well (an
            # offset per segment costs like an irregular step), they are one again.
            merged = [[t for run in runs for t in run]]
            one = fit_runs(merged, old_p, self._period_error, self._min_sigma_ns)
            if one is not None and (
                fitted is None or one[0] <= fitted[0] + IRREGULAR_COST * (len(runs) - 1)
            ):
                fitted, runs = one, merged
                for i, (t, _) in enumerate(self._history):
                    self._history[i] = (t, self._segment)
                self._seg_len = self._n
        if fitted is None:
            return
        line = fitted[1]
        p = round(line.slope)
        if p < 1:
            # Sends bunched at one instant are not periodic: keep the previous model.
            return
        dof = self._n - len(runs) - 1
        if self._conformal:
            slope = theil_sen(runs, line.numbered) or line.slope
            p = max(round(slope), 1)
            sigma, q = robust_scale(runs, line.numbered, slope)
        elif self._robust:
            sigma, q = robust_scale(runs, line.numbered, line.slope)
        else:
            if dof > 0:
                sigma = round(math.sqrt(line.ssr / dof))
            elif self._sigma_ns is not None:
                sigma = self._sigma_ns
            else:
                sigma = self._min_sigma_ns
            # Offset at the newest send, from the newest segment's own line.
            q = line.newest_ns
        self._period_ns = p
        self._offset_ns = q
        self._sigma_ns = max(sigma, self._min_sigma_ns)
        self._fitted_at_ns = now_ns
        self._fitted_samples = self._n
        # Only a fit on a full history is trusted as the next fit's prior: early fits
        # are rough, and an error then must not outlive them.
        full = self._n == self._max_n
        self._period_error = line.slope_error(self._n, len(runs)) if full else math.inf
        # The newest send is index 0 of the new fit: its interval is consumed (a
        # conformal fit's q is its slot's, however late the send was).
        self._last_index = 0 if self._conformal else round_div(runs[-1][-1] - q, p)
        self.refits += 1


#: Out-of-sample residuals an empirical window needs; fewer: the Gaussian one.
_MIN_RESIDUALS = 16
