from __future__ import annotations

from pathlib import Path

import pytest
from tiny_world import tiny

from coorp._errors import ScenarioError
from coorp.cosim import RobotKind, load_cosim, parse_cosim

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_scenario_loads() -> None:
    cs = load_cosim(ROOT / "scenarios" / "cosim-5.toml")
    assert [s.name for s in cs.scenario.stations] == [r.name for r in cs.cosim.robots]
    assert len(cs.cosim.robots) == 5
    assert cs.cosim.step_ns == 2_000_000  # 500 Hz
    assert cs.cosim.robot("leader").kind is RobotKind.STATIC
    assert cs.scenario.links.packet_errors  # loss follows the link budget


def test_twenty_robot_scenario_loads() -> None:
    cs = load_cosim(ROOT / "scenarios" / "cosim-20.toml")
    assert len(cs.cosim.robots) == 20 and len(cs.scenario.workers) == 19


def test_robots_become_stations_at_their_start() -> None:
    cs = parse_cosim(tiny())
    assert [(s.name, s.position_m) for s in cs.scenario.stations] == [
        ("leader", (0.0, 0.0)), ("r1", (2.0, 0.0)),
    ]  # fmt: skip


def _error(data: dict) -> str:
    with pytest.raises(ScenarioError) as exc:
        parse_cosim(data, source="x.toml")
    return str(exc.value)


def test_unknown_key_names_the_field() -> None:
    msg = _error(tiny(physics_step_s=0.002))
    assert "cosim.physics_step_s" in msg and "physics_step_ms" in msg


def test_worker_without_route_is_refused() -> None:
    d = tiny()
    d["cosim"]["robots"][1]["waypoints_m"] = []
    assert "waypoints_m" in _error(d) and "r1" in _error(d)


def test_missing_section_and_bad_values() -> None:
    d = tiny()
    del d["cosim"]
    assert "[cosim]" in _error(d)
    assert "cosim.physics_step_ms" in _error(tiny(physics_step_ms=-1))
    d = tiny()
    d["cosim"]["robots"][1]["waypoints_m"] = [[50.0, 0.0]]
    assert "outside the floor" in _error(d)


def test_aerial_robot_flies_above_obstacles() -> None:
    d = tiny(world={"obstacles": [{"name": "w", "center_m": [1, 1], "size_m": [1, 1],
                                   "height_m": 3.0}]})  # fmt: skip
    d["cosim"]["robots"][1]["kind"] = "aerial"
    d["cosim"]["robots"][1]["altitude_m"] = 2.0
    assert "altitude_m" in _error(d)


def test_links_come_from_the_world() -> None:
    d = tiny()
    d["links"] = {"mode": "distance"}
    assert "links" in _error(d)


def test_stations_must_match_robots() -> None:
    d = tiny()
    d["stations"] = [{"name": "leader"}, {"name": "other"}]
    assert "[[cosim.robots]]" in _error(d)


def test_reference_speed_below_max_speed() -> None:
    d = tiny(task={"speed_m_s": 2.0})
    assert "max_speed_m_s" in _error(d) and "r1" in _error(d)


def test_formation_robots_follow_the_shared_route_shifted() -> None:
    d = tiny(task={"kind": "formation", "route_m": [[0.0, 4.0], [0.0, 8.0]], "speed_m_s": 0.5})
    d["cosim"]["robots"][1]["waypoints_m"] = []
    d["cosim"]["robots"][1]["offset_m"] = [2.0, 0.0]
    cs = parse_cosim(d)
    assert cs.cosim.waypoints(cs.cosim.robots[1]) == [(2.0, 4.0), (2.0, 8.0)]
    d["cosim"]["robots"][1]["offset_m"] = None
    assert "offset_m" in _error(d)
    d["cosim"]["task"]["route_m"] = []
    assert "route_m" in _error(d)
