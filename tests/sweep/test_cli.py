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
    # progress on stderr (a line per run when it is not a terminal); stdout: results only
    lines = [ln for ln in stderr.splitlines() if ln.startswith("[")]
    assert len(lines) == 20 and lines[-1].startswith("[20/20]")
    assert not [ln for ln in stdout.splitlines() if ln.startswith("[")]
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


def test_figure_formats_of_sweep_plot_and_multi_seed_compare(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s"
    code, _, stderr = in_process(
        capsys, "sweep", "--scenarios", str(tiny), "--policies", "edca,coorp", "--seeds", "1-2",
        "--duration", "0.3", "--format", "pdf,svg", "--out", str(out), "--quiet",
    )  # fmt: skip
    assert code == 0, stderr
    figures = {p.name for p in out.iterdir() if p.suffix in (".png", ".pdf", ".svg")}
    assert figures == {"miss_vs_utilization.pdf", "miss_vs_utilization.svg"}
    assert json.loads((out / "manifest.json").read_text())["figures"] == sorted(figures)
    code, _, stderr = in_process(capsys, "plot", str(out), "--out", str(tmp_path / "p"),
                                      "--format", "svg")  # fmt: skip
    assert code == 0, stderr
    assert {p.name for p in (tmp_path / "p").iterdir()} == {"miss_vs_utilization.svg"}
    cmp = tmp_path / "c"
    code, _, stderr = in_process(
        capsys, "compare", str(tiny), "--policies", "edca", "--seeds", "1-2", "--duration",
        "0.3", "--format", "png,svg", "--out", str(cmp), "--quiet",
    )  # fmt: skip
    assert code == 0, stderr
    assert {"miss_vs_utilization.png", "miss_vs_utilization.svg"} <= {p.name for p in cmp.iterdir()}


@pytest.mark.parametrize(
    "args",
    [["sweep", "--scenarios", "crl-2"], ["plot", "."], ["compare", "crl-2"],
     ["compare", "crl-2", "--seeds", "1-2"]],
)  # fmt: skip
def test_a_bad_figure_format_exits_2_before_anything_runs(
    tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    code, _, stderr = in_process(capsys, *args, "--format", "png,jpg", "--out", str(out))
    assert code == 2
    assert stderr.strip() == (
        "error: --format 'png,jpg': unknown figure format 'jpg'; allowed: png, pdf, svg "
        "(comma-separated, e.g. png,pdf)"
    )
    assert not out.exists()  # checked before the output folder, let alone a simulation


def test_short_runs_and_the_reference_bound_in_sweep_outputs(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.05 s: one MPC loop, no epoch (the first starts at 0.14 s), no bulk data in the
    BH-only run either: every run warns, and the oracle reads "(not deployable)"."""
    out = tmp_path / "o"
    code, stdout, stderr = in_process(
        capsys, "sweep", "--scenarios", str(tiny), "--policies", "edca,oracle", "--seeds",
        "1-2", "--duration", "0.05", "--out", str(out), "--jobs", "1",
    )  # fmt: skip
    assert code == 0, stderr
    text = " ".join(stdout.split())
    assert "oracle (not deployable)" in text and "warnings:" in text
    assert "oracle: no epoch in 0.05 s: epoch time is null" in text and "(2 of 2 runs)" in text
    assert "oracle: utilization is null: the bh-only reference delivered no bulk data" in text
    agg = json.loads((out / "aggregate.json").read_text())
    texts = {(w["policy"], w["warning"].split(":")[0], w["count"]) for w in agg["warnings"]}
    assert {("edca", "no epoch in 0.05 s", 2), ("oracle", "no epoch in 0.05 s", 2),
            ("bh-only", "no epoch in 0.05 s", 2)} <= texts  # fmt: skip
    assert {r["warned"] for r in agg["rows"]} == {2}
    flags = {r["policy"]: r["deployable"] for r in agg["rows"]}
    assert flags == {"edca": True, "oracle": False, "bh-only": None}
    runs = pq.read_table(out / "runs.parquet").to_pylist()
    assert all("no epoch in 0.05 s" in r["warnings"] for r in runs)


def test_multi_seed_compare_json_has_warnings_and_deployable(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout, stderr = in_process(
        capsys, "compare", str(tiny), "--policies", "edca,oracle", "--seeds", "1-2",
        "--duration", "0.05", "--jobs", "1", "--json", str(tmp_path / "c.json"),
    )  # fmt: skip
    assert code == 0, stderr
    assert "oracle (not deployable)" in stdout and "warnings:" in stdout
    data = json.loads((tmp_path / "c.json").read_text())
    oracle = data["policies"]["oracle"]
    assert oracle["deployable"] is False and data["policies"]["edca"]["deployable"] is True
    assert any(w.startswith("no epoch in 0.05 s") for w in oracle["warnings"])
    assert any(w.startswith("oracle: no epoch in 0.05 s") and w.endswith("(2 of 2 runs)")
               for w in data["warnings"])  # fmt: skip
    assert data["reference"]["warnings"]
    per_seed = data["per_seed"]["1"]["oracle"]["warnings"]
    assert any(w.startswith("no epoch in 0.05 s") for w in per_seed)
