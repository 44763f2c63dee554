"""Per-link spatial streams (``[[links.overrides]] spatial_streams``): one-low and all-low
in the paper's configuration (``iw ... vht-mcs-5 1:0``: MCS 0 at 1 stream), checked
when loading, and carried to the MAC's airtimes and SchedWiFi's Eq. 4 windows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coorp import ScenarioError
from coorp.control import stw_duration_ns
from coorp.phy import SIFS_NS, VhtMode, vht_ppdu_duration_ns
from coorp.policies import SchedWifiPolicy, Team
from coorp.policies._hooks import per_packet_estimate_ns
from coorp.scenario import Scenario, load_scenario, parse_scenario
from coorp.sim import Simulation
from coorp.sim.timing import psdu_bytes
from crl_scenarios import crl_scenario

ROOT = Path(__file__).resolve().parents[2] / "scenarios"
PAPER_LOW_MBPS = 29.25  # MCS 0, 1 spatial stream, 80 MHz, long GI
PERIOD_NS = round(33_333.3 * 1000)


def rate_mbps(sim: Simulation, src: str, dst: str) -> float:
    s, d = sim.station(src), sim.station(dst)
    return sim.timing.mode(sim.links.rate_code(s.idx, d.idx)).rate_mbps


def test_the_paper_rate_is_mcs0_at_one_stream() -> None:
    assert VhtMode(0, 1, 80).rate_mbps == PAPER_LOW_MBPS
    assert VhtMode(0, 2, 80).rate_mbps == 2 * PAPER_LOW_MBPS  # what one-low used to pin


def test_one_low_puts_r4_at_the_paper_rate_and_nobody_else() -> None:
    sim = Simulation(load_scenario(ROOT / "one-low.toml"))
    assert rate_mbps(sim, "r4", "leader") == PAPER_LOW_MBPS
    assert rate_mbps(sim, "leader", "r4") == PAPER_LOW_MBPS
    r4, leader = sim.station("r4").idx, sim.station("leader").idx
    assert sim.links.mcs(r4, leader) == 0 and sim.links.spatial_streams_of(r4, leader) == 1
    for r in ("r1", "r2", "r3"):
        assert rate_mbps(sim, r, "leader") > 500 and rate_mbps(sim, "leader", r) > 500
        assert sim.links.spatial_streams_of(sim.station(r).idx, leader) == 2


def test_all_low_puts_every_link_at_the_paper_rate() -> None:
    sim = Simulation(load_scenario(ROOT / "all-low.toml"))
    names = list(sim.stations)
    assert {rate_mbps(sim, a, b) for a in names for b in names if a != b} == {PAPER_LOW_MBPS}


def _data(override: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {
        "duration_s": 0.05, "phy": {"width_mhz": 80, "spatial_streams": 2},
        "links": {"mcs": 7, "overrides": [{"src": "a", "dst": "b", "mcs": 0} | override]},
        "stations": [{"name": "a"}, {"name": "b"}],
    } | kw  # fmt: skip


@pytest.mark.parametrize("value", [0, 5, "two"])
def test_a_bad_spatial_streams_value_names_the_field(value: object) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_data({"spatial_streams": value}), source="bad.toml")
    text = str(info.value)
    assert text.startswith("invalid scenario bad.toml:")
    assert "links.overrides[0].spatial_streams" in text and repr(value) in text


def test_an_mcs_that_does_not_exist_at_the_links_streams_names_the_field() -> None:
    # VHT MCS 9 does not exist for 1 stream at 20 MHz (it does for 3 streams).
    data = _data({"mcs": 9, "spatial_streams": 1}, phy={"width_mhz": 20, "spatial_streams": 3})
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, source="bad.toml")
    text = str(info.value)
    assert "links.overrides[0].spatial_streams = 1: MCS 9 does not exist for 1 spatial" in text
    assert "allowed MCS at 1 stream(s): [0, 1, 2, 3, 4, 5, 6, 7, 8]" in text
    # The same MCS at the PHY's 3 streams is fine.
    assert parse_scenario(_data({"mcs": 9}, phy={"width_mhz": 20, "spatial_streams": 3}))


def test_the_ppdu_limit_uses_the_links_own_streams() -> None:
    # 20 MHz, MCS 0: a 6000-byte packet fits one PPDU at 2 streams, not at 1.
    phy = {"width_mhz": 20, "spatial_streams": 2}
    assert parse_scenario(_data({}, phy=phy, packet_bytes=6000))
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_data({"spatial_streams": 1}, phy=phy, packet_bytes=6000))
    assert "at MCS 0 (links.overrides[0], a -> b; 1 spatial stream(s), 20 MHz" in str(info.value)
    # The slowest link is the one at 1 stream, although another link has the same MCS
    # and comes first in station order.
    overrides = [
        {"src": "a", "dst": "b", "mcs": 0},
        {"src": "b", "dst": "a", "mcs": 0, "spatial_streams": 1},
    ]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(
            _data({}, phy=phy, packet_bytes=6000) | {"links": {"mcs": 3, "overrides": overrides}}
        )
    assert "links.overrides[1], b -> a; 1 spatial stream(s)" in str(info.value)


def test_the_mac_sends_at_the_links_own_streams() -> None:
    # One 1000-byte datagram on an idle channel: its exchange lasts exactly the 1-stream
    # PPDU, SIFS and the Ack (from the PHY, not from the simulator's tables).
    data = _data(
        {"spatial_streams": 1},
        packet_bytes=1500,
        flows=[{"kind": "datagram", "name": "d", "src": "a", "dst": "b", "size_bytes": 1000,
                "times_us": [1000.0]}],
    )  # fmt: skip
    sim = Simulation(parse_scenario(data), trace=True)
    result = sim.run(50_000_000)
    assert result.trace is not None and len(result.trace) == 1
    start, end, collided, _, _, _, (psdu,), _ = result.trace[0]
    assert psdu == psdu_bytes([1000 + 28 + 38])  # UDP/IP headers, MAC framing
    ppdu = vht_ppdu_duration_ns(psdu, VhtMode(0, 1, 80))
    assert not collided
    assert end - start == ppdu + SIFS_NS + sim.timing.ack_ns
    assert ppdu > vht_ppdu_duration_ns(psdu, VhtMode(0, 2, 80))


def test_schedwifi_windows_and_the_ctt_guess_use_the_links_own_streams() -> None:
    # r1's uplink at MCS 3 with 1 stream (117 Mb/s) or the PHY's 2 (234 Mb/s); others MCS 7.
    # (At the paper's 29.25 Mb/s SchedWiFi is infeasible: 12 KB with 7 retries is 27 ms.)
    def scenario(streams: int | None) -> Scenario:
        override = {"src": "r1", "dst": "leader", "mcs": 3, "spatial_streams": streams}
        return crl_scenario(2, links={"mode": "fixed", "mcs": 7, "overrides": [override]})

    def installed(sc: Scenario) -> tuple[Simulation, SchedWifiPolicy]:
        sim = Simulation(sc)
        wl = sc.workload
        assert wl is not None
        team = Team(sim=sim, leader=wl.leader, workers=tuple(sc.workers), ls_flows=frozenset(),
                    mpc=wl.mpc, options=sc.policy)  # fmt: skip
        policy = SchedWifiPolicy(team)
        policy.install()
        return sim, policy

    (sim1, p1), (sim2, p2) = installed(scenario(1)), installed(scenario(None))
    assert VhtMode(3, 1, 80).rate_mbps == 117.0 and VhtMode(3, 2, 80).rate_mbps == 234.0
    opts = sim1.scenario.policy.schedwifi
    skew, ack = round(opts.clock_skew_us * 1000), round(opts.tx_ack_us * 1000)

    def stw(rate: float) -> int:
        return stw_duration_ns(12_288, rate, retries=opts.retries, tx_ack_ns=ack,
                               clock_skew_ns=skew)  # fmt: skip

    # Only r1's perception window differs: Eq. 4 at 117 instead of 234 Mb/s.
    extra = (stw(117.0) - stw(234.0)) / PERIOD_NS
    assert p1.stats()["reserved_fraction"] - p2.stats()["reserved_fraction"] == pytest.approx(
        extra, rel=1e-9
    )
    # The CTT's per-packet guess before any sample uses r1's slowest link, now slower.
    assert per_packet_estimate_ns(sim1, "r1") > per_packet_estimate_ns(sim2, "r1")
    assert per_packet_estimate_ns(sim1, "r2") == per_packet_estimate_ns(sim2, "r2")
