"""``[[workload.ls_flows]]``, ``[[workload.link_changes]]`` and ``coordinated`` bulk flows:
bad values are refused with the field, the value and what is allowed."""

from __future__ import annotations

from typing import Any

import pytest

from coorp import ScenarioError
from coorp.scenario import load_scenario, parse_scenario, resolve_scenario


def _doc(**workload: Any) -> dict[str, Any]:
    return {
        "stations": [{"name": "leader"}, {"name": "r1"}, {"name": "guest"}],
        "workload": {"leader": "leader", "workers": ["r1"], **workload},
    }


def _flow(**over: Any) -> dict[str, Any]:
    return {"name": "lidar", "src": "r1", "dst": "leader", "size_bytes": 1000,
            "period_us": 1e5, **over}  # fmt: skip


def _errors(doc: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(doc, source="t.toml")
    return str(exc.value)


def test_a_valid_flow_and_its_defaults() -> None:
    sc = parse_scenario(_doc(ls_flows=[_flow(phase_us="random", drift_ppm=-50.0)]))
    (f,) = sc.workload.ls_flows  # type: ignore[union-attr]
    assert f.coordinated and f.deadline == 1e5 and f.category == "VO"
    assert f.phase_us == "random" and f.active_us is None


@pytest.mark.parametrize(
    ("over", "expect"),
    [
        ({"src": "zz"}, "workload.ls_flows[0].src = 'zz': unknown station; stations:"),
        ({"dst": "r1"}, "workload.ls_flows[0].dst = 'r1': equals src"),
        ({"src": "guest"}, "workload.ls_flows[0].coordinated = True: 'guest' is not in the team"),
        ({"name": "control:r1"}, "starts like the workload's own flows"),
        ({"drift_ppm": 60_000}, "workload.ls_flows[0].drift_ppm = 60000"),
        ({"phase_us": -1.0}, "phase_us = -1.0: allowed: a number >= 0 or 'random'"),
        ({"active_us": [[5, 2]]}, "active_us[0] = [5.0, 2.0]: allowed: 0 <= start < stop"),
        ({"active_us": [[0, 5], [4, 9]]}, "allowed: sorted, disjoint intervals"),
        ({"tail_scale_us": 10, "tail_max_us": 5}, "tail_max_us = 5.0 is below tail_scale_us"),
        ({"jitter": "uniform"}, "workload.ls_flows[0].jitter = 'uniform'"),
        ({"period": 5}, "workload.ls_flows[0].period = 5: unknown key"),
    ],
)
def test_bad_flows_are_named(over: dict[str, Any], expect: str) -> None:
    assert expect in _errors(_doc(ls_flows=[_flow(**over)]))


def test_a_guest_flow_outside_the_team_is_fine_when_not_coordinated() -> None:
    parse_scenario(_doc(ls_flows=[_flow(src="guest", coordinated=False)]))


def test_flow_names_are_unique_across_flows_and_ls_flows() -> None:
    doc = _doc(ls_flows=[_flow(), _flow()])
    assert "workload.ls_flows[1].name = 'lidar': is already the name" in _errors(doc)
    doc = _doc(ls_flows=[_flow(name="up")])
    doc["flows"] = [{"kind": "bulk", "name": "up", "src": "guest", "dst": "leader"}]
    assert "workload.ls_flows[0].name = 'up'" in _errors(doc)


def test_link_changes_must_name_stations_and_a_rate_that_exists() -> None:
    bad = {"at_s": 1.0, "src": "r1", "dst": "nowhere", "mcs": 3}
    assert "workload.link_changes[0].dst = 'nowhere': unknown station" in _errors(
        _doc(link_changes=[bad])
    )
    doc = _doc(link_changes=[{"at_s": 1.0, "src": "r1", "dst": "leader", "mcs": 9}])
    doc["phy"] = {"width_mhz": 20, "spatial_streams": 1}
    assert "workload.link_changes[0].mcs = 9: MCS 9 does not exist for 1 spatial" in _errors(doc)
    # A full packet must fit one PPDU at the new rate, as for [[links.overrides]].
    doc = _doc(link_changes=[{"at_s": 1.0, "src": "r1", "dst": "leader", "mcs": 0,
                              "spatial_streams": 1}])  # fmt: skip
    doc["phy"], doc["packet_bytes"] = {"width_mhz": 20, "spatial_streams": 1}, 7000
    assert "longer than aPPDUMaxTime" in _errors(doc)


def test_coordinated_bulk_needs_a_team_robot() -> None:
    doc = _doc()
    doc["flows"] = [{"kind": "bulk", "name": "up", "src": "guest", "dst": "leader",
                     "coordinated": True}]  # fmt: skip
    assert "flows[0].coordinated = True: flow 'up': coordinated bulk data needs a team" in (
        _errors(doc)
    )


@pytest.mark.parametrize(
    "name",
    ["crl-5-heavy-tail", "crl-5-guest", "crl-5-guest-leader", "crl-5-download",
     "crl-5-multiflow", "crl-5-60hz", "crl-5-drift-pause", "crl-5-links"],
)  # fmt: skip
def test_the_shipped_families_load(name: str) -> None:
    sc = load_scenario(resolve_scenario(name))
    assert sc.workload is not None and sc.name == name
