"""``coorp simulate`` and ``coorp schema``: outputs, exit codes, one clear error message."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cli_run import run_cli
from coorp.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
SAT5 = ROOT / "scenarios" / "saturation-5.toml"
COORP = Path(sys.executable).with_name("coorp")


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed ``coorp`` script in a subprocess."""
    return subprocess.run(
        [str(COORP), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


BAD = 'name = "bad"\nduration_s = 1.0\n[phy]\nwidth_mhz = 30\n[[stations]]\nname = "a"\n'


# -- errors ---------------------------------------------------------------------------------


def test_bad_scenario_exits_2_with_one_clear_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD)
    proc = run_script("simulate", str(bad))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert proc.stderr.startswith(f"error: invalid scenario {bad}:")
    assert "phy.width_mhz = 30: allowed: 20, 40, 80 or 160" in proc.stderr
    assert "stations: List should have at least 2 items" in proc.stderr
    assert proc.stdout == ""


def test_negative_duration_exits_2() -> None:
    proc = run_script("simulate", str(SAT5), "--duration", "-1")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "--duration must be > 0 seconds, got -1" in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["simulate", "missing.toml"], "scenario 'missing.toml': no such file and no built-in"),
        (["simulate", str(SAT5), "--duration", "0"], "--duration must be > 0 seconds, got 0"),
    ],
)  # fmt: skip
def test_usage_errors_in_process(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    code, _, err = run_cli(capsys, *args)
    assert code == 2
    assert needle in err
    assert err.startswith("error: ")
    assert "Traceback" not in err


def test_out_must_be_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = run_cli(capsys, "simulate", str(SAT5), "--duration", "0.01", "--out", str(f))
    assert code == 2
    assert f"--out {f} exists and is not a directory" in err


def test_errors_found_when_building_the_simulation_name_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "cw.toml"
    path.write_text(
        '[[stations]]\nname = "a"\n[[stations]]\nname = "b"\n'
        "[mac.edca.VO]\ncw_min = 7\ncw_max = 3\n"
    )
    code, _, err = run_cli(capsys, "simulate", str(path))
    assert code == 2
    assert err.startswith(f"error: invalid scenario {path}:")
    assert "cw_max 3 < cw_min 7" in err


def test_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "simulate", str(SAT5), "--speed", "3")
    assert code == 2
    assert "--speed" in err


