"""Golden equivalence for fleets: a multi-channel run computes what it computed before.

``tests/sim/test_golden_equivalence.py`` pins single-channel runs; fleets run several
channels in one event loop (each channel's pending event in a slot of its own, issue 37's
speed work), which those cases do not reach. The digests in ``fleet_golden_digests.json``
were computed on main at 381bd2d, before that work: every channel's exchange trace and
counters, every loop record, hand-over, byte count, policy counter and LS latency must
stay bit-identical. Regenerate (only for a change meant to alter results, with the reason
in the commit message) with::

    COORP_REGEN_GOLDEN=1 .venv/bin/pytest -q tests/workload/test_fleet_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import coorp.workload._fleet as fleet_mod
from coorp.scenario import load_scenario, resolve_scenario
from coorp.sim import Simulation
from golden_digest import _CHANNEL_COUNTERS, _canon, digest

GOLDEN = Path(__file__).with_name("fleet_golden_digests.json")
REGEN = os.environ.get("COORP_REGEN_GOLDEN") == "1"
CASES = [
    ("fleet-50", "edca"), ("fleet-50", "coorp"), ("fleet-50", "coorp-team"),
    ("fleet-50", "schedwifi"), ("fleet-200", "edca"), ("fleet-200", "coorp"),
]  # fmt: skip
DURATION_NS = 1_000_000_000


def _fleet_digest(monkeypatch: pytest.MonkeyPatch, scenario: str, policy: str) -> str:
    sims: list[Simulation] = []

    class Recording(Simulation):  # type: ignore[misc]
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            sims.append(self)

    monkeypatch.setattr(fleet_mod, "Simulation", Recording)
    sc = load_scenario(resolve_scenario(scenario))
    r = fleet_mod.run_fleet(sc, policy, seed=1, duration_ns=DURATION_NS, trace=True)
    (sim,) = sims
    extra = {
        "channels": [
            [_canon(ch.stats.trace), [getattr(ch.stats, k) for k in _CHANNEL_COUNTERS]]
            for ch in sim.channels
        ],
        "loops": [
            [lp.robot, lp.index, lp.sample_ns, lp.ap, lp.send_ns, lp.end_ns, lp.lost, lp.protected]
            for lp in r.loops
        ],
        "handovers": _canon(r.handovers),
        "bytes": _canon(r.bytes_by_cell),
        "cycles": r.cycles,
        "policy_stats": _canon(r.policy_stats),
        "ls_latency_ns": r.ls_latency_ns.tolist(),
        "other": _canon(r.other_bytes),
        "overlap": _canon(r.overlapping_senders),
    }
    # the run must have done something, or the digest pins nothing
    assert sum(len(ch.stats.trace) for ch in sim.channels) > 1000
    assert len(r.loops) > 0
    return digest(r.sim, extra)


@pytest.mark.parametrize(("scenario", "policy"), CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_a_fleet_run_is_what_it_was(
    monkeypatch: pytest.MonkeyPatch, scenario: str, policy: str
) -> None:
    got = _fleet_digest(monkeypatch, scenario, policy)
    key = f"{scenario}/{policy}"
    stored = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if REGEN:
        stored[key] = got
        GOLDEN.write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n")
        pytest.skip("regenerated")
    assert got == stored[key], f"{key}: the fleet's results changed (see module docstring)"
