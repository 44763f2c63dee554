"""Co-simulation outcomes over policies and seeds: means with 95% CIs, JSON, figures.

Each run's outcome is reduced to scalars (:data:`METRICS`); over seeds each becomes a
mean and the half-width of its Student-t 95% confidence interval
(:func:`coorp.stats.mean_ci`, the same statistics as ``coorp sweep``). Figures:
trajectories per policy side by side (the first seed), and the CDF of the tracking
error and of the MPC reaction time per policy (all seeds pooled).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from coorp.cosim._config import CosimConfig
from coorp.cosim._result import CosimResult
from coorp.stats import mean_ci

__all__ = ["EXTRA_METRICS", "METRICS", "aggregate", "plot_cosim", "run_scalars"]

#: (key, column header, unit multiplier, digits): scalars per run, aggregated over seeds.
METRICS: tuple[tuple[str, str, float, int], ...] = (
    ("tracking_mean_m", "track err m", 1.0, 3),
    ("tracking_p95_m", "p95 m", 1.0, 3),
    ("tracking_max_m", "max m", 1.0, 3),
    ("min_separation_m", "min sep m", 1.0, 2),
    ("collisions", "collisions", 1.0, 1),
    ("completion_s", "done s", 1.0, 2),
    ("reaction_p99_ms", "react p99 ms", 1.0, 1),
    ("miss_rate", "miss %", 100.0, 1),
    ("actuation_age_p99_ms", "cmd age p99 ms", 1.0, 1),
    ("stopped_fraction", "stopped %", 100.0, 1),
    ("bh_mbps", "BH Mb/s", 1.0, 1),
)
#: Aggregated over seeds into summary.json too, but not in the printed table.
EXTRA_METRICS: tuple[tuple[str, str, float, int], ...] = (
    ("estimate_error_mean_m", "est err m", 1.0, 4),
    ("handovers", "hand-overs", 1.0, 1),
)


def run_scalars(r: CosimResult) -> dict[str, float]:
    """The per-run scalars of :data:`METRICS` (NaN where a run has no value)."""
    s = r.summary()
    te = s["tracking_error_m"]
    rt = s["reaction_ms"]

    def f(v: Any) -> float:
        return math.nan if v is None else float(v)

    return {
        "tracking_mean_m": f(te["mean"]),
        "tracking_p95_m": f(te["p95"]),
        "tracking_max_m": f(te["max"]),
        "min_separation_m": f(s["min_separation_m"]),
        "collisions": float(r.collisions_robot + r.collisions_obstacle),
        "completion_s": f(s["completion_s"]),
        "reaction_p99_ms": f(rt["p99"]),
        "miss_rate": f(rt["violation_rate"]),
        "actuation_age_p99_ms": f(s["actuation_age_ms"]["p99"]),
        "estimate_error_mean_m": f(s["estimate_error_m"]["mean"]),
        "stopped_fraction": f(s["stopped_fraction"]),
        "bh_mbps": f(s["bh_mbps"]),
        "handovers": float(len(r.handovers)),
    }


def _clean(v: float) -> float | None:
    return v if math.isfinite(v) else None


def aggregate(results: dict[str, list[CosimResult]]) -> dict[str, Any]:
    """Per policy: each metric's mean, CI half-width and count over seeds, and each run."""
    out: dict[str, Any] = {}
    for policy, runs in results.items():
        scalars = [run_scalars(r) for r in runs]
        metrics = {}
        for key, *_ in (*METRICS, *EXTRA_METRICS):
            ci = mean_ci(sc[key] for sc in scalars)
            metrics[key] = {"mean": _clean(ci.mean), "ci95": _clean(ci.ci95), "n": ci.n}
        incomplete = sum(1 for sc in scalars if math.isnan(sc["completion_s"]))
        out[policy] = {
            "metrics": metrics,
            "runs": [
                {k: _clean(v) for k, v in sc.items()} | {"seed": r.seed}
                for sc, r in zip(scalars, runs, strict=True)
            ],
            "incomplete_runs": incomplete,
            "wall_s": sum(r.wall_s for r in runs),
        }
    return out


