"""Sweep figures with 95% confidence intervals: miss rate vs utilization (one panel per
scenario) and miss rate / utilization / epoch time vs team size (CI bands).

Each policy is drawn in its shared style (:func:`coorp.report.policy_styles`: the same
colour, line and marker as in ``coorp compare``'s figures) and named by
:func:`coorp.policies.policy_label` (a reference bound reads "oracle (not deployable)").
Override combinations of one policy differ by marker fill (and, against team size, by
a lighter band). Figures are written in each of ``formats`` (``png``, ``pdf``, ``svg``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from coorp.figures import PolicyStyle, parse_formats, policy_styles, save_figure
from coorp.policies import policy_label
from coorp.report import BH_ONLY
from coorp.sweep._overrides import split_overrides

__all__ = ["plot_sweep", "sweep_figures"]

#: How override combinations of one policy differ: the marker's fill.
_FILLS = ("full", "none", "left", "bottom", "right", "top")


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


def _label(policy: str, overrides: list[str], ov: str, shown: dict[str, str]) -> str:
    name = policy_label(policy)
    return name if len(overrides) == 1 else f"{name}, {_short(shown[ov])}"


def _short(override: str) -> str:
    """``workload.mpc.phase=random; seed=2`` → ``phase=random; seed=2`` (legends)."""
    return "; ".join(part.split("=", 1)[0].rsplit(".", 1)[-1] + "=" + part.split("=", 1)[1]
                     if "=" in part else part for part in override.split("; "))  # fmt: skip


def _figure_legend(fig: Figure, axes: Any) -> None:
    """One legend for every panel, below them (each label once)."""
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    if not seen:
        return
    # As many columns as fit the figure's width: five in a one-panel figure cut the
    # last labels ("oracle (n…") off the demo's figure.
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ncol in range(min(len(seen), 5), 0, -1):
        legend = fig.legend(list(seen.values()), list(seen), loc="outside lower center",
                            fontsize=8, ncol=ncol, frameon=False)  # fmt: skip
        if ncol == 1 or legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            return
        legend.remove()


def _marker(style: PolicyStyle, oi: int) -> dict[str, Any]:
    return {"marker": style.marker, "fillstyle": _FILLS[oi % len(_FILLS)],
            "markeredgecolor": style.color}  # fmt: skip


def sweep_figures(agg: Sequence[dict[str, Any]]) -> dict[str, Figure]:
    """The figures of an aggregate (:func:`coorp.sweep.aggregate`), by file stem:
    ``miss_vs_utilization`` and, with two team sizes or more, ``team_size``. The caller
    owns them (``plt.close``); :func:`plot_sweep` writes and closes them."""
    rows = [a for a in agg if a["policy"] != BH_ONLY]
    if not rows:
        return {}
    figures = {"miss_vs_utilization": _miss_vs_util(rows)}
    if len({r["team_size"] for r in rows}) > 1:
        figures["team_size"] = _team_size(rows)
    return figures


def plot_sweep(
    agg: Sequence[dict[str, Any]], out: Path, formats: Sequence[str] = ("png",)
) -> list[Path]:
    """Write ``miss_vs_utilization.<fmt>`` and (with two team sizes or more)
    ``team_size.<fmt>`` into ``out`` for each format; return their paths."""
    formats = parse_formats(formats)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for stem, fig in sweep_figures(agg).items():
        paths += save_figure(fig, out, stem, formats)
    return paths


def _orders(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[str], list[str]]:
    def uniq(key: str) -> list[str]:
        return list(dict.fromkeys(r[key] for r in rows))

    return uniq("scenario"), uniq("overrides"), uniq("policy")


def _miss_vs_util(rows: Sequence[dict[str, Any]]) -> Figure:
    idx = _index(rows)
    scenarios, overrides, policies = _orders(rows)
    styles = policy_styles(policies)
    _, shown = split_overrides(overrides)
    cols = min(3, len(scenarios))
    nrows = math.ceil(len(scenarios) / cols)
    fig, axes = plt.subplots(
        nrows, cols, figsize=(4.6 * cols, 3.9 * nrows + 0.6), squeeze=False, layout="constrained"
    )
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
                st = styles[policy]
                bars = ax.errorbar(
                    x, y, xerr=_err(util, 100), yerr=_err(miss, 100), linestyle="none",
                    color=st.color, capsize=3, markersize=6,
                    label=_label(policy, overrides, ov, shown), **_marker(st, oi),
                )  # fmt: skip
                for line in bars.lines[2]:  # CI bars in the policy's dash pattern
                    line.set_linestyle(st.linestyle)
        n = max((a["n"] for a in rows if a["scenario"] == sc), default=0)
        ax.set_title(f"{sc} (n ≤ {n} seeds)", fontsize=10)
        ax.set_xlabel("BH utilization vs BH-only run (%)")
        ax.set_ylabel("MPC miss rate (%)")
        ax.grid(alpha=0.3)
    _figure_legend(fig, axes.flat)
    fig.suptitle("miss rate vs utilization, mean ± 95% CI over seeds", fontsize=11)
    return fig


def _team_size(rows: Sequence[dict[str, Any]]) -> Figure:
    idx = _index(rows)
    scenarios, overrides, policies = _orders(rows)
    styles = policy_styles(policies)
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
                st = styles[policy]
                xs = [x for x, _ in pts]
                ys = [_val(a, scale) for _, a in pts]
                lo = [y - _err(a, scale) for y, (_, a) in zip(ys, pts, strict=True)]
                hi = [y + _err(a, scale) for y, (_, a) in zip(ys, pts, strict=True)]
                ax.plot(xs, ys, **st.line(), **_marker(st, oi),
                        label=_label(policy, overrides, ov, shown))  # fmt: skip
                ax.fill_between(xs, lo, hi, color=st.color, alpha=0.15 / (1 + oi), linewidth=0)
        ax.set_xlabel("team size (workers)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    _legend(axes[0])
    fig.suptitle("vs team size, mean with 95% CI band over seeds", fontsize=11)
    return fig
