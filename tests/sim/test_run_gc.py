"""Simulation.run freezes the heap that exists before it for the cyclic collector and
gives it back afterwards; a process that froze objects itself keeps them frozen."""

from __future__ import annotations

import gc

from coorp.scenario import parse_scenario
from coorp.sim import Simulation

_SCENARIO = {
    "name": "gc",
    "duration_s": 0.01,
    "stations": [
        {"name": "ap", "position_m": [0.0, 0.0]},
        {"name": "s1", "position_m": [3.0, 0.0]},
    ],
    "flows": [{"name": "up", "src": "s1", "dst": "ap", "kind": "bulk"}],
}


def _run(seen: list[int]) -> None:
    sim = Simulation(parse_scenario(_SCENARIO), seed=1)
    sim.call_at(1_000_000, lambda: seen.append(gc.get_freeze_count()))
    sim.run()


def test_run_freezes_during_and_unfreezes_after() -> None:
    # A fleet run earlier in this worker leaves what it made frozen, on purpose
    # (coorp.workload's run_fleet): start from a heap nobody froze.
    gc.unfreeze()
    seen: list[int] = []
    _run(seen)
    assert seen and seen[0] > 0  # frozen while the events ran
    assert gc.get_freeze_count() == 0


def test_run_leaves_a_callers_freeze_alone() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        seen: list[int] = []
        _run(seen)
        # Not frozen again by the run (the set-up's objects would add to the count;
        # frozen objects freed since only take from it), and not unfrozen after it.
        assert seen and 0 < seen[0] <= frozen
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
