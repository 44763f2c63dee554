"""Reliable vs best-effort LS transport: what a MAC drop does to a message and its loop.

Drops are forced with a retry limit of 0: every collision among the synchronised
perceptions of six workers then drops the colliding fragments.
"""

from __future__ import annotations

import numpy as np
import pytest

from coorp._errors import UsageError
from coorp.scenario import AccessCategory, Scenario
from coorp.sim import Simulation
from coorp.workload import CrlResult, run_crl
from crl_scenarios import crl_scenario

WORKERS = 6
LS_PREFIXES = ("perception:", "control:")


def lossy_team(transport: str, repair_us: float = 10_000.0, duration_s: float = 0.6) -> Scenario:
    return crl_scenario(
        WORKERS,
        duration_s=duration_s,
        mac={"retry_limit": 0},
        workload={
            "drlc": {"enabled": False},
            "mpc": {"ls_transport": transport, "repair_us": repair_us,
                    "loop_timeout_us": 200_000.0},
        },
    )  # fmt: skip


def ls_counters(r: CrlResult) -> dict[str, int]:
    keys = ("sent_packets", "delivered_packets", "dropped_packets", "retransmitted_packets")
    flows = [f for name, f in r.sim.flows.items() if name.startswith(LS_PREFIXES)]
    return {k: sum(getattr(f, k) for f in flows) for k in keys}


def ls_messages(r: CrlResult) -> dict[str, np.ndarray]:
    m = r.sim.messages
    mask = np.array([str(f).startswith(LS_PREFIXES) for f in m["flow"]], dtype=bool)
    return {k: v[mask] for k, v in m.items()}


def test_reliable_transport_repairs_every_dropped_fragment() -> None:
    r = run_crl(lossy_team("reliable"), "edca")
    c = ls_counters(r)
    assert c["dropped_packets"] > 0, "the scenario must force drops"
    # Every drop is sent again; nothing is lost, and every loop finishes.
    assert c["retransmitted_packets"] == c["dropped_packets"]
    assert not ls_messages(r)["lost"].any()
    finished = [lp for lp in r.loops if lp.end_ns >= 0]
    assert len(finished) == len(r.loops) > 0
    # Fragments sent = delivered + dropped + still in the air at the horizon.
    in_flight = c["sent_packets"] - c["delivered_packets"] - c["dropped_packets"]
    assert 0 <= in_flight <= 2 * WORKERS * 9


def test_best_effort_loses_the_message_and_abandons_its_loop() -> None:
    r = run_crl(lossy_team("best-effort"), "edca")
    c = ls_counters(r)
    msgs = ls_messages(r)
    assert c["dropped_packets"] > 0
    assert c["retransmitted_packets"] == 0
    assert msgs["lost"].any()
    assert (msgs["latency_ns"][msgs["lost"]] == -1).all()
    # A lost perception stalls its loop until the timeout: abandoned, and the next loop
    # starts only then.
    abandoned = [lp for lp in r.loops if lp.end_ns < 0]
    assert abandoned
    idx = r.loops.index(abandoned[0])
    if idx + 1 < len(r.loops):
        assert r.loops[idx + 1].start_ns - abandoned[0].start_ns >= 200_000_000


def test_a_repaired_message_is_late_by_at_least_the_shortest_repair_delay() -> None:
    # Repairs wait U[repair/2, 3 repair/2]; with a repair delay far longer than any
    # contention, a message that had a fragment dropped arrives at least repair/2 late,
    # and only those can: the latencies split into two groups.
    repair_ns = 80_000_000
    r = run_crl(lossy_team("reliable", repair_us=repair_ns / 1000, duration_s=0.4), "edca")
    c = ls_counters(r)
    lat = ls_messages(r)["latency_ns"]
    late = int((lat >= repair_ns // 2).sum())
    assert 1 <= late <= c["dropped_packets"]
    assert (lat[(lat >= 0) & (lat < repair_ns // 2)] < 20_000_000).all()


def test_simultaneous_drops_are_repaired_at_different_times() -> None:
    # Fragments dropped by one collision must not all be resent in one slot (they would
    # collide again, forever, with a retry limit of 0): every loop still finishes.
    r = run_crl(lossy_team("reliable"), "edca")
    assert all(lp.end_ns >= 0 for lp in r.loops)
    assert len(r.loops) >= 15  # 0.6 s at 30 Hz from 10 ms, none stalled


@pytest.mark.parametrize(("bulk", "repair_ns"), [(True, 1_000), (False, -1)])
def test_repair_needs_a_datagram_flow_and_a_nonnegative_delay(bulk: bool, repair_ns: int) -> None:
    sim = Simulation(crl_scenario(1))
    with pytest.raises(UsageError, match="repair_ns"):
        sim.flow("f", "r1", "leader", AccessCategory.VO, bulk=bulk, repair_ns=repair_ns)
