"""Tiny scenario files for the sweep tests: a leader and 1 or 2 workers on fixed MCS 7
links, the MPC loop from 10 ms, epochs of 4 items with 2 MB parameters (several epochs
per simulated second, so every metric exists in a 1 s run)."""

from __future__ import annotations

from pathlib import Path

import pytest

TINY = """\
name = "{name}"
duration_s = 1.0
seed = 1

[links]
mode = "fixed"
mcs = 7

[hw_queue]
mode = "shared"
capacity_packets = 128

[[stations]]
name = "leader"
position_m = [0.0, 0.0]
{workers}
[workload]
leader = "leader"

[workload.mpc]
start_us = 10000

[workload.drlc]
batch_items = 4
train_us = 20000
param_bytes = 2000000
"""

WORKER = """[[stations]]
name = "r{i}"
position_m = [{x}, 0.0]
"""


def write_tiny(folder: Path, workers: int, name: str | None = None) -> Path:
    name = name or f"tiny-{workers}"
    body = "".join(WORKER.format(i=i, x=float(i + 2)) for i in range(workers))
    path = folder / f"{name}.toml"
    path.write_text(TINY.format(name=name, workers=body))
    return path


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """A 2-worker tiny scenario file."""
    return write_tiny(tmp_path, 2)


@pytest.fixture
def tiny_pair(tmp_path: Path) -> tuple[Path, Path]:
    """Tiny scenarios with 1 and 2 workers (two team sizes)."""
    return write_tiny(tmp_path, 1), write_tiny(tmp_path, 2)
