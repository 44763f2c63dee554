"""``coorp compare``: the JSON other tools read, determinism across processes, infeasible
policies as results, and the CLI's files and errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from coorp.cli import main
from coorp.report import compare
from coorp.scenario import Scenario, load_scenario
from coorp.workload import run_crl
from crl_scenarios import crl_scenario

ROOT = Path(__file__).resolve().parents[2]
CRL2 = ROOT / "scenarios" / "crl-2.toml"
COORP = Path(sys.executable).with_name("coorp")
SHORT_NS = 400_000_000

#: The shape promised in the issue and docs/compare.md (other tools read it).
POLICY_KEYS = {"violation_rate", "reaction_ms", "ls_latency_ms", "bh_mbps", "utilization",
               "epoch_s"}  # fmt: skip


def tiny(**over: object) -> Scenario:
    return crl_scenario(2, duration_s=0.6, **over)


def test_json_has_the_stable_shape_and_consistent_numbers() -> None:
    cmp = compare(tiny(), ["edca", "coorp"], seed=5)
    data = cmp.to_json()
    assert data["scenario"] == "tiny-crl" and data["seed"] == 5
    assert list(data["policies"]) == ["edca", "coorp"]
    for name, block in data["policies"].items():
        assert set(block) >= POLICY_KEYS, name
        assert set(block["reaction_ms"]) == {"p50", "p90", "p99"}
        assert set(block["ls_latency_ms"]) == {"p50", "p99"}
        assert block["infeasible"] is None
        # Utilization is BH throughput over the BH-only reference run.
        ref = data["reference"]["bh_mbps"]
        assert block["utilization"] == pytest.approx(block["bh_mbps"] / ref)
    # The numbers are the workload's own: rerun one policy directly.
    direct = run_crl(tiny(), "coorp", seed=5).metrics()
    assert data["policies"]["coorp"]["bh_mbps"] == direct["bh_mbps"]
    assert data["policies"]["coorp"]["reaction_ms"] == direct["reaction_ms"]
    json.dumps(data, allow_nan=False)  # NaN never reaches the JSON


def test_results_do_not_depend_on_the_number_of_processes() -> None:
    one = compare(tiny(), ["edca", "coorp-local"], seed=2, jobs=1).to_json()
    two = compare(tiny(), ["edca", "coorp-local"], seed=2, jobs=2).to_json()
    assert one == two


def test_an_infeasible_policy_is_a_row_not_a_crash() -> None:
    # At MCS 0 SchedWiFi's windows do not fit the 33 ms period.
    sc = tiny(links={"mode": "fixed", "mcs": 0})
    data = compare(sc, ["schedwifi", "edca"], duration_ns=SHORT_NS).to_json()
    sw = data["policies"]["schedwifi"]
    assert "SchedWiFi needs" in sw["infeasible"] and "too slow" in sw["infeasible"]
    assert sw["violation_rate"] is None and sw["bh_mbps"] is None and sw["loops"] == 0
    edca = data["policies"]["edca"]
    assert edca["infeasible"] is None and edca["loops"] > 0
    assert not math.isnan(edca["bh_mbps"])


@pytest.mark.parametrize(
    ("policies", "jobs", "message"),
    [("edca,nope", 1, "available: edca"), ("edca,edca", 1, "listed twice"),
     ("edca", 0, "--jobs must be >= 1")],
)  # fmt: skip
def test_bad_arguments_exit_2_with_one_line(policies: str, jobs: int, message: str) -> None:
    proc = subprocess.run(
        [str(COORP), "compare", str(CRL2), "--policies", policies, "--jobs", str(jobs),
         "--duration", "0.2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_cli_writes_table_json_csv_figures_and_manifest(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    proc = subprocess.run(
        [str(COORP), "compare", str(CRL2), "--policies", "edca,coorp", "--duration", "0.5",
         "--seed", "3", "--out", str(out), "--json", str(tmp_path / "c.json")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "edca" in proc.stdout and "coorp" in proc.stdout and "miss rate" in proc.stdout
    data = json.loads((out / "compare.json").read_text())
    assert data == json.loads((tmp_path / "c.json").read_text())
    assert data["scenario"] == "crl-2" and data["seed"] == 3
    names = {p.name for p in out.iterdir()}
    assert {"compare.json", "manifest.json", "policy_stats.json", "reaction_cdf.png",
            "utilization_epoch.png", "ls_queue_depth.png"} <= names  # fmt: skip
    assert names & {"compare.parquet", "compare.csv"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 3 and manifest["policies"] == ["edca", "coorp"]
    assert load_scenario(CRL2).name == manifest["scenario"]["name"]
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COORP), "compare", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)  # fmt: skip


def test_json_dash_writes_json_to_stdout_and_the_table_to_stderr() -> None:
    proc = _cli("crl-2", "--policies", "edca", "--duration", "0.3", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # nothing but JSON on stdout
    assert data["scenario"] == "crl-2" and list(data["policies"]) == ["edca"]
    assert "miss rate" in proc.stderr


def test_quiet_prints_nothing(tmp_path: Path) -> None:
    proc = _cli("crl-2", "--policies", "edca", "--duration", "0.3", "--quiet",
                "--json", str(tmp_path / "c.json"))  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    assert json.loads((tmp_path / "c.json").read_text())["seed"] == 1


def test_out_and_json_are_checked_before_the_scenario_is_even_read(tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("")
    # The scenario does not exist either: the --out error comes first, so nothing ran.
    proc = _cli("no-such-scenario", "--out", str(a_file))
    assert proc.returncode == 2 and "--out" in proc.stderr and "not a directory" in proc.stderr
    proc = _cli("no-such-scenario", "--json", str(tmp_path))
    assert proc.returncode == 2 and "is a directory" in proc.stderr
    proc = _cli("crl-2", "--seed", "1", "--seeds", "1-3")
    assert proc.returncode == 2 and "not both" in proc.stderr


def test_seeds_show_means_with_confidence_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "multi"
    proc = _cli("crl-2", "--policies", "edca,coorp", "--duration", "0.5", "--seeds", "1-3",
                "--out", str(out), "--json", str(tmp_path / "m.json"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "seeds 1-3" in proc.stdout and "±" in proc.stdout and "95% CI" in proc.stdout
    data = json.loads((tmp_path / "m.json").read_text())
    assert data == json.loads((out / "compare.json").read_text())
    assert data["seeds"] == [1, 2, 3] and list(data["policies"]) == ["edca", "coorp"]
    miss = data["policies"]["coorp"]["violation_rate"]
    assert set(miss) == {"mean", "ci95", "n"} and miss["n"] == 3
    assert set(data["policies"]["coorp"]["reaction_ms"]) == {"p50", "p90", "p99"}
    # The mean is the mean of the per-seed values, each the same as a single-seed run.
    p50 = [data["per_seed"][str(s)]["coorp"]["reaction_ms"]["p50"] for s in (1, 2, 3)]
    assert data["policies"]["coorp"]["reaction_ms"]["p50"]["mean"] == pytest.approx(sum(p50) / 3)
    single = compare(load_scenario(CRL2), ["coorp"], seed=2, duration_ns=500_000_000).to_json()
    assert p50[1] == single["policies"]["coorp"]["reaction_ms"]["p50"]
    assert {"runs.parquet", "aggregate.json", "manifest.json", "miss_vs_utilization.png"} <= {
        p.name for p in out.iterdir()
    }
    # The rerun, in this process twice so that the code version (a hash of the source,
    # computed once per process) cannot change between the two calls.
    args = ["compare", "crl-2", "--policies", "edca,coorp", "--duration", "0.5", "--seeds",
            "1-3", "--out", str(tmp_path / "twice")]  # fmt: skip
    for expected in ("9 runs (0 from cache)", "9 runs (9 from cache)"):
        with pytest.raises(SystemExit) as done:
            main(args)
        assert done.value.code in (0, None) and expected in capsys.readouterr().out


def test_format_writes_every_figure_in_every_format(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    proc = _cli("crl-2", "--policies", "edca", "--duration", "0.2", "--format", "png,pdf,svg",
                "--out", str(out), "--quiet")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    magic = {".png": b"\x89PNG", ".pdf": b"%PDF", ".svg": b"<?xml"}
    figures = sorted(p.name for p in out.iterdir() if p.suffix in magic)
    stems = ("reaction_cdf", "utilization_epoch", "ls_queue_depth")
    assert figures == sorted(f"{s}{x}" for s in stems for x in magic)
    for name in figures:
        assert (out / name).read_bytes().startswith(magic[Path(name).suffix]), name
    assert sorted(json.loads((out / "manifest.json").read_text())["figures"]) == figures
    proc = _cli("crl-2", "--format", "tiff", "--out", str(tmp_path / "never"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--format 'tiff': unknown figure format 'tiff'; allowed: png, pdf, svg" in proc.stderr
    assert not (tmp_path / "never").exists()
