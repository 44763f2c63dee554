"""The EDCA state machine, behaviour by behaviour: contention-window evolution under
forced failures, the retry limit, the reset after a drop and after a success, internal
collisions and TXOP continuation, each as an exact trace.

Every station's backoff draws come from its own RNG (``Station.rng``). The tests put a
recording RNG there that answers each draw ``randrange(CW + 1)`` with a scripted value
(by default the largest, ``CW``): the list of ``CW + 1`` it was asked for is the exact
sequence of contention windows, and because the backoff *is* the window, every access
instant moves with it, so the channel's timeline checks the same thing independently.

The expected values follow from 802.11-2016 10.22.2 alone: after a failed attempt
``CW = min(2·CW + 1, CWmax)`` (10.22.2.4: CW takes the values 2^k − 1), after a success
or a drop (retry limit reached) ``CW = CWmin`` (10.22.2.4, 10.22.2.7); a frame is tried
``retry_limit + 1`` times; inside a TXOP the next frame follows after SIFS with no
backoff, and the backoff drawn when the TXOP ends uses the CW then in force.

Timing (as ``test_mac_trace.py``): 20 MHz, 1 stream, MCS 7, long GI; SIFS 16 µs, slot
9 µs, AIFS(VO) = AIFS(BE with AIFSN 2) = 34 µs. A 1000-byte datagram is one 1066-byte
MPDU: data 176 µs, so an exchange (data + SIFS + Ack, or + Ack timeout when it fails)
lasts 220 µs. A 12288-byte datagram is 8 full fragments (data 232 µs, exchange 276 µs)
and a last one (data 108 µs, exchange 152 µs).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from coorp.scenario import Scenario, parse_scenario
from coorp.sim import SimResult, Simulation

US = 1_000
SIFS, SLOT, AIFS = 16, 9, 34
EX = 176 + SIFS + 28  # one 1000-byte datagram: data + SIFS + Ack (or the Ack timeout)
FULL_EX, LAST_EX = 232 + SIFS + 28, 108 + SIFS + 28  # fragments of a 12288-byte datagram


class DrawLog(random.Random):
    """A station's backoff RNG that records every ``randrange(n)`` (``n = CW + 1``) and
    answers with ``pick(n, i)`` for the i-th draw (default: ``n - 1``, i.e. ``CW``)."""

    def __init__(self, pick: Callable[[int, int], int] | None = None) -> None:
        super().__init__(0)
        self.asked: list[int] = []
        self.pick = pick or (lambda n, _i: n - 1)

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:  # type: ignore[override]
        assert stop is None and step == 1, "the MAC draws randrange(CW + 1) only"
        self.asked.append(start)
        value = self.pick(start, len(self.asked) - 1)
        assert 0 <= value < start
        return value

    @property
    def windows(self) -> list[int]:
        """The contention window of every draw, in order."""
        return [n - 1 for n in self.asked]


def _datagram(name: str, src: str, at_us: float, size: int = 1000, cat: str = "VO") -> dict:
    return {"kind": "datagram", "name": name, "src": src, "dst": "ap", "size_bytes": size,
            "times_us": [at_us], "category": cat}  # fmt: skip


def _scenario(
    flows: list[dict[str, Any]],
    stations: Sequence[str],
    *,
    retry_limit: int = 7,
    edca: dict[str, dict[str, int]] | None = None,
) -> Scenario:
    return parse_scenario({
        "duration_s": 0.01,
        "phy": {"width_mhz": 20, "spatial_streams": 1, "guard_interval": "long"},
        "links": {"mode": "fixed", "mcs": 7},
        "mac": {"retry_limit": retry_limit,
                "edca": edca or {"VO": {"cw_min": 1, "cw_max": 7}}},
        "stations": [{"name": n} for n in ("ap", *stations)],
        "flows": flows,
    })  # fmt: skip


def _run(sc: Scenario, rngs: dict[str, DrawLog]) -> SimResult:
    sim = Simulation(sc, trace=True)
    for name, rng in rngs.items():
        sim.stations[name].rng = rng
    return sim.run()


def _trace(r: SimResult) -> list[tuple[int, int, bool, tuple[str, ...]]]:
    assert r.trace is not None
    return [(int(t[0]) // US, int(t[1]) // US, bool(t[2]), tuple(t[3])) for t in r.trace]


# -- CW doubling, CWmax, retry limit, reset after a drop -------------------------------------


def test_cw_doubles_to_cwmax_and_resets_after_the_drop() -> None:
    """CWmin 1, CWmax 7, retry limit 4: two stations collide on every attempt (same
    draws), CW 1, 3, 7, 7, 7 over the 5 attempts, the frame is dropped and CW is 1
    again. A later frame of s1 then waits one slot of post-backoff (CW 1), not seven."""
    flows = [_datagram("a", "s1", 0), _datagram("b", "s2", 0), _datagram("c", "s1", 1500)]
    rngs = {"s1": DrawLog(), "s2": DrawLog()}
    r = _run(_scenario(flows, ("s1", "s2"), retry_limit=4), rngs)

    # The draw after each failed attempt: 3, 7, 7, 7, then 1 after the drop (5th failure).
    assert rngs["s2"].windows == [3, 7, 7, 7, 1]
    # s1 also draws after its later frame's success: CWmin again.
    assert rngs["s1"].windows == [3, 7, 7, 7, 1, 1]
    # Attempt k + 1 starts AIFS + CW_k slots after attempt k ends (backoff = CW).
    both = ("s1", "s2")
    expected = [(34, 34 + EX, True, both)]
    for cw in (3, 7, 7, 7):
        start = expected[-1][1] + AIFS + cw * SLOT
        expected.append((start, start + EX, True, both))
    assert [e[:2] for e in expected] == [(34, 254), (315, 535), (632, 852), (949, 1169),
                                         (1266, 1486)]  # fmt: skip
    # Frame "c" arrives at 1500 on an idle medium: s1's post-backoff (1 slot, from the
    # drop at 1486) is over by 1486 + 34 + 9 = 1529 > 1500, so it goes at 1529.
    expected.append((1529, 1529 + EX, False, ("s1",)))
    assert _trace(r) == expected
    for station, flow in (("s1", "a"), ("s2", "b")):
        s = r.stations[station]
        assert (s.tx_failed, s.dropped_packets) == (5, 1)  # retry_limit + 1 attempts
        assert r.flows[flow].dropped_packets == 1
    assert r.flows["c"].delivered_packets == 1


@pytest.mark.parametrize(
    ("retry_limit", "windows"),
    [(0, [1]), (1, [3, 1]), (2, [3, 7, 1]), (5, [3, 7, 7, 7, 7, 1])],
)
def test_a_frame_gets_retry_limit_plus_one_attempts(retry_limit: int, windows: list[int]) -> None:
    flows = [_datagram("a", "s1", 0), _datagram("b", "s2", 0)]
    rngs = {"s1": DrawLog(), "s2": DrawLog()}
    r = _run(_scenario(flows, ("s1", "s2"), retry_limit=retry_limit), rngs)
    assert rngs["s1"].windows == rngs["s2"].windows == windows
    attempts = _trace(r)
    assert len(attempts) == retry_limit + 1 and all(a[2] for a in attempts)
    assert r.flows["a"].dropped_packets == r.flows["b"].dropped_packets == 1


# -- reset after a success ------------------------------------------------------------------


def test_cw_resets_after_a_success_that_follows_failures() -> None:
    """Two collisions (CW 3, then 7), then s2 draws 0 and wins alone; s1 counts down
    from 7 (one slot consumed at the boundary where s2 starts: 6 left) and goes after
    it. Each success brings its station's CW back to CWmin (the next draw is 1)."""
    s2_picks = {1: 0}  # the second draw of s2 (CW 7) gives 0
    rngs = {"s1": DrawLog(), "s2": DrawLog(lambda n, i: s2_picks.get(i, n - 1))}
    flows = [_datagram("a", "s1", 0), _datagram("b", "s2", 0)]
    r = _run(_scenario(flows, ("s1", "s2")), rngs)
    assert rngs["s1"].windows == [3, 7, 1]
    assert rngs["s2"].windows == [3, 7, 1]
    s2_start = 535 + AIFS  # backoff 0 after the second collision (ends 535)
    s1_start = s2_start + EX + AIFS + 6 * SLOT
    assert _trace(r) == [
        (34, 254, True, ("s1", "s2")),
        (315, 535, True, ("s1", "s2")),
        (s2_start, s2_start + EX, False, ("s2",)),
        (s1_start, s1_start + EX, False, ("s1",)),
    ]
    assert (s2_start, s1_start) == (569, 877)
    assert r.flows["a"].delivered_packets == r.flows["b"].delivered_packets == 1


