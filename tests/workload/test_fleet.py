"""A fleet's loops, learning and hand-overs (``coorp.workload.run_fleet``) under the fleet
policies: who holds the permit per channel, what per-team coordination lets through, a
robot's protection across a hand-over, a cut backbone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coorp import ScenarioError, UsageError
from coorp.report import compare
from coorp.scenario import parse_scenario
from coorp.workload import run_fleet

ROOT = Path(__file__).resolve().parents[2]
SECOND = 1_000_000_000
PERIOD = 33_333_300


def _fleet(*, ch2: int = 36, per_ap: int = 3, mover: bool = False, **fleet: Any) -> Any:
    """Two APs 20 m apart (in carrier-sense range), ``per_ap`` robots each; with
    ``mover``, one more robot that drives from ap1 to ap2 at 20 m/s from 0.3 s."""
    stations = [{"name": "ap1", "position_m": [0, 0]}, {"name": "ap2", "position_m": [20, 0]}]
    for b, x in enumerate((0.0, 20.0)):
        for i in range(per_ap):
            stations.append({"name": f"r{b}{i}", "position_m": [x + 2.0, 1.0 + i]})
    routes = []
    if mover:
        stations.append({"name": "m", "position_m": [1.0, -2.0]})
        routes.append({"robot": "m", "waypoints_m": [[19.0, -2.0]], "speed_m_s": 20.0,
                       "start_s": 0.3, "repeat": False})  # fmt: skip
    doc = {
        "name": "tiny-fleet", "duration_s": 1.5, "links": {"mode": "distance"},
        "hw_queue": {"mode": "shared"}, "stations": stations,
        "fleet": {
            "access_points": [{"name": "ap1", "channel": 36}, {"name": "ap2", "channel": ch2}],
            "routes": routes,
            "learning": {"update_bytes": 2_000_000, "model_bytes": 2_000_000,
                         "train_us": 50_000, "start_spread_us": 50_000},
            **fleet,
        },
    }  # fmt: skip
    return parse_scenario(doc)


def test_coorp_keeps_one_bulk_sender_per_channel_across_teams() -> None:
    sc = _fleet()
    per_channel = run_fleet(sc, "coorp", seed=1)
    per_team = run_fleet(sc, "coorp-team", seed=1)
    assert per_channel.overlapping_senders == {"ch36": 1}
    # Each team's leader alone: both teams send bulk data at once on the one channel.
    assert per_team.overlapping_senders == {"ch36": 2}
    leaders = per_channel.policy_stats["leaders"]
    assert leaders["ap2"]["relayed"] > 0  # ap1 coordinates ("ap1" < "ap2")
    assert leaders["ap1"]["relayed"] == 0
    assert per_team.policy_stats["leaders"]["ap2"]["relayed"] == 0
    for r in (per_channel, per_team):
        assert r.bh_mbps > 0 and r.violation_rate <= 0.05


def test_teams_on_other_channels_send_at_once() -> None:
    r = run_fleet(_fleet(ch2=52), "coorp", seed=1)
    assert r.overlapping_senders == {"ch36": 1, "ch52": 1}
    assert set(r.bh_mbps_by("channel")) == {"36", "52"}
    assert all(v > 0 for v in r.bh_mbps_by("channel").values())
    # Nobody relays: each channel's only leader coordinates it.
    assert all(s["relayed"] == 0 for s in r.policy_stats["leaders"].values())


def test_a_robot_hands_over_and_its_protection_follows_it() -> None:
    sc = _fleet(mover=True)
    r = run_fleet(sc, "coorp", seed=2)
    ((robot, old, new, _decided, left, joined),) = r.handovers
    assert (robot, old, new) == ("m", "ap1", "ap2")
    assert joined - left == 30_000_000  # the association gap
    roam = r.metrics()["roam"]
    assert roam["handovers"] == 1
    # Its next sends were predicted from its own time model: protected within a period.
    assert roam["protection_gap_ms_max"] is not None
    assert roam["protection_gap_ms_max"] <= PERIOD / 1e6
    assert roam["misses_after_join"] == 0 and roam["loops_after_join"] >= 1
    after = [x for x in r.loops if x.robot == "m" and x.sample_ns >= joined]
    assert after and all(x.ap == "ap2" for x in after if x.send_ns >= 0)
    assert any(x.end_ns > 0 for x in after)  # its loop runs with its new leader
    # Samples while it was off the air never left it: lost to the hand-over, not misses.
    during = [x for x in r.loops if x.robot == "m" and left <= x.sample_ns < joined - 1_000_000]
    assert during and all(x.lost for x in during)


def test_a_robot_that_starts_afresh_is_unprotected_for_several_periods() -> None:
    kept = run_fleet(_fleet(mover=True), "coorp", seed=2).metrics()["roam"]
    fresh = _fleet(mover=True, roaming={"keep_planner": False})
    afresh = run_fleet(fresh, "coorp", seed=2).metrics()["roam"]
    # A new time model needs four sends before it predicts the fifth.
    assert afresh["protection_gap_ms_max"] > 3 * PERIOD / 1e6 > kept["protection_gap_ms_max"]


def test_a_cut_backbone_falls_back_to_per_team_permits() -> None:
    sc = _fleet(backbone={"outages": [{"access_point": "ap2", "start_s": 0.1, "end_s": 1.0}]})
    r = run_fleet(sc, "coorp", seed=1)
    ap2 = r.policy_stats["leaders"]["ap2"]
    assert ap2["alone_ns"] > 0  # ap2 coordinated its own team while cut off
    assert r.policy_stats["backbone_dropped"] > 0
    assert r.overlapping_senders is not None and r.overlapping_senders["ch36"] <= 2


def test_schedwifi_names_the_channels_it_cannot_schedule() -> None:
    sc = _fleet(ch2=52, per_ap=2)
    doc = sc.model_dump()
    doc["stations"] += [{"name": f"x{i}", "position_m": [1.0, -1.0 - 0.1 * i]} for i in range(30)]
    r = run_fleet(parse_scenario(doc), "schedwifi", seed=1, duration_ns=SECOND // 2)
    m = r.metrics()
    assert set(m["channel_infeasible"]) == {"36"}  # 32 robots' windows exceed the period
    assert m["channel_miss_rate"]["36"] != m["channel_miss_rate"]["36"]  # NaN
    assert m["channel_miss_rate"]["52"] == m["channel_miss_rate"]["52"]


def test_same_seed_same_run_and_compare_reports_channels() -> None:
    sc = _fleet()
    a = run_fleet(sc, "coorp", seed=3, duration_ns=SECOND // 2)
    b = run_fleet(sc, "coorp", seed=3, duration_ns=SECOND // 2)
    assert a.metrics() == b.metrics()
    cmp = compare(sc, ["edca", "coorp"], seed=3, duration_ns=SECOND // 2)
    block = cmp.to_json()["policies"]["coorp"]
    assert set(block["channel_utilization"]) == {"36"}
    assert block["channel_utilization"]["36"] > 0
    assert set(block["cell_miss_rate"]) == {"ap1", "ap2"}


def test_fleet_errors() -> None:
    sc = _fleet().model_dump()
    with pytest.raises(ScenarioError, match=r"\[workload\].*remove \[workload\]"):
        parse_scenario({**sc, "workload": {"leader": "ap1"}})
    with pytest.raises(UsageError, match="for a fleet scenario; available: edca"):
        run_fleet(_fleet(), "coorp-paper")


def test_the_shipped_fleet_scenarios_are_what_the_script_writes() -> None:
    check = [sys.executable, str(ROOT / "benchmarks" / "fleet_scenarios.py"), "--check"]
    assert subprocess.run(check, capture_output=True).returncode == 0


def test_a_sweep_of_a_fleet_gives_each_channel_its_utilization(tmp_path: Path) -> None:
    from coorp.sweep import parse_sweep_spec, plan_sweep, run_sweep

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_TOML)
    spec = parse_sweep_spec({"scenarios": [str(path)], "policies": ["coorp", "coorp-team"],
                             "seeds": [1], "duration_s": 0.5})  # fmt: skip
    plan = plan_sweep(spec)
    assert {t.policy for t in plan.tasks} == {"coorp", "coorp-team", "bh-only"}
    assert plan.tasks[0].team_size == 2  # every robot of every cell
    rows = run_sweep(plan, jobs=1).rows()
    got = {(r["policy"], r["metric"]) for r in rows}
    for policy in ("coorp", "coorp-team"):
        assert {(policy, "channel_utilization_36"), (policy, "channel_utilization_52"),
                (policy, "cell_miss_rate_ap1")} <= got  # fmt: skip
    with pytest.raises(UsageError, match="for a fleet scenario"):
        plan_sweep(parse_sweep_spec({"scenarios": [str(path)], "policies": ["coorp-paper"],
                                     "seeds": [1]}))  # fmt: skip


TINY_TOML = """
name = "tiny-fleet-sweep"
[links]
mode = "distance"
[[stations]]
name = "ap1"
position_m = [0.0, 0.0]
[[stations]]
name = "ap2"
position_m = [20.0, 0.0]
[[stations]]
name = "a"
position_m = [2.0, 1.0]
[[stations]]
name = "b"
position_m = [18.0, 1.0]
[fleet]
[[fleet.access_points]]
name = "ap1"
channel = 36
[[fleet.access_points]]
name = "ap2"
channel = 52
[fleet.learning]
update_bytes = 1000000
model_bytes = 1000000
start_spread_us = 10000
"""


def _digest() -> str:
    r = run_fleet(_fleet(mover=True, per_ap=2), "coorp", seed=5, duration_ns=SECOND)
    loops = [(x.robot, x.sample_ns, x.end_ns, x.lost) for x in r.loops]
    return json.dumps([r.metrics(), loops], sort_keys=True, default=str)


def test_the_compiled_fleet_computes_what_the_plain_one_does() -> None:
    from coorp.sim import COMPILED

    if not COMPILED:
        pytest.skip("nothing compiled here: coorp --version says why")
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        "from test_fleet import _digest; print(_digest())"
    )
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "COORP_PURE": "1"}, timeout=300)  # fmt: skip
    assert plain.returncode == 0, plain.stderr[-1500:]
    assert plain.stdout.strip() == _digest()
