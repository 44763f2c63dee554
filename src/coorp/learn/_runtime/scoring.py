"""After a run: the MPC loop's latencies and misses, whether every sync arrived intact,
and the leader's model versions scored (outside the run, so scoring never takes CPU
from it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from coorp.learn._network import LearnCurve, LearnSpec
from coorp.learn._ppo import PPO
from coorp.learn._runtime.config import RoleConfig
from coorp.learn._runtime.results import ServerResult, WorkerResult
from coorp.stats import percentile

__all__ = ["check_syncs", "ls_metrics", "percentiles", "score_versions"]


def percentiles(vals: Sequence[float]) -> dict[str, float | None]:
    """p50, p99 (interpolated) and the largest of ``vals`` (all None if there are none)."""
    if not vals:
        return {"p50": None, "p99": None, "max": None}
    return {
        "p50": percentile(vals, 50, method="linear"),
        "p99": percentile(vals, 99, method="linear"),
        "max": float(np.asarray(vals, dtype=float).max()),
    }


def ls_metrics(
    server: ServerResult, workers: dict[str, WorkerResult], cfg: RoleConfig
) -> dict[str, Any]:
    """Loops that started in [t0, t_end]: reaction = last control's arrival − loop
    start; a miss when above the deadline or never completed; perception one-way
    latencies of the same window."""
    assert cfg.grid_ns is not None
    period, grid, deadline = cfg.period_ns, cfg.grid_ns, cfg.deadline_ns
    t0, t1 = server.t0_ns, server.t_end_ns
    k0 = max(0, -(-(t0 - grid) // period))
    k1 = (t1 - grid) // period
    loops = range(k0, k1 + 1) if k1 >= k0 else range(0)
    arrivals: dict[int, list[int]] = {}
    for res in workers.values():
        seen: dict[int, int] = {}
        for c in res.controls:
            seen.setdefault(c.k, c.received_ns)
        for k, recv in seen.items():
            arrivals.setdefault(k, []).append(recv)
    n = len(workers)
    reactions: list[float] = []
    missed = 0
    for k in loops:
        got = arrivals.get(k, [])
        if len(got) < n:
            missed += 1
            continue
        r = max(got) - (grid + k * period)
        reactions.append(r / 1e6)
        missed += r > deadline
    lat = [(p.received_ns - p.sent_ns) / 1e6 for p in server.perceptions if k0 <= p.k <= k1]
    return {
        "loops": len(loops),
        "missed": missed,
        "miss_rate": missed / len(loops) if len(loops) else 0.0,
        "reaction_ms": percentiles(reactions),
        "perception_ms": percentiles(lat),
        "perceptions": len(lat),
    }


def check_syncs(server: ServerResult, workers: dict[str, WorkerResult]) -> tuple[bool, int]:
    """Every message's digest at its sender equals the one at its receiver: (all equal,
    how many messages were checked)."""
    ok, count = True, 0
    out_s = {(r.peer, r.kind, r.version): (r.sha256, r.nbytes) for r in server.sent}
    in_s = {(r.peer, r.kind, r.version): (r.sha256, r.nbytes) for r in server.received}
    for robot, res in workers.items():
        got = {(r.kind, r.version): (r.sha256, r.nbytes) for r in res.received}
        mine = {(r.kind, r.version): (r.sha256, r.nbytes) for r in res.sent}
        for (p, k, v), db in out_s.items():
            if p == robot:
                count += 1
                ok &= got.get((k, v)) == db
        for (k, v), db in mine.items():
            count += 1
            ok &= in_s.get((robot, k, v)) == db
        ok &= len(got) == sum(1 for p, _k, _v in out_s if p == robot)
    return ok, count


def score_versions(
    server: ServerResult,
    versions: np.ndarray,
    spec: LearnSpec,
    *,
    mode: str,
    seed: int,
    sync: str,
    duration_s: float,
    violation_rate: float,
) -> LearnCurve:
    """The leader's model versions within ``duration_s``, each scored after the run (the
    simulated path's greedy score from fixed start states)."""
    judge = PPO(spec.ppo, spec.task, seed * 1000 + 1)
    times = server.times_s
    keep = [i for i in range(1, len(times)) if times[i] <= duration_s]
    return LearnCurve(
        policy=mode,
        seed=seed,
        sync=sync,
        times_s=[times[i] for i in keep],
        returns=[judge.evaluate(versions[i], spec.eval_episodes) for i in keep],
        staleness=[server.staleness[i - 1] for i in keep],
        train_returns=[server.train_returns[i - 1] for i in keep],
        violation_rate=violation_rate,
        epochs=len(keep),
        initial_return=judge.evaluate(versions[0], spec.eval_episodes),
        air_bytes=spec.air_bytes(),
        params=int(versions.shape[1]),
    )
