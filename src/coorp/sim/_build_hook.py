"""Hatch build hook: compile the simulator with mypyc while building the wheel.

Enabled from ``pyproject.toml`` (``[tool.hatch.build.targets.wheel.hooks.custom]`` with
``path`` pointing here; build requirements ``mypy`` and ``setuptools``). Both editable
(``pip install -e .``) and regular wheels get the compiled modules; if compiling fails
(no C compiler, say) the build goes on with a warning and the plain Python simulator,
which computes the same results. ``COORP_NO_COMPILE=1`` skips the step.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    BuildHookInterface = object
else:
    try:
        from hatchling.builders.hooks.plugin.interface import BuildHookInterface
    except ImportError:  # imported outside a build (hatchling absent): inert
        BuildHookInterface = object


class SimCompileHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    # Provided by hatchling's BuildHookInterface.
    root: str
    target_name: str
    app: Any

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("COORP_NO_COMPILE") == "1":
            return
        root = Path(self.root)
        script = root / "src" / "coorp" / "sim" / "_mypyc_build.py"
        self.app.display_info("coorp: compiling the simulator with mypyc ...")
        proc = subprocess.run(
            [sys.executable, str(script), str(root / "src")], capture_output=True, text=True
        )
        if proc.returncode:
            self.app.display_warning(
                "coorp: could not compile the simulator (it will run as plain Python, "
                f"with the same results, slower):\n{proc.stderr[-2000:]}"
            )
            return
        if version == "standard":
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            for line in proc.stdout.split():
                rel = Path(line).relative_to(root / "src")
                build_data["force_include"][line] = str(rel)
