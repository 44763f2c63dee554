"""The runnable programs in examples/ run and print what they promise.

``runtime_robot.py`` is one robot of a real deployment (it needs a team file and a
reachable leader), so it is only checked to import.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

#: example -> (arguments, text its output must contain)
RUNS = {
    "my_policy.py": ([], "guard-band"),
    "runtime_team.py": ([], "intact: True"),
    "runtime_async.py": ([], "round trip median"),
    "transport_camera.py": ([], "after publish"),
    "team_scaling.py": (["--workers", "2,3", "--duration", "0.3"], "MPC only"),
}


def test_every_example_is_covered() -> None:
    assert {p.name for p in EXAMPLES.glob("*.py")} == {*RUNS, "runtime_robot.py"}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_example_runs(name: str) -> None:
    if name == "transport_camera.py" and importlib.util.find_spec("iceoryx2") is None:
        pytest.skip("iceoryx2 is not installed (pip install 'coorp[transport]')")
    args, marker = RUNS[name]
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert marker in proc.stdout


def test_team_scaling_rejects_bad_worker_lists() -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "team_scaling.py"), "--workers", "2,x"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2 and "give worker counts" in proc.stderr


def test_runtime_robot_imports() -> None:
    spec = importlib.util.spec_from_file_location("runtime_robot", EXAMPLES / "runtime_robot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines, does not run (guarded by __main__)
    assert callable(getattr(module, "main", None))


def test_bulk_tcp_lines_never_run_into_each_other(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sink's connection threads print ``DONE`` while its command loop prints
    ``COUNT``: every line must reach the reader whole (a benchmark waited 30 s for a
    ``COUNT`` glued to the end of a ``DONE``)."""
    spec = importlib.util.spec_from_file_location(
        "bulk_tcp", EXAMPLES / "unmodified" / "bulk_tcp.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Pieces:
        """A stdout that keeps each write apart and lets another thread in between."""

        def __init__(self) -> None:
            self.pieces: list[str] = []

        def write(self, text: str) -> int:
            self.pieces.append(text)
            threading.Event().wait(0)  # a switch point between writes, as a pipe's would be
            return len(text)

        def flush(self) -> None:
            pass

    out = Pieces()
    monkeypatch.setattr(sys, "stdout", out)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [
            threading.Thread(target=lambda k=k: [module._say(f"L{k} {i}") for i in range(300)])
            for k in range(6)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(old)
    lines = "".join(out.pieces).split("\n")
    assert lines[-1] == ""
    assert sorted(lines[:-1]) == sorted(f"L{k} {i}" for k in range(6) for i in range(300))
