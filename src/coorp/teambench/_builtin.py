"""The carriers ``coorp bench team`` ships: the simulated channel, and raw UDP, Coorp,
Cyclone DDS and Zenoh in network namespaces (registered on import)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coorp.teambench._carriers import Carrier, Session, register_carrier
from coorp.teambench._config import TeamBenchConfig

__all__: list[str] = []


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
