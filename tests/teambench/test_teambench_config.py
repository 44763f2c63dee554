"""Config and flag validation: errors name the field or flag, the value, what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_run import run_cli
from coorp._errors import UsageError
from coorp.teambench import TeamBenchConfig, load_config


def test_defaults_are_a_valid_sweep() -> None:
    cfg = TeamBenchConfig()
    assert cfg.robots == [1, 2, 4, 8] and cfg.bound_ms == 33.0
    assert cfg.cells_per_repetition() == 36


def test_toml_unknown_key_names_it_and_the_allowed_ones(tmp_path: Path) -> None:
    p = tmp_path / "team.toml"
    p.write_text("robots = [1, 2]\nrobot_count = 3\n")
    with pytest.raises(UsageError) as e:
        load_config(p)
    msg = str(e.value)
    assert "robot_count = 3" in msg and "unknown key" in msg and "rates_hz" in msg


def test_toml_bad_values_name_field_and_value(tmp_path: Path) -> None:
    p = tmp_path / "team.toml"
    p.write_text('robots = [0, 4]\ncarriers = ["sim", "ros1"]\nsizes_bytes = [70000]\n')
    with pytest.raises(UsageError) as e:
        load_config(p)
    msg = str(e.value)
    assert "robots" in msg and "1..32" in msg and "[0]" in msg
    assert "carriers" in msg and "'ros1'" in msg and "dds-rel" in msg
    assert "sizes_bytes" in msg and "70000" in msg


def test_flags_override_the_file(tmp_path: Path) -> None:
    p = tmp_path / "team.toml"
    p.write_text("robots = [1, 2]\nduration_s = 5.0\n")
    cfg = load_config(p, {"duration_s": 0.5, "robots": None})
    assert cfg.robots == [1, 2] and cfg.duration_s == 0.5


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_config(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--robots", "1,x"], "--robots '1,x': 'x' is not an integer"),
        (["--rates", "30,fast"], "--rates '30,fast': 'fast' is not a number"),
        (["--sizes", "4KB,huge"], "--sizes '4KB,huge': 'huge' is not a size"),
        (["--carriers", "sim,ros2"], "unknown carrier(s) ['ros2']"),
        (["--bulk", "udp"], "bulk[0] = 'udp'"),
        (["--duration", "0"], "duration_s = 0.0"),
        (["--format", "gif"], "--format 'gif'"),
    ],
)
def test_bad_flags_exit_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    code, _out, err = run_cli(capsys, "bench", "team", "--carriers", "sim", *args)
    assert code == 2
    assert expected in err
    assert "Traceback" not in err
