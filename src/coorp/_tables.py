"""Writing result tables (columnar dicts of numpy arrays or lists) as CSV and Parquet.

CSV is always written here (text quoted, numbers not, as pyarrow's writer did), so its
bytes do not depend on what is installed. Parquet is written when pyarrow is installed
(the ``parquet`` extra; ``make test`` installs it, ``make demo`` does not, to keep the
demo's environment small): a table asked for as Parquet only (``csv=False``) falls back
to CSV rather than be lost, and :func:`parquet_note` says once what was skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

__all__ = ["format_cell", "parquet_available", "parquet_note", "read_csv_rows", "write_table"]

_skipped: list[Path] = []


def parquet_available() -> bool:
    """Whether pyarrow (Parquet) is installed."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def format_cell(value: object) -> str:
    """A CSV cell as pyarrow writes it: text in double quotes (a quote doubled), integers
    as digits, floats in their shortest round-trip form (``nan``, ``inf``), booleans
    ``true``/``false``, a missing value empty."""
    if value is None:
        return ""
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        x = float(value)
        return repr(x) if math.isfinite(x) else ("nan" if x != x else ("inf" if x > 0 else "-inf"))
    return '"' + str(value).replace('"', '""') + '"'


def _write_csv(path: Path, columns: Mapping[str, Iterable[object]]) -> None:
    cols = [np.asarray(v).tolist() if isinstance(v, np.ndarray) else list(v)
            for v in columns.values()]  # fmt: skip
    with path.open("w", encoding="utf-8") as f:
        f.write(",".join(format_cell(name) for name in columns) + "\n")
        for row in zip(*cols, strict=True):
            f.write(",".join(format_cell(v) for v in row) + "\n")


def write_table(
    path_stem: Path, columns: Mapping[str, np.ndarray | list[object]], *, csv: bool = True
) -> list[Path]:
    """Write ``columns`` to ``<stem>.parquet`` (with pyarrow) and ``<stem>.csv`` (always
    when ``csv``; without pyarrow in any case); return the paths."""
    path_stem.parent.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if parquet_available():
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({k: pa.array(v) for k, v in columns.items()})
        written.append(path_stem.with_suffix(".parquet"))
        pq.write_table(table, written[-1])
    else:
        _skipped.append(path_stem.with_suffix(".parquet"))
    if csv or not written:
        written.append(path_stem.with_suffix(".csv"))
        _write_csv(written[-1], columns)
    return written


def _value(text: str, quoted: bool) -> object:
    if quoted:
        return text
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return float(text)


def read_csv_rows(path: Path) -> list[dict[str, object]]:
    """The rows of a CSV table this module (or pyarrow) wrote, typed back: a quoted cell
    is text, an empty one missing, ``true``/``false`` booleans, the rest numbers."""
    text = path.read_text(encoding="utf-8")
    records: list[list[object]] = []
    row: list[object] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == '"':  # a quoted cell: up to the lone closing quote
            j, parts = i + 1, []
            while True:
                k = text.index('"', j)
                parts.append(text[j:k])
                if text.startswith('""', k):
                    parts.append('"')
                    j = k + 2
                    continue
                break
            row.append(_value("".join(parts), True))
            i = k + 1
        else:
            k = min((p for p in (text.find(",", i), text.find("\n", i)) if p >= 0), default=n)
            row.append(_value(text[i:k], False))
            i = k
        if i >= n or text[i] == "\n":
            records.append(row)
            row = []
        i += 1
    header = [str(h) for h in records[0]] if records else []
    return [dict(zip(header, r, strict=True)) for r in records[1:]]


def parquet_note() -> str | None:
    """One line for the user if this process skipped Parquet files (else ``None``)."""
    if not _skipped:
        return None
    n = len(_skipped)
    _skipped.clear()
    return (
        f"{n} table(s) written as CSV only: Parquet needs pyarrow "
        "(pip install 'coorp[parquet]'; make test installs it)"
    )
