"""The shipped team scenarios are what their names say: crl-N, one-low, all-low."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from coorp.analysis.crl_model import team_scenario
from coorp.scenario import load_scenario
from coorp.sim import Simulation

ROOT = Path(__file__).resolve().parents[2] / "scenarios"
BASE = load_scenario(ROOT / "crl-5.toml")


@pytest.mark.parametrize("n", [2, 5, 10, 20, 40])
def test_crl_n_has_n_robots_in_a_10_m_disc_and_crl5s_workload(n: int) -> None:
    sc = load_scenario(ROOT / f"crl-{n}.toml")
    assert sc.name == f"crl-{n}"
    assert len(sc.stations) == n and len(sc.workers) == n - 1  # the leader is a robot too
    leader = next(s for s in sc.stations if s.name == sc.workload.leader)
    assert tuple(leader.position_m) == (0.0, 0.0)
    for s in sc.stations:
        assert math.hypot(*s.position_m) <= 10.0
    for part in ("phy", "mac", "hw_queue", "workload", "policy"):
        if n != 5 and part == "workload":
            continue  # crl-5 names its workers r1..r4, the generated teams w1..wN
        assert getattr(sc, part) == getattr(BASE, part), part
    assert sc.workload.mpc == BASE.workload.mpc and sc.workload.drlc == BASE.workload.drlc


@pytest.mark.parametrize("n", [2, 10, 20, 40])
def test_generated_teams_match_the_model_commands_placement(n: int) -> None:
    # `coorp model --simulate --seed 1` places the same n - 1 workers: file and code agree.
    sc = load_scenario(ROOT / f"crl-{n}.toml")
    gen = team_scenario(BASE, n - 1, seed=1)
    for a, b in zip(sc.stations, gen.stations, strict=True):
        assert a.name == b.name
        assert a.position_m == pytest.approx(b.position_m, abs=0.005)


def _mcs(sim: Simulation, src: str, dst: str) -> int:
    index = {s.name: i for i, s in enumerate(sim.scenario.stations)}
    return sim.links.mcs(index[src], index[dst])


def test_one_low_pins_only_r4_to_mcs0() -> None:
    sim = Simulation(load_scenario(ROOT / "one-low.toml"))
    assert _mcs(sim, "r4", "leader") == _mcs(sim, "leader", "r4") == 0
    for r in ("r1", "r2", "r3"):
        assert _mcs(sim, r, "leader") > 0 and _mcs(sim, "leader", r) > 0


def test_all_low_is_mcs0_everywhere() -> None:
    sim = Simulation(load_scenario(ROOT / "all-low.toml"))
    names = [s.name for s in sim.scenario.stations]
    assert {_mcs(sim, a, b) for a in names for b in names if a != b} == {0}
