"""Trigger-based UL OFDMA (``coorp.sim.UlOfdma``): what goes on the air, and when.

Two or four saturated stations send 1500-byte packets to the AP on an 80 MHz 2x2 HE
channel at HE-MCS 7 (1.6 µs GI: TB PPDUs use it too). Every exchange the scheduler runs
is checked against its duration worked out from the PHY functions: a BSRP trigger
(48 bytes for 4 users at 24 Mb/s: 40 µs), SIFS, the QoS Null TB PPDUs; then SIFS later a
Basic trigger (52 bytes: 40 µs), SIFS, the TB PPDUs for one Block Ack window of MPDUs,
SIFS, the multi-STA BlockAck (all-ack: 22 + 2 per station).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from coorp import UsageError
from coorp.phy import (
    HE_QOS_NULL_BSR_BYTES,
    HeMode,
    basic_trigger_bytes,
    bsrp_trigger_bytes,
    he_tb_ppdu_duration_ns,
    legacy_duration_ns,
    multi_sta_block_ack_bytes,
)
from coorp.scenario import Scenario, parse_scenario
from coorp.sim import AdmitAll, Simulation, UlOfdma, UlOfdmaConfig

SIFS = 16_000


def scenario(n: int, *, mode: str = "per_ac", ls: bool = False, **over: Any) -> Scenario:
    flows: list[dict[str, Any]] = [
        {"kind": "bulk", "name": f"up{i}", "src": f"s{i}", "dst": "ap", "tcp_acks": False}
        for i in range(n)
    ]
    if ls:
        flows.append({"kind": "datagram", "name": "ls", "src": "s0", "dst": "ap",
                      "size_bytes": 12288, "period_us": 33333.3, "start_us": 20_000})  # fmt: skip
    return parse_scenario({
        "name": "ofdma", "duration_s": 0.2,
        "phy": {"standard": "ax", "he_guard_interval_ns": 1600},
        "links": {"mode": "fixed", "mcs": 7},
        "hw_queue": {"mode": mode, "capacity_packets": 128},
        "stations": [{"name": "ap"}] + [{"name": f"s{i}"} for i in range(n)],
        "flows": flows, **over,
    })  # fmt: skip


def run(sc: Scenario, config: UlOfdmaConfig | None = None, seed: int = 1) -> tuple[Any, UlOfdma]:
    sim = Simulation(sc, seed=seed, trace=True)
    stations = [s.name for s in sc.stations if s.name != "ap"]
    sched = UlOfdma(sim, "ap", stations, config or UlOfdmaConfig())
    return sim.run(), sched


def tb_mode(nss: int = 2) -> HeMode:
    return HeMode(7, nss, 80, 1600, 2, ru_tones=242, tb=True)


def test_cascades_last_what_the_standard_says() -> None:
    result, sched = run(scenario(4))
    mode = tb_mode()
    bsrp = (
        legacy_duration_ns(bsrp_trigger_bytes(4), 24)
        + SIFS
        + he_tb_ppdu_duration_ns([(4 + HE_QOS_NULL_BSR_BYTES, mode)] * 4)
    )
    # One Block Ack window (64 MPDUs of 1538 bytes, delimiters and padding: 64 x 1544)
    # fits a 242-tone RU at HE-MCS 7 within aPPDUMaxTime.
    tb = he_tb_ppdu_duration_ns([(64 * 1544, mode)] * 4)
    assert tb < 5_484_000
    basic = (
        legacy_duration_ns(basic_trigger_bytes(4), 24) + SIFS + tb + SIFS
        + legacy_duration_ns(multi_sta_block_ack_bytes(4, all_ack=True), 24)
    )  # fmt: skip
    assert legacy_duration_ns(bsrp_trigger_bytes(4), 24) == 40_000
    ap = [t for t in result.trace if t[3] == ("ap",)]
    assert ap, "the scheduler never got the medium"
    kinds = []
    for start, end, collided, _st, _acs, mpdus, _psdu, _txop in ap:
        if collided:
            continue
        kinds.append("basic" if mpdus[0] else "bsrp")
        assert end - start == (basic if mpdus[0] else bsrp)
        if mpdus[0]:
            assert mpdus[0] == 4 * 64  # every user sends a full window
    # A Basic trigger follows each BSRP exchange a SIFS later, in the same TXOP.
    for a, b in itertools.pairwise(ap):
        if not a[5][0] and b[5][0]:
            assert b[0] == a[1] + SIFS and b[7] == a[7]
    assert kinds.count("basic") == sched.stats.basic_triggers >= 10


def test_mu_edca_keeps_triggered_stations_off_edca() -> None:
    result, sched = run(scenario(4))
    first_tb = next(t[1] for t in result.trace if t[3] == ("ap",) and t[5][0])
    later = [t for t in result.trace if t[0] >= first_tb]
    assert later and all(t[3] == ("ap",) for t in later)
    # Round robin with four RUs: everyone is served in every Basic trigger, equally.
    delivered = [result.flows[f"up{i}"].delivered_packets for i in range(4)]
    assert max(delivered) - min(delivered) <= 64
    # Every MPDU put in a TB PPDU is delivered, but those of the cascade still on the air.
    assert 0 <= sched.stats.mpdus - sum(delivered) <= 4 * 64
    assert set(sched.stats.served) == {"s0", "s1", "s2", "s3"}


def test_without_mu_edca_stations_keep_contending() -> None:
    result, _ = run(scenario(4), UlOfdmaConfig(mu_edca_timer_ns=None))
    first_tb = next(t[1] for t in result.trace if t[3] == ("ap",) and t[5][0])
    assert any(t[3] != ("ap",) for t in result.trace if t[0] >= first_tb)


@pytest.mark.parametrize("n", [6, 8])
def test_more_stations_than_users_take_turns(n: int) -> None:
    # Saturated stations all report data: everyone gets the same share, whether the
    # scheduler last heard from it or not (reports expire after 20 ms).
    _, sched = run(scenario(n), UlOfdmaConfig(max_users=4))
    assert sched.ru_tones == 242 and sched.n_users == 4
    served = sched.stats.served
    assert set(served) == {f"s{i}" for i in range(n)}
    assert max(served.values()) - min(served.values()) <= 1


def test_polls_go_round_robin_so_a_station_beyond_the_first_rus_is_heard() -> None:
    # Six stations, four RUs, and only the last one has data: the BSRP polls must reach
    # it (once triggered, MU EDCA keeps it off EDCA; unpolled it would wait for ever).
    sc = scenario(6)
    sc = sc.model_copy(update={"flows": [f for f in sc.flows if f.src == "s5"]})
    result, sched = run(sc)
    assert set(sched.stats.served) == {"s5"} and sched.stats.served["s5"] >= 10
    ap_only = [t for t in result.trace if t[3] == ("ap",)]
    assert result.flows["up5"].delivered_packets >= sched.stats.mpdus - 64 > 0
    assert len(ap_only) > len(result.trace) / 2


def test_per_ac_rings_send_ls_first_a_shared_ring_cannot() -> None:
    # s0's 12 KB messages meet a saturated bulk backlog in its NIC: with per-AC rings its
    # TB PPDU carries the VO fragments first, whatever waits in the BE ring; a shared
    # ring is sent in FIFO order, bulk packets ahead first.
    per_ac, _ = run(scenario(2, ls=True, mode="per_ac"))
    shared, _ = run(scenario(2, ls=True, mode="shared"))
    mean = {}
    for name, res in (("per_ac", per_ac), ("shared", shared)):
        m = res.messages
        ls = (m["flow"] == "ls") & (m["latency_ns"] >= 0)
        assert ls.sum() >= 4, name
        mean[name] = m["latency_ns"][ls].mean()
        ahead = m["hw_depth_first"][ls]
        if name == "per_ac":
            assert (ahead == 0).all()
        else:
            assert (ahead >= 64).all()
    assert mean["per_ac"] < mean["shared"]


def test_same_seed_same_trace() -> None:
    a, sa = run(scenario(4, ls=True), seed=7)
    b, sb = run(scenario(4, ls=True), seed=7)
    assert a.trace == b.trace and sa.summary() == sb.summary()


def test_refusals_name_what_to_change() -> None:
    vht = parse_scenario({"stations": [{"name": "ap"}, {"name": "s0"}]})
    with pytest.raises(UsageError, match=r'phy\.standard = "ax"'):
        UlOfdma(Simulation(vht), "ap", ["s0"], UlOfdmaConfig())
    errs = scenario(1, links={"mode": "fixed", "mcs": 7, "packet_errors": True})
    with pytest.raises(UsageError, match="packet errors"):
        UlOfdma(Simulation(errs), "ap", ["s0"], UlOfdmaConfig())

    class Budget(AdmitAll):
        def max_bulk_airtime_ns(self, station: object, now_ns: int) -> int:
            return 1_000_000

    sim = Simulation(scenario(1))
    sim.set_hooks("s0", Budget())
    with pytest.raises(UsageError, match="airtime budget"):
        UlOfdma(sim, "ap", ["s0"], UlOfdmaConfig())
    with pytest.raises(UsageError, match="max_tb_ns"):
        UlOfdmaConfig(max_tb_ns=6_000_000)