def plot_cosim(
    results: dict[str, list[CosimResult]],
    cfg: CosimConfig,
    out: Path,
    formats: Sequence[str] = ("png",),
) -> list[Path]:
    """``trajectories`` (one panel per policy, first seed), ``tracking_cdf`` and
    ``reaction_cdf`` (all seeds pooled)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from coorp.figures import policy_styles, save_figure
    from coorp.policies import policy_label

    names = list(results)
    styles = policy_styles(names)
    paths: list[Path] = []
    n = len(names)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False, sharey=True)
    sx, sy = cfg.world.size_m
    colors = plt.get_cmap("tab10")
    for ax, name in zip(axes[0], names, strict=True):
        r = results[name][0]
        for o in cfg.world.obstacles:
            (cx, cy), (lx, ly) = o.center_m, o.size_m
            ax.add_patch(Rectangle((cx - lx / 2, cy - ly / 2), lx, ly, color="0.75", lw=0))
        for k, robot in enumerate(r.robots):
            c = colors(k % 10)
            xy = r.poses[:, k, :2]
            if robot in r.workers:
                w = r.workers.index(robot)
                ax.plot(r.references[:, w, 0], r.references[:, w, 1], color=c, lw=0.8,
                        ls=":", alpha=0.8)  # fmt: skip
                ax.plot(xy[:, 0], xy[:, 1], color=c, lw=1.4, label=robot)
            else:
                ax.plot(xy[0, 0], xy[0, 1], marker="^", color="k", ms=8, ls="", label=robot)
        ax.set_xlim(-sx / 2, sx / 2)
        ax.set_ylim(-sy / 2, sy / 2)
        ax.set_aspect("equal")
        ax.set_title(f"{policy_label(name)} · seed {r.seed}", fontsize=9)
        ax.set_xlabel("x (m)")
    axes[0][0].set_ylabel("y (m)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.suptitle("trajectories (solid) and references (dotted)", fontsize=10)
    paths += save_figure(fig, out, "trajectories", formats)

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name in names:
        err = np.sort(np.concatenate([r.tracking_error_m.ravel() for r in results[name]]))
        # Log axis: errors below 1 mm count as 1 mm.
        err = np.maximum(err, 1e-3)
        if err.size == 0:
            continue
        y = np.arange(1, err.size + 1) / err.size
        ax.step(err, y, where="post", label=policy_label(name), **styles[name].line())
    ax.set_xscale("log")
    ax.set_xlabel("tracking error (m, log scale; < 1 mm shown at 1 mm)")
    ax.set_ylabel("fraction of samples")
    ax.set_ylim(0, 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    seeds = sorted({r.seed for runs in results.values() for r in runs})
    ax.set_title(f"tracking error, all workers, seeds {seeds}", fontsize=9)
    paths += save_figure(fig, out, "tracking_cdf", formats)

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    deadline_ms = next(iter(results.values()))[0].deadline_ns / 1e6
    for name in names:
        rt = np.sort(np.concatenate([r.reaction_ns for r in results[name]])) / 1e6
        if rt.size == 0:
            continue
        # Abandoned loops (inf) stay off the axis: the curve ends below 1.
        y = np.arange(1, rt.size + 1) / rt.size
        ok = np.isfinite(rt)
        ax.step(rt[ok], y[ok], where="post", label=policy_label(name), **styles[name].line())
    ax.axvline(deadline_ms, color="0.5", ls="--", lw=1, label=f"bound {deadline_ms:g} ms")
    ax.set_xscale("log")
    ax.set_xlabel("MPC reaction time (ms, log scale)")
    ax.set_ylabel("fraction of loops")
    ax.set_ylim(0, 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"reaction time, seeds {seeds}", fontsize=9)
    paths += save_figure(fig, out, "reaction_cdf", formats)
    return paths
