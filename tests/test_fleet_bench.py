"""``benchmarks/fleet.py --json`` writes exactly the keys of issue 37's deliverable 5, from
real runs (a tiny fleet, one seed, a short run), in this process (a fresh interpreter per
test would cost more than the runs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import fleet as fleet_bench

TINY = """
name = "tiny-fleet-bench"
duration_s = 1.0
[hw_queue]
mode = "shared"
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
[[stations]]
name = "m"
position_m = [1.0, -1.0]
[fleet]
[[fleet.access_points]]
name = "ap1"
channel = 36
[[fleet.access_points]]
name = "ap2"
channel = 36
[[fleet.routes]]
robot = "m"
waypoints_m = [[19.0, -1.0]]
speed_m_s = 20.0
start_s = 0.1
repeat = false
[fleet.learning]
update_bytes = 1000000
model_bytes = 1000000
start_spread_us = 10000
"""


def test_fleet_benchmark_writes_exactly_the_issue_keys(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY)
    out = tmp_path / "fleet.json"
    args = [
        "--json", str(out), "--scenarios", str(scenario), "--policies", "edca,coorp",
        "--seeds", "1", "--duration", "1", "--roam-scenario", "tiny-fleet-bench",
        "--cache", str(tmp_path / "cache"), "--jobs", "1", "--no-speed",
    ]  # fmt: skip
    assert fleet_bench.main(args) == 0
    doc = json.loads(out.read_text())
    assert set(doc) == {"cells", "roam", "speed", "runtime"}
    assert {(c["channel"], c["policy"]) for c in doc["cells"]} == {(36, "edca"), (36, "coorp")}
    for c in doc["cells"]:
        assert set(c) == {"scenario", "channel", "policy", "miss_rate", "utilization"}
        assert 0.0 <= c["miss_rate"] <= 1.0 and c["utilization"] > 0.0
    assert set(doc["roam"]) == {"protection_gap_ms_max", "association_gap_ms"}
    assert doc["roam"]["association_gap_ms"] == 30.0  # the robot handed over once
    assert doc["roam"]["protection_gap_ms_max"] <= 33.3334
    assert doc["speed"] == []  # --no-speed; a speed row is what one fresh process measures:
    row = fleet_bench._speed_one((str(scenario), "coorp", 0.5, 1))
    speed = {k: row[k] for k in ("scenario", "policy", "realtime_factor", "rss_mb")}
    assert speed["scenario"] == "tiny-fleet-bench" and speed["policy"] == "coorp"
    assert speed["realtime_factor"] > 0 and speed["rss_mb"] > 0
    assert doc["runtime"] == {"overlapping_bh_senders": None, "ls_miss_rate_across_move": None}


def test_the_roam_breakdown_lists_each_hand_over_with_its_gap_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import fleet_roam

    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY)
    run = fleet_roam.one_run(str(scenario), "coorp", 1, 1.0)
    (row,) = run["rows"]  # robot m handed over from ap1 to ap2 once
    assert (row["robot"], row["from"], row["to"], row["assoc_ms"]) == ("m", "ap1", "ap2", 30.0)
    # Protected from the join on (ProtectionPlanner.resume): its first send, wherever
    # in the period it came, was inside a window.
    assert row["first_protected"] and row["protected_ms"] == row["first_send_ms"]
    assert 0 <= row["first_send_ms"] <= run["period_ms"] + 2
    assert fleet_roam.main(["--scenario", str(scenario), "--seeds", "1", "--duration", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 hand-overs" in out and "association gap: 30.00 ms" in out
