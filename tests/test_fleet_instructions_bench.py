"""``benchmarks/_fleet_instructions.py`` refuses bad input by name before starting valgrind
(the measurement itself, ~45x slower than a run, is not part of the suite)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _fleet_instructions as bench


def test_a_non_positive_duration_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--seconds", "0"])
    assert exc.value.code == 2
    assert "--seconds 0.0: must be > 0" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_a_tree_without_a_build_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no \.venv/bin/python \(run `make native` there"):
        bench.main(["--trees", str(tmp_path)])
