"""benchmarks/gate_anatomy.py only reads the simulation: the probed run is the plain one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from coorp.scenario import load_scenario, resolve_scenario
from coorp.workload import run_crl

# A script beside the tests, not a package: load it from its file.
_spec = importlib.util.spec_from_file_location(
    "gate_anatomy", Path(__file__).resolve().parents[1] / "benchmarks" / "gate_anatomy.py"
)
assert _spec is not None and _spec.loader is not None
gate_anatomy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gate_anatomy)


def test_the_probe_changes_nothing_and_accounts_for_every_robot() -> None:
    probed = gate_anatomy.anatomy("crl-2", "coorp", seed=2, duration_s=4.0, sample_us=500.0)
    plain = run_crl(
        load_scenario(resolve_scenario("crl-2")), "coorp", seed=2, duration_ns=4 * 10**9
    )
    assert probed["bh_mbps"] == plain.bh_mbps
    assert probed["metrics"]["violation_rate"] == plain.violation_rate
    robots = probed["robots"]
    assert set(robots) == {"leader", "w1"}
    held = [r for r in robots.values() if r["holding s"] > 0]
    assert held  # the first epoch's data went out
    for r in held:
        assert 0 <= r["idle NIC %"] <= r["gate %"] <= 100
        assert r["windows/period"] > 0
        assert 0 <= r["late %"] <= 100
