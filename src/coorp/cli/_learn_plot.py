"""The reward figure of ``coorp learn``: return of the model in place against time, mean
and 95% CI band per policy, and each update's staleness under it (SSP/ASP)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["plot_rewards"]


def plot_rewards(
    summary: dict[str, object],
    path: Path,
    formats: tuple[str, ...],
    title: str,
    xlabel: str = "simulated time (s)",
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
    if stale:  # SSP/ASP: each update's measured staleness under the curves
        fig, (ax, ax_s) = plt.subplots(
            2, 1, figsize=(7, 5.2), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
        )
    else:
        fig, ax = plt.subplots(figsize=(7, 4))
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
    if stale:
        for k, (pol, row) in enumerate(pols.items()):
            st = policy_style(pol)
            t = [x for cur in row["curves"] for x in cur["t_s"]]
            v = [x for cur in row["curves"] for x in cur["staleness"]]
            off = 0.12 * (k - (len(pols) - 1) / 2)  # side by side, not on top
            ax_s.scatter(t, np.asarray(v) + off, s=8, color=st.color, marker=st.marker)
        ax_s.set_ylabel("staleness\n(versions)")
        ax_s.set_xlabel(xlabel)
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
