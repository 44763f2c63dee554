"""Running a sweep's tasks: from the cache, serially, on a local process pool, or on Ray.

Each task returns a small JSON-able *outcome* (flat metrics, infeasible reason, wall time,
events). Results depend only on the task (scenario content, policy, seed, duration), never
on where or in which order it ran, so serial, pool and Ray give bit-identical outcomes.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from coorp._errors import ConfigurationError, UsageError
from coorp.report import BH_ONLY, run_policy
from coorp.sweep._plan import SweepPlan, Task, code_version
from coorp.workload import comparison_warnings

__all__ = [
    "METRICS",
    "WARNING_SEP",
    "Outcome",
    "Progress",
    "RunCache",
    "Runner",
    "SweepResult",
    "run_sweep",
    "simulate_task",
]

#: A finished run: ``{"metrics": {name: float}, "infeasible": str | None, "wall_s": float,
#: "warnings": [str]}``.
Outcome = dict[str, Any]
Runner = Callable[[Task], Outcome]

#: Metrics of every run, in table order (``utilization`` and ``epoch_vs_edca`` are derived
#: from the BH-only and EDCA runs of the same scenario, overrides and seed).
METRICS = (
    "violation_rate", "reaction_p50_ms", "reaction_p90_ms", "reaction_p99_ms",
    "ls_latency_p50_ms", "ls_latency_p99_ms", "bh_mbps", "other_mbps", "utilization", "epoch_s",
    "epoch_vs_edca", "loops", "epochs", "lag_ms_max", "events",
)  # fmt: skip


#: A fleet's per-channel and per-cell learning throughput metrics (prefixes).
_FLEET_BH = ("channel_bh_mbps_", "cell_bh_mbps_")

#: Between a run's warnings in one table cell (``runs.csv``'s ``warnings`` column).
WARNING_SEP = " | "


def join_warnings(warnings: Iterable[str]) -> str:
    return WARNING_SEP.join(warnings)


def split_warnings(text: str | None) -> list[str]:
    return [w for w in (text or "").split(WARNING_SEP) if w]


def _flatten(metrics: dict[str, Any]) -> dict[str, float]:
    """Numbers, and dicts of numbers as ``<name>_<key>[_ms]``; anything else is not a metric."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if isinstance(v, dict):
            stem, unit = (k[:-3], "_ms") if k.endswith("_ms") else (k, "")
            out.update({f"{stem}_{q}{unit}": float(x) for q, x in v.items() if _number(x)})
        elif _number(v):
            out[k] = float(v)
    return out


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def simulate_task(task: Task) -> Outcome:
    """The default runner: the same single run ``coorp compare`` makes."""
    run = run_policy(task.scenario, task.policy, task.seed, task.duration_ns, task.source)
    metrics = _flatten(run.metrics)
    metrics["events"] = float(run.events)
    warnings = run.metrics.get("warnings") or []
    return {"metrics": metrics, "infeasible": run.infeasible, "wall_s": run.wall_s,
            "warnings": [str(w) for w in warnings]}  # fmt: skip


class RunCache:
    """Finished runs as JSON files ``<root>/<key[:2]>/<key>.json``, written atomically, so
    an interrupted sweep leaves only whole entries behind."""

    def __init__(self, root: Path) -> None:
        if root.exists() and not root.is_dir():
            raise UsageError(f"cache {root} exists and is not a directory")
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Outcome | None:
        try:
            entry = json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None
        outcome = entry.get("outcome") if isinstance(entry, dict) else None
        return outcome if isinstance(outcome, dict) and "metrics" in outcome else None

    def put(self, key: str, task: Task, version: str, outcome: Outcome) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {"key": key, "run": task.describe(), "code_version": version, "outcome": outcome}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry))
        os.replace(tmp, path)


class Progress(Protocol):
    def start(self, total: int, cached: int) -> None: ...
    def done(self, task: Task, outcome: Outcome) -> None: ...


