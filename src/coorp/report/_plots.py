"""Figures of a comparison (reaction-time CDF, utilization and epoch time, LS queue depth)
and of one run (time series of bulk throughput, ring depth and gate state).

Every figure draws each policy in its own colour and line style
(:mod:`coorp.figures`) and is saved in each of ``formats`` (``png``, ``pdf``,
``svg``). A bar with no value says why (``infeasible``, ``no epoch in 10 s``) and the
epoch-time bars carry the number of epochs behind them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from coorp.figures import parse_formats, policy_styles, save_figure
from coorp.policies import policy_label
from coorp.report._compare import Comparison

if TYPE_CHECKING:
    from coorp.workload import CrlResult

__all__ = ["comparison_figures", "plot_comparison", "plot_run"]


def comparison_figures(cmp: Comparison) -> dict[str, Figure]:
    """The comparison's figures by file stem (``reaction_cdf``, ``utilization_epoch``,
    ``ls_queue_depth``). The caller owns them (``plt.close``); :func:`plot_comparison`
    writes and closes them."""
    return {
        "reaction_cdf": _reaction_cdf(cmp),
        "utilization_epoch": _bandwidth(cmp),
        "ls_queue_depth": _queue_depth(cmp),
    }


def plot_comparison(cmp: Comparison, out: Path, formats: Sequence[str] = ("png",)) -> list[Path]:
    """Write the comparison's figures into ``out`` in each format; return their paths."""
    formats = parse_formats(formats)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for stem, fig in comparison_figures(cmp).items():
        paths += save_figure(fig, out, stem, formats)
    return paths


def _name(policy: str) -> str:
    """A policy in a legend: ``oracle (not deployable)`` for a reference bound."""
    return policy_label(policy)


def _tick(policy: str) -> str:
    """A policy under a bar: the label on two lines if it has a qualifier."""
    return policy_label(policy).replace(" (", "\n(", 1)


def _reaction_cdf(cmp: Comparison) -> Figure:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    upper = cmp.deadline_ms * 3
    styles = policy_styles(cmp.runs)
    missing = []
    for name, run in cmp.runs.items():
        r = np.sort(run.reaction_ms)
        if not r.size:
            missing.append(f"{_name(name)}: {_why_no_loops(cmp, name)}")
            continue
        y = np.arange(1, r.size + 1) / r.size
        ax.step(np.minimum(r, upper), y, where="post", label=f"{_name(name)} ({r.size} loops)",
                linewidth=1.5, **styles[name].line())  # fmt: skip
    ax.axvline(cmp.deadline_ms, color="0.5", linestyle="--", linewidth=1)  # not the oracle
    ax.text(cmp.deadline_ms, 0.02, f" bound {cmp.deadline_ms:g} ms", fontsize=8)
    if missing:
        ax.text(0.02, 0.97, "no curve: " + "; ".join(missing), transform=ax.transAxes,
                fontsize=8, va="top")  # fmt: skip
    ax.set_xlim(0, upper)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("reaction time (ms; abandoned/slow loops drawn at the right edge)")
    ax.set_ylabel("CDF of MPC loops")
    ax.set_title(f"{cmp.scenario}: reaction time, seed {cmp.seed}, {cmp.duration_s:g} s")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return fig


def _why_no_loops(cmp: Comparison, name: str) -> str:
    run = cmp.runs[name]
    if run.infeasible:
        return "infeasible"
    return f"no MPC loop in {cmp.duration_s:g} s"


def _why_no_value(cmp: Comparison, name: str, what: str) -> str:
    """The label of a bar that has no value."""
    run = cmp.runs[name]
    if run.infeasible:
        return "infeasible"
    if what == "epoch" and run.metrics.get("epochs", 0) == 0:
        return f"no epoch in {cmp.duration_s:g} s"
    if what == "utilization":
        ref = cmp.reference.metrics.get("bh_mbps")
        if ref is None or not ref > 0:
            return f"no BH-only data in {cmp.duration_s:g} s"
    return "no data"


