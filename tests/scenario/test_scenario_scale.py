"""Many stations: loading checks each pair once (distance) or not at all (fixed), and a
team the simulator cannot hold is refused when loading, with the limit named."""

from __future__ import annotations

import math
import random
import tracemalloc
from typing import Any

import pytest

from coorp import ScenarioError
from coorp.phy import LinkBudget
from coorp.scenario import LINK_TABLE_BYTES_PER_PAIR, MAX_STATIONS, parse_scenario
from coorp.sim.links import LinkTable


def _team(n: int, mode: str, **links: Any) -> dict[str, Any]:
    rnd = random.Random(n)
    stations = [{"name": "leader", "position_m": [0.0, 0.0]}]
    for i in range(1, n):
        r, a = 10 * math.sqrt(rnd.random()), rnd.random() * 2 * math.pi
        stations.append({"name": f"r{i}", "position_m": [r * math.cos(a), r * math.sin(a)]})
    return {"name": f"team-{n}", "stations": stations, "links": {"mode": mode, **links}}


class _Count:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = LinkBudget.best_mcs_at

        def counted(budget: LinkBudget, *args: Any) -> int | None:
            self.calls += 1
            return original(budget, *args)

        monkeypatch.setattr(LinkBudget, "best_mcs_at", counted)


def test_distance_mode_checks_each_pair_once(monkeypatch: pytest.MonkeyPatch) -> None:
    count = _Count(monkeypatch)
    n = 60
    parse_scenario(_team(n, "distance"))
    assert count.calls == n * (n - 1) // 2  # not n (n - 1): path loss is symmetric
    count.calls = 0
    sc = parse_scenario(_team(n, "distance"))
    table = LinkTable(sc)
    # The table computes the budget inline (compiled), once per pair, to the same bits.
    assert count.calls == n * (n - 1) // 2
    budget, phy = table.budget, sc.phy
    for i, a in enumerate(sc.stations):
        for j, b in enumerate(sc.stations):
            if i != j:
                rx = budget.rx_power_dbm(math.dist(a.position_m, b.position_m))
                assert table.rx_power_dbm(i, j) == rx == table.rx_power_dbm(j, i)
                mcs = budget.best_mcs_at(rx, phy.spatial_streams, phy.width_mhz, phy.standard)
                assert table.mcs_table[i][j] == mcs == table.mcs_table[j][i]
    # What moving robots' links use (coorp.sim.cells): the budget's own numbers, under 1 m
    # (clamped) and out of range (no MCS) included.
    for d in (0.0, 0.5, 1.0, 7.3, 40.0, 5_000.0):
        rx = budget.rx_power_dbm(d)
        assert table.rx_at(d) == rx
        assert table.mcs_at(rx) == budget.best_mcs_at(
            rx, phy.spatial_streams, phy.width_mhz, phy.standard
        )
    assert table.mcs_at(budget.rx_power_dbm(5_000.0)) is None


def test_fixed_mode_visits_no_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    count = _Count(monkeypatch)
    rx_calls = []
    original = LinkBudget.rx_power_dbm
    monkeypatch.setattr(
        LinkBudget, "rx_power_dbm", lambda b, d: rx_calls.append(d) or original(b, d)
    )
    parse_scenario(_team(200, "fixed"))
    assert count.calls == 0 and rx_calls == []


def test_the_link_table_matches_a_per_pair_computation() -> None:
    sc = parse_scenario(_team(25, "distance", overrides=[{"src": "r3", "dst": "leader", "mcs": 2}]))
    table = LinkTable(sc)
    pl = sc.links.pathloss
    budget = LinkBudget(pl.tx_power_dbm, pl.reference_loss_db, pl.exponent, pl.margin_db)
    names = [s.name for s in sc.stations]
    for i, a in enumerate(sc.stations):
        for j, b in enumerate(sc.stations):
            if i == j:
                continue
            d = math.dist(a.position_m, b.position_m)
            assert table.rx_power_dbm(i, j) == budget.rx_power_dbm(d)
            expected = budget.best_mcs(d, sc.phy.spatial_streams, sc.phy.width_mhz)
            if (names[i], names[j]) == ("r3", "leader"):
                expected = 2
            assert table.mcs(i, j) == expected


def test_the_slowest_link_is_found_without_visiting_pairs_in_fixed_mode() -> None:
    data = _team(4, "fixed", mcs=0, overrides=[{"src": "r1", "dst": "r2", "mcs": 8}])
    data["phy"] = {"width_mhz": 20, "spatial_streams": 1}
    data["packet_bytes"] = 7935
    with pytest.raises(ScenarioError, match=r"at MCS 0 \(links.mcs;"):
        parse_scenario(data)
    # Every ordered pair overridden to MCS 8: links.mcs (0) is on no link, nothing to refuse.
    names = [s["name"] for s in data["stations"]]
    data["links"]["overrides"] = [
        {"src": a, "dst": b, "mcs": 8} for a in names for b in names if a != b
    ]
    assert parse_scenario(data).links.mcs == 0


def test_link_tables_cost_what_the_limit_assumes() -> None:
    """The station limit comes from the bytes per ordered pair the link tables take."""
    n = 300
    sc = parse_scenario(_team(n, "distance"))
    tracemalloc.start()
    try:
        table = LinkTable(sc)
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert table.mcs(0, 1) >= 0
    per_pair = used / n**2
    # The bound holds for the build in use (plain Python ~28 B, compiled ~40.4 B) and
    # is not loose by more than the plain build's share.
    assert 26 < per_pair <= LINK_TABLE_BYTES_PER_PAIR
    assert MAX_STATIONS**2 * LINK_TABLE_BYTES_PER_PAIR <= 512 * 2**20


def test_too_many_stations_are_refused_naming_the_limit() -> None:
    data = {
        "name": "huge",
        "stations": [{"name": f"s{i}"} for i in range(MAX_STATIONS + 1)],
    }
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, source="huge.toml")
    msg = str(info.value)
    assert msg.startswith(
        f"invalid scenario huge.toml:\n  - stations: {MAX_STATIONS + 1} stations is more"
    )
    assert f"at most {MAX_STATIONS}" in msg
    assert f"{LINK_TABLE_BYTES_PER_PAIR} bytes per ordered pair" in msg
