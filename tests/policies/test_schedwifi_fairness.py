"""SchedWiFi as a fair baseline: its time-aware shaper re-checks as the NIC drains.

The shaper (Algorithm 2 against the global schedule) denies a bulk packet ahead of a
window when ``CTT[depth]`` says it would not finish in time. Samples for deep rings are
learned while several robots send; once the others are done, the last sender's packets
leave far faster than those samples say. Algorithm 2 as published pauses the bulk queue
until the window has passed, so the last sender got about half a ring (64 packets) per
MPC period on these scenarios. Re-asking as each packet leaves the NIC
(``GatedHooks(drain_recheck=True)``) lets it refill the ring while the gap lasts.
"""

from __future__ import annotations

import numpy as np
import pytest

from coorp.workload import CrlResult, run_crl
from crl_scenarios import crl_scenario

PERIOD_NS = round(33_333.3 * 1000)
RING = 128  # the shared NIC ring's capacity in crl_scenario (packets)
PACKET = 1500


def solo_phases(r: CrlResult) -> list[tuple[str, float]]:
    """Stretches where exactly one worker has bulk data (sending or waiting) right after
    several had: ``(worker, packets per MPC period)`` over the stretch's whole bins (its
    first and last 10 ms bin left out), for stretches of at least 50 ms."""
    ts = r.timeseries
    st, sent, backlog = ts["station"], ts["bh_bytes"], ts["backlog_fraction"]
    workers = [n for n in dict.fromkeys(st) if f"perception:{n}" in r.ls_flows]
    per = {w: (sent[st == w], backlog[st == w]) for w in workers}
    active = np.array([(per[w][0] > 0) | (per[w][1] > 0) for w in workers])  # worker x bin
    count = active.sum(axis=0)
    bin_ns = int(ts["t_end_ns"][0] - ts["t_start_ns"][0])
    out = []
    i = 1
    while i < count.size:
        if count[i] == 1 and count[i - 1] > 1:
            w = int(np.argmax(active[:, i]))
            j = i
            while j < count.size and count[j] == 1 and active[w, j]:
                j += 1
            inner = per[workers[w]][0][i + 1 : j - 1]
            if inner.size * bin_ns >= 50_000_000:
                periods = inner.size * bin_ns / PERIOD_NS
                out.append((workers[w], float(inner.sum()) / PACKET / periods))
            i = j
        else:
            i += 1
    return out


@pytest.mark.parametrize("seed", [1, 5, 6])
def test_the_last_bulk_sender_refills_the_ring_within_a_gap(seed: int) -> None:
    # Three workers upload 6 MB each; they finish at different times, so the last one
    # sends alone for hundreds of ms (with drain re-checks off: 64 packets per period).
    sc = crl_scenario(3, duration_s=2.0, seed=seed, workload={"drlc": {"param_bytes": 6_000_000}})
    r = run_crl(sc, "schedwifi")
    phases = solo_phases(r)
    assert phases, "no stretch with a single bulk sender: the scenario no longer tests this"
    for worker, packets_per_period in phases:
        assert packets_per_period > RING, (worker, packets_per_period)
    # ...because paused queues were resumed as the NIC drained.
    gate = r.policy_stats["gate"]
    assert sum(g["early_resumes"] for g in gate.values()) > 0
    # The shaper still keeps bulk packets out of the windows: the loop is untouched.
    assert r.violation_rate == 0.0


@pytest.mark.xfail(strict=True, reason="known: stale CTT samples at shallow depths (see below)")
@pytest.mark.parametrize("seed", [3, 4])
def test_stale_shallow_samples_still_hold_the_last_sender_back(seed: int) -> None:
    # Not fixed by drain re-checks: on these seeds the first burst (a whole ring handed
    # to the NIC at once, before any sample) took ~24 ms under contention, so CTT[1..]
    # holds samples longer than any gap. The gate never admits at those depths again
    # and its exploration probes only an empty ring, so the samples are never replaced:
    # the last sender sends one packet at a time (~84 per period). docs/policies.md.
    sc = crl_scenario(3, duration_s=2.0, seed=seed, workload={"drlc": {"param_bytes": 6_000_000}})
    phases = solo_phases(run_crl(sc, "schedwifi"))
    assert phases and all(p > RING for _, p in phases)
