"""Sweep figures with 95% confidence intervals: miss rate vs utilization (one panel per
scenario) and miss rate / utilization / epoch time vs team size (CI bands)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from coorp.policies import policy_names
from coorp.report._compare import BH_ONLY
from coorp.sweep._overrides import split_overrides

__all__ = ["plot_sweep"]

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINES = ("-", "--", ":", "-.")


def _color(policy: str) -> Any:
    """One colour per policy, the same in every figure (registry order)."""
    known = policy_names()
    i = known.index(policy) if policy in known else len(known) + sum(map(ord, policy))
    return plt.get_cmap("tab10")(i % 10)


def _index(agg: Sequence[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    return {(a["scenario"], a["overrides"], a["policy"], a["metric"]): a for a in agg}


def _err(a: dict[str, Any] | None, scale: float = 1.0) -> float:
    if a is None or not math.isfinite(a["ci95"]):
        return 0.0
    return float(a["ci95"]) * scale


def _val(a: dict[str, Any] | None, scale: float = 1.0) -> float:
    if a is None or a["n"] == 0 or not math.isfinite(a["mean"]):
        return math.nan
    return float(a["mean"]) * scale


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def plot_sweep(agg: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """Write ``miss_vs_utilization.png`` and (with two team sizes or more)
    ``team_size.png`` into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [a for a in agg if a["policy"] != BH_ONLY]
    if not rows:
        return []
    figures = [_miss_vs_util(rows, out)]
    if len({r["team_size"] for r in rows}) > 1:
        figures.append(_team_size(rows, out))
    return figures


def _orders(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[str], list[str]]:
    def uniq(key: str) -> list[str]:
        return list(dict.fromkeys(r[key] for r in rows))

    return uniq("scenario"), uniq("overrides"), uniq("policy")


def _miss_vs_util(rows: Sequence[dict[str, Any]], out: Path) -> Path:
    idx = _index(rows)
    scenarios, overrides, policies = _orders(rows)
    _, shown = split_overrides(overrides)
    cols = min(3, len(scenarios))
    nrows = math.ceil(len(scenarios) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.9 * nrows), squeeze=False)
    for ax in axes.flat[len(scenarios) :]:
        ax.set_visible(False)
    for ax, sc in zip(axes.flat, scenarios, strict=False):
        for oi, ov in enumerate(overrides):
            for policy in policies:
                miss = idx.get((sc, ov, policy, "violation_rate"))
                util = idx.get((sc, ov, policy, "utilization"))
                x, y = _val(util, 100), _val(miss, 100)
                if math.isnan(x) or math.isnan(y):
                    continue
                lab = policy if len(overrides) == 1 else f"{policy} [{shown[ov]}]"
                ax.errorbar(
                    x, y, xerr=_err(util, 100), yerr=_err(miss, 100), fmt=_MARKERS[oi % 8],
                    color=_color(policy), capsize=3, markersize=6, label=lab,
                )  # fmt: skip
        n = max((a["n"] for a in rows if a["scenario"] == sc), default=0)
        ax.set_title(f"{sc} (n ≤ {n} seeds)", fontsize=10)
        ax.set_xlabel("BH utilization vs BH-only run (%)")
        ax.set_ylabel("MPC miss rate (%)")
        ax.grid(alpha=0.3)
        _legend(ax)
    fig.suptitle("miss rate vs utilization, mean ± 95% CI over seeds", fontsize=11)
    fig.tight_layout()
    path = out / "miss_vs_utilization.png"
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def _team_size(rows: Sequence[dict[str, Any]], out: Path) -> Path:
    idx = _index(rows)
    scenarios, overrides, policies = _orders(rows)
    _, shown = split_overrides(overrides)
    size = {r["scenario"]: r["team_size"] for r in rows}
    by_size = sorted(scenarios, key=lambda s: (size[s], scenarios.index(s)))
    panels = (
        ("violation_rate", "miss rate (%)", 100.0),
        ("utilization", "utilization (%)", 100.0),
        ("epoch_s", "epoch time (s)", 1.0),
    )
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (metric, ylabel, scale) in zip(axes, panels, strict=True):
        for oi, ov in enumerate(overrides):
            for policy in policies:
                pts = [(size[s], idx.get((s, ov, policy, metric))) for s in by_size]
                pts = [(x, a) for x, a in pts if not math.isnan(_val(a))]
                if not pts:
                    continue
                xs = [x for x, _ in pts]
                ys = [_val(a, scale) for _, a in pts]
                lo = [y - _err(a, scale) for y, (_, a) in zip(ys, pts, strict=True)]
                hi = [y + _err(a, scale) for y, (_, a) in zip(ys, pts, strict=True)]
                lab = policy if len(overrides) == 1 else f"{policy} [{shown[ov]}]"
                ax.plot(xs, ys, _LINES[oi % 4], marker=_MARKERS[oi % 8], color=_color(policy),
                        label=lab)  # fmt: skip
                ax.fill_between(xs, lo, hi, color=_color(policy), alpha=0.15, linewidth=0)
        ax.set_xlabel("team size (workers)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    _legend(axes[0])
    fig.suptitle("vs team size, mean with 95% CI band over seeds", fontsize=11)
    fig.tight_layout()
    path = out / "team_size.png"
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
