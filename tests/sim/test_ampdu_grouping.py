"""A-MPDUs per receiver and TID (``mac.ampdu_grouping``): which packets form each A-MPDU,
and in which order, in tiny scenarios worked out by hand.

An access point holds datagram messages of 1000 bytes (one fragment: an IP packet of
1028 bytes, an MPDU of 1066, an A-MPDU subframe of 1070 padded to 1072) for stations
``a``, ``b`` and ``c``, all handed over at t = 0, so every one is queued before the first
access. ``cw_min = cw_max = 0``: no backoff, no contention (only the AP sends), so the
A-MPDUs follow from the rules alone. Common PHY as in ``test_airtime_budget``: 20 MHz,
1 stream, VHT MCS 7, long GI.

* ``per_receiver_tid`` with per-AC rings (ns-3's model): the head packet's receiver and
  TID, every packet of theirs in the ring in FIFO order, the others skipped; the next
  A-MPDU starts at the new head, the oldest packet left (ns-3's first-come-first-served
  queue scheduler). Limits: ``max_ampdu_mpdus`` (the Block Ack window),
  ``max_ampdu_bytes``, aPPDUMaxTime, the TXOP.
* ``per_receiver_tid`` with a shared ring: the NIC's FIFO is never reordered (a packet
  to another receiver ends an A-MPDU, as before); the driver hands the priority queue
  to the ring in per-receiver bursts when it has to wait for room.
* ``consecutive``: the behaviour before issue 36, one A-MPDU per run of consecutive
  packets to one receiver.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from coorp.scenario import AccessCategory, parse_scenario
from coorp.sim import AdmitAll, DriverView, SimResult, Simulation
from golden_digest import digest

US = 1_000
MPDU = 1028 + 38  # a 1000-byte message: UDP 8 + IP 20 bytes; QoS header, LLC, FCS 38


def psdu(n: int) -> int:
    """An A-MPDU of ``n`` such MPDUs: a 4-byte delimiter each, padded to 4 but the last."""
    return (n - 1) * ((4 + MPDU + 3) & ~3) + 4 + MPDU


def data_us(psdu_bytes: int, n_dbps: int = 260) -> int:
    """VHT SU PPDU, 1 stream, long GI (40 µs of preamble, 4 µs symbols)."""
    return 40 + 4 * math.ceil((8 * psdu_bytes + 22) / n_dbps)


class Log(AdmitAll):
    """Per-packet hooks on the AP: the order packets leave its rings, and when."""

    per_packet = True

    def __init__(self) -> None:
        self.done: list[tuple[int, int]] = []

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        assert delivered
        self.done.append((now_ns, pid))


def _sim(
    grouping: str, mode: str = "per_ac", cap: int = 64, *, mac: dict[str, Any] | None = None,
    phy: dict[str, Any] | None = None, mcs: int = 7, **edca: Any,
) -> Simulation:  # fmt: skip
    cfg: dict[str, Any] = {ac: {"cw_min": 0, "cw_max": 0} for ac in ("VO", "VI", "BE", "BK")}
    for ac, over in edca.items():
        cfg[ac].update(over)
    sc = parse_scenario({
        "duration_s": 0.1,
        "phy": {"width_mhz": 20, "spatial_streams": 1, "guard_interval": "long", **(phy or {})},
        "links": {"mode": "fixed", "mcs": mcs},
        "mac": {"edca": cfg, "ampdu_grouping": grouping, **(mac or {})},
        "hw_queue": {"mode": mode, "capacity_packets": cap},
        "stations": [{"name": "ap"}, {"name": "a"}, {"name": "b"}, {"name": "c"}],
    })  # fmt: skip
    return Simulation(sc, trace=True)


def _ampdus(sim: Simulation, order: list[str], at_ns: int = 0) -> list[list[str]]:
    """Send one message per entry of ``order`` (``"a"``: to ``a`` in AC_BE, ``"a:VI"``
    in AC_VI) at ``at_ns`` in that order; run; return each exchange's packets in the
    order they left the ring, labelled ``a1, a2, ...`` per receiver (and category)."""
    log = Log()
    sim.set_hooks("ap", log)
    flows: dict[str, Any] = {}
    labels: list[str] = []
    seen: dict[str, int] = {}
    for entry in order:
        dst, _, ac = entry.partition(":")
        if entry not in flows:
            cat = AccessCategory[ac or "BE"]
            flows[entry] = sim.flow(f"to-{entry}", "ap", dst, cat, bulk=False)
        seen[entry] = seen.get(entry, 0) + 1
        labels.append(f"{entry}{seen[entry]}")

    def send() -> None:
        for entry in order:
            sim.send_message(flows[entry], 1000)

    sim.call_at(at_ns, send)
    sim.run()
    # One fragment per message, pids allocated as they are sent: the k-th smallest pid
    # is the k-th message.
    rank = {pid: i for i, pid in enumerate(sorted(pid for _, pid in log.done))}
    assert len(rank) == len(order), "every message delivered"
    out: list[list[str]] = []
    last = -1
    for t, pid in log.done:
        if t != last:
            out.append([])
            last = t
        out[-1].append(labels[rank[pid]])
    return out


# -- interleaved receivers --------------------------------------------------------------
def test_interleaved_receivers_form_one_ampdu_each_in_fifo_order() -> None:
    got = _ampdus(_sim("per_receiver_tid"), list("abacba"))
    assert got == [["a1", "a2", "a3"], ["b1", "b2"], ["c1"]]


def test_consecutive_grouping_keeps_the_behaviour_before() -> None:
    got = _ampdus(_sim("consecutive"), list("abacba"))
    assert got == [["a1"], ["b1"], ["a2"], ["c1"], ["b2"], ["a3"]]


def test_the_oldest_packet_left_picks_the_next_receiver() -> None:
    # After a's A-MPDU the oldest packet is c1 (b's first came after it), then b.
    got = _ampdus(_sim("per_receiver_tid"), list("acabab"))
    assert got == [["a1", "a2", "a3"], ["c1"], ["b1", "b2"]]


# -- limits -------------------------------------------------------------------------------
def test_block_ack_window_limits_each_receivers_ampdu() -> None:
    # 3 MPDUs per A-MPDU: a's first three, then the oldest left is b1, then a4, a5, ...
    got = _ampdus(_sim("per_receiver_tid", mac={"max_ampdu_mpdus": 3}), list("ababababab"))
    assert got == [["a1", "a2", "a3"], ["b1", "b2", "b3"], ["a4", "a5"], ["b4", "b5"]]


def test_max_ampdu_length_limits_each_receivers_ampdu() -> None:
    limit = psdu(3)  # 3 MPDUs fit exactly, a fourth does not
    assert psdu(4) > limit
    got = _ampdus(_sim("per_receiver_tid", mac={"max_ampdu_bytes": limit}), list("abababab"))
    assert got == [["a1", "a2", "a3"], ["b1", "b2", "b3"], ["a4"], ["b4"]]


def test_ppdu_duration_limits_each_receivers_ampdu() -> None:
    # VHT MCS 0, 20 MHz, 1 stream: N_DBPS = 26; aPPDUMaxTime 5.484 ms holds 4 MPDUs.
    assert data_us(psdu(4), 26) <= 5484 < data_us(psdu(5), 26)
    sim = _sim("per_receiver_tid", mcs=0)
    got = _ampdus(sim, list("abababababab"))
    assert got == [["a1", "a2", "a3", "a4"], ["b1", "b2", "b3", "b4"], ["a5", "a6"],
                   ["b5", "b6"]]  # fmt: skip


def test_txop_limit_bounds_the_ampdu_and_the_next_receiver_waits_for_an_access() -> None:
    # VI, TXOP 500 µs: the exchange (PPDU + SIFS 16 + BlockAck 32) must fit: 3 MPDUs
    # (436 µs of PPDU), not 4; no second exchange fits in the same TXOP.
    assert data_us(psdu(3)) + 16 + 32 <= 500 < data_us(psdu(4)) + 16 + 32
    sim = _sim("per_receiver_tid", VI={"txop_limit_us": 500})
    got = _ampdus(sim, [f"{x}:VI" for x in "abababab"])
    assert got == [["a:VI1", "a:VI2", "a:VI3"], ["b:VI1", "b:VI2", "b:VI3"], ["a:VI4"],
                   ["b:VI4"]]  # fmt: skip
    assert sim.channel.stats.exchanges == 4


# -- TIDs -------------------------------------------------------------------------------------
def test_categories_are_never_aggregated_together() -> None:
    # Per-AC rings: one A-MPDU per receiver and category; VI (AIFSN 2) goes first.
    got = _ampdus(_sim("per_receiver_tid"), ["a", "a:VI", "b", "a", "a:VI"])
    assert got == [["a:VI1", "a:VI2"], ["a1", "a2"], ["b1"]]


def test_a_shared_ring_is_never_reordered() -> None:
    # The NIC's FIFO: a packet of another receiver or category ends the A-MPDU, and the
    # VO packet (aggregation off) goes alone, in its place.
    order = ["a", "a", "b", "a", "a:VO", "a", "a"]
    got = _ampdus(_sim("per_receiver_tid", "shared"), order)
    assert got == [["a1", "a2"], ["b1"], ["a3"], ["a:VO1"], ["a4", "a5"]]
    assert got == _ampdus(_sim("consecutive", "shared"), order)


# -- a shared ring: the driver groups what waits for room ----------------------------------
@pytest.mark.parametrize("grouping", ["consecutive", "per_receiver_tid"])
def test_the_driver_hands_waiting_packets_over_per_receiver(grouping: str) -> None:
    # A 3-packet shared ring, full of c's; a's and b's wait in the priority queue,
    # interleaved. When room comes, the driver hands over a burst of the oldest
    # packet's receiver (skipping the others'), as it serves mac80211's per-station
    # queues; before issue 36 it took them in arrival order.
    got = _ampdus(_sim(grouping, "shared", cap=3), list("cccababab"))
    if grouping == "per_receiver_tid":
        assert got == [["c1", "c2", "c3"], ["a1", "a2", "a3"], ["b1", "b2", "b3"]]
    else:
        assert got == [["c1", "c2", "c3"], ["a1"], ["b1"], ["a2"], ["b2"], ["a3"], ["b3"]]


def test_a_burst_stops_at_the_ring_and_at_one_block_ack_window() -> None:
    # Window 2: a burst is one A-MPDU's worth; the ring (3) takes a1 a2, then b1.
    got = _ampdus(_sim("per_receiver_tid", "shared", cap=3, mac={"max_ampdu_mpdus": 2}),
                  list("cccaaabbb"))  # fmt: skip
    assert got == [["c1", "c2"], ["c3"], ["a1", "a2"], ["a3"], ["b1", "b2"], ["b3"]]


def test_categories_without_aggregation_keep_their_queue_order() -> None:
    # VO does not aggregate: nothing to gain from a burst, so the queue order stays.
    got = _ampdus(_sim("per_receiver_tid", "shared", cap=1),
                  [f"{x}:VO" for x in "abab"])  # fmt: skip
    assert got == [["a:VO1"], ["b:VO1"], ["a:VO2"], ["b:VO2"]]


# -- the drain model and determinism --------------------------------------------------------
@pytest.mark.parametrize("mode", ["per_ac", "shared"])
def test_ring_drain_is_exact_with_interleaved_receivers(mode: str) -> None:
    # The best-case drain model (Channel.ring_drain) builds the MAC's frames per
    # receiver too: without contention it ends when the last packet leaves.
    sim = _sim("per_receiver_tid", mode, cap=64)
    st = sim.station("ap")
    predicted: list[int] = []
    done: list[int] = []

    class Done(Log):
        def on_hw_complete(self, station: DriverView, pid: int, ac: AccessCategory,
                           now_ns: int, delivered: bool) -> None:  # fmt: skip
            done.append(now_ns)

    sim.set_hooks("ap", Done())
    flows = {x: sim.flow(f"to-{x}", "ap", x, AccessCategory.BE, bulk=False) for x in "abc"}

    def send() -> None:
        for x in "abcabcaab":
            sim.send_message(flows[x], 1000)
        predicted.append(sim.channel.ring_drain(st, sim.now_ns, AccessCategory.BE).end_ns())

    sim.call_at(0, send)
    sim.run()
    assert predicted == [done[-1]]


def test_ring_drain_extends_each_receivers_frame() -> None:
    # Appending a packet for a receiver joins that receiver's open A-MPDU, whatever was
    # appended in between (per-AC rings); a shared ring closes a frame at each change.
    ends: dict[str, list[int]] = {}
    for mode in ("per_ac", "shared"):
        sim = _sim("per_receiver_tid", mode)
        st = sim.station("ap")
        fa = sim.flow("to-a", "ap", "a", AccessCategory.BE, bulk=False)
        fb = sim.flow("to-b", "ap", "b", AccessCategory.BE, bulk=False)

        def probe(fa: Any = fa, fb: Any = fb, sim: Simulation = sim, st: Any = st,
                  mode: str = mode) -> None:  # fmt: skip
            from coorp.sim.packets import Packet

            d = sim.channel.ring_drain(st, sim.now_ns, AccessCategory.BE)
            out = []
            for f in (fa, fb, fa):
                d.add(Packet(-1, f, 1028))
                out.append(d.end_ns() - sim.now_ns)
            ends[mode] = out

        sim.call_at(0, probe)
        sim.run(1)
    one = 43 + data_us(psdu(1)) + 16 + 28  # AIFS, PPDU, SIFS, Ack
    two = 43 + data_us(psdu(2)) + 16 + 32  # AIFS, PPDU, SIFS, BlockAck
    assert ends["per_ac"] == [one * US, 2 * one * US, (two + one) * US]
    assert ends["shared"] == [one * US, 2 * one * US, 3 * one * US]


def test_ring_drain_extend_until_matches_adding_one_by_one() -> None:
    # The oracle's per-run path (extend_until) with a frame per receiver: as many packets
    # as copy + add + end_ns one at a time would admit, and the same model after.
    from coorp.sim.packets import Packet

    sim = _sim("per_receiver_tid")
    st = sim.station("ap")
    fa = sim.flow("to-a", "ap", "a", AccessCategory.BE, bulk=False)
    fb = sim.flow("to-b", "ap", "b", AccessCategory.BE, bulk=False)
    base = sim.channel.ring_drain(st, 0, AccessCategory.BE)
    for f in (fa, fb, fa, fb, fb):
        base.add(Packet(-1, f, 1028))
    for until_us in (900, 1500, 2600, 4000, 20_000):
        fast = base.copy()
        n = fast.extend_until(Packet(-1, fa, 1028), 40, until_us * US)
        slow = base.copy()
        k = 0
        while k < 40:
            trial = slow.copy()
            trial.add(Packet(-1, fa, 1028))
            if trial.end_ns() > until_us * US:
                break
            slow, k = trial, k + 1
        assert n == k
        assert fast.end_ns() == slow.end_ns()
        # And the model goes on alike: one more packet for b.
        fast.add(Packet(-1, fb, 1028))
        slow.add(Packet(-1, fb, 1028))
        assert fast.end_ns() == slow.end_ns()


def _mixed(grouping: str, seed: int) -> SimResult:
    sc = parse_scenario({
        "duration_s": 0.3, "seed": seed,
        "links": {"mode": "fixed", "mcs": 5, "packet_errors": True},
        "mac": {"ampdu_grouping": grouping, "retry_policy": "ns3", "retry_limit": 3},
        "hw_queue": {"mode": "per_ac", "capacity_packets": 96},
        "stations": [{"name": "ap", "position_m": [0.0, 0.0]},
                     {"name": "a", "position_m": [14.0, 0.0]},
                     {"name": "b", "position_m": [0.0, 16.0]},
                     {"name": "c", "position_m": [3.0, 3.0]}],
        "flows": [{"kind": "datagram", "name": f"to-{x}", "src": "ap", "dst": x,
                   "size_bytes": 1400, "period_us": 300, "jitter_us": 50, "category": "BE"}
                  for x in "abc"]
        + [{"kind": "bulk", "name": "up", "src": "c", "dst": "ap"}],
    })  # fmt: skip
    return Simulation(sc, trace=True).run()


def test_mixed_receivers_with_losses_are_deterministic() -> None:
    # Three receivers, packet errors (partial A-MPDU losses: scattered runs retried),
    # BlockAckReqs, contention: the same seed, the same run, bit for bit.
    a, b = _mixed("per_receiver_tid", 3), _mixed("per_receiver_tid", 3)
    assert digest(a) == digest(b)
    assert a.trace == b.trace
    assert a.flows["to-b"].dropped_packets > 0 and a.channel.per_failures > 0  # losses
    # The same traffic with the grouping before: the AP could not keep up.
    old = _mixed("consecutive", 3)

    def ap_delivered(r: SimResult) -> int:
        return sum(r.flows[f"to-{x}"].delivered_packets for x in "abc")

    assert ap_delivered(a) > 5 * ap_delivered(old)
