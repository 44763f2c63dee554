"""A fleet co-simulation (``coorp.cosim._fleet``): robots that drive from one AP's cell to
the next hand over on the world's links and keep their loop with the new leader."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from coorp import ScenarioError
from coorp.cosim import parse_cosim, run_cosim

SECOND = 1_000_000_000


def _world(**ap2: Any) -> dict[str, Any]:
    """Two APs 16 m apart on two channels; r1 drives from the west one to the east one."""
    return {
        "name": "tiny-fleet", "duration_s": 4.0, "seed": 2,
        "phy": {"width_mhz": 80, "spatial_streams": 2},
        "fleet": {
            "access_points": [{"name": "apw", "channel": 36}, {"name": "ape", "channel": 52}],
            "learning": {"update_bytes": 1_000_000, "model_bytes": 1_000_000,
                         "start_spread_us": 10_000},
        },
        "cosim": {
            "physics_step_ms": 2.0, "staleness_limit_ms": 150.0,
            "world": {"size_m": [24.0, 10.0]},
            "task": {"speed_m_s": 2.5, "start_ms": 20.0},
            "robots": [
                {"name": "apw", "kind": "static", "start_m": [-8.0, 0.0], "altitude_m": 3.0},
                {"name": "ape", "kind": "static", "start_m": [8.0, 0.0], "altitude_m": 3.0,
                 **ap2},
                {"name": "r1", "start_m": [-5.0, 1.0], "max_speed_m_s": 3.0,
                 "waypoints_m": [[7.0, 1.0]]},
                {"name": "r2", "start_m": [7.0, -1.0], "heading_deg": 180,
                 "max_speed_m_s": 3.0, "waypoints_m": [[6.0, -1.0]]},
            ],
        },
    }  # fmt: skip


def test_a_robot_that_drives_across_hands_over_and_keeps_its_loop() -> None:
    cs = parse_cosim(_world())
    r = run_cosim(cs, "coorp", seed=2)
    ((robot, old, new, left, joined),) = r.handovers
    assert (robot, old, new) == ("r1", "apw", "ape")
    assert joined - left == 30_000_000
    s = r.summary()
    assert s["handovers"] == 1 and s["association_gap_ms"] == 30.0
    # Its commands came from the new leader after the hand-over: it kept tracking.
    assert s["stopped_fraction"] == 0.0
    assert float(np.max(r.tracking_error_m)) < 0.5
    assert s["reaction_ms"]["loops"] > 100


def test_in_a_fleet_the_access_points_are_the_static_robots() -> None:
    with pytest.raises(ScenarioError, match="access points are the static robots"):
        parse_cosim(_world(kind="ground", max_speed_m_s=3.0, waypoints_m=[[6.0, 0.0]]))
