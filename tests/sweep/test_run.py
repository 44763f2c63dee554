"""Running sweeps: the cache (hit on rerun, resume after an interruption, invalidation),
serial vs process pool bit for bit, infeasible policies as results, the long table."""

from __future__ import annotations

import builtins
import json
import math
from pathlib import Path
from typing import Any

import pytest

from coorp._errors import ConfigurationError
from coorp.sweep import (
    METRICS,
    Outcome,
    RunCache,
    SweepPlan,
    Task,
    aggregate,
    parse_sweep_spec,
    plan_sweep,
    run_sweep,
    simulate_task,
)

VERSION = "test-version"


def dump(value: Any) -> str:
    """Exact text of ``value`` (float repr round-trips; NaN compares equal to NaN here)."""
    return json.dumps(value, sort_keys=True)


def tiny_plan(path: Path, **over: Any) -> SweepPlan:
    data: dict[str, Any] = {"scenarios": [str(path)], "policies": ["edca", "coorp"],
                            "seeds": "1-2", "duration_s": 0.6, **over}  # fmt: skip
    return plan_sweep(parse_sweep_spec(data))


class Counting:
    """A runner that records what it ran and can stop the sweep after ``stop_after`` runs
    (standing in for Ctrl-C or a killed machine)."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.ran: list[str] = []
        self.stop_after = stop_after

    def __call__(self, task: Task) -> Outcome:
        if self.stop_after is not None and len(self.ran) == self.stop_after:
            raise KeyboardInterrupt
        self.ran.append(task.describe())
        return simulate_task(task)


def test_a_rerun_is_served_from_the_cache_without_running_anything(
    tmp_path: Path, tiny: Path
) -> None:
    plan = tiny_plan(tiny)
    cache = RunCache(tmp_path / "cache")
    first = Counting()
    a = run_sweep(plan, jobs=1, cache=cache, runner=first, version=VERSION)
    assert len(first.ran) == len(plan.tasks) == 6 and a.executed == 6 and a.cached == 0
    second = Counting()
    b = run_sweep(plan, jobs=1, cache=cache, runner=second, version=VERSION)
    assert second.ran == [] and b.executed == 0 and b.cached == 6
    assert dump(b.rows()) == dump(a.rows())


def test_an_interrupted_sweep_resumes_with_the_runs_it_had_not_finished(
    tmp_path: Path, tiny: Path
) -> None:
    plan = tiny_plan(tiny)
    cache = RunCache(tmp_path / "cache")
    stopped = Counting(stop_after=4)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(plan, jobs=1, cache=cache, runner=stopped, version=VERSION)
    assert len(stopped.ran) == 4
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 4
    assert not list((tmp_path / "cache").rglob("*.tmp"))
    rest = Counting()
    result = run_sweep(plan, jobs=1, cache=cache, runner=rest, version=VERSION)
    assert len(rest.ran) == 2 and not set(rest.ran) & set(stopped.ran)
    assert result.cached == 4 and result.executed == 2
    fresh = run_sweep(plan, jobs=1, runner=Counting(), version=VERSION)
    assert dump(result.rows()) == dump(fresh.rows())


def test_code_version_duration_and_overrides_each_invalidate_the_cache(
    tmp_path: Path, tiny: Path
) -> None:
    cache = RunCache(tmp_path / "cache")
    run_sweep(tiny_plan(tiny), jobs=1, cache=cache, version=VERSION)
    for plan, version in [
        (tiny_plan(tiny), "edited-code"),
        (tiny_plan(tiny, duration_s=0.7), VERSION),
        (tiny_plan(tiny, overrides={"workload.mpc.jitter_us": 100}), VERSION),
    ]:
        counting = Counting()
        run_sweep(plan, jobs=1, cache=cache, runner=counting, version=version)
        assert len(counting.ran) == 6, version


def test_the_bh_only_reference_runs_once_for_policy_option_overrides(tiny: Path) -> None:
    plan = tiny_plan(tiny, policies=["coorp"], seeds=1, overrides={"coorp.margin_us": [1e3, 3e3]})
    assert len(plan.tasks) == 4  # 2 combos x (coorp + bh-only)
    counting = Counting()
    result = run_sweep(plan, jobs=1, runner=counting, version=VERSION)
    assert sorted(counting.ran) == sorted(
        ["tiny-2 bh-only seed 1 [coorp.margin_us=1000.0]",
         "tiny-2 coorp seed 1 [coorp.margin_us=1000.0]",
         "tiny-2 coorp seed 1 [coorp.margin_us=3000.0]"]
    )  # fmt: skip
    util = [r for r in result.rows() if r["metric"] == "utilization" and r["policy"] == "coorp"]
    assert len(util) == 2 and all(0 < r["value"] <= 1.2 for r in util)


def test_process_pool_and_serial_runs_are_bit_identical(tiny: Path) -> None:
    plan = tiny_plan(tiny)
    serial = run_sweep(plan, jobs=1, version=VERSION)
    pool = run_sweep(plan, jobs=2, version=VERSION)
    assert pool.executed == serial.executed == len(plan.tasks)
    strip = [{k: v for k, v in o.items() if k != "wall_s"} for o in serial.outcomes]
    assert dump(strip) == dump(
        [{k: v for k, v in o.items() if k != "wall_s"} for o in pool.outcomes]
    )
    assert dump(serial.rows()) == dump(pool.rows())


def test_the_long_table_has_one_row_per_run_and_metric(tiny: Path) -> None:
    plan = tiny_plan(tiny)
    rows = run_sweep(plan, jobs=1, version=VERSION).rows()
    assert len(rows) == len(plan.tasks) * len(METRICS)
    first = rows[0]
    assert set(first) == {"scenario", "team_size", "policy", "seed", "overrides", "duration_s",
                          "code_version", "metric", "value", "infeasible", "warnings"}  # fmt: skip
    assert (first["scenario"], first["team_size"], first["duration_s"]) == ("tiny-2", 2, 0.6)
    assert first["code_version"] == VERSION
    by = {(r["policy"], r["seed"], r["metric"]): r["value"] for r in rows}
    # utilization is the policy's BH throughput over the BH-only run of the same seed
    for seed in (1, 2):
        ref = by["bh-only", seed, "bh_mbps"]
        assert ref > 0
        assert by["coorp", seed, "utilization"] == by["coorp", seed, "bh_mbps"] / ref
        assert by["edca", seed, "epoch_vs_edca"] == 1.0
    assert math.isnan(by["bh-only", 1, "violation_rate"])  # no MPC loop in the reference


def test_an_infeasible_policy_is_a_result_row(tiny: Path) -> None:
    # At MCS 0 SchedWiFi's exclusive windows do not fit the MPC period.
    plan = tiny_plan(tiny, policies=["schedwifi", "edca"], seeds=1, duration_s=0.3,
                     overrides={"links.mcs": 0})  # fmt: skip
    result = run_sweep(plan, jobs=1, version=VERSION)
    rows = result.rows()
    sw = [r for r in rows if r["policy"] == "schedwifi"]
    assert sw and all("SchedWiFi needs" in r["infeasible"] for r in sw)
    assert all(math.isnan(r["value"]) for r in sw if r["metric"] == "bh_mbps")
    assert all(r["infeasible"] is None for r in rows if r["policy"] == "edca")
    agg = {(a["policy"], a["metric"]): a for a in aggregate(rows)}
    assert agg["schedwifi", "violation_rate"]["infeasible"] == 1
    assert agg["edca", "violation_rate"]["n"] == 1


def test_a_corrupt_cache_entry_is_recomputed(tmp_path: Path, tiny: Path) -> None:
    plan = tiny_plan(tiny, seeds=1)
    cache = RunCache(tmp_path / "cache")
    run_sweep(plan, jobs=1, cache=cache, version=VERSION)
    victim = sorted((tmp_path / "cache").rglob("*.json"))[0]
    victim.write_text("{not json")
    counting = Counting()
    run_sweep(plan, jobs=1, cache=cache, runner=counting, version=VERSION)
    assert len(counting.ran) == 1


def test_ray_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tiny: Path) -> None:
    real_import = builtins.__import__

    def no_ray(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigurationError, match=r"pip install 'coorp\[ray\]'"):
        run_sweep(tiny_plan(tiny), use_ray=True, version=VERSION)
