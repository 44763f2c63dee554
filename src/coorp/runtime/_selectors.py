"""Transparent mode's traffic selectors: which packets are LS, which connections are BH.

The ``[transparent]`` section of a team file lists selectors (validated like the rest of
the file, errors naming the field and value). Each selector is an AND of its fields;
a list of selectors is an OR. :meth:`LsSelector.matches` and
:meth:`BulkSelector.matches` turn them into :class:`Match` objects, plain data that
:mod:`._nft` compiles into kernel rules and that :meth:`Match.render` prints in
``nft`` syntax (``coorp agent --transparent --show-rules``).

Presets for ROS 2:

* ``dds``: every RTPS port of a DDS domain, per the DDSI-RTPS port mapping
  (PB 7400, DG 250): UDP destination ports ``7400 + 250·domain_id`` through
  ``7400 + 250·domain_id + 249`` — discovery (multicast d0 = 0, unicast d1 = 10) and
  user traffic (multicast d2 = 1, unicast d3 = 11, + 2 per participant) — and, unless
  ``any_port = false``, every UDP datagram that carries an RTPS message (its payload
  starts with ``RTPS``) to any other port: Cyclone DDS by default
  (``Discovery/ParticipantIndex`` ``none``/``default``) receives unicast on ephemeral
  ports, so a ROS 2 loop's samples go to ports outside the mapping, and an RTPS message
  does not name its domain.
* ``zenoh``: Zenoh's TCP locator port (7447 unless ``ports`` says otherwise), in both
  directions (rmw_zenoh and Zenoh peers carry every topic over TCP): such a flow is
  marked and observed, never intercepted as bulk.

Traffic that matches no selector is never touched.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "DDS_DOMAIN_GAIN",
    "DDS_PORT_BASE",
    "DSCP_NAMES",
    "RTPS_MAGIC",
    "BulkSelector",
    "LsSelector",
    "Match",
    "TransparentSection",
    "dds_binds",
    "dds_port_range",
    "parse_dscp",
    "parse_ports",
]

#: DDSI-RTPS port mapping (OMG DDSI-RTPS 2.x, 9.6.1.1): port base and domain gain.
DDS_PORT_BASE = 7400
DDS_DOMAIN_GAIN = 250
#: Zenoh's default TCP locator port.
ZENOH_PORT = 7447
#: The protocol id every RTPS message starts with (DDSI-RTPS 2.x, 8.3.3.1).
RTPS_MAGIC = b"RTPS"

#: DSCP code points by name (RFC 2474, 2597, 3246, 5865).
DSCP_NAMES: dict[str, int] = {
    **{f"cs{i}": 8 * i for i in range(8)},
    **{f"af{c}{d}": 8 * c + 2 * d for c in range(1, 5) for d in range(1, 4)},
    "ef": 46,
    "va": 44,
}

_PORTS = re.compile(r"^\s*(\d{1,5})\s*(?:-\s*(\d{1,5})\s*)?$")


def parse_ports(value: int | str) -> tuple[int, int]:
    """``7400``, ``"7400"`` or ``"7400-7499"`` → an inclusive (low, high) range."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r}: expected a port (1..65535) or a range 'LOW-HIGH'")
    if isinstance(value, int):
        low = high = value
    else:
        m = _PORTS.match(str(value))
        if m is None:
            raise ValueError(f"{value!r}: expected a port (1..65535) or a range 'LOW-HIGH'")
        low = int(m.group(1))
        high = int(m.group(2) or low)
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"{value!r}: ports must lie in 1..65535 with LOW <= HIGH")
    return low, high


