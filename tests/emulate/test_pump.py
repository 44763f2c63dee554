"""The pump's host probe: how late a bare loop wakes, measured exactly as the pump sleeps;
and its GRO writes (datagram socket pairs stand in for the TUN devices: one write, one
datagram).

A fake clock and sleeper make the trace exact: each sleep of ``period`` advances the
clock by the period plus a scripted oversleep, and the probe's lag meter must hold
exactly those oversleeps.
"""

from __future__ import annotations

import socket

from test_air import scenario
from test_gro import MSS, resegment, seg

from coorp.emulate import Air
from coorp.emulate._gro import PLAIN, VNET_HDR_BYTES
from coorp.emulate._pump import Pump, probe_wakeups

US = 1_000


def test_the_probe_records_each_oversleep_and_stops_at_its_duration() -> None:
    over = [10 * US, 0, 1_500 * US, 40 * US, 2_000 * US]
    now = [0]
    slept: list[float] = []

    def clock() -> int:
        return now[0]

    def sleep(timeout: float) -> None:
        slept.append(timeout)
        now[0] += round(timeout * 1e9) + over[len(slept) - 1]

    period = 200 * US
    duration = sum(period + o for o in over)  # exactly five sleeps fit
    meter = probe_wakeups(duration, period_ns=period, clock=clock, sleep=sleep)
    assert slept == [period / 1e9] * 5
    s = meter.summary()
    assert s.count == 5
    assert s.late == 2  # 1.5 and 2 ms are late by > 1 ms; 10 and 40 µs are not
    assert s.max_ms == 2.0
    # The third smallest of 0, 10, 40, 1500, 2000 µs, at the upper edge of its 1 µs bin.
    assert s.p50_ms == 0.041


def test_gro_writes_one_batch_per_instant_and_station_and_counts_every_frame() -> None:
    """With ``gro`` the deliveries of one instant to one station are coalesced (one
    flow's three segments: one write), another station or another instant is another
    batch, and the lag, the frame count and the trace are per frame, not per write."""
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
    try:
        air = Air(scenario(1), seed=1)  # two stations: the AP and one robot
        pump = Pump(air, [a.fileno() for a, _ in pairs], clock=lambda: 5_000, gro=True,
                    trace_writes=True)  # fmt: skip
        a, b, c, d = (seg(k * MSS) for k in range(4))
        other = seg(0, sport=9)
        # (delivery ns, station, packet, frame id): a-c to the leader at 1000, other to
        # r1 at 1000, d to the leader at 2000 (another exchange: not merged with a-c).
        pump._write([(1000, 0, a, 1), (1000, 1, other, 2), (1000, 0, b, 3),
                     (1000, 0, c, 4), (2000, 0, d, 5)], t0=0)  # fmt: skip
        got = [pairs[0][1].recv(70000) for _ in range(2)]
        assert resegment(got[0]) == [a, b, c] and got[1] == PLAIN + d
        assert pairs[1][1].recv(70000) == PLAIN + other
        st = pump.stats
        assert (st.frames_out, st.gro_writes, st.gro_frames) == (5, 1, 3)
        assert st.bytes_out == 5 * len(a) and len(got[0]) == VNET_HDR_BYTES + 20 + 32 + 3 * MSS
        assert st.writes == [(1, 1000, 5000), (3, 1000, 5000), (4, 1000, 5000),
                             (2, 1000, 5000), (5, 2000, 5000)]  # fmt: skip
        assert st.frame_lag.summary().count == 5
    finally:
        for x, y in pairs:
            x.close()
            y.close()
