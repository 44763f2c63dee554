"""The reward figure of ``coorp learn``: return of the model in place against time, mean
and 95% CI band per policy, each update's staleness under it (SSP/ASP) and, on the
simulated channel, the MPC loop's miss rate per policy beside it: what a policy costs
the control loop while the learning goes on (the network's two effects in one figure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_rewards"]


def plot_rewards(
    summary: dict[str, object],
    path: Path,
    formats: tuple[str, ...],
    title: str,
    xlabel: str = "simulated time (s)",
    *,
    misses: bool = False,
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from coorp.figures import policy_style

    grid = np.asarray(summary["grid_s"])
    pols = summary["policies"]
    assert isinstance(pols, dict)
    stale = any(
        max(cur["staleness"], default=0) > 0 for row in pols.values() for cur in row["curves"]
    )
    rows = 2 if stale else 1  # SSP/ASP: each update's measured staleness under the curves
    width = 9.0 if misses else 7.0
    fig = plt.figure(figsize=(width, 5.2 if stale else 4))
    gs = fig.add_gridspec(
        rows, 2 if misses else 1, height_ratios=[3, 1][:rows],
        width_ratios=[4, 1] if misses else [1],
    )  # fmt: skip
    ax = fig.add_subplot(gs[0, 0])
    ax_s = fig.add_subplot(gs[1, 0], sharex=ax) if stale else None
    if misses:
        _miss_bars(fig.add_subplot(gs[:, 1]), pols)
    for pol, row in pols.items():
        st = policy_style(pol)
        mean = np.asarray(row["reward_mean"])
        ci = np.asarray(row["reward_ci95"])
        n = len(row["seeds"])
        ax.step(grid, mean, where="post", label=f"{pol} (n={n})", **st.line())
        ax.fill_between(grid, mean - ci, mean + ci, step="post", color=st.color, alpha=0.15)
    target = summary["target"]
    assert isinstance(target, float)
    ax.axhline(target, color="#999999", linestyle=":", linewidth=1, label="target")
    # Few seeds make wide bands (t = 12.7 with two): keep the means readable.
    means = np.concatenate([np.asarray(row["reward_mean"]) for row in pols.values()])
    lo, hi = float(np.nanmin(means)), float(np.nanmax(means))
    pad = max(2.0, 0.6 * (hi - lo))
    ax.set_ylim(min(lo - pad, target - 1), max(hi + pad, target + 1))
    ax.set_ylabel("return of the model in place\n(greedy, fixed start states)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    if ax_s is not None:
        for k, (pol, row) in enumerate(pols.items()):
            st = policy_style(pol)
            t = [x for cur in row["curves"] for x in cur["t_s"]]
            v = [x for cur in row["curves"] for x in cur["staleness"]]
            off = 0.12 * (k - (len(pols) - 1) / 2)  # side by side, not on top
            ax_s.scatter(t, np.asarray(v) + off, s=8, color=st.color, marker=st.marker)
        ax_s.set_ylabel("staleness\n(versions)")
        ax_s.set_xlabel(xlabel)
        ax.tick_params(labelbottom=False)
    else:
        ax.set_xlabel(xlabel)
    fig.tight_layout()
    out = []
    for fmt in formats:
        target_path = path.with_suffix(f".{fmt}")
        fig.savefig(target_path, dpi=130)
        out.append(target_path)
    plt.close(fig)
    return out


def _miss_bars(ax: Any, pols: dict[str, Any]) -> None:
    """The MPC loop's miss rate per policy, mean and 95% CI over the seeds."""
    from coorp.figures import policy_style

    names = list(pols)
    for i, pol in enumerate(names):
        v = pols[pol]["violation_rate"]
        mean = 100 * v["mean"] if v["n"] else 0.0
        ci = 100 * v["ci95"] if v["n"] and v["ci95"] == v["ci95"] else 0.0
        ax.bar(i, mean, yerr=ci, color=policy_style(pol).color, capsize=3, width=0.7)
        ax.annotate(f"{mean:.1f}%", (i, mean + ci), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points")  # fmt: skip
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("MPC misses while learning (%)")
    ax.set_ylim(bottom=0, top=max(1.0, ax.get_ylim()[1] * 1.15))
    ax.set_title("control loop", fontsize=9)
