"""What one co-simulation run measured (:class:`CosimResult`) and its summary: tracking
error, separation, collisions, completion, reaction times, command age, sync error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from coorp.stats import percentile

__all__ = ["CosimResult"]

_NS = 1_000_000_000


@dataclass
class CosimResult:
    """Outcomes of one policy on one co-simulation scenario and seed."""

    policy: str
    seed: int
    coupling: str
    duration_ns: int
    step_ns: int
    robots: tuple[str, ...]
    workers: tuple[str, ...]
    #: Sample instants (ns) and per-sample robot poses (n_samples, n_robots, 3).
    times_ns: np.ndarray
    poses: np.ndarray
    #: Reference positions of the workers (n_samples, n_workers, 2) and the errors (m).
    references: np.ndarray
    tracking_error_m: np.ndarray
    min_separation_m: float
    collisions_robot: int
    collisions_obstacle: int
    completion_s: float | None
    reaction_ns: np.ndarray
    deadline_ns: int
    #: Sample instant of each applied command minus the sample instant of its pose (ns).
    actuation_age_ns: np.ndarray
    #: Per command: distance (m) from the pose the leader computed it from (the
    #: perceived pose, or its prediction) to the robot's true pose at that instant.
    estimate_error_m: np.ndarray
    #: Commands found stale (robot stopped) per worker-step, as a fraction.
    stopped_fraction: float
    quantization_ns: np.ndarray
    sync_inject_ns: np.ndarray
    sync_apply_ns: np.ndarray
    #: Per sample, per worker: MCS and walls of the leader -> worker link.
    link_mcs: np.ndarray
    link_walls: np.ndarray
    bh_bytes: int
    wall_s: float
    #: A fleet's hand-overs: (robot, from AP, to AP, left ns, joined ns).
    handovers: tuple[tuple[str, str, str, int, int], ...] = ()

    def summary(self) -> dict[str, Any]:
        te = self.tracking_error_m.ravel()
        r = self.reaction_ns

        def pct(a: np.ndarray, q: float, scale: float = 1.0) -> float | None:
            p = percentile(a, q, empty=None)
            return None if p is None else p / scale

        finite = r[np.isfinite(r)]
        return {
            "policy": self.policy,
            "seed": self.seed,
            "coupling": self.coupling,
            "duration_s": self.duration_ns / _NS,
            "tracking_error_m": {
                "mean": float(te.mean()) if te.size else None,
                "p95": pct(te, 95),
                "max": float(te.max()) if te.size else None,
            },
            "min_separation_m": self.min_separation_m,
            "collisions": {"robot": self.collisions_robot, "obstacle": self.collisions_obstacle},
            "completion_s": self.completion_s,
            "reaction_ms": {
                "p50": pct(finite, 50, 1e6),
                "p99": pct(r, 99, 1e6) if r.size else None,
                "violation_rate": float(np.mean(r > self.deadline_ns)) if r.size else None,
                "loops": int(r.size),
            },
            "actuation_age_ms": {
                "p50": pct(self.actuation_age_ns, 50, 1e6),
                "p99": pct(self.actuation_age_ns, 99, 1e6),
            },
            "estimate_error_m": {
                "mean": float(self.estimate_error_m.mean()) if self.estimate_error_m.size else None,
                "p99": pct(self.estimate_error_m, 99),
            },
            "stopped_fraction": self.stopped_fraction,
            "sync_error_ns": {
                "inject_max": int(self.sync_inject_ns.max()) if self.sync_inject_ns.size else 0,
                "inject_mean": float(self.sync_inject_ns.mean())
                if self.sync_inject_ns.size
                else 0.0,
                "apply_max": int(self.sync_apply_ns.max()) if self.sync_apply_ns.size else 0,
                "apply_mean": float(self.sync_apply_ns.mean()) if self.sync_apply_ns.size else 0.0,
            },
            "quantization_ns": {
                "mean": float(self.quantization_ns.mean()) if self.quantization_ns.size else 0.0,
                "max": int(self.quantization_ns.max()) if self.quantization_ns.size else 0,
            },
            "link_mcs_mean": float(self.link_mcs.mean()) if self.link_mcs.size else None,
            "nlos_fraction": float(np.mean(self.link_walls > 0)) if self.link_walls.size else None,
            "bh_mbps": self.bh_bytes * 8 / (self.duration_ns / _NS) / 1e6,
            **(
                {
                    "handovers": len(self.handovers),
                    "association_gap_ms": float(
                        np.mean([j - left for *_, left, j in self.handovers])
                    )
                    / 1e6,
                }
                if self.handovers
                else {}
            ),
            "wall_s": self.wall_s,
        }