def _bars(ax: Axes, cmp: Comparison, values: list[float], what: str) -> None:
    names = cmp.policies
    styles = policy_styles(names)
    x = np.arange(len(names))
    finite = [v for v in values if v is not None and math.isfinite(v)]
    top = max(finite, default=1.0) or 1.0
    for i, (name, v) in enumerate(zip(names, values, strict=True)):
        st = styles[name]
        if v is None or not math.isfinite(v):
            # An empty slot that says why, instead of a silent gap.
            ax.bar(x[i], top * 0.04, color="none", edgecolor="0.6", linestyle=":")
            ax.text(x[i], top * 0.06, _why_no_value(cmp, name, what), rotation=90,
                    ha="center", va="bottom", fontsize=8, color="0.3")  # fmt: skip
            continue
        ax.bar(x[i], v, color=st.color, hatch=st.hatch, edgecolor="black", linewidth=0.6)
        if what == "epoch":
            n = int(cmp.runs[name].metrics.get("epochs", 0))
            ax.text(x[i], v, f"n={n}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [_tick(n) for n in names])
    ax.set_ylim(0, top * 1.18)


def _bandwidth(cmp: Comparison) -> Figure:
    names = cmp.policies
    util = [cmp.utilization(n) for n in names]
    epoch = [cmp.runs[n].metrics["epoch_s"] for n in names]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.8))
    _bars(a, cmp, util, "utilization")
    a.axhline(1.0, color="black", linewidth=0.8)
    a.set_ylabel("BH throughput / BH-only run")
    ref = cmp.reference.metrics.get("bh_mbps")
    ref_text = f"{ref:.0f} Mb/s" if ref is not None and math.isfinite(ref) else "no data"
    a.set_title(f"utilization (BH-only: {ref_text})")
    _bars(b, cmp, epoch, "epoch")
    b.set_ylabel("seconds")
    b.set_title(f"time per DRLC epoch (n = epochs in {cmp.duration_s:g} s)")
    for ax in (a, b):
        ax.tick_params(axis="x", rotation=25)
        ax.grid(axis="y", alpha=0.3)
    return fig


def _queue_depth(cmp: Comparison) -> Figure:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    top = max((int(r.ls_hw_depths.max()) for r in cmp.runs.values() if r.ls_hw_depths.size),
              default=1)  # fmt: skip
    bins = [k - 0.5 for k in range(top + 2)]
    styles = policy_styles(cmp.runs)
    for name, run in cmp.runs.items():
        d = run.ls_hw_depths[run.ls_hw_depths >= 0]
        if d.size:
            ax.hist(d, bins=bins, histtype="step", density=True, label=_name(name), linewidth=1.4,
                    **styles[name].line())  # fmt: skip
    ax.set_xlabel("packets ahead in the hardware queue when an LS message entered it")
    ax.set_ylabel("fraction of LS messages")
    ax.set_yscale("log")
    ax.set_title(f"{cmp.scenario}: local congestion seen by LS messages")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def plot_run(result: CrlResult, out: Path, formats: Sequence[str] = ("png",)) -> list[Path]:
    """Figures of one workload run: ``timeseries`` (bulk Mb/s, ring depth and share of
    time the bulk queue was paused, per station, 10 ms bins) and, with an MPC loop,
    ``reaction_cdf``."""
    paths: list[Path] = []
    ts = result.timeseries
    if ts:
        stations = list(dict.fromkeys(ts["station"]))
        fig, axes = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
        cmap = plt.get_cmap("tab20")
        for k, name in enumerate(stations):
            m = ts["station"] == name
            t = (ts["t_start_ns"][m] + ts["t_end_ns"][m]) / 2e9
            color = cmap(k % 20)
            axes[0].plot(t, ts["bh_mbps"][m], color=color, linewidth=0.8, label=name)
            axes[1].plot(t, ts["ring_depth_mean"][m], color=color, linewidth=0.8)
            axes[2].plot(t, ts["paused_fraction"][m], color=color, linewidth=0.8)
        axes[0].set_ylabel("BH sent, Mb/s")
        axes[1].set_ylabel("ring depth\n(packets, mean)")
        axes[2].set_ylabel("bulk paused\n(share of bin)")
        axes[2].set_xlabel("simulated time (s), 10 ms bins")
        axes[0].set_title(
            f"{result.sim.scenario_name} · {_name(result.policy)} · seed {result.seed}"
        )
        if len(stations) <= 12:
            axes[0].legend(fontsize=7, ncol=min(6, len(stations)), loc="upper right")
        for ax in axes:
            ax.grid(alpha=0.3)
        paths += save_figure(fig, out, "timeseries", formats)
    r = np.sort(result.reaction_ns / 1e6)
    if r.size:
        deadline = result.deadline_ns / 1e6
        fig, ax = plt.subplots(figsize=(7, 4.2))
        upper = deadline * 3
        ax.step(np.minimum(r, upper), np.arange(1, r.size + 1) / r.size, where="post",
                label=f"{_name(result.policy)} ({r.size} loops)",
                **policy_styles([result.policy])[result.policy].line())  # fmt: skip
        ax.axvline(deadline, color="0.5", linestyle="--", linewidth=1)
        ax.set_xlim(0, upper)
        ax.set_ylim(0, 1.01)
        ax.set_xlabel("reaction time (ms; abandoned/slow loops drawn at the right edge)")
        ax.set_ylabel("CDF of MPC loops")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        paths += save_figure(fig, out, "reaction_cdf", formats)
    return paths