# -- a real run -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sat5_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    out = tmp_path_factory.mktemp("sat5")
    j = out.parent / "sat5-summary.json"
    proc = run_script(
        "simulate", "scenarios/saturation-5.toml", "--duration", "0.2",
        "--out", str(out / "run"), "--json", str(j),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out / "run", j, proc.stdout


def test_run_writes_every_output(sat5_run: tuple[Path, Path, str]) -> None:
    out, j, _ = sat5_run
    names = {p.name for p in out.iterdir()}
    for f in ("summary.json", "flows.csv", "flows.parquet", "messages.parquet",
              "stations.csv", "stations.parquet", "manifest.json"):  # fmt: skip
        assert f in names, f
    assert j.exists()


def test_summary_json(sat5_run: tuple[Path, Path, str]) -> None:
    out, j, _ = sat5_run
    summary = json.loads((out / "summary.json").read_text())
    assert json.loads(j.read_text()) == summary
    assert summary["scenario"] == "saturation-5"
    assert summary["seed"] == 1
    assert summary["duration_s"] == 0.2
    assert set(summary["stations"]) == {"ap", "s1", "s2", "s3", "s4", "s5"}
    bulk = [f for f in summary["flows"].values() if f["kind"] == "bulk"]
    assert len(bulk) == 5 and all(f["delivered_bytes"] > 0 for f in bulk)
    assert 0 < summary["channel"]["busy_fraction"] <= 1


def test_tables(sat5_run: tuple[Path, Path, str]) -> None:
    out, _, _ = sat5_run
    summary = json.loads((out / "summary.json").read_text())
    with (out / "flows.csv").open() as fh:
        flows = list(csv.DictReader(fh))
    assert {r["name"] for r in flows} == set(summary["flows"])
    for r in flows:
        assert int(r["delivered_bytes"]) == summary["flows"][r["name"]]["delivered_bytes"]
    assert pq.read_table(out / "flows.parquet").num_rows == len(flows)
    with (out / "stations.csv").open() as fh:
        stations = list(csv.DictReader(fh))
    assert [r["name"] for r in stations] == ["ap", "s1", "s2", "s3", "s4", "s5"]
    messages = pq.read_table(out / "messages.parquet")
    assert set(messages.column_names) >= {"flow", "msg_id", "created_ns", "delivered_ns",
                                          "latency_ns", "lost", "hw_depth_first"}  # fmt: skip
    assert messages.num_rows == 0  # bulk flows only: no datagram messages


def test_manifest(sat5_run: tuple[Path, Path, str]) -> None:
    out, _, _ = sat5_run
    m = json.loads((out / "manifest.json").read_text())
    assert m["scenario"]["name"] == "saturation-5"
    assert len(m["scenario"]["stations"]) == 6
    assert m["scenario_path"] == "scenarios/saturation-5.toml"
    assert m["seed"] == 1
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", m["git"]["commit"])
    for pkg in ("python", "coorp", "numpy", "pydantic", "pyarrow"):
        assert m["packages"][pkg]
    assert isinstance(m["wall_s"], float) and m["wall_s"] >= 0
    assert m["duration_ns"] == 200_000_000


def test_printed_table(sat5_run: tuple[Path, Path, str]) -> None:
    _, _, stdout = sat5_run
    assert "saturation-5" in stdout
    for flow in ("s1-up", "s5-up:ack"):
        assert flow in stdout
    assert "results written to" in stdout


def test_seed_option_overrides_the_scenario(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    j = tmp_path / "s.json"
    code, _, err = run_cli(
        capsys, "simulate", str(SAT5), "--duration", "0.02", "--seed", "7", "--json", str(j)
    )
    assert code == 0, err
    assert json.loads(j.read_text())["seed"] == 7


# -- schema -------------------------------------------------------------------------------------


def test_schema_prints_the_scenario_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "schema")
    assert code == 0
    schema = json.loads(out)
    assert set(schema["properties"]) == set(Scenario.model_fields)
    assert schema["required"] == ["stations"]
    for model in ("PhyConfig", "MacConfig", "HwQueueConfig", "DatagramFlow", "BulkFlow"):
        assert model in schema["$defs"]
    phy = schema["$defs"]["PhyConfig"]["properties"]
    assert phy["width_mhz"]["enum"] == [20, 40, 80, 160]
    assert schema["$defs"]["HwQueueMode"]["enum"] == ["per_ac", "shared"]


# -- many flows -----------------------------------------------------------------------------


def _many_flows(tmp_path: Path, n: int) -> Path:
    lines = ['name = "many"', "duration_s = 0.05", "[[stations]]", 'name = "ap"']
    for i in range(n):
        lines += ["[[stations]]", f'name = "s{i}"']
    for i in range(n):
        lines += ["[[flows]]", 'kind = "datagram"', f'name = "f{i}"', f'src = "s{i}"',
                  'dst = "ap"', "size_bytes = 200", "period_us = 10000"]  # fmt: skip
    lines += ["[[flows]]", 'kind = "bulk"', 'name = "up"', 'src = "s0"', 'dst = "ap"']
    path = tmp_path / "many.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_many_flows_print_a_row_per_kind_and_ac_unless_asked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from coorp.cli._simulate import MAX_FLOW_ROWS

    path = _many_flows(tmp_path, MAX_FLOW_ROWS + 5)
    code, out, _ = run_cli(capsys, "simulate", str(path), "--out", str(tmp_path / "r"))
    assert code == 0
    rows = [ln for ln in out.splitlines() if ln.startswith("│")]
    # datagrams (VO), the bulk flow and its acks (BE): three groups, not 47 rows
    assert [r.split("│")[2].strip() for r in rows] == ["datagram", "bulk", "tcp-ack"]
    assert f"{MAX_FLOW_ROWS + 5} flows" in rows[0] and "--all-flows" in out
    with (tmp_path / "r" / "flows.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == MAX_FLOW_ROWS + 7  # every flow, on disk
    code, out, _ = run_cli(capsys, "simulate", str(path), "--all-flows")
    assert code == 0
    assert len([ln for ln in out.splitlines() if ln.startswith("│")]) == MAX_FLOW_ROWS + 7
