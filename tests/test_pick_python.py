"""tools/pick_python.py: which interpreter a new .venv is made from."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "tools" / "pick_python.py"
_spec = importlib.util.spec_from_file_location("pick_python", _PATH)
assert _spec is not None and _spec.loader is not None
pp = importlib.util.module_from_spec(_spec)
sys.modules["pick_python"] = pp
_spec.loader.exec_module(pp)


def _f(path: str, *, version=(3, 11), shared=False, venv=True, headers=True) -> object:
    return pp.Found(path=path, version=version, shared=shared, venv=venv, headers=headers)


def test_a_static_python_with_headers_wins_over_earlier_shared_ones() -> None:
    found = [_f("/a", shared=True), _f("/b", shared=False), _f("/c", shared=False)]
    assert pp.pick(found).path == "/b"


def test_headers_count_before_static_and_old_or_venvless_pythons_never_win() -> None:
    found = [
        _f("/old", version=(3, 10)),
        _f("/novenv", venv=False),
        _f("/static-no-headers", headers=False),
        _f("/shared", shared=True),
    ]
    assert pp.pick(found).path == "/shared"
    assert pp.pick(found[:3]).path == "/static-no-headers"
    assert pp.pick(found[:2]) is None
    assert pp.pick([]) is None


def test_probe_reads_this_interpreter_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    f = pp.probe(sys.executable)
    assert f is not None and f.usable
    assert f.version == sys.version_info[:2]
    not_python = tmp_path / "python3"
    not_python.write_text("#!/bin/sh\necho hello\n")
    not_python.chmod(0o755)
    assert pp.probe(str(not_python)) is None
    assert pp.probe(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("flag", [[], ["--explain"]])
def test_the_script_prints_a_usable_interpreter(flag: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(_PATH), *flag], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    chosen = done.stdout.strip()
    version = subprocess.run(
        [chosen, "-c", "import sys; print(sys.version_info >= (3, 11))"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert version.stdout.strip() == "True"
    if flag:
        assert "Found(" in done.stderr
