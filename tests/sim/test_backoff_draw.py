"""The MAC's backoff draw is ``random.Random.randrange`` exactly (same numbers, same state
after), only without its interpreted argument checks: every run's results rest on it."""

from __future__ import annotations

import random

from coorp.scenario import parse_scenario
from coorp.sim import Simulation

_NS = [*range(1, 1100), 1 << 20, (1 << 20) + 1]


def _station():  # type: ignore[no-untyped-def]
    sc = parse_scenario({
        "duration_s": 0.01, "links": {"mode": "fixed", "mcs": 7},
        "stations": [{"name": "ap"}, {"name": "r1"}], "flows": [],
    })  # fmt: skip
    return Simulation(sc, seed=1).stations["r1"]


def test_backoff_draws_are_randrange_draws() -> None:
    st = _station()
    st.rng, b = random.Random(12345), random.Random(12345)
    for n in _NS:
        for _ in range(3):
            assert st.draw(n) == b.randrange(n)
    assert st.rng.getstate() == b.getstate()


class _Fixed(random.Random):
    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:  # type: ignore[override]
        return start - 1


def test_station_draws_follow_the_rng_it_holds_now() -> None:
    """``Station.draw`` keeps the rng's ``getrandbits`` at hand; a replaced rng (a test's
    recording one, a subclass) is the one drawn from, at once."""
    st = _station()
    st.rng = random.Random(7)
    ref = random.Random(7)
    assert [st.draw(n) for n in _NS[:200]] == [ref.randrange(n) for n in _NS[:200]]
    st.rng = _Fixed(0)
    assert [st.draw(n) for n in (1, 16, 1024)] == [0, 15, 1023]
    st.rng = random.Random(9)
    ref = random.Random(9)
    assert [st.draw(16) for _ in range(50)] == [ref.randrange(16) for _ in range(50)]
    assert st.rng.getstate() == ref.getstate()
