"""The carriers ``coorp bench team`` measures, behind one small interface (a registry).

A carrier opens a :class:`Session` for a sweep; a session measures one cell (N robots,
rate, size, bulk mode) at a time and returns a :class:`CellMeasurement`. The built-in
carriers are registered by :mod:`._builtin`: the simulated channel runs in this process;
every other carrier runs in network namespaces (``_netns``), one process per robot and
one for the leader (``_roles``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

__all__ = ["CARRIERS", "Carrier", "CellMeasurement", "Session", "register_carrier"]


@dataclass
class CellMeasurement:
    """What one cell measured: every echo's round trip (pooled over robots), counts,
    CPU seconds per process, bulk bytes delivered to the leader, wall time."""

    rtt_ns: np.ndarray
    sent: int
    echoed: int
    cpu_s: dict[str, float]
    wall_s: float
    bulk_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    #: The time over which ``bulk_bytes`` were counted (s): bulk Mb/s = bytes / this.
    bulk_window_s: float = 0.0
    #: The carrier's own loss counters over the cell, summed over its processes (Coorp:
    #: LS sends superseded / expired / failed, inbox drops); empty for the others.
    counters: dict[str, int] = field(default_factory=dict)


class Session(Protocol):
    def cell(self, robots: int, rate_hz: float, size: int, bulk: str, rep: int) -> CellMeasurement:
        """Measure one cell."""

    def close(self) -> None:
        """Stop everything this session started (processes, sockets)."""


@dataclass(frozen=True)
class Carrier:
    name: str
    summary: str
    #: Bulk modes it can run next to the echoes (see ``_config.BULK_MODES``).
    bulk_modes: tuple[str, ...]
    #: Runs in network namespaces (needs root and iproute2).
    netns: bool
    #: ``open(config, network)`` -> a session; ``config`` is the sweep's
    #: ``TeamBenchConfig`` (typed ``Any`` here: the config validates carrier names against
    #: this registry, so this module stays below it); ``network`` is the namespace network
    #: (``_netns.Network``) for namespace carriers, None for the simulated channel.
    open: Callable[[Any, Any], Session]


CARRIERS: dict[str, Carrier] = {}


def register_carrier(carrier: Carrier) -> Carrier:
    CARRIERS[carrier.name] = carrier
    return carrier
