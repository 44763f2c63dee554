"""From a spec to tasks: one per (scenario, override combination, policy, seed), plus the
BH-only reference once per (scenario, override combination, seed); and their cache keys."""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from coorp._errors import UsageError
from coorp.report import BH_ONLY, check_policy, default_policies
from coorp.scenario import PolicyOptions, Scenario, apply_overrides, load_scenario
from coorp.sweep._overrides import combinations, label
from coorp.sweep._spec import SweepSpec, resolve_scenario

__all__ = ["SweepPlan", "Task", "code_version", "plan_sweep"]

_SRC = Path(__file__).resolve().parents[1]


@cache
def code_version() -> str:
    """A hash of every ``.py`` file of the installed ``coorp`` package, of NumPy's version
    (its random streams) and of Python's: any code edit changes it, so cached runs made by
    other code are never reused."""
    h = hashlib.sha256()
    for p in sorted(_SRC.rglob("*.py")):
        h.update(p.relative_to(_SRC).as_posix().encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    h.update(f"numpy {np.__version__} python {platform.python_version()}".encode())
    return "src-" + h.hexdigest()[:16]


@dataclass(frozen=True)
class Task:
    """One simulation: a scenario (overrides applied), a policy or ``bh-only``, a seed."""

    scenario_label: str
    source: str
    scenario: Scenario = field(repr=False)
    policy: str
    seed: int
    overrides: str
    duration_ns: int

    @property
    def team_size(self) -> int:
        """The team's robots (a fleet's: every robot of every cell)."""
        fleet = self.scenario.fleet
        if fleet is not None:
            return len(self.scenario.stations) - len(fleet.access_points)
        return len(self.scenario.workers)

    def key(self, version: str) -> str:
        """The cache key: scenario content, policy, seed, duration and code version (the
        overrides are in the content; the BH-only run ignores the policy options)."""
        content = self.scenario.model_dump(mode="json")
        content.pop("name", None)
        content.pop("description", None)
        ident = {"scenario": content, "policy": self.policy, "seed": self.seed,
                 "duration_ns": self.duration_ns, "code": version}  # fmt: skip
        blob = json.dumps(ident, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def describe(self) -> str:
        extra = f" [{self.overrides}]" if self.overrides else ""
        return f"{self.scenario_label} {self.policy} seed {self.seed}{extra}"


@dataclass(frozen=True)
class SweepPlan:
    spec: SweepSpec
    #: label -> (source path, scenario as loaded)
    scenarios: dict[str, tuple[str, Scenario]]
    policies: list[str]
    override_labels: list[str]
    tasks: list[Task]

    @property
    def duration_s(self) -> dict[str, float]:
        return {t.scenario_label: t.duration_ns / 1e9 for t in self.tasks}


def plan_sweep(
    spec: SweepSpec, *, base_dir: Path | None = None, origin: str = "--set"
) -> SweepPlan:
    """Load every scenario, check every policy and override, and list the tasks.

    Nothing runs here; every error of the sweep is found before the first simulation.
    """
    policies = list(spec.policies) if spec.policies is not None else []
    for name in policies:
        if name == BH_ONLY:
            raise UsageError(f"{BH_ONLY!r} is the reference run every sweep adds; do not list it")
    loaded: dict[str, tuple[str, Scenario]] = {}
    for ref in spec.scenarios:
        path = resolve_scenario(ref, base_dir)
        sc = load_scenario(path)
        if sc.workload is None and sc.fleet is None:
            raise UsageError(
                f"{path} has no [workload] or [fleet] section; a sweep runs the CRL workload "
                "or a fleet's"
            )
        for name in policies:
            check_policy(sc, name)  # a UsageError listing the known names
        name = sc.name if sc.name not in loaded else Path(ref).stem
        if name in loaded:
            raise UsageError(f"scenario {ref!r} is listed twice (as {loaded[name][0]})")
        loaded[name] = (str(path), sc)
    combos = combinations(spec.overrides)
    variants = {
        (name, i): apply_overrides(sc, combo, source=source, origin=origin)
        for name, (source, sc) in loaded.items()
        for i, combo in enumerate(combos)
    }
    if spec.policies is None:
        # Every registered policy that runs on every scenario of the sweep (every PHY
        # standard of it; a fleet's policies for fleets).
        policies = []
        for v in variants.values():
            mine = default_policies(v)
            policies = mine if not policies else [p for p in policies if p in mine]
    tasks: list[Task] = []
    for name, (source, sc) in loaded.items():
        duration_ns = round((spec.duration_s or sc.duration_s) * 1e9)
        for i, combo in enumerate(combos):
            varied = variants[name, i]
            reference = varied.model_copy(update={"policy": PolicyOptions()})
            lab = label(combo)
            for policy in [*policies, BH_ONLY]:
                for seed in spec.seeds:
                    tasks.append(Task(
                        scenario_label=name, source=source,
                        scenario=reference if policy == BH_ONLY else varied,
                        policy=policy, seed=seed, overrides=lab, duration_ns=duration_ns,
                    ))  # fmt: skip
    return SweepPlan(
        spec=spec, scenarios=loaded, policies=policies,
        override_labels=[label(c) for c in combos], tasks=tasks,
    )  # fmt: skip