# -- internal collision ----------------------------------------------------------------------


def test_the_loser_of_an_internal_collision_doubles_its_cw() -> None:
    """One station, VO and BE (AIFSN 2: the same AIFS) frames at t = 0, both CWmin 1:
    they count down to the same boundary; VO transmits, BE behaves as after a failed
    attempt (CW 1 -> 3, backoff 3) and transmits after VO's exchange."""
    edca = {"VO": {"cw_min": 1, "cw_max": 7}, "BE": {"aifsn": 2, "cw_min": 1, "cw_max": 7}}
    flows = [_datagram("vo", "s1", 0), _datagram("be", "s1", 0, cat="BE")]
    rngs = {"s1": DrawLog()}
    r = _run(_scenario(flows, ("s1",), edca=edca), rngs)
    # BE's draw after the internal collision (CW 3), VO's after its success (CWmin 1),
    # BE's after its own success (CWmin 1 again).
    assert rngs["s1"].windows == [3, 1, 1]
    be_start = 34 + EX + AIFS + 3 * SLOT
    assert _trace(r) == [(34, 254, False, ("s1",)), (be_start, be_start + EX, False, ("s1",))]
    assert r.channel.internal_collisions == 1


def test_a_frame_dropped_at_an_internal_collision_resets_the_cw() -> None:
    """As above with retry limit 0: losing the internal collision is BE's last attempt,
    its frame is dropped and its CW goes back to CWmin (the draw is 1, not 3)."""
    edca = {"VO": {"cw_min": 1, "cw_max": 7}, "BE": {"aifsn": 2, "cw_min": 1, "cw_max": 7}}
    flows = [_datagram("vo", "s1", 0), _datagram("be", "s1", 0, cat="BE")]
    rngs = {"s1": DrawLog()}
    r = _run(_scenario(flows, ("s1",), retry_limit=0, edca=edca), rngs)
    assert rngs["s1"].windows == [1, 1]  # BE after its drop, VO after its success
    assert _trace(r) == [(34, 254, False, ("s1",))]
    assert (r.flows["be"].dropped_packets, r.flows["vo"].delivered_packets) == (1, 1)


