"""Several BSSs on one simulation (``coorp.sim.cells``): who hears whom, association,
hand-overs.

Co-channel BSSs in carrier-sense range share one medium exactly as one BSS with all
their stations would; a BSS on another channel runs exactly as it would alone; a robot
that moves hands over to the stronger AP, off the air for the association gap.
"""

from __future__ import annotations

from typing import Any

import pytest

from coorp import ScenarioError
from coorp.scenario import (
    AccessCategory,
    cca_threshold_dbm,
    channel_block_mhz,
    contention_domains,
    hidden_pairs,
    parse_scenario,
)
from coorp.sim import Simulation, simulate

SECOND = 1_000_000_000


def _two_bss(n: int, ch2: int, *, sep: float = 4.0, fleet: bool = True, **extra: Any) -> Any:
    stations = [{"name": "ap1", "position_m": [0, 0]}, {"name": "ap2", "position_m": [sep, 0]}]
    flows = []
    for b, (ap, x) in enumerate((("ap1", 0.0), ("ap2", sep))):
        for i in range(n):
            name = f"s{b}{i}"
            stations.append({"name": name, "position_m": [x + 0.5, 0.5 + 0.1 * i]})
            flows.append({"kind": "bulk", "name": f"u{b}{i}", "src": name,
                          "dst": ap if fleet else "ap1", "tcp_acks": False})  # fmt: skip
    doc: dict[str, Any] = {
        "name": "two-bss", "mac": {"retry_policy": "ns3"}, "links": {"mode": "fixed", "mcs": 7},
        "stations": stations, "flows": flows, **extra,
    }  # fmt: skip
    if fleet:
        doc["fleet"] = {"access_points": [{"name": "ap1", "channel": 36},
                                          {"name": "ap2", "channel": ch2}]}  # fmt: skip
    return parse_scenario(doc)


def _delivered(result: Any, prefix: str) -> list[int]:
    return [f.delivered_bytes for n, f in sorted(result.flows.items()) if n.startswith(prefix)]


