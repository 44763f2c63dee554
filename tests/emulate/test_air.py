"""The emulated channel without devices: packets in at instants, deliveries out.

Behaviour of :class:`coorp.emulate.Air` (the part of the emulator that decides): the
access category from the DSCP, the NIC ring model, the AP relaying between stations,
802.11's in-order delivery per sender, receiver and category, the kernel queue's tail
drop, replay of recorded arrivals, and a saturated channel's throughput against the
simulator's own run.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
import pytest
from emu_packets import addr, seq_of, udp

from coorp._errors import UsageError
from coorp.emulate import Air, FrameLog, Outcome, choose_ap, replay, station_addresses
from coorp.emulate._validate import saturation_scenario, uplinks
from coorp.scenario import AccessCategory, parse_scenario
from coorp.sim import Simulation

MS = 1_000_000


def scenario(n: int = 2, *, ring: str = "per_ac", errors: bool = False, dist: float = 1.0,
             capacity: int = 128, mcs: int = 7) -> Any:  # fmt: skip
    return parse_scenario({
        "name": "air", "phy": {"width_mhz": 20, "spatial_streams": 1},
        "links": {"mode": "fixed", "mcs": mcs, "packet_errors": errors},
        "hw_queue": {"mode": ring, "capacity_packets": capacity},
        "stations": [{"name": "ap"}]
        + [{"name": f"s{i}", "position_m": [dist, 0.0]} for i in range(1, n + 1)],
    })  # fmt: skip


def test_frames_are_delivered_in_order_per_category_despite_retries() -> None:
    """Packet errors make the MAC deliver MPDUs of an A-MPDU out of order (the failed
    ones are retried after later ones went through); the receiver's reorder buffer
    releases them in order per (sender, receiver, category), and a dropped one is a
    hole, not a reordering. Categories overtake each other (EDCA)."""
    air = Air(scenario(1, errors=True, dist=16.0), seed=3)
    log = FrameLog()
    air.log = log
    s1, ap = addr(air, "s1"), addr(air, "ap")
    sent = {46: 0, 0: 0}
    for k in range(400):
        dscp = 46 if k % 4 == 0 else 0
        air.send(1, udp(s1, ap, dscp=dscp, seq=sent[dscp] * 100 + dscp), 0)
        sent[dscp] += 1
    out = air.advance(3_000 * MS)
    got: dict[int, list[int]] = {46: [], 0: []}
    for _, station, packet, _ in out:
        assert station == 0
        s = seq_of(packet)
        got[s % 100].append(s // 100)
    for dscp, seqs in got.items():
        assert seqs == sorted(seqs), f"DSCP {dscp} delivered out of order"
        assert len(set(seqs)) == len(seqs)
    cols = log.cols
    mac = [(cols["done_ns"][i], cols["fid"][i]) for i in range(len(log))
           if cols["outcome"][i] == Outcome.DELIVERED and cols["ac"][i] == 2]  # BE  # fmt: skip
    fids_by_time = [fid for _, fid in sorted(mac)]
    assert fids_by_time != sorted(fids_by_time), "no MAC reordering: the test proves nothing"
    lost = sum(1 for o in cols["outcome"] if o == Outcome.LOST)
    assert sum(map(len, got.values())) == 400 - lost
    first_vo = out[[seq_of(p) % 100 for _, _, p, _ in out].index(46)][0]
    last_be = max(t for t, _, p, _ in out if seq_of(p) % 100 == 0)
    assert first_vo < last_be  # voice did not wait for all best effort queued before it


def _latencies(ring: str) -> dict[str, float]:
    """Median latency of EF packets and of saturating BE traffic of another station."""
    air = Air(scenario(2, ring=ring), seed=1)
    s1, s2, ap = addr(air, "s1"), addr(air, "s2"), addr(air, "ap")
    sent: dict[int, int] = {}
    lat: dict[int, list[int]] = {0: [], 46: []}
    k = 0
    for t in range(0, 2_000 * MS, MS):
        for d in air.advance(t):
            lat[seq_of(d[2]) % 100].append(d[0] - sent[seq_of(d[2])])
        while air.queued(1) < 200:
            sent[k * 100] = t
            air.send(1, udp(s1, ap, seq=k * 100), t)
            k += 1
        if t % (10 * MS) == 0:  # voice, and BE from the same station behind it
            sent[k * 100 + 46] = t
            air.send(2, udp(s2, ap, size=200, dscp=46, seq=k * 100 + 46), t)
            k += 1
            for _ in range(40):
                sent[k * 100] = t
                air.send(2, udp(s2, ap, seq=k * 100), t)
                k += 1
    return {"vo": statistics.median(lat[46]), "be": statistics.median(lat[0])}


def test_dscp_picks_the_category_and_the_ring_model_decides_its_wait() -> None:
    per_ac, shared = _latencies("per_ac"), _latencies("shared")
    assert per_ac["vo"] < per_ac["be"] / 10  # EF -> AC_VO, its own ring
    # One shared ring: the EF packet waits behind the bulk packets handed to the NIC.
    assert shared["vo"] > 3 * per_ac["vo"]


def test_station_to_station_crosses_the_air_twice_and_groups_fan_out() -> None:
    air = Air(scenario(3), seed=1)
    s1, s2 = addr(air, "s1"), addr(air, "s2")
    air.send(1, udp(s1, s2, size=300, seq=7), 0)
    out = air.advance(50 * MS)
    assert [(d[1], seq_of(d[2])) for d in out] == [(2, 7)]
    c = air.counters
    assert c.relayed == 1 and c.rx_frames == [1, 0, 1, 0]  # AP, then s2
    assert air.sim.channel.stats.exchanges == 2
    air.send(1, udp(s1, "239.1.2.3", size=300, seq=8), 50 * MS)
    out = air.advance(100 * MS)
    assert sorted(d[1] for d in out) == [0, 2, 3]  # the AP's host and every other station
    air.send(0, udp(addr(air, "ap"), "10.77.0.255", size=300, seq=9), 100 * MS)
    assert sorted(d[1] for d in air.advance(150 * MS)) == [1, 2, 3]


def test_a_full_kernel_queue_drops_at_its_tail_per_category() -> None:
    air = Air(scenario(1, capacity=4), seed=1, queue_packets=10)
    s1, ap = addr(air, "s1"), addr(air, "ap")
    for k in range(50):
        air.send(1, udp(s1, ap, seq=k), 0)
    assert air.counters.queue_drops[1] == 50 - 4 - 10  # 4 in the NIC ring, 10 queued
    air.send(1, udp(s1, ap, dscp=46, seq=99), 0)  # voice has a queue of its own
    assert air.counters.queue_drops[1] == 36
    out = air.advance(200 * MS)
    assert sorted(seq_of(d[2]) for d in out) == [*range(14), 99]


def test_unroutable_and_malformed_packets_are_counted_not_sent() -> None:
    air = Air(scenario(1), seed=1)
    log = FrameLog()
    air.log = log
    air.send(1, udp(addr(air, "s1"), "10.99.0.1"), 0)
    air.send(1, b"\x45" + bytes(10), 0)
    air.send(1, udp(addr(air, "s1"), addr(air, "ap"), size=1600), 0)  # above the MTU
    assert (air.counters.no_route, air.counters.malformed) == (1, 2)
    assert list(log.cols["outcome"]) == [Outcome.NO_ROUTE, Outcome.MALFORMED, Outcome.MALFORMED]
    assert air.advance(10 * MS) == [] and air.sim.channel.stats.exchanges == 0


def _arrivals(air: Air, seed: int) -> list[tuple[int, int, bytes]]:
    rng = np.random.default_rng(seed)
    out = []
    t = 0
    for k in range(600):
        t += int(rng.exponential(0.4 * MS))
        src = int(rng.integers(0, 4))
        dst = int(rng.integers(0, 4))
        if dst == src:
            dst = (dst + 1) % 4
        dscp = int(rng.choice([0, 46, 8, 34]))
        size = int(rng.integers(60, 1500))
        a, b = air.names[src], air.names[dst]
        out.append((t, src, udp(addr(air, a), addr(air, b), size=size, dscp=dscp, seq=k)))
    return out


def test_the_same_arrivals_and_seed_give_the_same_decisions() -> None:
    live = Air(scenario(3, errors=True, dist=14.0, ring="shared"), seed=5, record_arrivals=True)
    arrivals = _arrivals(live, 1)
    first = replay(live, arrivals, until_ns=arrivals[-1][0] + 200 * MS)
    assert live.arrivals == arrivals
    again = replay(Air(live.scenario, seed=5), arrivals, until_ns=arrivals[-1][0] + 200 * MS)
    assert again == first
    other = replay(Air(live.scenario, seed=6), arrivals, until_ns=arrivals[-1][0] + 200 * MS)
    assert [d[0] for d in other] != [d[0] for d in first]  # the seed matters


def _window_tolerance(sc: Any, window_s: float, sims: list[float]) -> float:
    """How far an emulated saturation throughput may be from the simulator's mean over
    ``sims`` (one per seed) when both are draws of the same process: 4 standard
    deviations of the difference of one draw and a k-seed mean, plus one longest
    exchange (a whole A-MPDU of 64 packets) at each edge of the window."""
    k = len(sims)
    sd = statistics.stdev(sims)
    edge = 2 * 64 * sc.packet_bytes * 8 / window_s / 1e6
    return 4 * sd * math.sqrt(1 + 1 / k) + edge


@pytest.mark.parametrize("ring", ["per_ac", "shared"])
@pytest.mark.parametrize("n", [1, 2, 5])
def test_saturating_arrivals_make_exactly_the_simulators_decisions(n: int, ring: str) -> None:
    """Real packets injected so that every queue is backlogged from the first instant
    get the channel the simulator's own saturated UDP flows get, exchange for exchange:
    the emulator's path into the MAC is the simulator's (same EDCA draws, aggregation,
    collisions, block acks)."""
    sc = saturation_scenario(n, mcs=4, ring=ring)
    end = 300 * MS
    sim = Simulation(sc, seed=7, trace=True)
    for src, dst in uplinks(sc):
        f = sim.flow(f"{src}>{dst}", src, dst, AccessCategory.BE, bulk=True, tcp_acks=False)
        sim.start_transfer(f, None)
    sim.loop.run(end)
    air = Air(sc, seed=7, trace=True)
    pk = [udp(addr(air, f"s{i}"), addr(air, "ap")) for i in range(1, n + 1)]
    for t in range(0, end + 1, MS):
        air.advance(t)
        for i in range(1, n + 1):
            for _ in range(300 - air.queued(i)):
                air.send(i, pk[i - 1], t)
    assert len(air.exchanges()) > 50
    assert air.exchanges() == sim.channel.stats.trace
    delivered = sum(f.delivered_bytes for f in sim.flows.values())
    assert air.counters.rx_bytes[0] == delivered


def test_bad_settings_get_clear_errors() -> None:
    sc = scenario(2)
    with pytest.raises(UsageError, match=r"'zz' is not a station.*\['ap', 's1', 's2'\]"):
        choose_ap(sc, "zz")
    with pytest.raises(UsageError, match="three octets"):
        station_addresses(["ap", "s1"], "ap", "10.77")
    with pytest.raises(UsageError, match="queue_packets = 0"):
        Air(sc, queue_packets=0)
    sim = Simulation(sc)
    f = sim.flow("x", "s1", "ap", AccessCategory.BE, bulk=False)
    with pytest.raises(UsageError, match=r"ip_bytes = 1501.*packet_bytes \(1500\)"):
        sim.send_packet(f, 1501)


def test_traces_hold_every_frame_and_the_arrivals_to_replay(tmp_path: Any) -> None:
    from coorp.emulate import read_arrivals, write_traces

    air = Air(scenario(2, errors=True, dist=14.0), seed=2, record_arrivals=True, trace=True)
    log = FrameLog()
    air.log = log
    arrivals = _arrivals_between(air, 3)
    replay(air, arrivals, until_ns=arrivals[-1][0] + 100 * MS)
    files = {p.name for p in write_traces(tmp_path, air, log, [(0, 5, 9)])}
    assert {"arrivals.csv"} <= files
    assert read_arrivals(tmp_path / "arrivals.csv") == arrivals
    outcomes = list(log.cols["outcome"])
    assert outcomes.count(Outcome.DELIVERED) == sum(air.counters.rx_frames)
    assert outcomes.count(Outcome.LOST) == sum(air.counters.mac_lost)
    mcap = pytest.importorskip("mcap.reader")
    with (tmp_path / "frames.mcap").open("rb") as fh:
        n = sum(1 for _ in mcap.make_reader(fh).iter_messages())
    assert n == outcomes.count(Outcome.DELIVERED) + outcomes.count(Outcome.LOST)


def _arrivals_between(air: Air, n: int) -> list[tuple[int, int, bytes]]:
    """Packets between the AP and ``n - 1`` stations, both ways, every 0.5 ms."""
    out = []
    for k in range(300):
        src = k % n
        dst = 0 if src else 1 + (k // n) % (n - 1)
        a, b = air.names[src], air.names[dst]
        out.append((k * MS // 2, src, udp(addr(air, a), addr(air, b), size=800, seq=k)))
    return out


def _replay_digest() -> dict[str, Any]:
    """Deliveries and counters of a fixed arrival log (errors on, shared rings, a lag
    meter fed with every delivery instant): what the compiled and plain channel must
    agree on."""
    import hashlib

    from coorp.emulate import LagMeter

    live = Air(scenario(3, errors=True, dist=14.0, ring="shared"), seed=5)
    arrivals = _arrivals(live, 2)
    out = replay(live, arrivals, until_ns=arrivals[-1][0] + 200 * MS)
    h = hashlib.sha256()
    meter = LagMeter()
    for t, dst, packet, fid in out:
        h.update(f"{t},{dst},{fid},".encode() + packet)
        meter.add(t - arrivals[0][0])
    c = live.counters
    return {"deliveries": len(out), "digest": h.hexdigest(), "rx_frames": c.rx_frames,
            "queue_drops": c.queue_drops, "mac_lost": c.mac_lost,
            "lag": meter.summary().as_dict()}  # fmt: skip


def test_the_compiled_channel_decides_exactly_as_the_plain_one() -> None:
    """The emulator's per-packet modules run compiled (mypyc) when the build is fresh:
    the same arrivals and seed give the same deliveries, byte for byte, in the plain
    modules (a subprocess with ``COORP_PURE=1``)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    import coorp.emulate._air as air_module

    if not air_module.__file__ or air_module.__file__.endswith(".py"):
        pytest.skip("the emulator's modules are not compiled here (coorp --version says why)")
    here = Path(__file__).parent
    code = (
        "import json, sys; sys.path[:0] = sys.argv[1:]; import test_air as t; "
        "import coorp.emulate._air as a; assert a.__file__.endswith('.py'), a.__file__; "
        "print(json.dumps(t._replay_digest()))"
    )
    env = {**os.environ, "COORP_PURE": "1"}
    out = subprocess.run([sys.executable, "-c", code, str(here), str(here.parent)], env=env,
                         capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    plain = json.loads(out.stdout.strip().splitlines()[-1])
    assert plain["deliveries"] > 500
    assert plain == json.loads(json.dumps(_replay_digest()))
