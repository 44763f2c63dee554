"""Hatch build hook: compile the hot modules with mypyc while building the wheel.

Enabled in ``pyproject.toml`` (``[tool.hatch.build.targets.wheel.hooks.custom]`` with
``path`` pointing here; ``mypy`` and ``setuptools`` are build requirements), so ``make``,
``pip install -e .`` and ``pip install .`` all build the compiled simulator, control
algorithms and policy hooks (``coorp._accel.MODULES``, ~60 s on 2 cores). An editable
install compiles next to the sources (``src/coorp/**/*.so`` and
``src/coorp/_accel/_native_manifest.json``, git-ignored); a regular wheel compiles into
a temporary directory and packs the result, leaving the source tree alone.

If compiling fails (no C compiler, say) the build goes on with the plain Python
modules, which compute the same results, slower: the hook prints one warning (pip
shows it with ``-v``; ``make`` prints the outcome itself) and records the reason in
``_native_build_error.txt``, which ``coorp --version`` reports. ``COORP_NO_COMPILE=1``
skips the step.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    BuildHookInterface = object
else:
    try:
        from hatchling.builders.hooks.plugin.interface import BuildHookInterface
    except ImportError:  # imported outside a build (hatchling absent): inert
        BuildHookInterface = object

#: Keep in step with ``_mypyc_build.BUILD_ERROR`` / ``coorp._accel.BUILD_ERROR``.
BUILD_ERROR = "_native_build_error.txt"


class SimCompileHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    # Provided by hatchling's BuildHookInterface.
    root: str
    target_name: str
    app: Any

    _tmp: str | None = None

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("COORP_NO_COMPILE") == "1":
            return
        root = Path(self.root)
        src = root / "src"
        script = src / "coorp" / "_accel" / "_mypyc_build.py"
        # A regular wheel is built into a temporary tree (the source tree stays as it
        # was); an editable install compiles in place, where its imports look.
        standard = version == "standard"
        out = Path(tempfile.mkdtemp(prefix="coorp-wheel-native-")) if standard else None
        if out is not None:
            self._tmp = str(out)
        self.app.display_info("coorp: compiling the hot modules with mypyc (~60 s) ...")
        cmd = [sys.executable, str(script), str(src), *([str(out)] if out else [])]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        error_file = (out or src) / "coorp" / "_accel" / BUILD_ERROR
        if proc.returncode:
            why = _reason(script, proc.stderr)
            self.app.display_warning(
                f"coorp: could not compile the hot modules ({why}); they will run as plain "
                "Python: same results, slower. `coorp --version` says which one runs."
            )
            error_file.parent.mkdir(parents=True, exist_ok=True)
            error_file.write_text(why + "\n")
            if standard:
                build_data["force_include"][str(error_file)] = f"coorp/_accel/{BUILD_ERROR}"
            return
        if standard:
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            base = out or src
            for line in proc.stdout.split():
                rel = Path(line).relative_to(base)
                build_data["force_include"][line] = str(rel)

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _reason(script: Path, stderr: str) -> str:
    """``_mypyc_build.reason`` without importing coorp (its dependencies may be absent)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_coorp_mypyc_build", script)
    if spec is None or spec.loader is None:
        return "unknown error"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.reason(stderr))