def test_co_channel_bsss_share_the_air_as_one_bss() -> None:
    one = simulate(_two_bss(3, 36, fleet=False), seed=2, duration_ns=SECOND // 2)
    two = simulate(_two_bss(3, 36), seed=2, duration_ns=SECOND // 2)
    assert list(two.domains) == ["ch36"]
    # The same stations on one medium: the same exchanges, collisions and bytes.
    assert _delivered(two, "u") == _delivered(one, "u")
    assert two.domains["ch36"].collisions == one.channel.collisions > 0


def test_a_bss_on_another_channel_runs_as_it_would_alone() -> None:
    two = simulate(_two_bss(3, 52), seed=3, duration_ns=SECOND // 2)
    assert sorted(two.domains) == ["ch36", "ch52"]
    alone = parse_scenario({
        "name": "alone", "mac": {"retry_policy": "ns3"}, "links": {"mode": "fixed", "mcs": 7},
        "stations": [{"name": "ap2"}, *({"name": f"s1{i}"} for i in range(3))],
        "flows": [{"kind": "bulk", "name": f"u1{i}", "src": f"s1{i}", "dst": "ap2",
                   "tcp_acks": False} for i in range(3)],
    })  # fmt: skip
    ref = simulate(alone, seed=3, duration_ns=SECOND // 2)
    # Bit-identical: the second domain's events run in the heap, ordered as the slot is.
    assert _delivered(two, "u1") == _delivered(ref, "u1")
    assert two.domains["ch52"].exchanges == ref.channel.exchanges
    # And each channel carries about what one BSS carries: twice the shared medium.
    shared = simulate(_two_bss(3, 36), seed=3, duration_ns=SECOND // 2)
    assert sum(_delivered(two, "u")) > 1.8 * sum(_delivered(shared, "u"))


def test_co_channel_aps_out_of_carrier_sense_range_are_two_domains() -> None:
    # 80 MHz: -76 dBm; at the default path loss (46.7 dB at 1 m, exponent 3) about 44 m.
    assert cca_threshold_dbm(20) == -82.0
    assert cca_threshold_dbm(80) == pytest.approx(-75.98, abs=0.01)
    near = _two_bss(1, 36, sep=40.0, links={"mode": "distance"})
    far = _two_bss(1, 36, sep=50.0, links={"mode": "distance"})
    assert [d.access_points for d in contention_domains(near)] == [("ap1", "ap2")]
    assert [d.name for d in contention_domains(far)] == ["ch36-1", "ch36-2"]
    # A stricter threshold (energy detection, -62 dBm) separates them too.
    doc = near.model_dump()
    doc["fleet"]["cca_dbm"] = -62.0
    assert len(contention_domains(parse_scenario(doc))) == 2
    hidden, total = hidden_pairs(near)["ch36"]
    assert total == 6 and hidden == 0  # 4 stations, 40 m apart at most


def test_channel_blocks_and_partial_overlap() -> None:
    assert channel_block_mhz(36, 80) == channel_block_mhz(48, 80) == (5170.0, 5250.0)
    assert channel_block_mhz(149, 80) == (5735.0, 5815.0)
    assert channel_block_mhz(165, 40) is None  # 165 pairs with nothing
    assert channel_block_mhz(37, 20) is None
    with pytest.raises(ScenarioError, match=r"overlaps 'ap1'.*partially overlapping"):
        _two_bss(1, 40)  # 80 MHz at primary 40 lies in 36's block
    with pytest.raises(ScenarioError, match="no 80 MHz channel has primary channel 165"):
        _two_bss(1, 165)


def test_fleet_scenario_errors_name_the_field() -> None:
    base = _two_bss(1, 36).model_dump()
    bad = {**base, "fleet": {"access_points": [{"name": "apX", "channel": 36}]}}
    msg = r"fleet.access_points\[0\].name = .apX.: is not a station"
    with pytest.raises(ScenarioError, match=msg):
        parse_scenario(bad)
    bad = {**base, "fleet": {"access_points": [{"name": "ap1", "channel": 36, "width_mhz": 40}]}}
    with pytest.raises(ScenarioError, match="one width per scenario"):
        parse_scenario(bad)
    far = _two_bss(1, 52).model_dump()
    far["flows"][0]["dst"] = "ap2"  # s00 is in ap1's cell, on another channel
    with pytest.raises(ScenarioError, match="not in one contention domain"):
        parse_scenario(far)


def _roaming(fast: bool = False, **roaming: Any) -> Any:
    return parse_scenario({
        "name": "roam", "links": {"mode": "distance"},
        "stations": [
            {"name": "ap1", "position_m": [0, 0]}, {"name": "ap2", "position_m": [30, 0]},
            {"name": "r1", "position_m": [2, 0]}, {"name": "r2", "position_m": [28, 1]},
        ],
        "flows": [{"kind": "bulk", "name": "bg", "src": "r2", "dst": "ap2"}],
        "fleet": {
            "access_points": [{"name": "ap1", "channel": 36}, {"name": "ap2", "channel": 52}],
            "roaming": {"fast_transition": fast, **roaming},
            "routes": [{"robot": "r1", "waypoints_m": [[28, 0]], "speed_m_s": 10.0,
                        "repeat": False}],
        },
    })  # fmt: skip


def test_a_moving_robot_hands_over_to_the_stronger_ap() -> None:
    sim = Simulation(_roaming(), seed=1)
    cells = sim.cells
    joined: list[tuple[str, str, int]] = []
    cells.on_join.append(lambda r, ap, t: joined.append((r, ap, t)))
    assert cells.ap_of == {"r1": "ap1", "r2": "ap2"}
    assert sim.station("r1").channel is cells.channels["ch36"]
    sim.run(4 * SECOND)
    assert cells.ap_of["r1"] == "ap2"
    assert sim.station("r1").channel is cells.channels["ch52"]
    (h,) = cells.handovers
    assert (h.robot, h.from_ap, h.to_ap) == ("r1", "ap1", "ap2")
    assert h.gap_ns == 30_000_000  # association_us's default
    # Past the midpoint (15 m) by the 6 dB hysteresis: 6 dB = 10·3·log10(d2/d1).
    x = sim.motion.position["r1"][0]
    assert x == 28.0
    assert joined == [("r1", "ap2", h.joined_ns)]


def test_fast_transition_shortens_the_gap() -> None:
    sim = Simulation(_roaming(fast=True, ft_us=5_000.0, scan_us=1_000.0), seed=1)
    sim.run(4 * SECOND)
    (h,) = sim.cells.handovers
    assert h.gap_ns == 6_000_000


def test_a_hand_over_flushes_what_robot_and_old_ap_held_for_each_other() -> None:
    sc = _roaming()
    sim = Simulation(sc, seed=1)
    up = sim.flow("up", "r1", "ap1", AccessCategory.BE, bulk=True)
    transfer = sim.start_transfer(up, None)
    left: list[int] = []
    sim.cells.on_leave.append(lambda r, ap, t: left.append(sim.station("r1").rings[up.ac].n))
    sim.run(4 * SECOND)
    assert left == [0]  # nothing of r1 left in its rings when it left
    assert transfer not in sim.station("r1").transfers  # the upload was abandoned
    assert sim.station("r1").dropped_packets > 0
    # r1 contends on ap2's medium now (its data rebound there), nowhere else.
    ch36, ch52 = sim.cells.channels["ch36"], sim.cells.channels["ch52"]
    assert all(e.station.name != "r1" for e in ch36.edcafs)
    assert any(e.station.name == "r1" for e in ch52.edcafs)


def test_a_hand_over_flushes_queued_ls_and_keeps_the_per_receiver_counts() -> None:
    # Robots' shared rings group A-MPDUs per receiver (main's default); an AP's per-AC
    # rings never do. A hand-over drops r1's queued LS fragments for ap1 with their
    # per-receiver counts, so that the driver's bursts start afresh at ap2.
    doc = _roaming().model_dump()
    doc["hw_queue"] = {"mode": "shared"}  # a commodity NIC's one ring on every robot
    sim = Simulation(parse_scenario(doc), seed=1)
    r1, ap1 = sim.station("r1"), sim.station("ap1")
    assert r1.group_ls and r1.shared
    assert not ap1.group_ls and not ap1.shared
    ls = sim.flow("cam", "r1", "ap1", AccessCategory.VI, bulk=False)
    for k in range(40):  # 2 MB every 100 ms: far more than the link carries
        sim.call_at(k * SECOND // 10, lambda: sim.send_message(ls, 2_000_000))
    seen: list[tuple[int, int]] = []

    def on_leave(robot: str, ap: str, now: int) -> None:
        q = r1.ls_queues[AccessCategory.VI]
        seen.append((len(q), sum(r1._ls_left[AccessCategory.VI].values())))

    sim.cells.on_leave.append(on_leave)
    sim.run(4 * SECOND)
    assert seen == [(0, 0)]
    assert ls.dropped_packets > 0
    assert any(m.lost for m in sim.messages if m.flow is ls)


def test_a_fleet_refuses_a_tcp_sender() -> None:
    doc = _two_bss(1, 36).model_dump()
    doc["tcp"] = {"sender": "cubic"}
    with pytest.raises(ScenarioError, match=r"tcp.sender = .cubic.: TCP senders are not"):
        parse_scenario(doc)
