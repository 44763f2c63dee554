"""What a fleet policy is: the policies of several cells and channels on one simulation.

A fleet (``[fleet]``, ``coorp.sim.cells``) has a leader per cell (the AP's edge
computer) and robots that move between cells. A :class:`FleetPolicy` sees the whole
fleet (:class:`Fleet`), installs driver hooks on every station, starts bulk transfers
(:meth:`FleetPolicy.send_bulk`) and follows the robots' hand-overs
(:meth:`FleetPolicy.on_leave`, :meth:`FleetPolicy.on_join`). Fleet policies have a
registry of their own, by the same names as the team policies where they are the same
idea (``edca``, ``coorp``, ``schedwifi``, ``oracle``), plus ``coorp-team``: COORP
coordinated per team only, the baseline that shows what co-channel teams cost.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from coorp._errors import UsageError
from coorp.scenario import FleetLoopConfig, PolicyOptions
from coorp.sim import Simulation
from coorp.sim.packets import FlowState

__all__ = [
    "Fleet",
    "FleetEdcaPolicy",
    "FleetPolicy",
    "fleet_policy_names",
    "get_fleet_policy",
    "register_fleet_policy",
]


@dataclass(frozen=True)
class Fleet:
    """The cells, robots and loops a fleet policy coordinates."""

    sim: Simulation
    #: ``sim.cells`` (``coorp.sim.cells.Cells``): domains, associations, hand-overs.
    cells: Any
    #: The cells' leaders (one per AP, the AP's station) and the robots.
    access_points: tuple[str, ...]
    robots: tuple[str, ...]
    #: Each robot's loop flows (perception up, control down), by robot.
    perception: Mapping[str, str]
    control: Mapping[str, str]
    loop: FleetLoopConfig | None
    options: PolicyOptions
    #: ``ls_send(station, now_ns)``: the station's next loop send at or after ``now_ns``
    #: and whether that instant is exact (else the earliest possible): what the loop
    #: itself knows, for reference policies (``oracle``). None: no loop.
    ls_send: Callable[[str, int], tuple[int, bool] | None] | None = None
    #: Each robot's camera phase in the period (its samples are at start + phase + k
    #: periods): what a global schedule (SchedWiFi) plans around.
    ls_phases: Mapping[str, int] | None = None

    @property
    def stations(self) -> tuple[str, ...]:
        return (*self.access_points, *self.robots)

    def channel(self, ap: str) -> int:
        """The primary channel number of ``ap``'s cell."""
        return int(self.cells.channel_of_ap[ap])

    def protected_flows(self, station: str) -> frozenset[str]:
        """The loop flows ``station`` sends now: a robot its perceptions, an AP the
        controls of the robots in its cell."""
        if station in self.perception:
            return frozenset((self.perception[station],))
        control = self.control
        return frozenset(control[r] for r in self.cells.members(station) if r in control)


class FleetPolicy(ABC):
    """Base class of every fleet policy; the default is plain EDCA."""

    name: ClassVar[str]
    summary: ClassVar[str]
    deployable: ClassVar[bool] = True

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def install(self) -> None:  # noqa: B027 - a hook with a meaningful default
        """Install driver hooks and timers before traffic starts."""

    def send_bulk(
        self, station: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        """Start a bulk transfer; ``on_complete(now_ns)`` once every byte is delivered
        (never, if a hand-over abandons it)."""
        self.fleet.sim.start_transfer(flow, nbytes, lambda _t, now: on_complete(now))

    def expect_ls_send(  # noqa: B027 - a hook with a meaningful default
        self, station: str, flow: str, at_ns: int, *, exact: bool = False
    ) -> None:
        """The application's word on ``station``'s next send on ``flow``."""

    def on_leave(self, robot: str, ap: str, now_ns: int) -> None:  # noqa: B027
        """``robot`` left ``ap``'s cell (its queues, and its AP's for it, were flushed)."""

    def on_join(self, robot: str, ap: str, now_ns: int) -> None:  # noqa: B027
        """``robot`` joined ``ap``'s cell (on the air again)."""

    def protected(self, station: str, now_ns: int) -> bool | None:
        """Whether ``now_ns`` lies in a protection window of ``station``'s (None: the
        policy has no such notion)."""
        return None

    def stats(self) -> dict[str, Any]:
        return {}


_REGISTRY: dict[str, type[FleetPolicy]] = {}
F = TypeVar("F", bound=type[FleetPolicy])


def register_fleet_policy(cls: F) -> F:
    """Class decorator: make ``cls`` available to fleet scenarios as ``cls.name``."""
    existing = _REGISTRY.get(cls.name)
    if existing is not None and existing is not cls:
        raise UsageError(f"fleet policy {cls.name!r} is already registered by {existing.__name__}")
    _REGISTRY[cls.name] = cls
    return cls


def get_fleet_policy(name: str) -> type[FleetPolicy]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(
            f"unknown policy {name!r} for a fleet scenario; available: "
            f"{', '.join(fleet_policy_names())}"
        ) from None


def fleet_policy_names() -> list[str]:
    return list(_REGISTRY)


@register_fleet_policy
class FleetEdcaPolicy(FleetPolicy):
    name = "edca"
    summary = "LS in AC_VO, bulk in AC_BE, no coordination"
