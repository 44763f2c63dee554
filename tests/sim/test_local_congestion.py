"""Local congestion: LS packets behind bulk packets in a shared NIC ring (DESIGN.md, sim/).

One robot streams saturating bulk data (AC_BE) to the leader and sends a 12 KB AC_VO
perception every 33.3 ms. With one ring per AC the perception enters an empty VO ring;
with one shared FIFO ring it waits behind the bulk packets already handed to the NIC.
The margins below are derived from the ring size and the PHY, not from a previous run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from coorp.phy import BLOCK_ACK_BYTES, SIFS_NS, VhtMode, legacy_duration_ns, vht_ppdu_duration_ns
from coorp.scenario import Scenario, parse_scenario
from coorp.sim import SimResult, simulate

CAPACITY = 128
MAX_MPDUS = 64  # the standard's BlockAck window and the scenario default
MODE = VhtMode(7, 2, 80)  # the scenario defaults: 80 MHz, 2 streams, MCS 7, long GI
BE_MPDU = 1500 + 38  # a full bulk packet: IP 1500 + QoS header, LLC/SNAP, FCS
PERCEPTION = 12_288
FRAGMENTS = math.ceil((PERCEPTION + 8) / 1480)  # UDP header; 1480 payload bytes / fragment


def _scenario(mode: str) -> Scenario:
    return parse_scenario({
        "duration_s": 1.0,
        "seed": 4,
        "hw_queue": {"mode": mode, "capacity_packets": CAPACITY},
        "stations": [{"name": "leader", "position_m": [0, 0]},
                     {"name": "robot", "position_m": [5, 0]}],
        "flows": [
            {"kind": "datagram", "name": "perception", "src": "robot", "dst": "leader",
             "size_bytes": PERCEPTION, "period_us": 33_333.3, "jitter_us": 500,
             "start_us": 2_000, "category": "VO"},
            {"kind": "bulk", "name": "params", "src": "robot", "dst": "leader"},
        ],
    })  # fmt: skip


@pytest.fixture(scope="module")
def runs() -> dict[str, SimResult]:
    return {mode: simulate(_scenario(mode)) for mode in ("shared", "per_ac")}


def _ampdu_exchange_ns(n_mpdus: int) -> int:
    """Airtime of one BE A-MPDU of ``n_mpdus`` full packets: DATA + SIFS + BlockAck.

    PSDU: each subframe is a 4-byte delimiter + MPDU, padded to 4 bytes except the last.
    """
    padded = (4 + BE_MPDU + 3) // 4 * 4
    psdu = (n_mpdus - 1) * padded + 4 + BE_MPDU
    return vht_ppdu_duration_ns(psdu, MODE) + SIFS_NS + legacy_duration_ns(BLOCK_ACK_BYTES, 24)


def _airtime_of_be_packets(n: int) -> int:
    """Least airtime ``n`` bulk packets can take: A-MPDUs as full as the limit allows."""
    full, rest = divmod(n, MAX_MPDUS)
    return full * _ampdu_exchange_ns(MAX_MPDUS) + (_ampdu_exchange_ns(rest) if rest else 0)


def _perception(r: SimResult) -> dict[str, np.ndarray]:
    mask = r.messages["flow"] == "perception"
    return {k: v[mask] for k, v in r.messages.items()}


def test_both_runs_are_saturated_and_deliver_perceptions(runs: dict[str, SimResult]) -> None:
    for r in runs.values():
        p = _perception(r)
        assert p["msg_id"].size == 30  # 2 ms + k·33.3 ms < 1 s
        assert (p["delivered_ns"] >= 0).sum() >= 29
        assert r.flows["params"].throughput_mbps > 100  # the bulk flow keeps the ring busy


def test_per_ac_perceptions_enter_an_empty_ring(runs: dict[str, SimResult]) -> None:
    r = runs["per_ac"]
    assert (_perception(r)["hw_depth_first"] == 0).all()
    # A perception's own fragments queue behind each other, nothing else.
    depths = r.ls_hw_depths["robot"]
    assert depths.size == 30 * FRAGMENTS
    assert depths.max() <= FRAGMENTS - 1


def test_shared_ring_puts_perceptions_behind_bulk_packets(runs: dict[str, SimResult]) -> None:
    r = runs["shared"]
    first = _perception(r)["hw_depth_first"]
    assert (first > 0).all()
    # The driver refills the ring to capacity whenever the medium goes idle and one
    # A-MPDU takes out at most 64 packets, so at least capacity - 64 are always ahead.
    assert first.min() >= CAPACITY - MAX_MPDUS
    assert (r.ls_hw_depths["robot"] > 0).all()
    st = r.stations["robot"]
    assert st.ls_hw_depth_max == int(r.ls_hw_depths["robot"].max())
    assert st.ls_hw_depth_mean == pytest.approx(float(r.ls_hw_depths["robot"].mean()))


def test_shared_latency_is_at_least_the_airtime_of_the_packets_ahead(
    runs: dict[str, SimResult],
) -> None:
    p = _perception(runs["shared"])
    done = p["delivered_ns"] >= 0
    for depth, latency in zip(p["hw_depth_first"][done], p["latency_ns"][done], strict=True):
        assert latency >= _airtime_of_be_packets(int(depth))


def test_shared_ring_raises_median_latency_by_half_a_ring(runs: dict[str, SimResult]) -> None:
    shared = runs["shared"].flows["perception"].latency_ms_p50
    per_ac = runs["per_ac"].flows["perception"].latency_ms_p50
    assert shared is not None and per_ac is not None
    half_ring_ms = _ampdu_exchange_ns(CAPACITY // 2) / 1e6
    assert half_ring_ms > 1.0  # 64 x 1538 bytes at 585 Mb/s: about 1.4 ms
    assert shared >= per_ac + half_ring_ms