# -- TXOP continuation -----------------------------------------------------------------------


def test_txop_continues_after_sifs_without_backoff_and_draws_cwmin_when_it_ends() -> None:
    """A 12288-byte VO datagram (9 fragments), VO TXOP limit 1504 µs: each fragment of a
    TXOP follows the previous exchange after SIFS with no draw; a TXOP ends when the next
    exchange would end past its limit, and only then a backoff is drawn, with CWmin
    (1 slot here), before the next TXOP."""
    rngs = {"s1": DrawLog()}
    r = _run(_scenario([_datagram("m", "s1", 0, size=12288)], ("s1",)), rngs)
    step = FULL_EX + SIFS
    txop1 = [(34 + k * step, 34 + k * step + FULL_EX) for k in range(5)]  # a 6th: 1770 > 1538
    t2 = txop1[-1][1] + AIFS + 1 * SLOT  # the backoff drawn at the TXOP's end: CW 1
    txop2 = [(t2 + k * step, t2 + k * step + FULL_EX) for k in range(3)]
    last = txop2[-1][1] + SIFS
    expected = [*txop1, *txop2, (last, last + LAST_EX)]
    assert expected[4] == (1202, 1478) and expected[5][0] == 1521 and expected[-1][1] == 2549
    assert expected[-1][1] <= t2 + 1504  # the whole second TXOP fits its limit
    assert [t[:2] for t in _trace(r)] == expected
    assert rngs["s1"].windows == [1, 1]  # one draw per TXOP, none between its frames
    assert r.flows["m"].messages_delivered == 1
