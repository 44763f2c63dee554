"""benchmarks/learn_team_netns.py: `coorp learn --team` started per robot in namespaces
(permit daemon, own keys, no shared clock) and `coorp learn --runtime` side by side."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.netns

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "learn_team_netns.py"
_spec = importlib.util.spec_from_file_location("learn_team_netns", _BENCH)
assert _spec is not None and _spec.loader is not None
learn_team_netns = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(learn_team_netns)


def test_both_paths_learn_the_same_versions_and_leave_nothing(tmp_path: Path) -> None:
    from coorp.learn._netns import netns_unavailable

    why = netns_unavailable()
    if why is not None:
        pytest.skip(why)
    code = learn_team_netns.main(
        ["--seeds", "1", "--modes", "coorp", "--duration", "60", "--max-versions", "1",
         "--hidden", "8", "--envs", "2", "--air-params", "20000", "--out", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    rows = json.loads((tmp_path / "summary.json").read_text())["rows"]["coorp"]
    team, runtime = rows["team"][0], rows["runtime"][0]
    assert team["versions"] == runtime["versions"] == 1
    # Seeds are the simulated path's on both: the same model comes out.
    assert team["final_return"] == runtime["final_return"]
    # Each worker's clock offset is a one-way delay through the namespaces.
    assert all(0 <= off < 50 for off in team["clock_offset_ms"])
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"coorpl-{os.getpid()}-" not in left
