"""Digests of simulation results for the golden tests (tests/sim, tests/policies).

A SHA-256 over everything a run produces that may not change unnoticed: the exchange
trace, every flow's, station's and the channel's counters, the message table, the LS
hardware-queue depths, and whatever ``extra`` the caller adds (hook calls, policy stats).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from coorp.sim import SimResult


def _canon(x: Any) -> Any:
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, dict):
        return {str(k): _canon(v) for k, v in sorted(x.items())}
    if isinstance(x, list | tuple):
        return [_canon(v) for v in x]
    if hasattr(x, "__slots__"):
        return {k: _canon(getattr(x, k)) for k in x.__slots__}
    return x


_CHANNEL_COUNTERS = (
    "busy_ns", "success_ns", "failure_ns", "exchanges", "collisions", "internal_collisions",
    "bar_exchanges", "per_failures",
)  # fmt: skip


def digest(r: SimResult, extra: Any = None) -> str:
    ch = r.channel
    state = {
        "trace": _canon(r.trace),
        "flows": _canon(r.flows),
        "stations": _canon(r.stations),
        "channel": {k: getattr(ch, k) for k in _CHANNEL_COUNTERS},
        "messages": _canon(r.messages),
        "ls_hw_depths": _canon(r.ls_hw_depths),
        "extra": _canon(extra),
    }
    text = json.dumps(state, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()
