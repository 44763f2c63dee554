"""A team file's ``[fleet]``: several cells (an access point each, its own leader), the
channel each is on, and how a robot knows which cell it is in.

Example (two cells on channel 36, one on 52)::

    [fleet]
    locate = "gateway"          # the robot's cell: its default route's gateway
    peer_heartbeat_ms = 100
    peer_timeout_ms = 1000

    [[fleet.cells]]
    name = "cell-a"
    channel = 36
    leader = "10.0.1.2:7400"    # where robots (and the other leaders) reach its leader
    gateway = "10.0.1.1"        # a robot routed through this address is in this cell

    [[fleet.cells]]
    name = "cell-b"
    channel = 36
    leader = "10.0.2.2:7400"
    gateway = "10.0.2.1"

Robots roaming between access points of one subnet keep their gateway; their cell is
the access point they are associated with: ``locate = "bssid"``, each cell lists its
APs' BSSIDs (``bssids = ["02:00:00:00:01:01"]``) and ``bssid_file`` names the file that
holds the robot's current BSSID (written by whatever watches the association: a
wpa_supplicant action script, an ``iw event`` hook; docs/runtime.md "A fleet").

Leaders of cells on one channel peer and keep one coordinator for the channel
(:class:`coorp.control.CellLeader`, docs/runtime.md "A fleet"); an agent follows the
cell it is in and joins that cell's leader. Validation errors name the cell and field.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._errors import RuntimeUsageError
from .wire import parse_address

__all__ = ["CellSection", "FleetSection", "normalize_bssid"]

CellName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]


_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


def normalize_bssid(value: str) -> str:
    """A BSSID as the kernel prints it (lower case); ``ValueError`` naming the value."""
    if not _MAC.match(value):
        raise ValueError(f"{value!r}: expected a BSSID, six hex bytes like 02:00:00:00:01:01")
    return value.lower()


def check_address(value: str | None) -> str | None:
    """A team file's ``host:port`` (pydantic validator): ``ValueError`` naming it."""
    if value is not None:
        try:
            parse_address(value)
        except RuntimeUsageError as exc:
            raise ValueError(str(exc)) from None
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CellSection(_Model):
    name: CellName
    channel: int = Field(ge=1, le=233, description="the AP's WiFi channel number")
    leader: str = Field(description="host:port of this cell's leader (robots and peers)")
    listen: str | None = Field(
        None, description="where this cell's leader listens (default: leader.listen)"
    )
    gateway: str | None = Field(
        None,
        description="IPv4 gateway of a robot's default route while it is in this cell "
        "(fleet.locate = 'gateway')",
    )

    bssids: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="BSSIDs of this cell's access points (fleet.locate = 'bssid'), as "
        "aa:bb:cc:dd:ee:ff",
    )

    _address = field_validator("leader", "listen")(check_address)

    @field_validator("bssids")
    @classmethod
    def _macs(cls, value: list[str]) -> list[str]:
        return [normalize_bssid(v) for v in value]

    @field_validator("gateway")
    @classmethod
    def _ipv4(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ipaddress.IPv4Address(value)
            except ValueError:
                raise ValueError(f"{value!r}: expected an IPv4 address") from None
        return value


class FleetSection(_Model):
    cells: list[CellSection] = Field(min_length=1, max_length=256)
    locate: Literal["gateway", "bssid"] = Field(
        "gateway",
        description="how an agent knows its cell: 'gateway' (its default route's gateway; "
        "in namespaces a route change is the roam) or 'bssid' (the access point it is "
        "associated with, read from bssid_file)",
    )
    bssid_file: str | None = Field(
        None,
        description="with locate = 'bssid': the file holding the robot's current BSSID "
        "(one line; empty or missing: not associated)",
    )
    locate_every_ms: float = Field(
        50.0, ge=5, le=10_000, description="how often an agent checks which cell it is in"
    )
    peer_heartbeat_ms: float = Field(100.0, ge=10, le=10_000)
    peer_timeout_ms: float = Field(
        1000.0, ge=20, le=60_000, description="a peer leader silent this long is down"
    )

    @field_validator("bssid_file")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r}: give an absolute path (agents start anywhere)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> FleetSection:
        names = [c.name for c in self.cells]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(
                f"fleet.cells: cell names must be unique; repeated: {', '.join(dupes)}"
            )
        for i, c in enumerate(self.cells):
            if self.locate == "gateway" and c.gateway is None:
                raise ValueError(
                    f"fleet.cells[{i}] ({c.name}): no gateway, but fleet.locate = 'gateway' "
                    "finds a robot's cell by it"
                )
            if self.locate == "bssid" and not c.bssids:
                raise ValueError(
                    f"fleet.cells[{i}] ({c.name}): no bssids, but fleet.locate = 'bssid' "
                    "finds a robot's cell by them"
                )
        if self.locate == "bssid" and not self.bssid_file:
            raise ValueError(
                "fleet.locate = 'bssid' needs fleet.bssid_file: the file that holds the "
                "robot's current BSSID"
            )
        macs = [m for c in self.cells for m in c.bssids]
        shared = sorted({m for m in macs if macs.count(m) > 1})
        if shared:
            raise ValueError(
                f"fleet.cells: BSSID {', '.join(shared)} listed in two cells: a robot could "
                "not tell them apart"
            )
        gws = [c.gateway for c in self.cells if c.gateway is not None]
        again = sorted({g for g in gws if gws.count(g) > 1})
        if again:
            raise ValueError(
                f"fleet.cells: two cells with gateway {', '.join(again)}: a robot could not "
                "tell them apart"
            )
        if self.peer_timeout_ms < 2 * self.peer_heartbeat_ms:
            raise ValueError(
                f"fleet.peer_timeout_ms = {self.peer_timeout_ms} must be at least twice "
                f"fleet.peer_heartbeat_ms = {self.peer_heartbeat_ms}"
            )
        return self

    def cell(self, name: str) -> CellSection:
        for c in self.cells:
            if c.name == name:
                return c
        raise RuntimeUsageError(
            f"cell {name!r} is not in fleet.cells ({', '.join(c.name for c in self.cells)})"
        )

    def peers_of(self, name: str) -> list[CellSection]:
        """The cells on ``name``'s channel, itself included, in file order."""
        channel = self.cell(name).channel
        return [c for c in self.cells if c.channel == channel]

    def by_gateway(self) -> dict[str, CellSection]:
        return {c.gateway: c for c in self.cells if c.gateway is not None}
