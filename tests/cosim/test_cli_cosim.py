from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_world import TINY

from cli_run import run_cli


def _toml(d: dict, prefix: str = "") -> str:
    """A minimal TOML writer for the test scenario (tables, arrays of tables, values)."""
    lines, subs = [], []
    for k, v in d.items():
        if isinstance(v, dict):
            subs.append((k, v, False))
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            subs.append((k, v, True))
        else:
            lines.append(f"{k} = {json.dumps(v)}")
    out = "\n".join(lines) + "\n"
    for k, v, many in subs:
        name = f"{prefix}{k}"
        for item in v if many else [v]:
            out += f"\n[[{name}]]\n" if many else f"\n[{name}]\n"
            out += _toml(item, f"{name}.")
    return out


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.toml"
    p.write_text(_toml(TINY))
    return p


def test_cosim_table_json_figures_and_traces(
    capsys: pytest.CaptureFixture[str], scenario: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    code, text, err = run_cli(
        capsys, "cosim", str(scenario), "--policies", "edca,coorp", "--seeds", "1-2",
        "--duration", "0.3", "--out", str(out), "--trace", str(tmp_path / "t.mcap"),
    )  # fmt: skip
    assert code == 0, err
    assert "track err m" in text and "± " in text and "coorp" in text

    def strict(name: str) -> None:
        raise AssertionError(f"{name} in summary.json: not JSON")

    data = json.loads((out / "summary.json").read_text(), parse_constant=strict)
    assert data["seeds"] == [1, 2] and set(data["policies"]) == {"edca", "coorp"}
    m = data["policies"]["edca"]["metrics"]["tracking_mean_m"]
    assert m["n"] == 2 and m["mean"] > 0
    assert (out / "trajectories.png").stat().st_size > 0
    assert (out / "tracking_cdf.png").stat().st_size > 0
    assert (out / "reaction_cdf.png").stat().st_size > 0
    for p in ("edca", "coorp"):
        for s in (1, 2):
            assert (tmp_path / f"t-{p}-seed{s}.mcap").stat().st_size > 0


def test_cosim_errors_are_clear(
    capsys: pytest.CaptureFixture[str], scenario: Path, tmp_path: Path
) -> None:
    code, _, err = run_cli(capsys, "cosim", str(scenario), "--coupling", "sliding")
    assert code == 2 and "'--coupling'" in err and "'sliding'" in err and "velocity-window" in err
    code, _, err = run_cli(capsys, "cosim", str(scenario), "--policies", "nope")
    assert code == 2 and "nope" in err
    code, _, err = run_cli(capsys, "cosim", str(scenario), "--trace", str(tmp_path / "t.json"))
    assert code == 2 and ".mcap" in err
    plain = tmp_path / "plain.toml"
    plain.write_text('[[stations]]\nname = "a"\n[[stations]]\nname = "b"\n')
    code, _, err = run_cli(capsys, "cosim", str(plain))
    assert code == 2 and "[cosim]" in err


def test_cosim_leader_prediction_flag_overrides_the_scenario(
    capsys: pytest.CaptureFixture[str], scenario: Path, tmp_path: Path
) -> None:
    """--leader-prediction changes the commands (the leader's pose estimate is nearer
    the robot's true pose: a smaller estimate error); the scenario says false."""
    errs = {}
    for flag in ("--no-leader-prediction", "--leader-prediction"):
        js = tmp_path / f"{flag}.json"
        code, _, err = run_cli(capsys, "cosim", str(scenario), "--policies", "edca",
                               "--duration", "0.5", flag, "--json", str(js))  # fmt: skip
        assert code == 0, err
        m = json.loads(js.read_text())["policies"]["edca"]["metrics"]
        errs[flag] = m["estimate_error_mean_m"]["mean"]
    assert errs["--leader-prediction"] < 0.5 * errs["--no-leader-prediction"]
