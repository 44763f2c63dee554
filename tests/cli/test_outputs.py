"""Where commands write: an output path that cannot be used is refused before any work,
naming the flag, the path and why; never a traceback, never a directory nobody asked
for (``coorp.cli._options``).

``--out DIR`` is created when missing; a file flag (``--json FILE``) needs its folder
to exist, as shell redirection does.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from cli_run import run_cli

#: Commands that would run for a while; each must refuse a bad path before starting.
OUT_COMMANDS = [
    ["simulate", "saturation-5", "--duration", "0.01"],
    ["compare", "crl-2", "--policies", "edca", "--duration", "0.1"],
    ["compare", "crl-2", "--policies", "edca", "--duration", "0.1", "--seeds", "1-2"],
    ["sweep", "--scenarios", "crl-2", "--policies", "edca", "--duration", "0.1"],
    ["learn", "crl-2", "--policies", "edca", "--seeds", "1", "--duration", "1"],
    ["model", "--simulate", "--robots", "2", "--duration", "0.1"],
    ["bench", "team", "--carriers", "sim", "--robots", "1", "--rates", "10", "--sizes", "1000"],
]

JSON_COMMANDS = [
    ["simulate", "saturation-5", "--duration", "0.01"],
    ["compare", "crl-2", "--policies", "edca", "--duration", "0.1"],
    ["model", "--robots", "2"],
    ["bench", "rl", "--contenders", "flow", "--workers", "1"],
]


@pytest.mark.parametrize("args", OUT_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_an_out_dir_that_cannot_be_created_is_refused_first(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    code, out, err = run_cli(capsys, *args, "--out", "/proc/nope")
    assert code == 2, out + err
    assert err.startswith("error: --out /proc/nope: cannot create it in /proc")
    # the kernel's "No such file or directory" for an existing folder misleads; say why
    assert "virtual file system" in err and "No such file" not in err
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize("args", JSON_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_json_into_a_missing_folder_is_refused_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str]
) -> None:
    target = tmp_path / "missing" / "run.json"
    code, out, err = run_cli(capsys, *args, "--json", str(target))
    assert code == 2, out + err
    assert f"--json {target}: the folder {target.parent} does not exist" in err
    assert "mkdir -p" in err
    assert not target.parent.exists() and out == ""


def test_json_into_an_existing_folder_is_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "run.json"
    code, _, err = run_cli(capsys, "model", "--robots", "2", "--json", str(target))
    assert code == 0, err
    assert target.stat().st_size > 0


def test_a_missing_out_dir_is_created_with_its_parents(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "a" / "b"
    code, _, err = run_cli(capsys, "model", "--robots", "2", "--out", str(out))
    assert code == 0, err
    assert (out / "model.json").is_file()


def test_learn_team_checks_its_addresses_before_it_creates_the_out_dir(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "o"
    code, _, err = run_cli(
        capsys, "learn", "crl-2", "--team", str(tmp_path / "t.toml"), "--robot", "w1",
        "--host", "127.0.0.1", "--server", "nope", "--out", str(out),
    )  # fmt: skip
    assert code == 2 and "--server 'nope': expected host:port" in err
    assert not out.exists()


def test_a_write_the_system_refuses_later_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk after the checks: the file and the reason, exit 1, no traceback."""
    import coorp.cli._model as model

    def full(path: Path, data: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(model, "write_json", full)
    target = tmp_path / "run.json"
    code, _, err = run_cli(capsys, "model", "--robots", "2", "--json", str(target))
    assert code == 1
    assert err == f"error: {target}: No space left on device\n"


def test_json_next_to_the_out_dir_it_creates_is_fine(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--out results/lc --json results/lc.json`` from a fresh clone: the --out folder
    creates results/ before anything is written (docs/simulator.md's example)."""
    out, js = tmp_path / "results" / "lc", tmp_path / "results" / "lc.json"
    code, _, err = run_cli(capsys, "simulate", "saturation-5", "--duration", "0.01",
                           "--out", str(out), "--json", str(js))  # fmt: skip
    assert code == 0, err
    assert js.stat().st_size > 0 and (out / "summary.json").is_file()


def test_a_policy_asked_for_on_a_standard_it_cannot_run_on_is_refused_first(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, "compare", "crl-2", "--policies", "edca,ofdma",
                                "--duration", "0.1", "--out", str(out))  # fmt: skip
    assert code == 2 and stdout == ""
    assert "--policies ofdma" in err and "--set phy.standard=ax" in err
    assert not out.exists()  # refused before anything was created
    code, stdout, err = run_cli(capsys, "compare", "crl-2", "--policies", "ofdma",
                                "--duration", "0.05", "--set", "phy.standard=ax")  # fmt: skip
    assert code == 0, err
    assert "infeasible" not in stdout
