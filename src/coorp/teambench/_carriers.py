"""The carriers ``coorp bench team`` measures, behind one small interface (a registry).

A carrier opens a :class:`Session` for a sweep; a session measures one cell (N robots,
rate, size, bulk mode) at a time and returns a :class:`CellMeasurement`. The simulated
channel runs in this process; every other carrier runs in network namespaces
(``_netns``), one process per robot and one for the leader (``_roles``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from coorp.teambench._config import TeamBenchConfig

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
    #: ``open(config, network)`` -> a session; ``network`` is the namespace network
    #: (``_netns.Network``) for namespace carriers, None for the simulated channel.
    open: Callable[[TeamBenchConfig, Any], Session]


CARRIERS: dict[str, Carrier] = {}


def register_carrier(carrier: Carrier) -> Carrier:
    CARRIERS[carrier.name] = carrier
    return carrier


def _open_sim(cfg: TeamBenchConfig, _network: Any) -> Session:
    from coorp.teambench._sim import SimSession

    return SimSession(cfg)


def _netns_opener(transport: str) -> Callable[[TeamBenchConfig, Any], Session]:
    def open_(cfg: TeamBenchConfig, network: Any) -> Session:
        from coorp.teambench._netrun import NetnsSession

        return NetnsSession(cfg, network, transport)

    return open_


register_carrier(Carrier(
    "sim", "the simulated 802.11ac channel (PHY/MAC/NIC queues of --scenario); bulk 'tcp' "
    "is EDCA, 'coorp' the coorp policy", ("none", "tcp", "coorp"), False, _open_sim,
))  # fmt: skip
_NETNS = {
    "udp": "raw UDP sockets (the floor: no middleware)",
    "udp-mac": "raw UDP with a keyed BLAKE2b MAC on every datagram (authentication alone)",
    "coorp": "coorp.runtime LS channels; bulk 'coorp' = coordinated bulk streams",
    "dds-be": "Cyclone DDS, best-effort QoS, keep-last 10",
    "dds-rel": "Cyclone DDS, reliable QoS, keep-last 10 (ROS 2's default profile)",
    "zenoh-be": "Zenoh peer over TCP, best-effort reliability, congestion control DROP",
    "zenoh-rel": "Zenoh peer over TCP, reliable, congestion control BLOCK",
}
for _name, _summary in _NETNS.items():
    register_carrier(Carrier(
        _name, _summary, ("none", "tcp", "coorp") if _name == "coorp" else ("none", "tcp"),
        True, _netns_opener(_name),
    ))  # fmt: skip
