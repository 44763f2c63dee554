"""Tail loss probes and Linux's RTO estimator in the TCP model (``[tcp] loss_probe``,
``rto_estimator = "linux"``; ``coorp.sim.sack``, ``coorp.sim.congestion.rtt_sample``):
the estimator's exact values, a lost tail repaired by a probe instead of the RTO, a probe
of new data past the window, the window reduced when a probe repaired a loss, and bytes
delivered once through MAC losses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tcp_losses import assert_delivered_once, drop_queued, lossy_scenario

from coorp import ScenarioError
from coorp._accel import describe
from coorp.scenario import AccessCategory, parse_scenario
from coorp.sim import COMPILED, Simulation
from coorp.sim.congestion import DISORDER, EVER_RETX, OPEN, rto_now, rtt_sample
from coorp.sim.sack import loss_probe, schedule_probe
from coorp.sim.tcp import TcpConnection
from golden_digest import digest

MS = 1_000_000
BE = AccessCategory.BE


def _sim(probe: bool, estimator: str = "linux", **tcp: Any) -> Simulation:
    tcp = {"sender": "cubic", "receive_window_bytes": 4_194_304, "sack": True,
           "loss_probe": probe, "rto_estimator": estimator, **tcp}  # fmt: skip
    sc = parse_scenario({"name": "tlp", "stations": [{"name": "ap"}, {"name": "sta"}], "tcp": tcp})
    return Simulation(sc)


def _conn(estimator: str) -> TcpConnection:
    sim = _sim(False, estimator)
    sim.flow("up", "sta", "ap", BE, bulk=True)
    return sim.tcp["up"]


def test_linux_estimator_values() -> None:
    # tcp_rtt_estimator by hand (ms): the first sample r gives SRTT r, 4 x mdev 2r and
    # rttvar max(2r, 200); RTO = SRTT + rttvar.
    c = _conn("linux")
    rtt_sample(c, 10 * MS)
    assert (c.srtt_ns, c.mdev_ns, c.rttvar_ns, c.rto_ns) == (10 * MS, 20 * MS, 200 * MS, 210 * MS)
    # 30: error +20, SRTT 12.5; mdev 20 + (20 - 20/4) = 35 (below the round's 200 max).
    rtt_sample(c, 30 * MS)
    assert (c.srtt_ns, c.mdev_ns, c.rttvar_ns) == (12_500_000, 35 * MS, 200 * MS)
    assert c.rto_ns == 212_500_000
    # 500: error +487.5, SRTT 12.5 + 60.9375; mdev 35 + 487.5 - 8.75 = 513.75 > 200: the
    # round's maximum and rttvar follow at once.
    rtt_sample(c, 500 * MS)
    assert (c.srtt_ns, c.mdev_ns) == (73_437_500, 513_750_000)
    assert c.mdev_max_ns == c.rttvar_ns == 513_750_000
    assert c.rto_ns == 73_437_500 + 513_750_000
    # 10 (below SRTT): error -63.4375; the deviation moves by an eighth of its excess over
    # mdev/4: (63.4375 - 128.4375) < 0, so by that whole (negative) amount: mdev 448.75.
    rtt_sample(c, 10 * MS)
    assert c.srtt_ns == 73_437_500 + (-63_437_500 >> 3)
    assert c.mdev_ns == 448_750_000 and c.rttvar_ns == 513_750_000
    # A round trip on (snd_una beyond rtt_seq): the round's maximum deviation restarts at
    # the minimum RTO; rttvar would decay towards the finished round's (513.75), so stays.
    c.snd_una = c.snd_nxt = c.rtt_seq + 1
    rtt_sample(c, 10 * MS)  # SRTT 65.5078, error -55.5, mdev 448.75 - 56.68 = 392.07
    assert (c.mdev_ns, c.mdev_max_ns, c.rttvar_ns) == (392_070_312, 200 * MS, 513_750_000)
    # The next round: mdev 342.62 (above the restarted 200: the round's maximum), and at
    # its end rttvar decays a quarter of the way to it: 513.75 - 171.13 / 4 = 470.97.
    c.snd_una = c.snd_nxt = c.rtt_seq + 1
    rtt_sample(c, 10 * MS)
    assert c.mdev_ns == 342_622_069 and c.rttvar_ns == 470_968_018
    assert c.rto_ns == c.srtt_ns + 470_968_018 and c.mdev_max_ns == 200 * MS


def test_a_sample_below_srtt_moves_the_deviation_by_an_eighth() -> None:
    # Linux's Eifel-like rule: a sample well below SRTT grows mdev by 1/8 of its excess.
    c = _conn("linux")
    rtt_sample(c, 100 * MS)  # SRTT 100, mdev 200
    rtt_sample(c, 100 * MS)  # error 0: mdev 200 - 50 = 150
    assert c.mdev_ns == 150 * MS
    rtt_sample(c, 0)  # error -100: excess 100 - 37.5 = 62.5 > 0, an eighth: + 7.8125
    assert c.mdev_ns == 150 * MS + 62_500_000 // 8
    assert c.srtt_ns == 100 * MS - 100 * MS // 8


def test_rfc6298_is_the_default_estimator() -> None:
    c = _conn("rfc6298")
    assert c.params.rto_linux is False
    rtt_sample(c, 10 * MS)
    assert (c.srtt_ns, c.rttvar_ns, c.rto_ns) == (10 * MS, 5 * MS, 200 * MS)
    stations = [{"name": "a"}, {"name": "b"}]
    sc = parse_scenario({"name": "d", "stations": stations, "tcp": {"sender": "reno"}})
    assert (sc.tcp.rto_estimator, sc.tcp.loss_probe) == ("rfc6298", False)


def test_loss_probe_needs_sack() -> None:
    with pytest.raises(ScenarioError) as info:
        tcp = {"sender": "cubic", "loss_probe": True}
        stations = [{"name": "a"}, {"name": "b"}]
        parse_scenario({"name": "x", "stations": stations, "tcp": tcp}, source="x.toml")
    text = str(info.value)
    assert text.startswith("invalid scenario x.toml:")
    assert "tcp" in text and "loss_probe = true needs sack = true" in text


def _tail(probe: bool, second_at_ms: int | None = None) -> tuple[Simulation, TcpConnection]:
    """A 15,000-byte upload (ten segments) whose last segment is lost; optionally a second
    transfer later."""
    sim = _sim(probe)
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    sim.start_transfer(flow, 15_000)
    conn = sim.tcp["up"]
    sim.call_at(0, lambda: drop_queued(sim, conn, [9]))
    if second_at_ms is not None:
        sim.call_at(second_at_ms * MS, lambda: sim.start_transfer(flow, 150_000))
    return sim, conn


@pytest.mark.parametrize("probe", [False, True])
def test_a_lost_tail_is_resent_by_the_probe_not_the_rto(probe: bool) -> None:
    sim, conn = _tail(probe)
    sim.run(2_000 * MS)
    # Nothing above the last segment to SACK: the RTO resends it (the window collapses to
    # one), or the probe does, the window kept.
    assert (conn.timeouts, conn.loss_probes, conn.retransmits) == (
        (0, 1, 1) if probe else (1, 0, 1)
    )
    assert conn.fast_recoveries == 0 and conn.probe_recoveries == 0
    # slow start: 10 + 10 acked with the probe; after the RTO a window of 1, + 1 acked
    assert conn.cwnd == (20 if probe else 2)
    assert conn.ca_state == OPEN and conn.flags[9 - conn.base] & EVER_RETX
    assert sim.flows["up"].delivered_bytes == 15_000


def test_an_ack_beyond_a_repairing_probe_reduces_the_window() -> None:
    # The probe resent the lost tail (snd_nxt 10 then): the ack of 10 leaves the episode
    # open; the next transfer's first ack beyond 10 shows the probe repaired a loss, so
    # the window is reduced as by a CWR (CUBIC: 717/1024 of it), once.
    sim, conn = _tail(True, second_at_ms=1_000)
    seen: list[tuple[int, int, int]] = []

    def watch() -> None:
        seen.append((conn.snd_una, conn.cwnd, conn.probe_recoveries))

    for t in range(1_000, 1_100):
        sim.call_at(t * MS, watch)
    sim.run(1_100 * MS)
    assert seen[0] == (10, 10, 0)  # before the second transfer: all acked, the probe's open
    assert conn.tlp_high_seq == 0 and conn.probe_recoveries == 1
    first = next(s for s in seen if s[2] == 1)
    assert first[0] > 10
    assert conn.ssthresh == 10 * 717 // 1024


def test_a_probe_with_data_waiting_sends_a_new_segment_past_the_window() -> None:
    # The window is full (ten segments out, none acked) and the application has more: the
    # probe is the next new segment, past the window; its ack ends the episode without a
    # reduction (nothing was resent).
    sim = _sim(True)
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    sim.start_transfer(flow, None)
    conn = sim.tcp["up"]
    assert (conn.snd_nxt, conn.in_flight(), conn.cwnd) == (10, 10, 10)
    loss_probe(conn, 0)
    assert (conn.snd_nxt, conn.in_flight(), conn.loss_probes) == (11, 11, 1)
    assert (conn.tlp_high_seq, conn.tlp_retrans, conn.retransmits) == (11, False, 0)
    assert conn._rto_deadline == rto_now(conn) and not conn.probe_pending  # RTO from now
    sim.run(20 * MS)
    assert conn.snd_una > 11 and conn.tlp_high_seq == 0 and conn.probe_recoveries == 0
    assert conn.timeouts == conn.fast_recoveries == 0  # no reduction


def test_the_probe_waits_two_round_trips_after_the_last_ack() -> None:
    # Armed on every ack of new data: 2 SRTT + 2 ms with more than one segment out, and
    # 2 SRTT + the minimum RTO (the receiver's delayed ack) with one.
    sim = _sim(True)
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    sim.start_transfer(flow, None)
    conn = sim.tcp["up"]
    sim.run(10 * MS)
    assert conn.probe_pending and conn.srtt_ns > 0
    now = sim.now_ns
    schedule_probe(conn, now, True)
    assert conn._rto_deadline == now + 2 * conn.srtt_ns + 2 * MS
    conn.snd_una = conn.snd_nxt - 1  # one segment out: the delayed ack's allowance
    schedule_probe(conn, now, True)
    assert conn._rto_deadline == now + min(2 * conn.srtt_ns + 200 * MS, rto_now(conn))
    conn.ca_state = DISORDER  # not Open: no probe, the RTO stays
    assert not schedule_probe(conn, now, True)


def _lossy(seed: int, probe: bool, comp: int = 0) -> tuple[Any, list[Any], list[TcpConnection]]:
    tcp = {"sender": "cubic", "sack": True, "loss_probe": probe, "rto_estimator": "linux",
           "comp_sack_nr": comp}  # fmt: skip
    sc = lossy_scenario(tcp)
    sim = Simulation(sc, seed=seed)
    transfers: list[Any] = []
    for name in ("a", "b"):
        flow = sim.flow(f"up-{name}", name, "ap", BE, bulk=True)
        for k in range(40):  # short transfers: their tails are lost too
            sim.call_at(k * 40 * MS, lambda f=flow: transfers.append(
                sim.start_transfer(f, 30_000 + 1234 * len(transfers))))  # fmt: skip
    res = sim.run(2_000 * MS)
    return res, transfers, [sim.tcp["up-a"], sim.tcp["up-b"]]


def test_every_byte_is_delivered_once_with_probes_through_mac_losses() -> None:
    res, transfers, conns = _lossy(3, True)
    assert sum(c.loss_probes for c in conns) > 0  # probes happened
    assert_delivered_once(res, transfers)


def test_probes_same_seed_same_results_and_they_change_the_run() -> None:
    a, _, _ = _lossy(5, True)
    b, _, _ = _lossy(5, True)
    assert digest(a, a.tcp) == digest(b, b.tcp)
    c, _, _ = _lossy(5, False)
    assert digest(c, c.tcp) != digest(a, a.tcp)


def _linux_digest() -> str:
    """Probes, Linux's RTO and SACK compression together through MAC losses."""
    res, _, _ = _lossy(5, True, comp=44)
    return digest(res, res.tcp)


@pytest.mark.skipif(not COMPILED, reason=f"simulator: {describe(COMPILED)}")
def test_the_plain_python_tcp_computes_what_the_compiled_one_does() -> None:
    # The golden digests have no TCP case: this one pins the compiled modules against
    # the plain ones for the Linux mechanisms (each run's digest is its whole result).
    code = (
        "import sys; sys.path[:0] = sys.argv[1:]; "
        "import test_loss_probe as t; print(t._linux_digest())"
    )
    here = Path(__file__).parent
    out = subprocess.run(
        [sys.executable, "-c", code, str(here), str(here.parent)],
        env={**os.environ, "COORP_PURE": "1"}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == _linux_digest()