def parse_dscp(value: int | str) -> int:
    """A DSCP code point 0..63, or a name (``ef``, ``cs6``, ``af41``…)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r}: expected 0..63 or a DSCP name")
    if isinstance(value, int):
        if not 0 <= value <= 63:
            raise ValueError(f"{value}: a DSCP code point is 0..63")
        return value
    name = value.strip().lower()
    if name not in DSCP_NAMES:
        raise ValueError(f"{value!r}: unknown DSCP name; allowed: 0..63 or {', '.join(DSCP_NAMES)}")
    return DSCP_NAMES[name]


def dds_port_range(domain_id: int) -> tuple[int, int]:
    """Every RTPS port of ``domain_id`` (discovery and user traffic, all participants)."""
    low = DDS_PORT_BASE + DDS_DOMAIN_GAIN * domain_id
    return low, low + DDS_DOMAIN_GAIN - 1


def dds_binds(domain_id: int, port: int) -> bool:
    """Whether a DDS participant of ``domain_id`` may bind ``port``: the multicast ports
    (offsets d0 = 0, d2 = 1) and the unicast ones of participants 0..119 (d1 = 10,
    d3 = 11, participant gain 2) — not offsets 2..9."""
    low = DDS_PORT_BASE + DDS_DOMAIN_GAIN * domain_id
    off = port - low
    return off in (0, 1) or 10 <= off <= 10 + 2 * 119 + 1


@dataclass(frozen=True, slots=True)
class Match:
    """One kernel rule's match, normalized: every field set must hold (AND)."""

    proto: Literal["udp", "tcp"] | None = None
    dport: tuple[int, int] | None = None
    sport: tuple[int, int] | None = None
    daddr: ipaddress.IPv4Network | None = None
    saddr: ipaddress.IPv4Network | None = None
    dscp: int | None = None
    uid: int | None = None
    gid: int | None = None
    cgroup: str | None = None
    rtps: bool = False
    """The UDP payload starts with the RTPS protocol id (``RTPS``): a DDS datagram on
    whatever port (the first fragment's header as the kernel sees the datagram before
    it fragments it, so every fragment is marked)."""

    def render(self) -> str:
        """The match in ``nft`` syntax (what ``nft list table`` would show)."""
        parts: list[str] = []
        if self.uid is not None:
            parts.append(f"meta skuid {self.uid}")
        if self.gid is not None:
            parts.append(f"meta skgid {self.gid}")
        if self.cgroup is not None:
            level = len([p for p in self.cgroup.split("/") if p])
            parts.append(f'socket cgroupv2 level {level} "{self.cgroup.strip("/")}"')
        if self.saddr is not None:
            parts.append(f"ip saddr {_net_text(self.saddr)}")
        if self.daddr is not None:
            parts.append(f"ip daddr {_net_text(self.daddr)}")
        if self.dscp is not None:
            parts.append(f"ip dscp {_dscp_text(self.dscp)}")
        if self.proto is not None and self.dport is None and self.sport is None:
            parts.append(f"meta l4proto {self.proto}")
        if self.dport is not None:
            parts.append(f"{self.proto} dport {_range_text(self.dport)}")
        if self.sport is not None:
            parts.append(f"{self.proto} sport {_range_text(self.sport)}")
        if self.rtps:
            parts.append(f"@th,64,32 0x{RTPS_MAGIC.hex()}")  # "RTPS" after the UDP header
        return " ".join(parts)


def _range_text(r: tuple[int, int]) -> str:
    return str(r[0]) if r[0] == r[1] else f"{r[0]}-{r[1]}"


def _net_text(net: ipaddress.IPv4Network) -> str:
    return str(net.network_address) if net.prefixlen == 32 else str(net)


def _dscp_text(dscp: int) -> str:
    for name, value in DSCP_NAMES.items():
        if value == dscp:
            return name
    return hex(dscp)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_cgroup(v: str | None) -> str | None:
    if v is None:
        return v
    parts = [p for p in v.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"{v!r}: expected a cgroup v2 path like 'system.slice/ros2.service'")
    return "/".join(parts)


def _check_network(v: str | None) -> str | None:
    if v is not None:
        _ipv4_network(v)
    return v


def _check_ports(v: int | str | None) -> int | str | None:
    if v is not None:
        parse_ports(v)
    return v


def _check_dscp(v: int | str | None) -> int | str | None:
    if v is not None:
        parse_dscp(v)
    return v


def _ipv4_network(text: str) -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(text, strict=False)
    except ValueError:
        raise ValueError(
            f"{text!r}: expected an IPv4 address or CIDR (e.g. 192.168.50.0/24); "
            "transparent mode selects IPv4 traffic"
        ) from None


