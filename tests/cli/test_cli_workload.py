"""``coorp simulate`` on a [workload], scenarios by name, --policy-module, --format,
--version, and help text that keeps its brackets."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path

import pytest

from cli_run import run_cli
from coorp import __version__
from coorp.policies import _plugins, _registry
from coorp.sim import COMPILED

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = """
from coorp.policies import EdcaPolicy, register_policy

@register_policy
class CliPolicy(EdcaPolicy):
    name = "cli-test-policy"
    summary = "EDCA under a test name"
"""


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from a directory that has no scenarios/ in it."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))
    monkeypatch.setattr(_plugins, "_REGISTRY", _registry._REGISTRY)
    monkeypatch.setattr(_plugins, "_MODULES", {})


def _no_nan(text: str) -> object:
    def refuse(c: str) -> object:
        raise AssertionError(f"{c} in JSON")

    return json.loads(text, parse_constant=refuse)


# -- simulate on a workload ------------------------------------------------------------------


def test_simulate_runs_a_workload_scenario_by_name(
    capsys: pytest.CaptureFixture[str], elsewhere: Path
) -> None:
    out = elsewhere / "run"
    code, stdout, err = run_cli(
        capsys, "simulate", "crl-2", "--duration", "0.3", "--out", str(out), "--format",
        "png,svg", "--json", "s.json",
    )  # fmt: skip
    assert code == 0, err
    assert "workload under edca" in stdout
    # 0.3 s is too short for an epoch of 64 loops: the table says so.
    assert "warning: no epoch in 0.3 s: epoch time is null" in stdout
    summary = _no_nan((out / "summary.json").read_text())
    assert summary == _no_nan((elsewhere / "s.json").read_text())
    assert isinstance(summary, dict)
    wl = summary["workload"]
    assert wl["policy"] == "edca" and wl["epochs"] == 0 and wl["epoch_s"] is None
    assert wl["warnings"][0].startswith("no epoch in 0.3 s")
    with (out / "loops.csv").open() as f:
        loops = list(csv.DictReader(f))
    assert len(loops) == wl["loops"] > 0
    missed = sum(r["missed"] == "true" for r in loops) / len(loops)
    assert missed == wl["violation_rate"]
    names = {p.name for p in out.iterdir()}
    assert {"loops.csv", "epochs.parquet", "ls_messages.csv", "timeseries.csv"} <= names
    assert {"timeseries.png", "timeseries.svg", "reaction_cdf.png", "reaction_cdf.svg"} <= names
    assert {"summary.json", "flows.csv", "manifest.json"} <= names
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["scenario"]["name"] == "crl-2"
    assert manifest["scenario_path"].endswith("scenarios/crl-2.toml")


def test_simulate_a_workload_under_another_policy(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run_cli(capsys, "simulate", "crl-2", "--duration", "0.2", "--policy",
                              "coorp")  # fmt: skip
    assert code == 0 and "workload under coorp" in stdout
    code, _, err = run_cli(capsys, "simulate", "crl-2", "--duration", "0.2", "--policy", "x")
    assert code == 2 and "unknown policy 'x'; available: edca" in err


def test_simulate_labels_the_reference_bound(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, stdout, err = run_cli(capsys, "simulate", "crl-2", "--duration", "0.05", "--policy",
                                "oracle", "--json", str(tmp_path / "s.json"))  # fmt: skip
    assert code == 0, err
    assert "workload under oracle (not deployable)" in stdout
    assert "warning: no epoch in 0.05 s" in stdout
    workload = json.loads((tmp_path / "s.json").read_text())["workload"]
    assert workload["policy"] == "oracle" and workload["deployable"] is False


def test_a_scenario_without_traffic_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    p = tmp_path / "quiet.toml"
    p.write_text('name = "quiet"\n[[stations]]\nname = "a"\n[[stations]]\nname = "b"\n')
    code, stdout, err = run_cli(capsys, "simulate", str(p))
    assert code == 2 and stdout == ""
    assert err == (
        f"error: {p} has no traffic: no [[flows]] and no [workload] section; add one "
        "(docs/scenarios.md), or simulate a built-in scenario such as saturation-5\n"
    )


def test_policy_needs_a_workload(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "simulate", "saturation-5", "--duration", "0.01", "--policy",
                           "coorp")  # fmt: skip
    assert code == 2
    assert "--policy coorp:" in err and "has no [workload] section" in err


def test_a_bad_format_is_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "never"
    code, stdout, err = run_cli(capsys, "simulate", "crl-2", "--out", str(out), "--format", "gif")
    assert code == 2 and stdout == ""
    assert "--format 'gif': unknown figure format 'gif'; allowed: png, pdf, svg" in err
    assert not out.exists()


def test_flow_scenarios_still_run_from_a_file_or_a_name(
    capsys: pytest.CaptureFixture[str], elsewhere: Path
) -> None:
    code, by_name, _ = run_cli(capsys, "simulate", "saturation-5", "--duration", "0.02")
    assert code == 0
    code, by_file, _ = run_cli(
        capsys, "simulate", str(ROOT / "scenarios" / "saturation-5.toml"), "--duration", "0.02"
    )
    assert code == 0
    strip = [ln for ln in by_name.splitlines() if "sim-s/wall-s" not in ln]
    assert strip == [ln for ln in by_file.splitlines() if "sim-s/wall-s" not in ln]
    code, _, err = run_cli(capsys, "simulate", "saturation-6")
    assert code == 2
    assert "scenario 'saturation-6': no such file and no built-in scenario" in err
    assert "saturation-5" in err


# -- --policy-module ---------------------------------------------------------------------------


@pytest.mark.usefixtures("registry")
def test_simulate_with_a_policy_module(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    mod = tmp_path / "cli_policy.py"
    mod.write_text(textwrap.dedent(PLUGIN))
    code, stdout, err = run_cli(
        capsys, "simulate", "crl-2", "--duration", "0.2", "--policy-module", str(mod),
        "--policy", "cli-test-policy",
    )  # fmt: skip
    assert code == 0, err
    assert "workload under cli-test-policy" in stdout


@pytest.mark.usefixtures("registry")
@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such file; give a Python file (.py)"),
        ("raise ValueError('bad config')\n", "raised ValueError (line 1) while being imported: "
         "bad config"),
        ("x = 1\n", "registered no policy: decorate a subclass of coorp.policies.Policy"),
    ],
)  # fmt: skip
def test_policy_module_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | None, needle: str
) -> None:
    mod = tmp_path / "p.py"
    if content is not None:
        mod.write_text(content)
    for cmd in (["simulate", "crl-2"], ["compare", "crl-2"]):
        code, stdout, err = run_cli(capsys, *cmd, "--duration", "0.1", "--policy-module", str(mod))
        assert code == 2, cmd
        assert err == f"error: --policy-module {mod}: {needle}\n" or (
            err.startswith(f"error: --policy-module {mod} ") and needle in err
        ), err
        assert "Traceback" not in err and stdout == ""


@pytest.mark.usefixtures("registry")
def test_compare_runs_a_user_policy_and_writes_raw_tables(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    mod = tmp_path / "cli_policy.py"
    mod.write_text(textwrap.dedent(PLUGIN))
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(
        capsys, "compare", "crl-2", "--duration", "0.3", "--policies", "edca,cli-test-policy",
        "--policy-module", str(mod), "--jobs", "1", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert "cli-test-policy" in stdout
    data = json.loads((out / "compare.json").read_text())
    assert list(data["policies"]) == ["edca", "cli-test-policy"]
    for name in ("edca", "cli-test-policy", "bh-only"):
        for table in ("loops", "epochs", "ls_messages", "timeseries"):
            assert (out / "raw" / name / f"{table}.csv").is_file(), (name, table)
    with (out / "raw" / "cli-test-policy" / "loops.csv").open() as f:
        assert len(list(csv.DictReader(f))) == data["policies"]["cli-test-policy"]["loops"]


def test_compare_set_turns_a_shipped_scenario_into_802_11ax(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "ax"
    code, _, err = run_cli(
        capsys, "compare", "crl-2", "--set", "phy.standard=ax", "--set", "ofdma.max_users=2",
        "--duration", "0.3", "--policies", "edca,ofdma", "--jobs", "1", "--quiet",
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    data = json.loads((out / "compare.json").read_text())
    assert data["policies"]["ofdma"]["infeasible"] is None
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["scenario"]["phy"]["standard"] == "ax"
    assert manifest["scenario"]["policy"]["ofdma"]["max_users"] == 2
    stats = json.loads((out / "policy_stats.json").read_text())
    assert stats["ofdma"]["ul_ofdma"]["bsrp_triggers"] > 0  # the AP polls its stations


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("phy.standard=ax,ac", "coorp compare takes one value per key"),
        ("phy.standard=be", "phy.standard"),
        ("phy.nonsense=1", "is not a scenario key"),
    ],
)
def test_compare_set_errors_are_one_paragraph(
    capsys: pytest.CaptureFixture[str], flag: str, says: str
) -> None:
    code, stdout, err = run_cli(capsys, "compare", "crl-2", "--set", flag, "--duration", "0.1")
    assert code == 2 and stdout == ""
    assert says in err and "Traceback" not in err


# -- --version and help ---------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run_cli(capsys, "--version")
    assert code == 0
    assert stdout.startswith(f"coorp {__version__} (simulator, control, policy hooks, emulator: ")
    assert ("compiled (mypyc)" in stdout) == COMPILED
    if not COMPILED:
        assert "plain Python" in stdout
