"""The benchmark command: JSON shape and honest reporting (no timing thresholds here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coorp._errors import UsageError
from coorp.transport._bench import BenchConfig, parse_sizes, run

from .conftest import needs_iceoryx2

CLI = [sys.executable, "-c", "from coorp.cli import main; main()"]


def test_parse_sizes() -> None:
    assert parse_sizes("1MB,10MB, 64B,12KB,1MiB") == [10**6, 10**7, 64, 12_000, 1 << 20]
    with pytest.raises(UsageError, match="invalid size"):
        parse_sizes("ten")


def test_a_failing_implementation_is_reported_and_omitted() -> None:
    result = run(BenchConfig(sizes=[1000], rtt_sizes=[], impls=["no-such-impl"], iterations=2))
    assert "no-such-impl" in result.skipped
    summary = result.summary()
    assert set(summary["broadcast"]) == {"memcpy"}


@needs_iceoryx2
def test_broadcast_command_writes_the_documented_json(tmp_path: Path) -> None:
    out, plot = tmp_path / "bench.json", tmp_path / "bench.png"
    cmd = [
        *CLI,
        "bench",
        "broadcast",
        "--sizes",
        "100KB",
        "--subscribers",
        "2",
        "--impls",
        "coorp,pickle5_socket",
        "--iterations",
        "3",
        "--rtt-sizes",
        "64B",
        "--rtt-iterations",
        "5",
        "--json",
        str(out),
        "--plot",
        str(plot),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert set(doc) == {"broadcast", "rtt"}
    assert {"coorp", "memcpy", "pickle5_socket"} <= set(doc["broadcast"])
    for by_size in doc["broadcast"].values():
        assert set(by_size) == {"100000"}
        assert set(by_size["100000"]) == {"median_ms", "p99_ms"}
    assert {"coorp", "memcpy"} <= set(doc["rtt"])
    assert set(doc["rtt"]["coorp"]["64"]) == {"median_us", "p99_us"}
    assert plot.stat().st_size > 0
    assert "Broadcast" in proc.stdout


def test_unknown_implementation_is_a_usage_error() -> None:
    proc = subprocess.run(
        [*CLI, "bench", "broadcast", "--impls", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "unknown implementation" in proc.stderr
