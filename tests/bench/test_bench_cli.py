"""The benchmark command: JSON shape and honest reporting (no timing thresholds here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from coorp._errors import UsageError
from coorp.bench import BenchConfig, checksum, parse_sizes
from coorp.bench import run_broadcast as run
from coorp.transport import iceoryx2_available

needs_iceoryx2 = pytest.mark.skipif(
    not iceoryx2_available(), reason="iceoryx2 not installed (pip install 'coorp[transport]')"
)


CLI = [sys.executable, "-c", "from coorp.cli import main; main()"]


def test_parse_sizes() -> None:
    assert parse_sizes("1MB,10MB, 64B,12KB,1MiB") == [10**6, 10**7, 64, 12_000, 1 << 20]
    with pytest.raises(UsageError, match="invalid size"):
        parse_sizes("ten")


def test_a_failing_implementation_is_reported_and_omitted() -> None:
    result = run(BenchConfig(sizes=[1000], rtt_sizes=[], impls=["no-such-impl"], iterations=2))
    assert "no-such-impl" in result.skipped
    summary = result.summary()
    assert set(summary["broadcast"]) == {"view", "checksum"}
    assert set(summary["broadcast"]["view"]) == {"memcpy", "memcpy_x4"}
    assert set(summary["broadcast"]["checksum"]) == {"memcpy", "memcpy_x4", "private_copy"}


def test_checksum_reads_every_byte() -> None:
    import numpy as np

    for n in (1, 7, 8, 9, 1000, 4099):
        a = np.arange(n, dtype=np.uint64).astype(np.uint8)
        base = checksum(a)
        for i in {0, n // 2, n - 1}:
            b = a.copy()
            b[i] ^= 0x5A
            assert checksum(b) != base, (n, i)
        assert checksum(a.copy()) == base


def test_unknown_consume_mode_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--consume"):
        run(BenchConfig(sizes=[1000], rtt_sizes=[], impls=[], consume=["read"]))


@needs_iceoryx2
def test_broadcast_command_writes_the_documented_json_and_leaves_no_files(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    out, plot = tmp_path / "bench.json", tmp_path / "bench.png"
    # A short private TMPDIR (Unix socket paths are limited to 107 bytes).
    tmp = Path(tempfile.mkdtemp(prefix="cbt-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    (tmp / "someone-elses-file").write_text("kept")
    before = sorted(p.name for p in tmp.iterdir())
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
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp.iterdir()) == before  # socket files and dirs gone
    doc = json.loads(out.read_text())
    assert set(doc) == {"broadcast", "rtt"}
    assert set(doc["broadcast"]) == {"view", "checksum"}
    for mode, impls in doc["broadcast"].items():
        refs = {"memcpy", "memcpy_x4"} | ({"private_copy"} if mode == "checksum" else set())
        # coorp_spin (busy-poll) and coorp_iox (iceoryx2's event) come with coorp.
        assert set(impls) == {"coorp", "coorp_spin", "coorp_iox", "pickle5_socket"} | refs
        for impl, by_size in impls.items():
            assert set(by_size) == {"100000"}
            keys = {"median_ms", "p99_ms"} | (
                set() if impl in refs - {"private_copy"} else {"producer_median_ms"}
            )
            assert set(by_size["100000"]) == keys, (mode, impl)
    assert set(doc["rtt"]) == {"coorp", "coorp_spin", "coorp_iox", "pickle5_socket", "memcpy"}
    assert set(doc["rtt"]["coorp"]["64"]) == {"median_us", "p99_us"}
    assert plot.stat().st_size > 0
    assert "consume=view" in proc.stdout and "consume=checksum" in proc.stdout


def test_unknown_implementation_is_a_usage_error() -> None:
    proc = subprocess.run(
        [*CLI, "bench", "broadcast", "--impls", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "unknown implementation" in proc.stderr


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_interrupted_run_removes_its_directory(
    monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    import coorp.bench._broadcast as bench

    made: list[Path] = []

    def fail(cfg: BenchConfig, run_id: str, result: object, progress: object) -> None:
        d = Path(bench.run_dir(run_id))
        (d / "bcast.sock").write_bytes(b"")  # as a socket file would be
        made.append(d)
        raise error("stop")

    monkeypatch.setattr(bench, "_run", fail)
    with pytest.raises(error):
        run(BenchConfig(sizes=[1000], rtt_sizes=[], impls=[]))
    assert made and not made[0].exists()
