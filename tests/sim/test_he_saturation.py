"""An 802.11ax (HE) channel against Bianchi's saturation model.

The same contention as on VHT (``test_bianchi_validation.py``), with HE SU PPDUs: what
changes is every data PPDU's airtime (HE preamble, 12.8 µs + GI symbols, LDPC padding)
and, with a 256-MPDU Block Ack window, the aggregate and its 256-bit BlockAck. The
model takes the same airtimes (``ExchangeTiming``), so this checks that the MAC builds
exactly the aggregates the HE timing allows and contends as the model says. ns-3 is the
independent check of the HE airtimes themselves (docs/validation.md).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from coorp.analysis import BianchiResult, saturation_throughput
from coorp.phy import HeMode
from coorp.scenario import Scenario, parse_scenario
from coorp.sim import SimResult, simulate

TOLERANCE = 0.03
EXCHANGES = 12_000


def he_scenario(n: int, *, mcs: int, mpdus: int, gi: int, policy: str) -> Scenario:
    return parse_scenario(
        {
            "name": f"he-{n}-{mcs}-{mpdus}-{gi}-{policy}",
            "phy": {"standard": "ax", "he_guard_interval_ns": gi},
            "mac": {"max_ampdu_mpdus": mpdus, "retry_policy": policy},
            "hw_queue": {"capacity_packets": max(128, 2 * mpdus)},
            "links": {"mode": "fixed", "mcs": mcs},
            "stations": [{"name": "ap"}] + [{"name": f"sta{i}"} for i in range(n)],
            "flows": [
                {"kind": "bulk", "name": f"up{i}", "src": f"sta{i}", "dst": "ap", "tcp_acks": False}
                for i in range(n)
            ],
        }
    )


@functools.cache
def run(n: int, mcs: int, mpdus: int, gi: int, policy: str) -> tuple[SimResult, BianchiResult]:
    sc = he_scenario(n, mcs=mcs, mpdus=mpdus, gi=gi, policy=policy)
    model = saturation_throughput(n, payload_bytes=1500, mcs=mcs, phy=sc.phy, mac=sc.mac)
    exchanges = EXCHANGES if n > 1 else 2_000
    duration = round(exchanges * model.mean_slot_ns / model.p_busy)
    return simulate(sc, seed=1, duration_ns=duration), model


CASES: list[Any] = [
    (1, 11, 64, 800, "classic"),
    (5, 7, 64, 800, "classic"),
    (20, 11, 64, 800, "ns3"),
    (10, 7, 64, 3200, "classic"),
    (1, 11, 256, 800, "classic"),
    (10, 11, 256, 800, "classic"),
]


@pytest.mark.parametrize(("n", "mcs", "mpdus", "gi", "policy"), CASES)
def test_he_channel_matches_bianchi(n: int, mcs: int, mpdus: int, gi: int, policy: str) -> None:
    result, model = run(n, mcs, mpdus, gi, policy)
    sim = sum(result.flows[f"up{i}"].throughput_mbps for i in range(n))
    assert sim == pytest.approx(model.throughput_mbps, rel=TOLERANCE)
    ch = result.channel
    assert ch.collisions / ch.exchanges == pytest.approx(1 - model.p_success, abs=0.02)
    # Every successful data exchange carries the model's K MPDUs.
    delivered = sum(result.flows[f"up{i}"].delivered_packets for i in range(n))
    k = model.mpdus_per_ppdu
    data = ch.exchanges - ch.collisions - ch.bar_exchanges
    assert data * k - k <= delivered <= data * k


def test_he_aggregates_are_as_large_as_the_window_allows() -> None:
    # HE-MCS 11, 2 streams, 80 MHz (1201 Mb/s): 256 MPDUs of 1538 bytes fit one PPDU.
    _, m64 = run(1, 11, 64, 800, "classic")
    _, m256 = run(1, 11, 256, 800, "classic")
    assert (m64.mpdus_per_ppdu, m256.mpdus_per_ppdu) == (64, 256)
    # And the longer aggregate pays off on a lone station, as on real HE links.
    assert m256.throughput_mbps > 1.15 * m64.throughput_mbps
    sc = he_scenario(1, mcs=11, mpdus=256, gi=800, policy="classic")
    assert isinstance(sc.phy.mode(11), HeMode)


if __name__ == "__main__":
    # The table in docs/validation.md:  .venv/bin/python tests/sim/test_he_saturation.py
    print("| N | HE-MCS | MPDUs | GI ns | retry | Bianchi Mb/s | simulator Mb/s | error | sim. s |")
    print("|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for n, mcs, mpdus, gi, policy in CASES:
        res, mod = run(n, mcs, mpdus, gi, policy)
        sim = sum(res.flows[f"up{i}"].throughput_mbps for i in range(n))
        err = 100 * (sim / mod.throughput_mbps - 1)
        print(
            f"| {n} | {mcs} | {mpdus} | {gi} | {policy} | {mod.throughput_mbps:.1f} "
            f"| {sim:.1f} | {err:+.2f}% | {res.duration_ns / 1e9:.1f} |"
        )
