"""``make demo`` installs the core dependencies only (``pip install -e .``, no extras):
the demo's command must run with every extra's packages missing, and write its results
(CSV tables without pyarrow, the JSON, the figures, the manifest)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Import names of what the extras install (pyproject [project.optional-dependencies]).
EXTRA_MODULES = ("pyarrow", "ray", "mujoco", "scipy", "mcap", "cyclonedds", "zenoh",
                 "iceoryx2", "zmq", "pyroute2", "pettingzoo", "gymnasium", "ns3")  # fmt: skip

_BLOCKED_RUN = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
        return None
sys.meta_path.insert(0, Block())
sys.argv = ["coorp", *sys.argv[2:]]
from coorp.cli import main
main()
"""


def test_the_demo_target_installs_the_core_only() -> None:
    make = (ROOT / "Makefile").read_text()
    demo_stamp = re.search(r"^\$\(CORE\):.*?(?=^\S)", make, re.S | re.M)
    assert demo_stamp is not None
    assert "pip install --quiet -e .\n" in demo_stamp.group(0)
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=\[ ]", d)[0].lower() for d in deps}
    assert not names & {"pyarrow", "ray", "mujoco", "scipy"}


def test_the_demo_command_runs_without_any_extra(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-c", _BLOCKED_RUN, ",".join(EXTRA_MODULES), "compare", "crl-2",
         "--seeds", "1-2", "--duration", "0.5", "--policies", "edca,coorp", "--jobs", "1",
         "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    names = {p.name for p in out.iterdir()}
    assert {"runs.csv", "compare.json", "manifest.json", "miss_vs_utilization.png"} <= names
    assert "runs.parquet" not in names
    assert "Parquet needs pyarrow" in proc.stderr
    assert re.search(r"\d+\.\d s wall \(\d+\.\d s CPU\) on \d+ cores, 1-min load", proc.stdout)
