"""The echo workload on the simulated channel: counts, physics, determinism."""

from __future__ import annotations

from coorp.phy import GuardInterval, VhtMode, vht_ppdu_duration_ns
from coorp.scenario._load import load_scenario, resolve_scenario
from coorp.teambench._sim import echo_scenario, run_echo


def _run(robots: int, size: int, seed: int = 1, bulk: str = "none") -> tuple[object, object]:
    base = load_scenario(resolve_scenario("crl-5"))
    sc = echo_scenario(base, robots, seed=seed)
    m = run_echo(sc, rate_hz=20, size=size, duration_ns=500_000_000, drain_ns=200_000_000,
                 bulk=bulk, bulk_message_bytes=65_536, seed=seed)  # fmt: skip
    return sc, m


def test_every_ping_is_echoed_slower_than_its_airtime() -> None:
    sc, m = _run(robots=3, size=4000)
    assert m.sent == 3 * 10 and m.echoed == m.sent  # type: ignore[attr-defined]
    # Lower bound: each way, the whole payload in one PPDU at the channel's fastest mode
    # (the real exchange fragments it and adds access delays, acks, the UDP/IP headers).
    phy = sc.phy  # type: ignore[attr-defined]
    fastest = VhtMode(9, phy.spatial_streams, phy.width_mhz, GuardInterval.SHORT)
    assert m.rtt_ns.min() > 2 * vht_ppdu_duration_ns(4000, fastest)  # type: ignore[attr-defined]


def test_same_seed_same_round_trips_other_seed_other_phases() -> None:
    _, a = _run(robots=2, size=1000, seed=3)
    _, b = _run(robots=2, size=1000, seed=3)
    _, c = _run(robots=2, size=1000, seed=4)
    assert a.rtt_ns.tolist() == b.rtt_ns.tolist()  # type: ignore[attr-defined]
    assert a.rtt_ns.tolist() != c.rtt_ns.tolist()  # type: ignore[attr-defined]


def test_bulk_flows_next_to_the_echoes() -> None:
    _, m = _run(robots=2, size=1000, bulk="tcp")
    assert m.bulk_bytes > 0 and m.echoed > 0  # type: ignore[attr-defined]
