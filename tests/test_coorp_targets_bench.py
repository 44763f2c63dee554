"""``benchmarks/coorp_targets.py``: a directory that is not a sweep's gets an error that
names it (not a traceback)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import coorp_targets


def test_a_directory_without_a_sweep_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        coorp_targets.main([str(tmp_path)])
    assert str(tmp_path) in str(exc.value) and "coorp sweep" in str(exc.value)