class LsSelector(_Model):
    """Latency-sensitive traffic: marked for AC_VO in the kernel and observed."""

    preset: Literal["dds", "zenoh"] | None = Field(
        None, description="'dds': the RTPS ports of domain_id; 'zenoh': its TCP locator port"
    )
    domain_id: int | None = Field(None, ge=0, le=232, description="DDS domain (preset 'dds')")
    any_port: bool | None = Field(
        None,
        description="preset 'dds': also RTPS datagrams to ports outside the domain's "
        "mapping (default true: Cyclone DDS's unicast ports are ephemeral by default); "
        "false: the domain's mapped ports only (ParticipantIndex auto or a number)",
    )
    proto: Literal["udp", "tcp"] | None = Field(
        None,
        description="udp or tcp (with ports: udp unless set; without: any); TCP LS is "
        "matched in both directions",
    )
    ports: int | str | None = Field(None, description="destination port or range 'LOW-HIGH'")
    dscp: int | str | None = Field(None, description="DSCP the application already sets")
    uid: int | None = Field(None, ge=0, le=2**32 - 2)
    gid: int | None = Field(None, ge=0, le=2**32 - 2)
    cgroup: str | None = Field(
        None, description="cgroup v2 path of the sender, e.g. 'system.slice/ros2.service'"
    )
    to: str | None = Field(None, description="destination IPv4 address or CIDR")

    _cgroup = field_validator("cgroup")(_check_cgroup)
    _to = field_validator("to")(_check_network)
    _ports = field_validator("ports")(_check_ports)
    _dscp = field_validator("dscp")(_check_dscp)

    @model_validator(mode="after")
    def _consistent(self) -> LsSelector:
        if self.domain_id is not None and self.preset != "dds":
            raise ValueError("domain_id applies to preset = 'dds' only")
        if self.any_port is not None and self.preset != "dds":
            raise ValueError("any_port applies to preset = 'dds' only")
        if self.preset == "dds" and (self.ports is not None or self.proto not in (None, "udp")):
            raise ValueError(
                "preset 'dds' selects the RTPS UDP ports of domain_id; "
                "drop ports/proto or use a selector without preset"
            )
        if self.preset == "zenoh" and self.proto not in (None, "tcp"):
            raise ValueError("preset 'zenoh' selects TCP (its locator port); drop proto")
        criteria = (self.preset, self.ports, self.dscp, self.uid, self.gid, self.cgroup, self.to)
        if all(c is None for c in criteria):
            raise ValueError(
                "an LS selector needs at least one of preset, ports, dscp, uid, gid, cgroup, to "
                "(an empty one would mark every datagram)"
            )
        return self

    def matches(self) -> list[Match]:
        """The kernel matches this selector stands for (an OR of them)."""
        common: dict[str, object] = {
            "uid": self.uid,
            "gid": self.gid,
            "cgroup": self.cgroup,
            "daddr": None if self.to is None else _ipv4_network(self.to),
            "dscp": None if self.dscp is None else parse_dscp(self.dscp),
        }
        if self.preset == "dds":
            out = [Match(proto="udp", dport=dds_port_range(self.domain_id or 0), **common)]  # type: ignore[arg-type]
            if self.any_port is not False:
                out.append(Match(proto="udp", rtps=True, **common))  # type: ignore[arg-type]
            return out
        ports = None if self.ports is None else parse_ports(self.ports)
        proto: Literal["udp", "tcp"] | None
        if self.preset == "zenoh":
            proto, ports = "tcp", ports or (ZENOH_PORT, ZENOH_PORT)
        else:
            # Ports need a protocol (UDP unless told); without ports, any protocol.
            proto = self.proto or ("udp" if ports is not None else None)
        if ports is None:
            return [Match(proto=proto, **common)]  # type: ignore[arg-type]
        out = [Match(proto=proto, dport=ports, **common)]  # type: ignore[arg-type]
        if proto == "tcp":
            # The other direction of a TCP LS connection (a listener's replies).
            out.append(Match(proto=proto, sport=ports, **common))  # type: ignore[arg-type]
        return out


