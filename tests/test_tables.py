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
