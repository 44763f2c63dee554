"""``coorp bench rl``: the same reactors on coorp.flow (local processes + zero-copy
transport) and on Ray actors, side by side.

Measured per worker count: PPO iteration time (data-parallel PPO, parameter averaging),
sampling throughput (env steps per second gathered by a collector), and the thesis's
broadcast+gather micro-benchmark (one array of 1–100 MB broadcast to N workers, a small
answer gathered from each). Every contender is timed the same way, on the same clock
reading inside the graph's sink (the server, collector or source): the spacing of its
reactions from the one at tag 1 (when the first round is complete, with its one-time
costs: first shared-memory loans, first object-store puts) to the last one. Processes or
actors are up before tag 0 is released; their setup time and the first round are
reported apart. All coorp.flow runs go first, then Ray starts and runs the same graphs,
so Ray's daemons never share the CPU with a flow run.
Determinism: the PPO run is repeated ``reruns`` times on each executor and the final
parameters compared byte for byte.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coorp._errors import UsageError
from coorp.flow import Graph, run
from coorp.learn._formation import FormationSpec
from coorp.learn._graphs import broadcast_graph, ppo_graph, sampling_graph
from coorp.learn._ppo import PPO, Layout, PPOConfig

__all__ = ["RlBenchConfig", "run_rl_bench"]

CONTENDERS = ("flow", "ray")


@dataclass(frozen=True)
class RlBenchConfig:
    workers: tuple[int, ...] = (2, 4)
    bcast_workers: tuple[int, ...] = (2, 4, 8)
    bcast_mb: tuple[float, ...] = (1.0, 10.0, 100.0)
    bcast_tags: int = 20
    iterations: int = 8
    sample_tags: int = 8
    reruns: int = 3
    hidden: int = 64
    robots: int = 3
    horizon: int = 40
    envs: int = 8
    seed: int = 1
    contenders: tuple[str, ...] = CONTENDERS
    #: Also time PPO as Ray code is usually written (driver loop, ray.wait gathers).
    ray_idiom: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if any(w < 1 for w in (*self.workers, *self.bcast_workers)):
            raise UsageError("worker counts must be >= 1")
        bad = sorted(set(self.contenders) - set(CONTENDERS))
        if bad:
            raise UsageError(f"unknown contender(s) {bad}; choose from {list(CONTENDERS)}")
        if self.iterations < 2 or self.sample_tags < 2 or self.bcast_tags < 2:
            raise UsageError("iterations, sample tags and broadcast tags must be >= 2")


def _executor(contender: str) -> str:
    return "processes" if contender == "flow" else "ray"


def _measure(
    cfg: RlBenchConfig, contender: str, progress: Callable[[str], None]
) -> dict[str, list[dict[str, Any]]]:
    ex = _executor(contender)
    ppo_cfg = PPOConfig(hidden=cfg.hidden, envs=cfg.envs)
    spec = FormationSpec(robots=cfg.robots, horizon=cfg.horizon)
    out: dict[str, list[dict[str, Any]]] = {"ppo": [], "sampling": [], "broadcast": []}

    def go(g: Graph, tags: int) -> Any:
        return run(g, tags, executor=ex, max_payload=int(max(cfg.bcast_mb) * 1e6) + (1 << 20))

    for w in cfg.workers:
        digests, walls, setups, cpus, firsts, e2e = [], [], [], [], [], []
        for k in range(cfg.reruns):
            progress(f"{contender}: PPO, {w} workers, run {k + 1}/{cfg.reruns}")
            r = go(ppo_graph(w, ppo_cfg, spec, cfg.seed), cfg.iterations)
            digests.append(r.results["server"]["params"].tobytes())
            walls.append(_steady(r.extra, "server", r.wall_s, cfg.iterations))
            firsts.append(_first(r.extra, "server"))
            e2e.append(r.wall_s / cfg.iterations)
            setups.append(r.setup_s)
            cpus.append(_worker_cpu(r.extra, "w") / cfg.iterations)
        out["ppo"].append(
            {
                "workers": w,
                # Steady state: the spacing of the server's reactions after the first
                # full round (tag 0 pays one-time costs on every executor); see
                # first_round_s.
                "s_per_iteration": float(np.median(walls)),
                "first_round_s": float(np.median(firsts)),
                # From releasing tag 0 to the driver holding every result, per iteration.
                "end_to_end_s_per_iteration": float(np.median(e2e)),
                "setup_s": float(np.median(setups)),
                # CPU seconds one worker spent computing per iteration (mean over workers):
                # the work itself, apart from waiting for inputs or for a free core.
                "worker_cpu_s_per_iteration": float(np.median(cpus)),
                "bit_identical_reruns": len(set(digests)) == 1,
                "reruns": cfg.reruns,
            }
        )
        progress(f"{contender}: sampling, {w} workers")
        r = go(sampling_graph(w, ppo_cfg, spec, cfg.seed), cfg.sample_tags)
        out["sampling"].append(
            {
                "workers": w,
                # Samples gathered after the first round, over the time they took.
                "samples_per_s": _steady_rate(r, cfg.sample_tags),
                "samples": r.results["collector"],
                "end_to_end_samples_per_s": r.results["collector"] / r.wall_s,
                "worker_cpu_s_per_tag": _worker_cpu(r.extra, "s") / cfg.sample_tags,
            }
        )
    for w in cfg.bcast_workers:
        for mb in cfg.bcast_mb:
            progress(f"{contender}: broadcast+gather {mb:g} MB to {w} workers")
            r = go(broadcast_graph(w, int(mb * 1e6)), cfg.bcast_tags)
            out["broadcast"].append(
                {
                    "workers": w,
                    "mb": mb,
                    "ms_per_round": 1e3 * _steady(r.extra, "source", r.wall_s, cfg.bcast_tags),
                    "end_to_end_ms_per_round": 1e3 * r.wall_s / cfg.bcast_tags,
                }
            )
    return out


class _IdiomWorker:
    """A Ray actor body for the idiomatic Ray PPO loop (see :func:`_ray_idiom`)."""

    def __init__(self, cfg: PPOConfig, spec: FormationSpec, seed: int) -> None:
        self.ppo = PPO(cfg, spec, seed)

    def ready(self) -> bool:
        return True

    def step(self, params: np.ndarray) -> np.ndarray:
        return self.ppo.local_update(params)[0]


def _ray_idiom(cfg: RlBenchConfig, workers: int, progress: Callable[[str], None]) -> dict[str, Any]:
    """The same data-parallel PPO as Ray code is usually written: a driver loop that
    ``ray.put``s the parameters, calls every worker, and sums the answers as they
    complete (``ray.wait``). Float sums depend on their order, so the result may change
    from run to run; reported, not hidden."""
    import ray

    ppo_cfg = PPOConfig(hidden=cfg.hidden, envs=cfg.envs)
    spec = FormationSpec(robots=cfg.robots, horizon=cfg.horizon)
    actor: Any = ray.remote(num_cpus=0)(_IdiomWorker)
    digests, walls = [], []
    for k in range(cfg.reruns):
        progress(f"ray (driver loop, ray.wait): PPO, {workers} workers, run {k + 1}/{cfg.reruns}")
        pool = [actor.remote(ppo_cfg, spec, cfg.seed * 1000 + i + 1) for i in range(workers)]
        params = Layout(cfg.hidden, ppo_cfg.layers).init(cfg.seed)
        ray.get([a.ready.remote() for a in pool])  # actors up: setup is not timed
        t0 = time.perf_counter()
        for it in range(cfg.iterations):
            if it == 1:
                t0 = time.perf_counter()  # as for the graphs: after the first round
            ref = ray.put(params)
            pending = [a.step.remote(ref) for a in pool]
            acc = np.zeros_like(params)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                acc += ray.get(done[0])
            params = (acc / np.float32(workers)).astype(np.float32)
        walls.append(time.perf_counter() - t0)
        digests.append(params.tobytes())
        for a in pool:
            ray.kill(a)
    return {
        "workers": workers,
        "s_per_iteration": float(np.median(walls)) / (cfg.iterations - 1),
        "bit_identical_reruns": len(set(digests)) == 1,
        "distinct_results": len(set(digests)),
        "reruns": cfg.reruns,
    }


def _steady(extra: dict[str, Any], sink: str, wall_s: float, tags: int) -> float:
    """Seconds per tag from the sink's reaction at tag 1 to its last one (its input of
    tag 0 has arrived by then: the first round, with its one-time costs, is over)."""
    starts = extra.get("react_starts_s", {}).get(sink, [])
    if len(starts) >= 3:
        return float(starts[-1] - starts[1]) / (len(starts) - 2)
    return wall_s / tags


def _first(extra: dict[str, Any], sink: str) -> float:
    starts = extra.get("react_starts_s", {}).get(sink, [])
    return float(starts[1] - starts[0]) if len(starts) >= 2 else float("nan")


def _steady_rate(r: Any, tags: int) -> float:
    """Samples per second in the steady state: the collector's gathers at tags 2..N-1
    (batches of tags 1..N-2) over the time between its reactions at tags 1 and N-1."""
    per_tag = r.results["collector"] / (tags - 1)  # every gather brings the same count
    return per_tag / _steady(r.extra, "collector", r.wall_s, tags)


def _worker_cpu(extra: dict[str, Any], prefix: str) -> float:
    cpu = [v for n, v in extra.get("react_cpu_s", {}).items() if n.startswith(prefix)]
    return float(np.mean(cpu)) if cpu else float("nan")


def run_rl_bench(
    cfg: RlBenchConfig, progress: Callable[[str], None] = lambda m: None
) -> dict[str, Any]:
    """Run every contender; returns the JSON-ready result with ratios (ray / flow)."""
    load0 = os.getloadavg()[0]
    res: dict[str, Any] = {}
    for c in cfg.contenders:
        if c == "ray":
            try:
                import ray
            except ImportError:
                raise UsageError("the ray contender needs Ray: pip install 'coorp[ray]'") from None
            if not ray.is_initialized():
                ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        res[c] = _measure(cfg, c, progress)
        if c == "ray" and cfg.ray_idiom:
            idiom = [_ray_idiom(cfg, w, progress) for w in cfg.workers]
    if "ray" not in cfg.contenders or not cfg.ray_idiom:
        idiom = []
    rows: dict[str, list[dict[str, Any]]] = {"ppo": [], "sampling": [], "broadcast": []}
    for kind, metric, higher_better in (
        ("ppo", "s_per_iteration", False),
        ("sampling", "samples_per_s", True),
        ("broadcast", "ms_per_round", False),
    ):
        first = res[cfg.contenders[0]][kind]
        for i, row in enumerate(first):
            merged = {k: v for k, v in row.items() if k in ("workers", "mb")}
            for c in cfg.contenders:
                for k, v in res[c][kind][i].items():
                    if k not in ("workers", "mb"):
                        merged[f"{c}_{k}"] = v
            if "flow" in res and "ray" in res:
                f, r = res["flow"][kind][i][metric], res["ray"][kind][i][metric]
                # "speedup": how many times better flow is (>1 = flow wins).
                merged["flow_speedup"] = (f / r) if higher_better else (r / f)
            rows[kind].append(merged)
    params = Layout(cfg.hidden, 2).size
    return {
        "config": {
            "workers": list(cfg.workers),
            "bcast_workers": list(cfg.bcast_workers),
            "bcast_mb": list(cfg.bcast_mb),
            "iterations": cfg.iterations,
            "hidden": cfg.hidden,
            "params": params,
            "param_bytes": 4 * params,
            "robots": cfg.robots,
            "envs_per_worker": cfg.envs,
            "horizon": cfg.horizon,
            "reruns": cfg.reruns,
        },
        "machine": {
            "cores": os.cpu_count(),
            "load_before": load0,
            "load_after": os.getloadavg()[0],
        },
        "timing": "steady state: spacing of the sink's reactions from tag 1 to the last; "
        "setup and first round apart",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **rows,
        "ray_idiom_ppo": idiom,
    }
