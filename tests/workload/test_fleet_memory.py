"""A fleet run leaves nothing behind in its process once its result is dropped: its
objects are in reference cycles (an access function and its station, the loop's
callbacks and the simulation), and ``run_fleet`` used to freeze them out of the
collector's sight (``gc.freeze``), so that a sweep's worker grew by a whole run's heap
with every run."""

from __future__ import annotations

import gc

import pytest

from coorp.scenario import load_scenario, resolve_scenario
from coorp.sim.station import Station
from coorp.workload import run_fleet


def _stations() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, Station))


@pytest.mark.parametrize("policy", ["edca", "coorp"])
def test_a_dropped_fleet_run_is_collected(policy: str) -> None:
    sc = load_scenario(resolve_scenario("fleet-50"))
    gc.collect()
    frozen, before = gc.get_freeze_count(), _stations()
    per_run = len(sc.stations)
    for _ in range(3):
        r = run_fleet(sc, policy, seed=1, duration_ns=200_000_000)
        assert r.loops  # the run ran: loop records to drop
        assert gc.isenabled()
        assert gc.get_freeze_count() == frozen  # nothing left out of the collector's sight
        del r
        # At most the last run's objects wait for a collection; every earlier run's were
        # collected by the time the next one started: a process does not grow run by run.
        assert _stations() - before in (0, per_run)
    gc.collect()
    assert _stations() == before
