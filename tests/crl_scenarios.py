"""Tiny coordinated-robotic-learning scenarios for the policy and workload tests, built in code."""

from __future__ import annotations

import math
from typing import Any

from coorp.scenario import Scenario, parse_scenario


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``, nested dicts merged key by key."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def crl_scenario(workers: int = 2, **over: Any) -> Scenario:
    """A leader and ``workers`` robots 3 m away; MCS 7 on every link, one shared NIC
    ring; the paper's MPC loop from 10 ms; BSP epochs of 4 items with 2 MB parameters."""
    stations: list[dict[str, Any]] = [{"name": "leader", "position_m": [0.0, 0.0]}]
    for i in range(workers):
        a = 2 * math.pi * i / workers
        stations.append({"name": f"r{i + 1}", "position_m": [3 * math.cos(a), 3 * math.sin(a)]})
    base: dict[str, Any] = {
        "name": "tiny-crl",
        "duration_s": 1.5,
        "seed": 3,
        "links": {"mode": "fixed", "mcs": 7},
        "hw_queue": {"mode": "shared", "capacity_packets": 128},
        "stations": stations,
        "workload": {
            "leader": "leader",
            "mpc": {"start_us": 10_000.0},
            "drlc": {"batch_items": 4, "train_us": 20_000.0, "param_bytes": 2_000_000},
        },
    }
    return parse_scenario(merge(base, over), source="<test>")
