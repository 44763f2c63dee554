"""The MAC's backoff draw is ``random.Random.randrange`` exactly (same numbers, same state
after), only without its interpreted argument checks: every run's results rest on it."""

from __future__ import annotations

import random

from coorp.sim.mac import _draw


def test_backoff_draws_are_randrange_draws() -> None:
    a, b = random.Random(12345), random.Random(12345)
    for n in [*range(1, 1100), 1 << 20, (1 << 20) + 1]:
        for _ in range(3):
            assert _draw(a, n) == b.randrange(n)
    assert a.getstate() == b.getstate()
