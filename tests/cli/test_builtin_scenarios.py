"""The built-in names a user is offered are scenarios: each loads as one (a team file of
the real runtime once sat among them and was listed as a built-in scenario)."""

from __future__ import annotations

import pytest

from cli_run import run_cli
from coorp.cosim import load_cosim
from coorp.scenario import builtin_scenarios, load_scenario


@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_every_built_in_name_is_a_scenario(name: str) -> None:
    path = builtin_scenarios()[name]
    sc = load_cosim(path).scenario if "[cosim]" in path.read_text() else load_scenario(path)
    assert sc.stations


def test_an_unknown_name_lists_only_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "simulate", "crl-6")
    assert code == 2 and "built-in scenarios: all-low, " in err
    assert "team" not in err.split("built-in scenarios:")[1]
