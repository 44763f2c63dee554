"""``coorp sweep`` and ``coorp plot`` as a user runs them: files, cache reruns, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from coorp.cli import main
from coorp.sweep import LONG_COLUMNS, METRICS

COORP = Path(sys.executable).with_name("coorp")
PNG = b"\x89PNG\r\n\x1a\n"


def coorp(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COORP), *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)  # fmt: skip


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in this process: the code version (a hash of the source, computed once
    per process) stays the same across calls even if someone edits the tree meanwhile."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_sweep_writes_tables_figures_manifest_and_reruns_from_cache(
    tmp_path: Path, tiny_pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = ["sweep", "--scenarios", ",".join(map(str, tiny_pair)), "--policies", "edca,coorp",
            "--seeds", "1-2", "--duration", "0.6", "--set", "coorp.margin_us=1000,2000",
            "--out", str(out), "--jobs", "2"]  # fmt: skip
    code, stdout, stderr = in_process(capsys, *args)
    assert code == 0, stderr
    # 2 scenarios x 2 combos x (2 policies + BH-only) x 2 seeds = 24 runs, 20 distinct
    # (the BH-only run ignores COORP's margin).
    lines = [ln for ln in stdout.splitlines() if ln.startswith("[")]
    assert len(lines) == 20 and lines[-1].startswith("[20/20]")
    assert "24 runs: 20 simulated, 0 from cache, 4 identical" in stdout
    assert "mean ± 95% CI" in stdout and "coorp.margin_us=2000" in stdout
    names = {p.name for p in out.iterdir()}
    assert {"runs.parquet", "runs.csv", "aggregate.json", "aggregate.csv", "manifest.json",
            "miss_vs_utilization.png", "team_size.png", "cache"} <= names  # fmt: skip
    table = pq.read_table(out / "runs.parquet")
    assert tuple(table.column_names) == LONG_COLUMNS
    assert table.num_rows == 24 * len(METRICS)
    assert set(table.column("team_size").to_pylist()) == {1, 2}
    agg = json.loads((out / "aggregate.json").read_text())
    coorp_miss = [r for r in agg["rows"] if r["policy"] == "coorp"
                  and r["metric"] == "violation_rate"]  # fmt: skip
    assert len(coorp_miss) == 4 and all(r["n"] == 2 for r in coorp_miss)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seeds"] == [1, 2] and manifest["executed"] == 20
    assert manifest["code_version"].startswith("src-")
    assert manifest["spec"]["overrides"] == {"coorp.margin_us": [1000, 2000]}
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == PNG

    code, stdout, stderr = in_process(capsys, *args)
    assert code == 0, stderr
    assert "24 runs: 0 simulated, 20 from cache" in stdout
    assert not [ln for ln in stdout.splitlines() if ln.startswith("[")]
    rerun = pq.read_table(out / "runs.parquet").to_pylist()
    assert json.dumps(rerun) == json.dumps(table.to_pylist())  # NaN == NaN as text

    replot = coorp("plot", str(out), "--out", str(tmp_path / "again"))
    assert replot.returncode == 0, replot.stderr
    again = {p.name for p in (tmp_path / "again").iterdir()}
    assert again == {"miss_vs_utilization.png", "team_size.png"}


def test_a_sweep_file_with_flags_replacing_its_fields(tmp_path: Path, tiny: Path) -> None:
    spec = tmp_path / "sweep.toml"
    spec.write_text(
        f'scenarios = ["{tiny.name}"]\npolicies = ["edca", "coorp"]\nseeds = "1-5"\n'
        "duration_s = 0.4\n"
    )
    proc = coorp(
        "sweep", str(spec), "--seeds", "3", "--policies", "edca", "--out", str(tmp_path / "o")
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 runs: 2 simulated" in proc.stdout
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["spec"]["seeds"] == [3] and manifest["spec"]["policies"] == ["edca"]
    assert manifest["spec"]["duration_s"] == 0.4


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--scenarios", "crl-2", "--set", "coorp.nope=1"],
      "policy.coorp.nope is not a scenario key; allowed: confidence, ctt_percentile"),
     (["--scenarios", "crl-2", "--set", "workload.drlc.sync=bsp,fast"],
      "workload.drlc.sync = 'fast': allowed: 'bsp', 'ssp' or 'asp'"),
     (["--scenarios", "crl-2", "--seeds", "x"], "seeds = 'x': 'x' is not a seed"),
     (["--scenarios", "crl-2", "--policies", "edca,nope"], "available: edca"),
     (["--scenarios", "crl-99"], "no built-in scenario of that name"),
     (["--policies", "edca"], "give a sweep file or --scenarios"),
     (["--scenarios", "crl-2", "--jobs", "0"], "--jobs must be >= 1")],
)  # fmt: skip
def test_bad_input_exits_2_with_a_message_not_a_traceback(
    tmp_path: Path, args: list[str], message: str
) -> None:
    proc = coorp("sweep", *args, "--duration", "0.2", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_bad_sweep_file_names_the_file_and_key(tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('scenarios = ["crl-2"]\npolicy = ["edca"]\n')
    proc = coorp("sweep", str(spec), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert f"invalid sweep {spec}" in proc.stderr and "policy: " in proc.stderr
    assert "unknown key; allowed here:" in proc.stderr and "Traceback" not in proc.stderr


def test_plot_of_a_folder_without_results_says_what_it_needs(tmp_path: Path) -> None:
    proc = coorp("plot", str(tmp_path))
    assert proc.returncode == 2
    assert "neither runs.parquet" in proc.stderr and "Traceback" not in proc.stderr
