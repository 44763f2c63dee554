"""Shipped scenario files load and run; defaults are the documented (standard) values."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from coorp.phy import LinkBudget
from coorp.scenario import (
    AccessCategory,
    BulkFlow,
    DatagramFlow,
    HwQueueMode,
    RetryPolicy,
    load_scenario,
    parse_scenario,
)
from coorp.sim import Simulation

ROOT = Path(__file__).resolve().parents[2]
# Simulation scenarios: TOML files in scenarios/ with stations (other configs live there
# too, e.g. the runtime's team file).
FILES = sorted(
    f for f in (ROOT / "scenarios").glob("*.toml") if "stations" in tomllib.loads(f.read_text())
)


def test_there_are_scenario_files() -> None:
    names = {f.name for f in FILES}
    assert {"saturation-5.toml", "local-congestion.toml", "example-minimal.toml",
            "example-distance.toml"} <= names  # fmt: skip


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_every_shipped_scenario_loads_and_builds(path: Path) -> None:
    sc = load_scenario(path)
    assert sc.name == path.stem  # file name and scenario name agree
    Simulation(sc, source=str(path))  # builds (and re-checks) what loaded


@pytest.mark.parametrize("path", [f for f in FILES if f.stem.startswith("example-")],
                         ids=lambda p: p.stem)  # fmt: skip
def test_examples_run_and_deliver(path: Path) -> None:
    r = Simulation(load_scenario(path), source=str(path)).run(100_000_000)
    assert r.total_throughput_mbps > 0
    assert any(f.delivered_packets for f in r.flows.values())


def test_minimal_scenario_defaults() -> None:
    sc = parse_scenario({"stations": [{"name": "a"}, {"name": "b"}]})
    assert (sc.name, sc.description, sc.duration_s, sc.seed) == ("scenario", "", 10.0, 1)
    assert sc.packet_bytes == 1500
    assert (sc.phy.width_mhz, sc.phy.spatial_streams, sc.phy.guard_interval.value) == (
        80, 2, "long",
    )  # fmt: skip
    assert sc.phy.basic_rate_mbps == 24
    mac = sc.mac
    assert (mac.retry_limit, mac.retry_policy) == (7, RetryPolicy.CLASSIC)
    assert mac.rts_threshold_bytes == 1_048_576  # larger than any PSDU: never
    assert (mac.max_ampdu_bytes, mac.max_ampdu_mpdus) == (1_048_575, 64)
    assert mac.edca == {}
    assert (sc.hw_queue.mode, sc.hw_queue.capacity_packets) == (HwQueueMode.PER_AC, 128)
    assert (sc.links.mode, sc.links.mcs, sc.links.packet_errors) == ("fixed", 7, False)
    assert sc.links.overrides == []
    pl = sc.links.pathloss
    assert (pl.tx_power_dbm, pl.reference_loss_db, pl.exponent, pl.margin_db) == (
        20.0, 46.7, 3.0, 0.0,
    )  # fmt: skip
    assert sc.stations[0].position_m == (0.0, 0.0)
    assert sc.flows == [] and sc.workload is None


def test_flow_defaults_and_kinds() -> None:
    sc = parse_scenario({
        "stations": [{"name": "a"}, {"name": "b"}],
        "flows": [
            {"kind": "datagram", "name": "d", "src": "a", "dst": "b", "size_bytes": 10,
             "times_us": [5, 1]},
            {"kind": "bulk", "name": "b", "src": "b", "dst": "a"},
        ],
    })  # fmt: skip
    d, b = sc.flows
    assert isinstance(d, DatagramFlow) and isinstance(b, BulkFlow)
    assert (d.category, d.start_us, d.jitter_us, d.period_us) == (AccessCategory.VO, 0, 0, None)
    assert (b.category, b.total_bytes, b.tcp_acks, b.start_us) == (
        AccessCategory.BE, None, True, 0,
    )  # fmt: skip


def test_scenarios_are_immutable() -> None:
    sc = parse_scenario({"stations": [{"name": "a"}, {"name": "b"}]})
    with pytest.raises(Exception, match="frozen"):
        sc.seed = 3  # type: ignore[misc]


def test_distance_mode_mcs_follows_the_link_budget() -> None:
    # Hand check of example-distance.toml: 40 MHz, 1 stream, 17 dBm, margin 2 dB.
    sc = load_scenario(ROOT / "scenarios" / "example-distance.toml")
    sim = Simulation(sc)
    lb = LinkBudget(17.0, 46.7, 3.0, 2.0)
    pos = {s.name: s.position_m for s in sc.stations}
    # 4 m: 17 - 46.7 - 18.06 = -47.8 dBm; 40 MHz MCS 9 needs -57 + 3 + 2 = -52: MCS 9.
    assert lb.best_mcs(4.0, 1, 40) == 9
    for name in ("near", "mid", "far"):
        expected = lb.best_mcs(math.dist(pos[name], pos["ap"]), 1, 40)
        assert sim.links.mcs(sim.station(name).idx, sim.station("ap").idx) == expected
    # The override pins ap -> far only.
    assert sim.links.mcs(sim.station("ap").idx, sim.station("far").idx) == 1
    assert sim.links.mcs(sim.station("far").idx, sim.station("ap").idx) == lb.best_mcs(18.0, 1, 40)
