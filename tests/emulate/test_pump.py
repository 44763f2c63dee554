"""The pump's host probe: how late a bare loop wakes, measured exactly as the pump sleeps.

A fake clock and sleeper make the trace exact: each sleep of ``period`` advances the
clock by the period plus a scripted oversleep, and the probe's lag meter must hold
exactly those oversleeps.
"""

from __future__ import annotations

from coorp.emulate._pump import probe_wakeups

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
