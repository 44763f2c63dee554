"""``phy.standard``: an 802.11ax (HE) channel beside 802.11ac, and the keys of each."""

from __future__ import annotations

from pathlib import Path

import pytest

from coorp import ScenarioError
from coorp.phy import HeMode, PhyStandard, VhtMode
from coorp.scenario import PhyConfig, load_scenario, parse_scenario
from coorp.sim import Simulation

GOOD = """\
name = "t"
duration_s = 1.0

[[stations]]
name = "a"
[[stations]]
name = "b"
"""


def _problem(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    err = info.value
    assert len(err.problems) == 1, str(err)
    return str(err).splitlines()[1]


def test_default_is_vht_and_unchanged() -> None:
    phy = PhyConfig()
    assert phy.standard is PhyStandard.AC
    assert isinstance(phy.mode(7), VhtMode) and phy.max_mcs == 9


def test_ax_channel_loads_with_he_keys(tmp_path: Path) -> None:
    path = tmp_path / "ax.toml"
    path.write_text(
        GOOD + '[phy]\nstandard = "ax"\nhe_guard_interval_ns = 3200\n[links]\nmcs = 11\n'
    )
    sc = load_scenario(path)
    mode = sc.phy.mode(sc.links.mcs)
    assert isinstance(mode, HeMode)
    assert (mode.mcs, mode.gi_ns, mode.ltf) == (11, 3200, 4)
    # A scenario dumped and parsed again (what --set and the simulator do) stays valid.
    assert parse_scenario(sc.model_dump()) == sc


def test_he_key_on_a_vht_channel_is_refused(tmp_path: Path) -> None:
    line = _problem(tmp_path, GOOD + "[phy]\nhe_guard_interval_ns = 1600\n")
    assert "phy.he_guard_interval_ns = 1600" in line
    assert 'applies to phy.standard = "ax" only' in line


def test_vht_short_gi_on_an_ax_channel_is_refused(tmp_path: Path) -> None:
    line = _problem(tmp_path, GOOD + '[phy]\nstandard = "ax"\nguard_interval = "short"\n')
    assert "phy.guard_interval = 'short'" in line or 'phy.guard_interval = "short"' in line
    assert "he_guard_interval_ns (allowed: 800, 1600, 3200)" in line


def test_he_ltf_must_suit_the_guard_interval(tmp_path: Path) -> None:
    text = GOOD + '[phy]\nstandard = "ax"\nhe_guard_interval_ns = 3200\nhe_ltf = 2\n'
    line = _problem(tmp_path, text)
    assert "phy.he_ltf = 2" in line and "allowed with 3200 ns: 4x" in line


def test_unknown_standard_lists_the_allowed(tmp_path: Path) -> None:
    line = _problem(tmp_path, GOOD + '[phy]\nstandard = "be"\n')
    assert "phy.standard" in line and "'ac'" in line and "'ax'" in line


def test_mcs_range_depends_on_the_standard(tmp_path: Path) -> None:
    line = _problem(tmp_path, GOOD + "[links]\nmcs = 10\n")
    assert "links.mcs = 10 does not exist" in line and "allowed: [0, 1" in line
    assert "9]" in line
    path = tmp_path / "ok.toml"
    path.write_text(GOOD + '[phy]\nstandard = "ax"\n[links]\nmcs = 10\n')
    assert load_scenario(path).links.mcs == 10


def test_distance_mode_reaches_he_mcs_11_up_close() -> None:
    base = {
        "stations": [{"name": "a"}, {"name": "b", "position_m": [1.0, 0.0]}],
        "links": {"mode": "distance"},
    }
    ac = Simulation(parse_scenario(base))
    ax = Simulation(parse_scenario({**base, "phy": {"standard": "ax"}}))
    assert ac.links.mcs(0, 1) == 9
    assert ax.links.mcs(0, 1) == 11
