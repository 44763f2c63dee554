"""Figures of a comparison: reaction-time CDF, utilization and epoch time, LS queue depth."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from coorp.report._compare import Comparison

__all__ = ["plot_comparison"]


def plot_comparison(cmp: Comparison, out: Path) -> list[Path]:
    """Write the comparison's PNG figures into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    return [_reaction_cdf(cmp, out), _bandwidth(cmp, out), _queue_depth(cmp, out)]


def _reaction_cdf(cmp: Comparison, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    upper = cmp.deadline_ms * 3
    for name, run in cmp.runs.items():
        r = np.sort(run.reaction_ms)
        if not r.size:
            continue
        y = np.arange(1, r.size + 1) / r.size
        ax.step(np.minimum(r, upper), y, where="post", label=name)
    ax.axvline(cmp.deadline_ms, color="black", linestyle="--", linewidth=1)
    ax.text(cmp.deadline_ms, 0.02, f" bound {cmp.deadline_ms:g} ms", fontsize=8)
    ax.set_xlim(0, upper)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("reaction time (ms; abandoned/slow loops drawn at the right edge)")
    ax.set_ylabel("CDF of MPC loops")
    ax.set_title(f"{cmp.scenario}: reaction time, seed {cmp.seed}")
    ax.grid(alpha=0.3)
    ax.legend()
    path = out / "reaction_cdf.png"
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def _bandwidth(cmp: Comparison, out: Path) -> Path:
    names = cmp.policies
    util = [cmp.utilization(n) for n in names]
    epoch = [cmp.runs[n].metrics["epoch_s"] for n in names]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.8))
    a.bar(names, util, color="tab:blue")
    a.axhline(1.0, color="black", linewidth=0.8)
    a.set_ylabel("BH throughput / BH-only run")
    a.set_title(f"utilization (BH-only: {cmp.reference.metrics['bh_mbps']:.0f} Mb/s)")
    b.bar(names, epoch, color="tab:orange")
    b.set_ylabel("seconds")
    b.set_title("time per DRLC epoch")
    for ax in (a, b):
        ax.tick_params(axis="x", rotation=25)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "utilization_epoch.png"
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def _queue_depth(cmp: Comparison, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    top = max((int(r.ls_hw_depths.max()) for r in cmp.runs.values() if r.ls_hw_depths.size),
              default=1)  # fmt: skip
    bins = [k - 0.5 for k in range(top + 2)]
    for name, run in cmp.runs.items():
        d = run.ls_hw_depths[run.ls_hw_depths >= 0]
        if d.size:
            ax.hist(d, bins=bins, histtype="step", density=True, label=name, linewidth=1.4)
    ax.set_xlabel("packets ahead in the hardware queue when an LS message entered it")
    ax.set_ylabel("fraction of LS messages")
    ax.set_yscale("log")
    ax.set_title(f"{cmp.scenario}: local congestion seen by LS messages")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = out / "ls_queue_depth.png"
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