@dataclass(frozen=True)
class SweepResult:
    plan: SweepPlan
    code_version: str
    #: Outcome of ``plan.tasks[i]``.
    outcomes: list[Outcome]
    executed: int
    cached: int
    wall_s: float

    def rows(self) -> list[dict[str, Any]]:
        """The long table: one row per run and metric (NaN: the value does not exist)."""
        ref: dict[tuple[str, str, int], float] = {}
        ref_all: dict[tuple[str, str, int], dict[str, float]] = {}
        edca: dict[tuple[str, str, int], float] = {}
        for task, out in zip(self.plan.tasks, self.outcomes, strict=True):
            at = (task.scenario_label, task.overrides, task.seed)
            if task.policy == BH_ONLY:
                ref[at] = out["metrics"]["bh_mbps"]
                ref_all[at] = out["metrics"]
            elif task.policy == "edca":
                edca[at] = out["metrics"]["epoch_s"]
        rows = []
        for task, out in zip(self.plan.tasks, self.outcomes, strict=True):
            at = (task.scenario_label, task.overrides, task.seed)
            m = dict(out["metrics"])
            m["utilization"] = _ratio(m.get("bh_mbps", math.nan), ref.get(at, math.nan))
            m["epoch_vs_edca"] = _ratio(m.get("epoch_s", math.nan), edca.get(at, math.nan))
            # A fleet's per channel and per cell: learning data against the BH-only run's.
            base = ref_all.get(at, {})
            for name in [k for k in m if k.startswith(_FLEET_BH)]:
                group = name[len(_FLEET_BH[0]) :] if name.startswith(_FLEET_BH[0]) else None
                key = "channel" if group is not None else "cell"
                if group is None:
                    group = name[len(_FLEET_BH[1]) :]
                m[f"{key}_utilization_{group}"] = _ratio(m[name], base.get(name, math.nan))
            names = [k for k in METRICS if k in m] + sorted(set(m) - set(METRICS))
            warnings = join_warnings(self._warnings(task, out, ref.get(at, math.nan)))
            for name in names:
                rows.append({
                    "scenario": task.scenario_label, "team_size": task.team_size,
                    "policy": task.policy, "seed": task.seed, "overrides": task.overrides,
                    "duration_s": task.duration_ns / 1e9, "code_version": self.code_version,
                    "metric": name, "value": float(m[name]), "infeasible": out["infeasible"],
                    "warnings": warnings,
                })  # fmt: skip
        return rows

    @staticmethod
    def _warnings(task: Task, out: Outcome, ref_bh_mbps: float) -> list[str]:
        """The run's short-run warnings (none in cache entries older than them), and
        "utilization is null" when its BH-only reference delivered no bulk data."""
        own = {"warnings": out.get("warnings") or [], "infeasible": out["infeasible"]}
        if task.policy == BH_ONLY:
            return list(own["warnings"])
        ref = {"bh_mbps": ref_bh_mbps if math.isfinite(ref_bh_mbps) else None}
        got = comparison_warnings({task.policy: own}, ref, duration_s=task.duration_ns / 1e9,
                                  reference_name=BH_ONLY)  # fmt: skip
        return got[task.policy]


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and math.isfinite(b) else math.nan


def _ray_module() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigurationError(
            "--ray needs Ray, which is not installed: pip install 'coorp[ray]'"
        ) from None
    return ray


def run_sweep(
    plan: SweepPlan,
    *,
    jobs: int | None = None,
    ray_address: str | None = None,
    use_ray: bool = False,
    cache: RunCache | None = None,
    runner: Runner | None = None,
    progress: Progress | None = None,
    version: str | None = None,
) -> SweepResult:
    """Run every task of ``plan`` not already in ``cache``; return all outcomes.

    ``jobs`` processes (default: every core; 1 runs in this process); with ``use_ray`` the
    same tasks become Ray tasks on the cluster at ``ray_address`` (or a new local
    instance with ``jobs`` CPUs). Each finished run is cached as soon as it finishes.
    """
    if jobs is None:
        jobs = os.cpu_count() or 1
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    ray = _ray_module() if use_ray else None
    runner = simulate_task if runner is None else runner
    version = code_version() if version is None else version
    t0 = time.perf_counter()
    keys = [t.key(version) for t in plan.tasks]
    by_key: dict[str, Outcome] = {}
    todo: dict[str, Task] = {}
    for key, task in zip(keys, plan.tasks, strict=True):
        if key in by_key or key in todo:
            continue
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            by_key[key] = hit
        else:
            todo[key] = task
    cached = len(by_key)
    if progress is not None:
        progress.start(len(todo) + cached, cached)

    def finish(key: str, outcome: Outcome) -> None:
        by_key[key] = outcome
        if cache is not None:
            cache.put(key, todo[key], version, outcome)
        if progress is not None:
            progress.done(todo[key], outcome)

    # Longest first (team size x duration) so the pool's tail is short.
    order = sorted(todo, key=lambda k: -todo[k].team_size * todo[k].duration_ns)
    if ray is not None:
        _run_ray(ray, ray_address, jobs, runner, [(k, todo[k]) for k in order], finish)
    elif jobs == 1 or len(order) <= 1:
        for key in order:
            finish(key, runner(todo[key]))
    else:
        _run_pool(jobs, runner, [(k, todo[k]) for k in order], finish)
    return SweepResult(
        plan=plan, code_version=version, outcomes=[by_key[k] for k in keys],
        executed=len(todo), cached=cached, wall_s=time.perf_counter() - t0,
    )  # fmt: skip


def _run_pool(
    jobs: int,
    runner: Runner,
    items: Iterable[tuple[str, Task]],
    finish: Callable[[str, Outcome], None],
) -> None:
    items = list(items)
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(items)))
    try:
        pending = {pool.submit(runner, task): key for key, task in items}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f]):
                finish(pending.pop(fut), fut.result())
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _run_ray(
    ray: Any,
    address: str | None,
    jobs: int,
    runner: Runner,
    items: list[tuple[str, Task]],
    finish: Callable[[str, Outcome], None],
) -> None:
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        try:
            if address:
                ray.init(address=address, **kwargs)
            else:
                ray.init(num_cpus=jobs, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigurationError(
                f"--ray {address or '(local)'}: cannot start or reach Ray: {exc}"
            ) from None
        started = True
    try:
        remote = ray.remote(num_cpus=1)(runner)
        pending = {remote.remote(task): key for key, task in items}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                finish(pending.pop(ref), ray.get(ref))
    finally:
        if started:
            ray.shutdown()
