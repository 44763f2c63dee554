"""Writing result tables (columnar dicts of numpy arrays) as Parquet and CSV."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

__all__ = ["write_table"]


def write_table(
    path_stem: Path, columns: Mapping[str, np.ndarray | list[object]], *, csv: bool = True
) -> list[Path]:
    """Write ``columns`` to ``<stem>.parquet`` (and ``<stem>.csv``); return the paths."""
    path_stem.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({k: pa.array(v) for k, v in columns.items()})
    written = [path_stem.with_suffix(".parquet")]
    pq.write_table(table, written[0])
    if csv:
        written.append(path_stem.with_suffix(".csv"))
        pacsv.write_csv(table, written[1])
    return written
