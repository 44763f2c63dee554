"""A tiny co-simulated world the cosim tests share (not a conftest: the suite has one
conftest.py at tests/, and two modules named ``conftest`` cannot both be imported)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

pytest.importorskip("mujoco")
pytest.importorskip("scipy")

#: A tiny world: a static leader and one ground robot driving along a wall; a second
#: obstacle can be placed between them to block the line of sight.
TINY: dict[str, Any] = {
    "name": "tiny",
    "duration_s": 1.0,
    "seed": 3,
    "phy": {"width_mhz": 80, "spatial_streams": 2},
    "workload": {
        "leader": "leader",
        "mpc": {"start_us": 20_000.0},
        "drlc": {"enabled": False},
    },
    "cosim": {
        "physics_step_ms": 2.0,
        "staleness_limit_ms": 100.0,
        "world": {"size_m": [20.0, 20.0]},
        "task": {"speed_m_s": 0.8, "start_ms": 20.0},
        "robots": [
            {"name": "leader", "kind": "static", "start_m": [0.0, 0.0], "altitude_m": 1.0},
            {
                "name": "r1",
                "start_m": [2.0, 0.0],
                "heading_deg": 90,
                "waypoints_m": [[2.0, 4.0], [-2.0, 4.0]],
            },
        ],
    },
}


def tiny(**cosim: Any) -> dict[str, Any]:
    d = copy.deepcopy(TINY)
    d["cosim"].update(cosim)
    return d
