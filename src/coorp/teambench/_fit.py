"""The Communication Scaling Limit Volume (CSLV = N·f·S) and a fitted RTT curve.

The seed (``ros-multi-robot-scalability.txt``, §4.1) finds that a host carries
configurations up to a roughly constant product of senders N, message rate f and size S.
Here, per carrier and bulk mode, a cell *passes* when its p99 RTT is within the bound and
its loss within the limit; the CSLV is the load threshold that best separates passing
from failing cells (fewest cells on the wrong side; ties go to the higher threshold),
reported as the geometric mean of the highest passing load below it and the lowest
failing load above it, with that bracket. A curve ``p99(L) = r0 / (1 − L/L_sat)`` (a
single-server queue's shape) is fitted to the p99 values for the figure; where it
crosses the bound is reported too, as a cross-check, not as the CSLV.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SEED_REFERENCE", "CslvFit", "fit_cslv", "fit_curve"]

#: The seed's published values (ROS 1 Kinetic, Raspberry Pi 3 Model B, WiFi; other
#: hardware): CSLV ≈ 300 senders·Hz at 4.25 kB messages (§4.1), and over WiFi a limit
#: of 680–1,360 kB/s "depending on exact message latency tolerance" (§4.2).
SEED_REFERENCE = {
    "cslv_node_hz": 300.0,
    "message_bytes": 4250.0,
    "cslv_kBps": 300.0 * 4.25,
    "wifi_range_kBps": (680.0, 1360.0),
    "label": "seed: ROS 1 on Raspberry Pi 3 over WiFi (other hardware)",
}


@dataclass(frozen=True)
class CslvFit:
    """A carrier's capacity in bytes/s of offered echo load (N·f·S).

    ``cslv`` is None when no threshold separates anything: ``all_pass`` (the CSLV is
    above ``high``, the largest load measured) or all fail (below ``low``).
    """

    cslv: float | None
    #: Highest passing load below the threshold, lowest failing load above it.
    low: float | None
    high: float | None
    #: Cells on the wrong side of the threshold (0: the CSLV separates them exactly).
    misclassified: int
    cells: int
    all_pass: bool
    all_fail: bool
    #: The fitted curve: p99 = r0_ms / (1 - L / l_sat); where it crosses the bound.
    r0_ms: float | None = None
    l_sat: float | None = None
    curve_cslv: float | None = None

    def describe(self) -> str:
        if self.all_pass:
            return f"> {self.high / 1e3:,.0f} kB/s (every cell passed)" if self.high else "-"
        if self.all_fail:
            return f"< {self.low / 1e3:,.0f} kB/s (every cell failed)" if self.low else "-"
        assert self.cslv is not None
        return f"{self.cslv / 1e3:,.0f} kB/s"


def fit_cslv(
    loads: Sequence[float],
    p99_ms: Sequence[float],
    loss: Sequence[float],
    *,
    bound_ms: float = 33.0,
    loss_limit: float = 0.01,
) -> CslvFit:
    """The CSLV of one carrier from its cells (offered load in bytes/s, p99 RTT, loss)."""
    if not (len(loads) == len(p99_ms) == len(loss)):
        raise ValueError("loads, p99_ms and loss must have the same length")
    n = len(loads)
    if n == 0:
        return CslvFit(None, None, None, 0, 0, False, False)
    L = np.asarray(loads, dtype=float)
    ok = np.array(
        [
            (not math.isnan(p)) and p <= bound_ms and x <= loss_limit
            for p, x in zip(p99_ms, loss, strict=True)
        ]
    )
    order = np.argsort(L, kind="stable")
    L, ok = L[order], ok[order]
    uniq = np.unique(L)
    # Threshold t_k between uniq[k-1] and uniq[k]: loads < uniq[k] predicted to pass.
    best: tuple[int, int] | None = None
    for k in range(len(uniq) + 1):
        below = uniq[k] > L if k < len(uniq) else np.ones_like(ok)
        errors = int(np.sum(below & ~ok) + np.sum(~below & ok))
        if best is None or errors <= best[0]:
            best = (errors, k)
    assert best is not None
    errors, k = best
    r0, l_sat, crossing = fit_curve(L, np.asarray(p99_ms, dtype=float)[order], bound_ms=bound_ms)
    common: dict[str, Any] = {"misclassified": errors, "cells": n, "r0_ms": r0, "l_sat": l_sat,
                              "curve_cslv": crossing}  # fmt: skip
    if k == len(uniq):
        return CslvFit(
            None, float(uniq[-1]), float(uniq[-1]), all_pass=True, all_fail=False, **common
        )
    if k == 0:
        return CslvFit(
            None, float(uniq[0]), float(uniq[0]), all_pass=False, all_fail=True, **common
        )
    lo, hi = float(uniq[k - 1]), float(uniq[k])
    return CslvFit(math.sqrt(lo * hi), lo, hi, all_pass=False, all_fail=False, **common)


def fit_curve(
    loads: np.ndarray, p99_ms: np.ndarray, *, bound_ms: float
) -> tuple[float | None, float | None, float | None]:
    """Least squares in log space of ``p99 = r0 / (1 − L/l_sat)`` over a grid of l_sat;
    cells at or beyond l_sat count as predicted unbounded (a cell measured there within
    the bound costs its log distance to it). Returns (r0_ms, l_sat, where it crosses the
    bound), Nones with fewer than two usable cells."""
    good = np.isfinite(p99_ms) & (p99_ms > 0) & (loads > 0)
    L, y = loads[good], np.log(p99_ms[good])
    if L.size < 2:
        return None, None, None
    best: tuple[float, float, float] | None = None
    for l_sat in np.geomspace(L.min() * 1.01, L.max() * 1000, 400):
        under = l_sat > L
        if under.sum() < 2:
            continue
        z = y[under] + np.log1p(-L[under] / l_sat)
        log_r0 = float(np.mean(z))
        cost = float(np.sum((z - log_r0) ** 2))
        cost += float(np.sum(np.maximum(0.0, math.log(bound_ms) - y[~under]) ** 2))
        if best is None or cost < best[0]:
            best = (cost, log_r0, float(l_sat))
    if best is None:
        return None, None, None
    r0, l_sat = math.exp(best[1]), best[2]
    crossing = l_sat * (1 - r0 / bound_ms) if r0 < bound_ms else 0.0
    return r0, l_sat, crossing
