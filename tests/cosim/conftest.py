"""The co-simulation needs MuJoCo and SciPy (the `cosim` extra): without them, skip the folder."""

from __future__ import annotations

import pytest

pytest.importorskip("mujoco")
pytest.importorskip("scipy")
