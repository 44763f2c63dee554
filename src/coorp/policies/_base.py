"""What a policy is: a small object that wires ``coorp.control`` into a simulated team.

A policy sees the team (:class:`Team`), installs driver hooks on the robots' stations,
and decides how bulk transfers start (:meth:`Policy.send_bulk`). The workload never
asks which policy is running; adding a policy is one module registered by name
(see ``docs/policies.md``).
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from coorp.phy import PhyStandard
from coorp.scenario import MpcConfig, PolicyOptions
from coorp.sim import Simulation
from coorp.sim.packets import FlowState

__all__ = ["Policy", "Team"]


@dataclass(frozen=True)
class Team:
    """The robots a policy coordinates, on one simulated channel."""

    sim: Simulation
    leader: str
    workers: tuple[str, ...]
    #: Names of the latency-sensitive (MPC) flows: what local preemption learns from.
    ls_flows: frozenset[str]
    mpc: MpcConfig | None
    options: PolicyOptions
    #: ``ls_schedule(robot, now_ns)``: the instant of the robot's next LS send at or after
    #: ``now_ns`` (exact once determined, else the earliest possible), ``None`` if none is
    #: scheduled: the MPC loop's own knowledge (``MpcLoop.next_send_ns``), for reference
    #: policies such as ``oracle``. ``None`` when there is no MPC loop.
    ls_schedule: Callable[[str, int], int | None] | None = None
    #: ``ls_send(robot, now_ns)``: the same as ``(instant, exact)``
    #: (``MpcLoop.next_send``): whether that instant is the send itself or only its
    #: earliest possible time. ``None``: not provided.
    ls_send: Callable[[str, int], tuple[int, bool] | None] | None = None
    #: Each worker's fixed sample offset after the loop tick (``MpcLoop.phase_ns``: 0 with
    #: aligned phases, a random constant per worker with ``phase = "random"``), known to a
    #: global schedule with a synchronized clock (SchedWiFi). ``None``: no MPC loop, or not
    #: provided (then aligned is assumed).
    ls_phases: Mapping[str, int] | None = None

    @property
    def robots(self) -> tuple[str, ...]:
        return (self.leader, *self.workers)

    def bulk_peers(self, robot: str) -> tuple[str, ...]:
        """Where ``robot``'s bulk data goes in the DRLC workload: a worker's to the
        leader, the leader's to every worker."""
        return self.workers if robot == self.leader else (self.leader,)


class Policy(ABC):
    """Base class of every policy. Subclasses set ``name`` and ``summary``.

    ``install()`` runs once before traffic starts; ``send_bulk()`` is how the workload
    starts every bulk transfer. The default is plain EDCA: no hooks, start at once.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    #: ``False`` for a reference bound that a real deployment cannot run (``oracle``):
    #: reports label it "not deployable".
    deployable: ClassVar[bool] = True
    #: The PHY standards (``phy.standard``) the policy runs on; on another it is
    #: infeasible, and ``coorp compare`` leaves it out of its default list there.
    standards: ClassVar[frozenset[PhyStandard]] = frozenset(PhyStandard)

    def __init__(self, team: Team) -> None:
        self.team = team

    def install(self) -> None:  # noqa: B027 - a hook with a meaningful default
        """Install driver hooks and timers. Default: nothing (plain EDCA)."""

    def send_bulk(
        self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        """Start a bulk transfer of ``nbytes`` on ``flow``; call ``on_complete(now_ns)``
        once every byte is delivered."""
        self.team.sim.start_transfer(flow, nbytes, lambda _t, now: on_complete(now))

    #: ``expect_ls_send`` takes ``min_lead_ns`` (the MPC loop then gives its full word,
    #: ``MpcLoop.lead_hints``); a policy of one's own need not.
    lead_hints: ClassVar[bool] = False

    def expect_ls_send(  # noqa: B027 - a hook with a meaningful default
        self, robot: str, flow: str, at_ns: int, *, exact: bool = False, min_lead_ns: int = 0
    ) -> None:
        """The application on ``robot`` says its next send on LS ``flow`` happens not
        before ``at_ns`` (``exact``: at ``at_ns``; ``min_lead_ns``: nor sooner than that
        after any later instant, until its next word); see
        :meth:`coorp.control.ProtectionPlanner.expect`. Default: ignored."""

    def stats(self) -> dict[str, Any]:
        """Counters worth reporting (JSON-able)."""
        return {}
