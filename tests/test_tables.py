"""Result tables (``coorp._tables``): CSV by the standard library (the same bytes with or
without pyarrow), Parquet when pyarrow is there, nothing lost when it is not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import coorp._tables as tables
from cli_run import run_cli

COLUMNS = {
    "policy": ["edca", "a,b", None],
    "n": np.array([1, 2, 3], dtype=np.int64),
    "x": np.array([0.1, float("nan"), 1e-5]),
    "ok": np.array([True, False, True]),
}


def test_csv_quotes_text_and_writes_numbers_in_full(tmp_path: Path) -> None:
    (path,) = [p for p in tables.write_table(tmp_path / "t", COLUMNS) if p.suffix == ".csv"]
    assert path.read_text() == (
        '"policy","n","x","ok"\n"edca",1,0.1,true\n"a,b",2,nan,false\n,3,1e-05,true\n'
    )


def test_parquet_when_pyarrow_is_there(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    written = tables.write_table(tmp_path / "t", COLUMNS, csv=False)
    assert written == [tmp_path / "t.parquet"]
    assert pq.read_table(written[0]).column("n").to_pylist() == [1, 2, 3]


def test_without_pyarrow_every_table_is_csv_and_the_user_is_told(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "parquet_available", lambda: False)
    out = tmp_path / "o"
    code, _, err = run_cli(capsys, "simulate", "saturation-5", "--duration", "0.01",
                           "--out", str(out))  # fmt: skip
    assert code == 0, err
    names = {p.name for p in out.iterdir()}
    assert {"messages.csv", "flows.csv", "stations.csv", "summary.json"} <= names
    assert not [n for n in names if n.endswith(".parquet")]
    assert "note: 3 table(s) written as CSV only: Parquet needs pyarrow" in err


def test_csv_rows_read_back_typed(tmp_path: Path) -> None:
    cols = {"s": ['a,"b"\nc', "", None], "i": [1, 2, 3], "f": [0.5, float("inf"), -2.0],
            "b": [True, False, None]}  # fmt: skip
    tables.write_table(tmp_path / "t", cols)
    rows = tables.read_csv_rows(tmp_path / "t.csv")
    assert [r["s"] for r in rows] == cols["s"]
    assert [r["i"] for r in rows] == [1, 2, 3] and [r["f"] for r in rows] == cols["f"]
    assert [r["b"] for r in rows] == cols["b"]


def test_plot_reads_a_sweep_written_without_pyarrow(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """make demo's .venv has no pyarrow: coorp plot then reads runs.csv, and draws the
    figure it draws from runs.parquet."""
    import coorp.sweep._results as results
    from coorp.sweep import load_rows

    out = tmp_path / "demo"
    code, _, err = run_cli(capsys, "compare", "crl-2", "--seeds", "1-2", "--duration", "1",
                           "--policies", "edca,coorp", "--out", str(out))  # fmt: skip
    assert code == 0, err
    from_parquet = load_rows(out)
    monkeypatch.setattr(results, "parquet_available", lambda: False)
    from_csv = load_rows(out)
    assert len(from_csv) == len(from_parquet) > 0
    for a, b in zip(from_csv, from_parquet, strict=True):
        assert a.keys() == b.keys()
        assert all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a), (a, b)
    (out / "runs.parquet").unlink()
    (out / "miss_vs_utilization.png").unlink()
    code, _, err = run_cli(capsys, "plot", str(out))
    assert code == 0, err
    assert (out / "miss_vs_utilization.png").stat().st_size > 0
