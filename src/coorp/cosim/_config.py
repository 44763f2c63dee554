"""The ``[cosim]`` section of a scenario: world, robots, task, radio, coupling.

A co-simulation scenario is an ordinary Coorp scenario (PHY, MAC, hardware queue,
``[workload]``) plus a ``[cosim]`` section. The robots of ``[cosim]`` *are* the stations:
when the file has no ``[[stations]]`` they are generated from the robots (name and start
position); when it has, their names must match the robots one to one. Lengths are in
metres, times in milliseconds, angles in degrees, speeds in m/s (units in every name).
"""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coorp._errors import ScenarioError, ScenarioProblem
from coorp.scenario import Scenario, parse_scenario, problems_from_validation

__all__ = [
    "CosimConfig",
    "CosimScenario",
    "Coupling",
    "Obstacle",
    "RadioConfig",
    "RobotConfig",
    "RobotKind",
    "TaskConfig",
    "WorldConfig",
    "load_cosim",
    "parse_cosim",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RobotKind(StrEnum):
    GROUND = "ground"
    """Differential drive on the floor: collides with obstacles and other ground robots."""
    AERIAL = "aerial"
    """Flies at ``altitude_m`` above the obstacles (no contacts), usually faster."""
    STATIC = "static"
    """Does not move (an edge computer or access point: typically the leader)."""


class Coupling(StrEnum):
    EXACT = "exact"
    """Physics steps are events on the channel simulator's loop: no sync error."""
    FIXED_WINDOW = "fixed-window"
    """The seed's sliding window: the simulators exchange data every ``window_ms``."""
    VELOCITY_WINDOW = "velocity-window"
    """The seed's velocity-aware window w_a = w + |V_p - V_s| / 1000 (s, V in m/s)."""


class Obstacle(_Model):
    """A box standing on the floor (a wall, a shelf): blocks robots and radio."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    center_m: tuple[float, float]
    size_m: tuple[float, float] = Field(description="full extent along x and y")
    height_m: float = Field(2.5, gt=0, le=100)

    @model_validator(mode="after")
    def _positive(self) -> Obstacle:
        if min(self.size_m) <= 0:
            raise ValueError(f"size_m must be > 0 along x and y, got {list(self.size_m)}")
        return self


class WorldConfig(_Model):
    size_m: tuple[float, float] = Field((30.0, 30.0), description="floor extent (x, y)")
    obstacles: list[Obstacle] = Field(default_factory=list)


class RobotConfig(_Model):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    kind: RobotKind = RobotKind.GROUND
    start_m: tuple[float, float]
    heading_deg: float = Field(0.0, ge=-360, le=360)
    radius_m: float = Field(0.2, gt=0, le=5)
    max_speed_m_s: float = Field(1.5, gt=0, le=50)
    max_turn_deg_s: float = Field(180.0, gt=0, le=3600)
    altitude_m: float = Field(0.1, ge=0, le=500, description="height of the body's centre")
    #: Patrol route after the start point (the route closes back to its first waypoint
    #: when ``task.laps`` > 1). Empty for static robots.
    waypoints_m: list[tuple[float, float]] = Field(default_factory=list)
    speed_m_s: float | None = Field(
        None, gt=0, le=50, description="reference speed along the route (default task.speed_m_s)"
    )
    #: Formation task: this robot's place relative to the formation's route (x, y).
    offset_m: tuple[float, float] | None = None


class TaskConfig(_Model):
    #: ``patrol``: each robot follows its own ``waypoints_m``; ``formation``: every robot
    #: follows ``route_m`` shifted by its ``offset_m`` (a translating formation).
    kind: Literal["patrol", "formation"] = "patrol"
    route_m: list[tuple[float, float]] = Field(
        default_factory=list, description="formation: the route the formation's origin follows"
    )
    speed_m_s: float = Field(0.5, gt=0, le=50, description="reference speed along routes")
    start_ms: float = Field(100.0, ge=0, description="when the references start moving")
    laps: int = Field(1, ge=1, le=1000)
    tolerance_m: float = Field(0.3, gt=0, description="a waypoint counts as reached within")


class RadioConfig(_Model):
    """Path loss of the IEEE 802.11ax (TGax) evaluation methodology's enterprise scenario
    (IEEE 802.11-14/0980r16, SS2): free space up to a breakpoint, exponent 3.5 beyond,
    a fixed loss per wall crossed, log-normal shadowing. Defaults are that document's."""

    model: Literal["tgax-enterprise"] = "tgax-enterprise"
    tx_power_dbm: float = Field(20.0, ge=-10, le=30)
    frequency_ghz: float = Field(5.0, gt=1, le=7.2)
    breakpoint_m: float = Field(10.0, gt=0)
    exponent_after: float = Field(3.5, ge=1.5, le=6)
    wall_loss_db: float = Field(7.0, ge=0, le=60, description="per obstacle crossed")
    shadowing_db: float = Field(
        0.0, ge=0, le=20, description="std. dev. of a per-link log-normal draw (TGax: 5)"
    )
    margin_db: float = Field(0.0, ge=0, le=40, description="rate adaptation's safety margin")


class CosimConfig(_Model):
    physics_step_ms: float = Field(2.0, gt=0, le=100)
    staleness_limit_ms: float = Field(
        200.0,
        gt=0,
        description="a robot stops when its last command (counted from its "
        "creation by the leader) is older than this",
    )
    coupling: Coupling = Coupling.EXACT
    #: The leader predicts each robot's pose from the perception's sample instant to the
    #: command's creation with the commands it sent in between (delay compensation).
    leader_prediction: bool = False
    window_ms: float = Field(1.0, gt=0, le=1000, description="window of the window couplings")
    record_period_ms: float = Field(10.0, gt=0, le=1000, description="outcome/trace sampling")
    world: WorldConfig = Field(default_factory=WorldConfig)
    robots: list[RobotConfig] = Field(min_length=2, max_length=64)
    task: TaskConfig = Field(default_factory=TaskConfig)
    radio: RadioConfig = Field(default_factory=RadioConfig)

    @model_validator(mode="after")
    def _consistent(self) -> CosimConfig:
        names = [r.name for r in self.robots]
        dupes = sorted(n for n, c in Counter(names).items() if c > 1)
        if dupes:
            raise ValueError(f"robot names must be unique; repeated: {dupes}")
        formation = self.task.kind == "formation"
        if formation and not self.task.route_m:
            raise ValueError("task.kind = 'formation' needs task.route_m (the formation's route)")
        for r in self.robots:
            if r.kind is RobotKind.STATIC:
                continue
            if formation and (r.offset_m is None or r.waypoints_m):
                raise ValueError(
                    f"robot {r.name!r}: a formation robot has an offset_m (its place in the "
                    "formation) and no waypoints_m (task.route_m is the route)"
                )
            if not formation and not r.waypoints_m:
                raise ValueError(
                    f"robot {r.name!r} ({r.kind.value}) has no waypoints_m; give its patrol "
                    "route or make it kind = 'static'"
                )
        for r in self.robots:
            speed = r.speed_m_s or self.task.speed_m_s
            if r.kind is not RobotKind.STATIC and speed >= r.max_speed_m_s:
                raise ValueError(
                    f"robot {r.name!r}: its reference speed {speed} m/s must be below its "
                    f"max_speed_m_s = {r.max_speed_m_s} (a robot that falls behind must be "
                    "able to catch up)"
                )
        step_ns = round(self.physics_step_ms * 1e6)
        if step_ns <= 0 or abs(step_ns - self.physics_step_ms * 1e6) > 1e-3:
            raise ValueError(f"physics_step_ms = {self.physics_step_ms}: not a whole ns count")
        return self

    @property
    def step_ns(self) -> int:
        return round(self.physics_step_ms * 1e6)

    def waypoints(self, r: RobotConfig) -> list[tuple[float, float]]:
        """The robot's route after its start: its own (patrol) or the formation's, shifted."""
        if self.task.kind == "formation" and r.offset_m is not None:
            ox, oy = r.offset_m
            return [(x + ox, y + oy) for x, y in self.task.route_m]
        return list(r.waypoints_m)

    def robot(self, name: str) -> RobotConfig:
        for r in self.robots:
            if r.name == name:
                return r
        raise KeyError(name)


class _Section(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    cosim: CosimConfig


class CosimScenario(BaseModel):
    """A network scenario and its ``[cosim]`` section, validated together."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    scenario: Scenario
    cosim: CosimConfig
    source: str = "<scenario>"


def parse_cosim(data: dict[str, Any], *, source: str = "<data>") -> CosimScenario:
    """Validate a co-simulation scenario (the dict of a TOML file)."""
    data = dict(data)
    if "cosim" not in data:
        raise ScenarioError(
            source, [ScenarioProblem("cosim", ScenarioProblem.NO_VALUE,
                                     "missing: a co-simulation scenario needs a [cosim] "
                                     "section (see docs/cosim.md)")]
        )  # fmt: skip
    try:
        cosim = _Section.model_validate({"cosim": data.pop("cosim")}).cosim
    except ValidationError as exc:
        raise ScenarioError(source, problems_from_validation(exc, _Section, data)) from None
    robots = [{"name": r.name, "position_m": list(r.start_m)} for r in cosim.robots]
    if "stations" not in data:
        data["stations"] = robots
    else:
        given = sorted(str(s.get("name")) for s in data["stations"] if isinstance(s, dict))
        if given != sorted(r.name for r in cosim.robots):
            raise ScenarioError(source, [ScenarioProblem(
                "stations", given,
                "must name exactly the [[cosim.robots]] (or leave [[stations]] out: the "
                f"robots become the stations); robots: {sorted(r.name for r in cosim.robots)}",
            )])  # fmt: skip
        data["stations"] = robots
    # Links come from the physics world: the co-simulation sets every leader-worker link
    # from the initial geometry before the policy is installed, then at every step.
    links = dict(data.get("links", {}))
    if links.get("mode", "fixed") != "fixed" or links.get("overrides"):
        raise ScenarioError(source, [ScenarioProblem(
            "links", ScenarioProblem.NO_VALUE,
            "a co-simulation derives every link from the physics world ([cosim.radio]); "
            "leave links.mode and links.overrides out",
        )])  # fmt: skip
    links.setdefault("packet_errors", True)
    data["links"] = links
    scenario = parse_scenario(data, source=source)
    wl = scenario.workload
    if scenario.fleet is not None:
        # A fleet: the access points are the static robots (an AP on a pole, its cell's
        # leader); every other robot moves under its cell's leader's commands.
        aps = set(scenario.fleet.ap_names())
        static = {r.name for r in cosim.robots if r.kind is RobotKind.STATIC}
        if static != aps:
            raise ScenarioError(source, [ScenarioProblem(
                "cosim.robots", sorted(static ^ aps),
                "in a fleet co-simulation the access points are the static robots and the "
                f"static robots are the access points: access points {sorted(aps)}, static "
                f"robots {sorted(static)}",
            )])  # fmt: skip
    elif wl is None:
        raise ScenarioError(source, [ScenarioProblem(
            "workload", ScenarioProblem.NO_VALUE,
            "missing: the robots' perceptions and commands are the [workload.mpc] loop",
        )])  # fmt: skip
    else:
        leader = cosim.robot(wl.leader)
        for r in cosim.robots:
            if r.name != leader.name and r.kind is RobotKind.STATIC:
                raise ScenarioError(source, [ScenarioProblem(
                    "cosim.robots", r.name,
                    "only the leader may be static: every worker is controlled by the leader",
                )])  # fmt: skip
    for r in cosim.robots:
        if r.kind is RobotKind.AERIAL:
            tallest = max((o.height_m for o in cosim.world.obstacles), default=0.0)
            if r.altitude_m <= tallest:
                raise ScenarioError(source, [ScenarioProblem(
                    f"cosim.robots.{r.name}.altitude_m", r.altitude_m,
                    f"an aerial robot flies above the obstacles (tallest {tallest} m)",
                )])  # fmt: skip
    half = (cosim.world.size_m[0] / 2, cosim.world.size_m[1] / 2)
    for r in cosim.robots:
        for p in (r.start_m, *cosim.waypoints(r)):
            if abs(p[0]) > half[0] or abs(p[1]) > half[1] or not all(map(math.isfinite, p)):
                raise ScenarioError(source, [ScenarioProblem(
                    f"cosim.robots.{r.name}", list(p),
                    f"outside the floor: |x| <= {half[0]} m and |y| <= {half[1]} m "
                    "(cosim.world.size_m is centred on the origin)",
                )])  # fmt: skip
    return CosimScenario(scenario=scenario, cosim=cosim, source=source)


def load_cosim(path: str | Path) -> CosimScenario:
    """Read and validate a co-simulation scenario file (ScenarioError naming fields)."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(str(p), [ScenarioProblem("", str(p), "file not found")]) from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(str(p), [ScenarioProblem("", str(p), f"cannot read: {exc}")]) from None
    return parse_cosim(data, source=str(p))
