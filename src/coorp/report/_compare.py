"""``coorp compare``: every policy on the same scenario and seed, side by side.

Runs are independent processes (``jobs`` at a time); each returns only what the report
needs, so results do not depend on ``jobs``. A policy that cannot run on the scenario
(:class:`~coorp.InfeasibleError`, e.g. SchedWiFi's windows do not fit the period) is a
result: its row says why and its metrics are null. The BH-only run (MPC off, plain EDCA) is
the bandwidth reference for utilization; epoch times are also given relative to EDCA
when EDCA is among the policies.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np

from coorp._errors import InfeasibleError, UsageError
from coorp._manifest import json_safe
from coorp.policies import fleet_policy_names, get_fleet_policy, get_policy, policy_names
from coorp.scenario import Scenario
from coorp.workload import comparison_warnings, run_crl, run_fleet

__all__ = [
    "BH_ONLY",
    "FLEET_BLOCKS",
    "Comparison",
    "PolicyRun",
    "check_policy",
    "compare",
    "deadline_ms",
    "default_policies",
    "deployable",
    "run_policy",
]

#: Name of the reference run in reports.
BH_ONLY = "bh-only"


def deployable(name: str) -> bool | None:
    """Whether reports may present ``name`` as a policy one can deploy: ``False`` for a
    reference bound (``Policy.deployable = False``, e.g. ``oracle``; labelled with
    :func:`coorp.policies.policy_label`), ``True`` for other registered policies,
    ``None`` for the BH-only reference and names not registered in this process."""
    if name == BH_ONLY:
        return None
    if name in policy_names():
        return bool(get_policy(name).deployable)
    if name in fleet_policy_names():
        return bool(get_fleet_policy(name).deployable)
    return None


def check_policy(scenario: Scenario, name: str) -> None:
    """A :class:`UsageError` listing the known names if ``name`` cannot run on
    ``scenario``: a team policy (``coorp.policies``), or a fleet policy on a scenario with
    ``[fleet]``."""
    if scenario.fleet is not None:
        get_fleet_policy(name)
    else:
        get_policy(name)


def default_policies(scenario: Scenario) -> list[str]:
    """Every registered policy that runs on ``scenario`` (its PHY standard; a fleet's)."""
    if scenario.fleet is not None:
        return fleet_policy_names()
    return policy_names(scenario.phy.standard)


def deadline_ms(scenario: Scenario) -> float:
    """The reaction-time bound of the scenario's loops (ms)."""
    if scenario.fleet is not None:
        return scenario.fleet.loop.deadline_us / 1000
    if scenario.workload is None:
        raise UsageError(f"scenario {scenario.name!r} has no [workload] or [fleet] section")
    return scenario.workload.mpc.deadline_us / 1000


@dataclass(frozen=True)
class PolicyRun:
    """What the report keeps of one run."""

    name: str
    metrics: dict[str, Any]
    reaction_ms: np.ndarray
    ls_hw_depths: np.ndarray
    policy_stats: dict[str, Any]
    wall_s: float
    events: int
    #: Why the policy cannot run on this scenario (then every metric is NaN).
    infeasible: str | None = None
    #: The run's raw tables (``CrlResult.tables()``; ``coorp.report.write_raw_tables``).
    raw: dict[str, Any] | None = None


_NO_METRICS: dict[str, Any] = {
    "violation_rate": math.nan,
    "reaction_ms": {"p50": math.nan, "p90": math.nan, "p99": math.nan},
    "ls_latency_ms": {"p50": math.nan, "p99": math.nan},
    "bh_mbps": math.nan, "other_mbps": math.nan, "epoch_s": math.nan, "loops": 0, "epochs": 0,
    "lag_ms_max": math.nan,
}  # fmt: skip

#: Per-flow blocks of a run's metrics (``CrlResult.metrics``), present only where the
#: scenario has LS flows beside the MPC loop or traffic outside the team.
PER_FLOW = ("flow_miss_rate", "flow_latency_p99_ms", "flow_mbps")
#: A fleet's blocks (``coorp.workload.FleetResult.metrics``): per channel and per cell
#: (AP), the hand-overs' costs, the most bulk senders at once per contention domain.
FLEET_BLOCKS = (
    "channel_miss_rate", "channel_bh_mbps", "cell_miss_rate", "cell_bh_mbps", "roam",
    "overlapping_bh_senders", "channel_infeasible",
)  # fmt: skip


def run_policy(
    scenario: Scenario, policy: str, seed: int, duration_ns: int | None, source: str
) -> PolicyRun:
    """One policy (or :data:`BH_ONLY`) on ``scenario`` with ``seed``: what a report keeps
    of it; an infeasible policy gives a run whose ``infeasible`` says why."""
    bh_only = policy == BH_ONLY
    run = run_fleet if scenario.fleet is not None else run_crl
    try:
        r = run(
            scenario, "edca" if bh_only else policy, seed=seed, duration_ns=duration_ns,
            bh_only=bh_only, source=source,
        )  # fmt: skip
    except InfeasibleError as exc:
        empty = np.zeros(0)
        return PolicyRun(
            name=policy, metrics=copy.deepcopy(_NO_METRICS), reaction_ms=empty,
            ls_hw_depths=empty.astype(int), policy_stats={}, wall_s=0.0, events=0,
            infeasible=str(exc),
        )  # fmt: skip
    return PolicyRun(
        name=policy, metrics=r.metrics(), reaction_ms=r.reaction_ns / 1e6,
        ls_hw_depths=r.ls_hw_depths, policy_stats=r.policy_stats, wall_s=r.sim.wall_s,
        events=r.sim.events_processed, raw=r.tables(),
    )  # fmt: skip


def _utilization_by(metrics: dict[str, Any], reference: dict[str, Any], key: str) -> Any:
    """``{group: bulk Mb/s / the reference's}`` for a fleet's ``<key>_bh_mbps`` block."""
    mine, ref = metrics.get(f"{key}_bh_mbps"), reference.get(f"{key}_bh_mbps")
    if not isinstance(mine, dict) or not isinstance(ref, dict):
        return None
    return {
        g: (v / ref[g] if ref.get(g) and ref[g] > 0 and math.isfinite(v) else math.nan)
        for g, v in mine.items()
    }


@dataclass(frozen=True)
class Comparison:
    scenario: str
    seed: int
    duration_s: float
    deadline_ms: float
    runs: dict[str, PolicyRun]
    reference: PolicyRun

    @property
    def policies(self) -> list[str]:
        return list(self.runs)

    def utilization(self, name: str) -> float:
        ref = self.reference.metrics["bh_mbps"]
        return self.runs[name].metrics["bh_mbps"] / ref if ref > 0 else math.nan

    def epoch_vs_edca(self, name: str) -> float:
        if "edca" not in self.runs:
            return math.nan
        base = self.runs["edca"].metrics["epoch_s"]
        return self.runs[name].metrics["epoch_s"] / base if base > 0 else math.nan

    def warnings(self) -> dict[str, list[str]]:
        """Short-run warnings per run name (the reference under ``bh-only``): each run's
        own plus "utilization is null" when the reference delivered no bulk data."""
        return comparison_warnings(
            {n: {**r.metrics, "infeasible": r.infeasible} for n, r in self.runs.items()},
            self.reference.metrics, duration_s=self.duration_s, reference_name=BH_ONLY,
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The stable JSON shape other tools read (NaN becomes null)."""
        out: dict[str, Any] = {"scenario": self.scenario, "seed": self.seed, "policies": {}}
        warnings = self.warnings()
        for name, run in self.runs.items():
            m = run.metrics
            out["policies"][name] = json_safe({
                "violation_rate": m["violation_rate"],
                "reaction_ms": m["reaction_ms"],
                "ls_latency_ms": m["ls_latency_ms"],
                "bh_mbps": m["bh_mbps"],
                "other_mbps": m.get("other_mbps", math.nan),
                "utilization": self.utilization(name),
                "epoch_s": m["epoch_s"],
                "epoch_vs_edca": self.epoch_vs_edca(name),
                "loops": m["loops"],
                "epochs": m["epochs"],
                "lag_ms_max": m["lag_ms_max"],
                "infeasible": run.infeasible,
                "deployable": deployable(name),
                "warnings": warnings[name],
                **{k: m[k] for k in PER_FLOW if k in m},
                **{k: m[k] for k in FLEET_BLOCKS if k in m},
                **self._fleet_utilization(m),
            })  # fmt: skip
        out["reference"] = json_safe({"name": BH_ONLY, "bh_mbps": self.reference.metrics["bh_mbps"],
                                   "other_mbps": self.reference.metrics.get("other_mbps"),
                                   "epoch_s": self.reference.metrics["epoch_s"],
                                   "warnings": warnings[BH_ONLY]})  # fmt: skip
        out["duration_s"] = self.duration_s
        out["deadline_ms"] = self.deadline_ms
        # Every warning once, named by its run: what a reader must know before the numbers.
        out["warnings"] = [f"{n}: {w}" for n, ws in warnings.items() for w in ws]
        return out

    def _fleet_utilization(self, m: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key in ("channel", "cell"):
            u = _utilization_by(m, self.reference.metrics, key)
            if u is not None:
                out[f"{key}_utilization"] = u
        return out

    def rows(self) -> list[dict[str, Any]]:
        """One flat row per policy (for CSV)."""
        rows = []
        for name, block in self.to_json()["policies"].items():
            row: dict[str, Any] = {"policy": name}
            for k, v in block.items():
                if isinstance(v, dict):
                    row.update({f"{k}_{q}": x for q, x in v.items()})
                elif isinstance(v, list):  # warnings: one cell
                    row[k] = " | ".join(map(str, v))
                else:
                    row[k] = v
            rows.append(row)
        return rows


def compare(
    scenario: Scenario,
    policies: Sequence[str],
    *,
    seed: int | None = None,
    duration_ns: int | None = None,
    jobs: int = 1,
    source: str = "<scenario>",
    on_done: Callable[[PolicyRun], None] | None = None,
) -> Comparison:
    """Run ``policies`` (registered names) and the BH-only reference on one scenario."""
    if scenario.workload is None and scenario.fleet is None:
        raise UsageError(f"{source} has no [workload] or [fleet] section; coorp compare needs one")
    if not policies:
        raise UsageError("give at least one policy")
    for name in policies:
        check_policy(scenario, name)  # fail fast with the list of known names
    if len(set(policies)) != len(policies):
        raise UsageError(f"policies listed twice: {list(policies)}")
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    seed = scenario.seed if seed is None else seed
    names = [*policies, BH_ONLY]
    done: dict[str, PolicyRun] = {}
    if jobs == 1:
        for name in names:
            done[name] = run_policy(scenario, name, seed, duration_ns, source)
            if on_done is not None:
                on_done(done[name])
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(names))) as pool:
            futures = {
                pool.submit(run_policy, scenario, name, seed, duration_ns, source): name
                for name in names
            }
            for fut in as_completed(futures):
                run = fut.result()
                done[run.name] = run
                if on_done is not None:
                    on_done(run)
    duration_s = duration_ns / 1e9 if duration_ns is not None else scenario.duration_s
    return Comparison(
        scenario=scenario.name, seed=seed, duration_s=duration_s,
        deadline_ms=deadline_ms(scenario),
        runs={n: done[n] for n in policies}, reference=done[BH_ONLY],
    )  # fmt: skip
