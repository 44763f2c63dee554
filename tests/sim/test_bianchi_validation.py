"""The simulator against Bianchi's saturation model (``coorp.analysis.bianchi``).

N saturated stations, each with one bulk uplink (no TCP acks) to an extra ``ap``
station, at a fixed MCS, in every variant the model covers: basic access or RTS/CTS,
times single MPDUs (aggregation off), A-MPDUs with the classic retry policy, A-MPDUs
with the ns3 (BlockAckReq) policy. The model is an independent derivation; the
tolerance (3%) covers its decoupling approximation (≤ ~1.3% here, largest for the ns3
policy at large N; see tests/analysis) plus the simulation's statistical noise.

Simulated durations are chosen per case from the model's exchange rate
(``p_busy / mean_slot``) so that every run sees a fixed number of channel exchanges:
the noise of the measured throughput then depends on N and the variant, not on how long
each exchange is: 15 000 exchanges per run, 2 000 at N = 1 (no collisions), and 30 000
(60 000 at N = 40) for the ns3 basic-access variant, the noisiest (long A-MPDU collisions
mixed with short BAR exchanges). The whole file takes ~12 s of CPU (N = 40 included).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from coorp.analysis import BianchiResult, saturation_throughput
from coorp.scenario import Scenario, parse_scenario
from coorp.sim import SimResult, simulate

PAYLOAD_BYTES = 1500
MCS = 7  # 80 MHz, 2 spatial streams, long GI: 585 Mb/s; K = 64 MPDUs per A-MPDU
TOLERANCE = 0.03
VARIANTS = ("single", "ampdu-classic", "ampdu-ns3")


def saturation_scenario(n: int, variant: str, rts: bool) -> Scenario:
    mac: dict[str, Any] = {}
    if variant == "single":
        mac["edca"] = {"BE": {"aggregation": False}}
    elif variant == "ampdu-ns3":
        mac["retry_policy"] = "ns3"
    else:
        assert variant == "ampdu-classic"
    if rts:
        mac["rts_threshold_bytes"] = 0  # every PSDU is longer than 0 bytes
    return parse_scenario(
        {
            "name": f"bianchi-{variant}-{'rts' if rts else 'basic'}-{n}",
            "packet_bytes": PAYLOAD_BYTES,
            "mac": mac,
            "links": {"mode": "fixed", "mcs": MCS},
            "stations": [{"name": "ap"}] + [{"name": f"sta{i}"} for i in range(n)],
            "flows": [
                {"kind": "bulk", "name": f"up{i}", "src": f"sta{i}", "dst": "ap", "tcp_acks": False}
                for i in range(n)
            ],
        }
    )


def model_for(sc: Scenario, n: int) -> BianchiResult:
    # Everything (aggregation, K, RTS, retry policy and limit, EDCA) from the scenario.
    return saturation_throughput(
        n, payload_bytes=sc.packet_bytes, mcs=sc.links.mcs, phy=sc.phy, mac=sc.mac
    )


def exchanges_wanted(n: int, variant: str, rts: bool) -> int:
    if n == 1:
        return 2_000  # no collisions: only the backoff draws are random
    if variant == "ampdu-ns3" and not rts:
        # Noisiest, and the model's decoupling error is largest here (~ +1.3% at N = 40).
        return 60_000 if n >= 40 else 30_000
    return 15_000


@functools.cache
def run_case(n: int, variant: str, rts: bool) -> tuple[SimResult, BianchiResult]:
    sc = saturation_scenario(n, variant, rts)
    model = model_for(sc, n)
    exchanges_per_ns = model.p_busy / model.mean_slot_ns
    duration_ns = round(exchanges_wanted(n, variant, rts) / exchanges_per_ns)
    return simulate(sc, seed=1, duration_ns=duration_ns), model


def check_against_model(n: int, variant: str, rts: bool) -> None:
    result, model = run_case(n, variant, rts)
    flows = [result.flows[f"up{i}"] for i in range(n)]
    sim_mbps = sum(f.throughput_mbps for f in flows)
    assert sim_mbps == pytest.approx(model.throughput_mbps, rel=TOLERANCE), (
        f"{variant} {'RTS/CTS' if rts else 'basic'} N={n}: simulator {sim_mbps:.2f} Mb/s, "
        f"Bianchi {model.throughput_mbps:.2f} Mb/s"
    )
    # The simulator counts the same bits the model does: IP packets of PAYLOAD_BYTES.
    delivered = sum(f.delivered_packets for f in flows)
    assert sum(f.delivered_bytes for f in flows) == delivered * PAYLOAD_BYTES

    ch = result.channel
    assert ch.exchanges > 0
    # Share of exchanges that are collisions: 1 - P_s in the model.
    assert ch.collisions / ch.exchanges == pytest.approx(1 - model.p_success, abs=0.015)
    if n == 1:
        assert ch.collisions == 0
    # Every successful data exchange carries exactly K MPDUs (the model's ampdu_size must
    # be what the simulator builds). The run may end inside one last exchange.
    data_successes = ch.exchanges - ch.collisions - ch.bar_exchanges
    k = model.mpdus_per_ppdu
    assert data_successes * k - k <= delivered <= data_successes * k
    # BlockAckReqs follow a missing BlockAck, which only basic access can produce.
    if variant == "ampdu-ns3" and not rts and n > 1:
        assert ch.bar_exchanges > 0
    else:
        assert ch.bar_exchanges == 0


def _cases(ns: list[int]) -> list[Any]:
    return [
        pytest.param(
            n,
            variant,
            rts,
            id=f"{n}-{variant}-{'rts' if rts else 'basic'}",
        )
        for n in ns
        for variant in VARIANTS
        for rts in (False, True)
    ]


@pytest.mark.parametrize(("n", "variant", "rts"), _cases([1, 2, 5, 10, 20]))
def test_simulator_matches_bianchi(n: int, variant: str, rts: bool) -> None:
    check_against_model(n, variant, rts)


@pytest.mark.slow
@pytest.mark.parametrize(("n", "variant", "rts"), _cases([40]))
def test_simulator_matches_bianchi_40_stations(n: int, variant: str, rts: bool) -> None:
    check_against_model(n, variant, rts)


def test_ns3_policy_costs_throughput_in_the_simulator_too() -> None:
    """The model's ordering S_ns3 < S_classic (basic access, N >= 2), seen in the simulator."""
    ns3, _ = run_case(10, "ampdu-ns3", False)
    classic, _ = run_case(10, "ampdu-classic", False)
    assert ns3.total_throughput_mbps < classic.total_throughput_mbps


if __name__ == "__main__":
    # The table in docs/validation.md:  .venv/bin/python tests/sim/test_bianchi_validation.py
    print("| variant | access | N | Bianchi Mb/s | simulator Mb/s | error | sim. s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for variant in VARIANTS:
        for rts in (False, True):
            for n in (1, 2, 5, 10, 20, 40):
                res, mod = run_case(n, variant, rts)
                sim = sum(res.flows[f"up{i}"].throughput_mbps for i in range(n))
                err = 100 * (sim / mod.throughput_mbps - 1)
                print(
                    f"| {variant} | {'RTS/CTS' if rts else 'basic'} | {n} "
                    f"| {mod.throughput_mbps:.1f} | {sim:.1f} | {err:+.2f}% "
                    f"| {res.duration_ns / 1e9:.1f} |",
                    flush=True,
                )
