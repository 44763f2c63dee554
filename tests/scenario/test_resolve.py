"""Built-in scenarios resolve by name from any directory; files still win."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import pytest

from coorp import UsageError
from coorp.scenario import _load, builtin_scenarios, load_scenario, resolve_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_every_shipped_file_is_a_builtin_name() -> None:
    names = builtin_scenarios()
    shipped = sorted(p.stem for p in (ROOT / "scenarios").glob("*.toml"))
    assert sorted(names) == shipped
    assert {"crl-5", "crl-10", "saturation-5"} <= set(names)


@pytest.mark.parametrize("given", ["crl-10", "crl-10.toml", "scenarios/crl-10.toml"])
def test_a_name_resolves_from_another_directory(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    p = resolve_scenario(given)
    assert p.read_bytes() == (ROOT / "scenarios" / "crl-10.toml").read_bytes()
    assert load_scenario(p).name == "crl-10"


def test_an_existing_file_wins_over_a_builtin_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "crl-10.toml"
    mine.write_text('name = "mine"\n[[stations]]\nname = "a"\n[[stations]]\nname = "b"\n')
    monkeypatch.chdir(tmp_path)
    assert resolve_scenario("crl-10.toml") == Path("crl-10.toml")
    assert load_scenario(resolve_scenario("crl-10.toml")).name == "mine"
    # A bare name without the suffix still means the built-in one.
    assert load_scenario(resolve_scenario("crl-10")).name == "crl-10"


def test_unknown_name_lists_the_builtin_names(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        resolve_scenario("crl-11")
    msg = str(info.value)
    assert msg.startswith("scenario 'crl-11': no such file and no built-in scenario")
    assert "built-in scenarios: all-low, " in msg and "crl-10, crl-2, crl-20" in msg
    # A path in another directory is never taken for a built-in name.
    with pytest.raises(UsageError, match="no such file"):
        resolve_scenario(tmp_path / "crl-5.toml")
    with pytest.raises(UsageError, match="is a directory"):
        resolve_scenario(tmp_path)


def test_an_installed_wheel_reads_its_packaged_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wheel carries the scenarios as coorp/scenarios (pyproject force-include): when
    that directory exists it is used, not a checkout's scenarios/."""
    pkg = tmp_path / "coorp"
    (pkg / "scenarios").mkdir(parents=True)
    (pkg / "scenarios" / "only-here.toml").write_text("name = 'x'\n")
    monkeypatch.setattr(importlib.resources, "files", lambda _name: pkg)
    assert list(builtin_scenarios()) == ["only-here"]
    assert resolve_scenario("only-here") == pkg / "scenarios" / "only-here.toml"


def test_pyproject_ships_the_scenarios_in_the_wheel() -> None:
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    force = cfg["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force == {"scenarios": "coorp/scenarios"}
    assert _load._builtin_dir() == ROOT / "scenarios"  # this checkout (editable install)