class BulkSelector(_Model):
    """Bandwidth-hungry TCP connections: intercepted and sent under the robot's permit.

    Two sides. A *client-side* selector (``ports``, ``to``, ``to_team``, ``uid``,
    ``gid``, ``cgroup``) picks connections this host opens: what it sends on them goes
    under its permit. A *server-side* selector (``listen``, optionally ``from`` or
    ``from_team``) picks connections this host accepts: what it sends back on them (a
    checkpoint served, a parameter server's model, a ring neighbour's share) goes under
    its permit. The owner of an accepted connection is not known when its first packet
    arrives, so a server-side selector has no ``uid``/``gid``/``cgroup``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    proto: Literal["tcp"] | None = Field(
        None,
        description="tcp (the default and the only choice: the relay re-sends TCP "
        "connections; UDP bulk cannot be intercepted)",
    )
    ports: int | str | None = Field(None, description="TCP destination port or range")
    to: str | None = Field(None, description="destination IPv4 address or CIDR")
    to_team: bool = Field(False, description="TCP to any host in team.hosts")
    uid: int | None = Field(None, ge=0, le=2**32 - 2)
    gid: int | None = Field(None, ge=0, le=2**32 - 2)
    cgroup: str | None = Field(None, description="cgroup v2 path of the sender")
    listen: int | str | None = Field(
        None,
        description="server side: TCP connections this host accepts on this local port "
        "or range (its replies go under its permit)",
    )
    from_: str | None = Field(
        None,
        alias="from",
        description="server side: only connections from this IPv4 address or CIDR",
    )
    from_team: bool = Field(
        False, description="server side: connections from any host in team.hosts"
    )

    _cgroup = field_validator("cgroup")(_check_cgroup)
    _to = field_validator("to")(_check_network)
    _from = field_validator("from_")(_check_network)
    _ports = field_validator("ports", "listen")(_check_ports)

    @property
    def server_side(self) -> bool:
        """Selects connections this host accepts (``listen``/``from``/``from_team``)."""
        return self.listen is not None or self.from_ is not None or self.from_team

    @field_validator("proto", mode="before")
    @classmethod
    def _tcp_only(cls, v: object) -> object:
        if v is not None and v != "tcp":
            raise ValueError(
                f"bulk selectors match TCP connections only (the relay re-sends TCP); "
                f"{v!r} is not allowed: drop proto, or give 'tcp'"
            )
        return v

    @model_validator(mode="after")
    def _consistent(self) -> BulkSelector:
        if self.to_team and self.to is not None:
            raise ValueError("to_team and to exclude each other")
        if self.from_team and self.from_ is not None:
            raise ValueError("from_team and from exclude each other")
        client = {
            "ports": self.ports, "to": self.to, "to_team": self.to_team or None,
            "uid": self.uid, "gid": self.gid, "cgroup": self.cgroup,
        }  # fmt: skip
        if self.server_side:
            mixed = sorted(k for k, v in client.items() if v is not None)
            if mixed:
                raise ValueError(
                    f"{', '.join(mixed)} cannot be combined with listen/from/from_team: a "
                    "server-side selector picks connections this host accepts (by its "
                    "listening port and the peer's address); list the client side as "
                    "another selector"
                )
            return self
        if all(c is None for c in client.values()):
            raise ValueError(
                "a bulk selector needs at least one of ports, to, to_team, uid, gid, cgroup "
                "(connections this host opens) or listen, from, from_team (connections it "
                "accepts); an empty one would intercept every TCP connection"
            )
        return self

    def matches(self, team_hosts: list[str]) -> list[Match]:
        """Kernel matches (an OR); ``to_team``/``from_team`` expand to one per team
        host. Client-side selectors only (see :meth:`server_matches`)."""
        if self.server_side:
            return []
        dport = None if self.ports is None else parse_ports(self.ports)
        base: dict[str, object] = {
            "proto": "tcp",
            "dport": dport,
            "uid": self.uid,
            "gid": self.gid,
            "cgroup": self.cgroup,
        }
        if self.to_team:
            return [Match(daddr=_ipv4_network(h), **base) for h in team_hosts]  # type: ignore[arg-type]
        daddr = None if self.to is None else _ipv4_network(self.to)
        return [Match(daddr=daddr, **base)]  # type: ignore[arg-type]

    def server_matches(self, team_hosts: list[str]) -> list[Match]:
        """Kernel matches of connections this host accepts (an OR): the first packet's
        destination port is the listening port, its source the peer."""
        if not self.server_side:
            return []
        dport = None if self.listen is None else parse_ports(self.listen)
        if self.from_team:
            return [Match(proto="tcp", dport=dport, saddr=_ipv4_network(h)) for h in team_hosts]
        saddr = None if self.from_ is None else _ipv4_network(self.from_)
        return [Match(proto="tcp", dport=dport, saddr=saddr)]


class TransparentSection(_Model):
    """``[transparent]``: protect programs that know nothing of Coorp."""

    ls: list[LsSelector] = Field(default_factory=list, max_length=64)
    bulk: list[BulkSelector] = Field(default_factory=list, max_length=64)
    relay_port: int = Field(
        7409, ge=1, le=65535, description="local port where intercepted connections arrive"
    )
    inbound_relay_port: int = Field(
        7408,
        ge=1,
        le=65535,
        description="port where accepted connections picked by a server-side selector "
        "arrive (on every address of the host)",
    )
    relay_mark: int = Field(
        0x0C0F,
        ge=1,
        le=2**32 - 5,
        description="fwmark of the relay's own connections (the next 4 values mark refusals)",
    )
    relay_max_flows: int = Field(
        1024,
        ge=1,
        le=1_000_000,
        description="relayed connections at once at most (the fd limit may allow fewer)",
    )
    relay_memory_mb: float = Field(
        32.0, ge=1, le=65536, description="the relay's copy buffers, in all"
    )
    min_message_bytes: int = Field(
        200,
        ge=0,
        le=65535,
        description="LS sends smaller than this (acks, heartbeats) are marked, not modelled",
    )
    burst_gap_us: float = Field(
        1000.0,
        ge=0,
        le=100_000,
        description="packets of one LS flow closer than this are one send (fragments, segments)",
    )
    idle_release_ms: float = Field(
        20.0,
        ge=0,
        le=60_000,
        description="an intercepted connection with nothing to send this long releases the permit",
    )
    ack_category: Literal["AC_VI", "AC_BE"] = Field(
        "AC_VI",
        description="the access category of the TCP acks this host sends for bulk data "
        "(the relay's downloads, its programs' uploads received on a bulk port): AC_VI "
        "(DSCP CS4, priority 260), as the simulator's coorp sends them, or AC_BE",
    )
    ls_category: Literal["AC_VO", "AC_VI"] = Field(
        "AC_VO",
        description="the access category LS packets are marked for: AC_VO (DSCP CS6, "
        "priority 262; the paper's), or AC_VI (CS5, priority 261), which drivers "
        "aggregate: an LS message of several frames (a camera frame) then takes one "
        "channel access, not one per frame (docs/emulate.md)",
    )

    @model_validator(mode="after")
    def _something(self) -> TransparentSection:
        if not self.ls and not self.bulk:
            raise ValueError("list at least one selector in transparent.ls or transparent.bulk")
        return self

    @property
    def burst_gap_ns(self) -> int:
        return round(self.burst_gap_us * 1e3)

    @property
    def idle_release_ns(self) -> int:
        return round(self.idle_release_ms * 1e6)

    def ls_matches(self) -> list[Match]:
        return [m for sel in self.ls for m in sel.matches()]

    def bulk_matches(self, team_hosts: list[str]) -> list[Match]:
        return [m for sel in self.bulk for m in sel.matches(team_hosts)]

    def serve_matches(self, team_hosts: list[str]) -> list[Match]:
        return [m for sel in self.bulk for m in sel.server_matches(team_hosts)]

    @model_validator(mode="after")
    def _relay_ports(self) -> TransparentSection:
        if self.relay_port == self.inbound_relay_port:
            raise ValueError(
                f"relay_port and inbound_relay_port are both {self.relay_port}: give each "
                "its own port"
            )
        return self
