"""A fleet co-simulation: robots that move by physics between access points and roam.

The scenario has ``[fleet]`` beside ``[cosim]``: the access points are static robots of
the world (an AP on a pole), every other robot patrols its route. Each robot runs the
fleet's loop with the leader of the cell it is in (``coorp.workload.FleetLoop``: its pose
up in the perception, the leader's LQR command back) and its learning, under a fleet
policy; every link follows the world (distance, walls), and every beacon interval each
robot measures its APs from those links and hands over when another is stronger by the
hysteresis (``coorp.sim.cells.Cells.consider``): it leaves one cell's permit queue, is
off the air for the association gap, joins the next and its commands come from the new
leader. What the run reports adds the hand-overs to the co-simulation's outcomes.

``run_cosim``, the entry point, lives here too: it picks a team's run or a fleet's (so
that ``_run`` need not import this module back).
"""

from __future__ import annotations

from typing import Any

from coorp._errors import UsageError
from coorp.cosim._config import CosimScenario, Coupling
from coorp.cosim._result import CosimResult
from coorp.cosim._run import CosimRun
from coorp.policies import Fleet, get_fleet_policy
from coorp.units import us
from coorp.workload import FleetLearning, FleetLoop

__all__ = ["FleetCosimRun", "run_cosim"]


class FleetCosimRun(CosimRun):
    """:class:`CosimRun` for a scenario with ``[fleet]`` (a fleet policy's name)."""

    def _roles(self) -> tuple[str, tuple[str, ...], float]:
        fleet = self.cs.scenario.fleet
        if fleet is None:
            raise UsageError(f"{self.cs.source}: a fleet co-simulation needs [fleet]")
        aps = fleet.ap_names()
        robots = tuple(r.name for r in self.cs.cosim.robots if r.name not in aps)
        return aps[0], robots, fleet.loop.period_us / 1e6

    def _pair_list(self) -> list[tuple[int, int]]:
        # Robots talk to APs only: every AP with every robot, the first AP's pairs first
        # (its links are the ones recorded per worker).
        index = self.world.index
        aps = [index[a] for a in self.cs.scenario.fleet.ap_names()]  # type: ignore[union-attr]
        return [(a, i) for a in aps for i in self._wi]

    def _install_workload(self, policy: str) -> int:
        sc, sim = self.cs.scenario, self.sim
        fleet_cfg = sc.fleet
        assert fleet_cfg is not None
        cells = sim.cells
        self.cells = cells
        self.fleet_loop = FleetLoop(sim, fleet_cfg.loop, cells) if fleet_cfg.loop.enabled else None
        loop = self.fleet_loop
        fleet = Fleet(
            sim=sim, cells=cells, access_points=cells.access_points, robots=cells.robots,
            perception={r: f.name for r, f in loop.perception.items()} if loop else {},
            control={r: f.name for r, f in loop.control.items()} if loop else {},
            loop=fleet_cfg.loop if loop else None, options=sc.policy,
            ls_send=loop.next_send if loop else None,
            ls_phases=loop.phase_ns if loop else None,
        )  # fmt: skip
        self.fleet_policy = get_fleet_policy(policy)(fleet)
        self.fleet_policy.install()
        self.learning = (
            FleetLearning(sim, fleet_cfg.learning, cells, self.fleet_policy.send_bulk)
            if fleet_cfg.learning.enabled
            else None
        )
        cells.on_leave.append(self._left)
        cells.on_join.append(self._joined)
        if loop is not None:
            loop.hint = self.fleet_policy.expect_ls_send
            loop.protected = self.fleet_policy.protected
        self._check_ns = us(fleet_cfg.roaming.check_us)
        self._next_check = 0
        self._ap_index = {ap: self.world.index[ap] for ap in cells.access_points}
        self.drlc = None
        return us(fleet_cfg.loop.deadline_us)

    def _left(self, robot: str, ap: str, now: int) -> None:
        if self.fleet_loop is not None:
            self.fleet_loop.on_leave(robot, ap, now)
        if self.learning is not None:
            self.learning.on_leave(robot, ap, now)
        self.fleet_policy.on_leave(robot, ap, now)

    def _joined(self, robot: str, ap: str, now: int) -> None:
        if self.fleet_loop is not None:
            self.fleet_loop.on_join(robot, ap, now)
        if self.learning is not None:
            self.learning.on_join(robot, ap, now)
        self.fleet_policy.on_join(robot, ap, now)
        if self.learning is not None:
            self.learning.restart(robot)

    def _begin_workload(self) -> None:
        if self.fleet_loop is not None:
            self.fleet_loop.begin()
        if self.learning is not None:
            self.learning.begin()

    def _after_links(self, now: int) -> None:
        """Every beacon interval: each robot measures its APs (the links the world just
        gave) and may hand over."""
        if now < self._next_check:
            return
        self._next_check = now + self._check_ns
        world, cells = self.world, self.cells
        for robot in cells.robots:
            i = world.index[robot]
            rssi = {
                ap: float(self._link_rx[self._pair_index[(a, i)]])
                for ap, a in self._ap_index.items()
            }
            cells.consider(robot, rssi)

    def _finish(self, result: Any) -> tuple[tuple[Any, ...], int, dict[str, Any]]:
        loops = tuple(self.fleet_loop.records) if self.fleet_loop is not None else ()
        bh = sum(self.learning.finish().values()) if self.learning is not None else 0
        handovers = tuple(
            (h.robot, h.from_ap, h.to_ap, h.left_ns, h.joined_ns) for h in self.cells.handovers
        )
        return loops, bh, {"handovers": handovers}


def run_cosim(
    cs: CosimScenario,
    policy: str,
    *,
    seed: int | None = None,
    duration_ns: int | None = None,
    coupling: Coupling | None = None,
    tracer: Any = None,
) -> CosimResult:
    """Co-simulate ``cs`` under ``policy``; same scenario and seed ⇒ same result. A
    scenario with ``[fleet]`` runs the fleet's loops and hand-overs
    (:class:`FleetCosimRun`, a fleet policy)."""
    if cs.scenario.fleet is not None:
        return FleetCosimRun(cs, policy, seed=seed, coupling=coupling, tracer=tracer).run(
            duration_ns
        )
    return CosimRun(cs, policy, seed=seed, coupling=coupling, tracer=tracer).run(duration_ns)
