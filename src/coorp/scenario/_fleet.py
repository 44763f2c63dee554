"""A fleet: several access points and channels, cells, robots that move (``[fleet]``).

Plain data and the geometry derived from it, validated when a scenario loads:

* ``[[fleet.access_points]]``: each names a station (the AP's radio, and the leader of
  its *cell*: the edge computer wired to the AP), its 5 GHz primary channel and width.
  Every other station is a robot; it associates with the strongest AP where it starts.
* Channels: a primary 20 MHz channel number and a width give the block of spectrum an
  AP occupies (802.11-2016 Annex E: 40/80/160 MHz blocks aligned at 36, 100, 149). Two
  APs share the air when their blocks are the same (same primary, same width); disjoint
  blocks never interact; blocks that overlap without being the same (a 20 MHz AP inside
  an 80 MHz one, or two primaries in one block) are refused: partial overlap is not
  modelled.
* Contention domains: co-channel APs within carrier-sense range of each other (the
  received power of one at the other at least the CCA threshold) are one domain, and
  transitively so; every station associated with an AP of a domain defers to every other
  station of that domain, and to nobody else. The threshold is the 802.11 CCA
  sensitivity for a PPDU of the channel's width on its primary channel (802.11-2016
  21.3.18.5.3: -82 dBm for 20 MHz, -79, -76, -73 dBm for 40, 80, 160 MHz: -82 dBm per
  20 MHz of the signal), or ``fleet.cca_dbm``. Hidden and exposed stations inside a
  domain are not modelled (see :func:`hidden_pairs`, which counts them).
* ``[fleet.roaming]``, ``[[fleet.routes]]``: when a robot measures its APs (every beacon
  interval), when it hands over (another AP stronger by the hysteresis), what the
  hand-over costs (scan, association, or an 802.11r fast transition), where robots go.
* ``[fleet.loop]``, ``[fleet.learning]``: what every robot does on the air (its own
  control loop with its cell's leader; asynchronous learning: an update up, a model
  down), read by ``coorp.workload``'s fleet runner.
* ``[fleet.backbone]``: the wired link between leaders (latency, heartbeats, outages).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import Field, model_validator

from coorp.phy import LinkBudget
from coorp.scenario._radio import _Model, _Problem
from coorp.scenario._tcp import TcpSender
from coorp.scenario._workload import LsTransport

__all__ = [
    "CHANNELS_5GHZ",
    "AccessPointConfig",
    "BackboneConfig",
    "BackboneOutage",
    "Domain",
    "FleetConfig",
    "FleetLearningConfig",
    "FleetLoopConfig",
    "RoamingConfig",
    "RouteConfig",
    "association_pairs",
    "cca_threshold_dbm",
    "channel_block_mhz",
    "contention_domains",
    "domain_of_station",
    "fleet_problems",
    "hidden_pairs",
    "initial_association",
    "route_position",
]

#: 5 GHz primary 20 MHz channels (802.11-2016 Annex E, the US/EU set without 169-177).
CHANNELS_5GHZ: Final = (
    *range(36, 65, 4),
    *range(100, 145, 4),
    *range(149, 166, 4),
)
#: The 20 MHz channels of the first group of each band segment: blocks align to these.
_SEGMENTS: Final = ((36, 64), (100, 144), (149, 165))


class AccessPointConfig(_Model):
    name: str = Field(
        description="a station: the AP's radio, and its cell's leader (the edge computer at the AP)"
    )
    channel: int = Field(description="5 GHz primary 20 MHz channel number (36, 40, ..., 165)")
    width_mhz: Literal[20, 40, 80, 160] | None = Field(
        None, description="channel width; unset: phy.width_mhz (the only width modelled)"
    )
    members: list[str] = Field(
        default_factory=list,
        description="robots that start associated with this AP whatever they receive "
        "(its team's SSID); the others start with the strongest AP",
    )
    hw_queue: Literal["per_ac", "shared"] = Field(
        "per_ac",
        description="the AP's NIC rings: per_ac as enterprise APs keep (a queue per access "
        "category); shared: a commodity NIC's one ring, as [hw_queue] mode",
    )


class RoamingConfig(_Model):
    """When a robot hands over, and what the hand-over costs (assumptions: set them from
    your own NICs' measurements)."""

    check_us: float = Field(
        102_400.0, gt=0, description="how often a robot measures its APs (a beacon interval)"
    )
    hysteresis_db: float = Field(
        6.0, ge=0, description="hand over when another AP is this much stronger than its own"
    )
    scan_us: float = Field(
        0.0,
        ge=0,
        description="off the air scanning before re-associating; 0: the target is known "
        "from background scans or an 802.11k neighbour report",
    )
    association_us: float = Field(
        30_000.0,
        ge=0,
        description="authentication + reassociation + WPA2 4-way handshake, off the air",
    )
    fast_transition: bool = Field(
        False, description="802.11r fast BSS transition: ft_us instead of association_us"
    )
    ft_us: float = Field(
        8_000.0, ge=0, description="an 802.11r transition (FT auth + reassociation), off the air"
    )
    keep_planner: bool = Field(
        True,
        description="a robot's local preemption (its send-time models and completion "
        "times) follows it to the new cell; false: it starts afresh there",
    )

    def gap_us(self) -> float:
        """How long a hand-over keeps the robot off the air."""
        return self.scan_us + (self.ft_us if self.fast_transition else self.association_us)


class RouteConfig(_Model):
    robot: str = Field(description="a robot (a station that is not an AP)")
    waypoints_m: list[tuple[float, float]] = Field(
        min_length=1, description="visited in order from the robot's start position"
    )
    speed_m_s: float = Field(1.0, gt=0, le=20)
    start_s: float = Field(0.0, ge=0, description="when the robot starts moving")
    repeat: bool = Field(True, description="back and forth along the route for the whole run")


class FleetLoopConfig(_Model):
    """Each robot's own control loop with its cell's leader: a perception up, the leader
    infers, a control back; every robot's camera runs on its own clock (a fixed random
    phase in the period, drawn once per run)."""

    enabled: bool = True
    period_us: float = Field(33_333.3, gt=0)
    jitter_us: float = Field(500.0, ge=0, description="std. dev. of each robot's send delay")
    perception_bytes: int = Field(1_200, gt=0)
    control_bytes: int = Field(256, gt=0)
    inference_us: float = Field(
        2_000.0, ge=0, description="the leader's compute per perception (a batched accelerator)"
    )
    deadline_us: float = Field(33_000.0, gt=0, description="reaction-time bound")
    start_us: float = Field(100_000.0, ge=0)
    ls_transport: LsTransport = Field(LsTransport.RELIABLE)
    repair_us: float = Field(10_000.0, ge=0)


class FleetLearningConfig(_Model):
    """Asynchronous learning across the fleet: each robot sends its update to its cell's
    leader, gets the model back, trains, and again; a hand-over abandons the cycle in
    progress and the robot starts a new one in its new cell."""

    enabled: bool = True
    update_bytes: int = Field(10_000_000, gt=0)
    model_bytes: int = Field(10_000_000, gt=0)
    train_us: float = Field(1_000_000.0, ge=0)
    start_us: float = Field(200_000.0, ge=0)
    start_spread_us: float = Field(
        1_000_000.0,
        ge=0,
        description="each robot starts its first cycle at a random instant this long "
        "after start_us at most (robots do not all start learning at once)",
    )


class BackboneOutage(_Model):
    access_point: str = Field(description="this AP's leader is cut off from the other leaders")
    start_s: float = Field(ge=0)
    end_s: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> BackboneOutage:
        if self.end_s <= self.start_s:
            raise ValueError(f"end_s = {self.end_s} must be after start_s = {self.start_s}")
        return self


class BackboneConfig(_Model):
    """The wired network between the leaders (the per-channel coordination's link)."""

    latency_us: float = Field(200.0, ge=0, description="one way, leader to leader")
    heartbeat_us: float = Field(100_000.0, gt=0)
    timeout_us: float = Field(
        300_000.0, gt=0, description="a leader not heard from for this long is taken as down"
    )
    outages: list[BackboneOutage] = Field(default_factory=list)

    @model_validator(mode="after")
    def _timeout(self) -> BackboneConfig:
        if self.timeout_us < 2 * self.heartbeat_us:
            raise ValueError(
                f"timeout_us = {self.timeout_us} is shorter than two heartbeats "
                f"({2 * self.heartbeat_us}); allowed: timeout_us >= 2 * heartbeat_us"
            )
        return self


class FleetConfig(_Model):
    access_points: list[AccessPointConfig] = Field(min_length=1)
    cca_dbm: float | None = Field(
        None,
        le=-20,
        ge=-100,
        description="carrier-sense threshold between co-channel BSSs; unset: -82 dBm "
        "per 20 MHz of the channel (802.11-2016 21.3.18.5.3)",
    )
    roaming: RoamingConfig = Field(default_factory=RoamingConfig)
    routes: list[RouteConfig] = Field(default_factory=list)
    loop: FleetLoopConfig = Field(default_factory=FleetLoopConfig)
    learning: FleetLearningConfig = Field(default_factory=FleetLearningConfig)
    backbone: BackboneConfig = Field(default_factory=BackboneConfig)

    def ap_names(self) -> list[str]:
        return [a.name for a in self.access_points]


# -- geometry ----------------------------------------------------------------------------------
def cca_threshold_dbm(width_mhz: int) -> float:
    """802.11-2016 21.3.18.5.3: a PPDU of ``width_mhz`` occupying the primary channel is
    detected at -82 dBm per 20 MHz of it: -82, -79, -76, -73 dBm for 20 ... 160 MHz."""
    return -82.0 + 10.0 * math.log10(width_mhz / 20)


def channel_block_mhz(channel: int, width_mhz: int) -> tuple[float, float] | None:
    """The spectrum ``[low, high)`` (MHz) of a ``width_mhz`` channel whose primary 20 MHz
    channel is ``channel``, or None if no such channel exists."""
    if channel not in CHANNELS_5GHZ:
        return None
    per = width_mhz // 20
    for first, last in _SEGMENTS:
        if first <= channel <= last:
            k = (channel - first) // 4
            start = first + 4 * (k - k % per)
            if start + 4 * (per - 1) > last:
                return None
            low = 5000.0 + 5 * start - 10
            return low, low + width_mhz
    return None


@dataclass(frozen=True)
class Domain:
    """One contention domain: APs of one channel within carrier-sense range of each other."""

    name: str
    channel: int
    width_mhz: int
    access_points: tuple[str, ...]


def _position(scenario: Any) -> dict[str, tuple[float, float]]:
    return {s.name: s.position_m for s in scenario.stations}


def _budget(scenario: Any) -> LinkBudget:
    pl = scenario.links.pathloss
    return LinkBudget(pl.tx_power_dbm, pl.reference_loss_db, pl.exponent, pl.margin_db)


def _width(scenario: Any, ap: AccessPointConfig) -> int:
    return ap.width_mhz if ap.width_mhz is not None else scenario.phy.width_mhz


def contention_domains(scenario: Any) -> list[Domain]:
    """The scenario's contention domains, in the order of their first AP: co-channel APs
    whose received power at each other is at least the CCA threshold, transitively."""
    fleet: FleetConfig = scenario.fleet
    pos = _position(scenario)
    budget = _budget(scenario)
    aps = fleet.access_points
    parent = list(range(len(aps)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(aps):
        for j in range(i + 1, len(aps)):
            b = aps[j]
            if a.channel != b.channel or _width(scenario, a) != _width(scenario, b):
                continue
            width = _width(scenario, a)
            cca = fleet.cca_dbm if fleet.cca_dbm is not None else cca_threshold_dbm(width)
            rx = budget.rx_power_dbm(math.dist(pos[a.name], pos[b.name]))
            if rx >= cca:
                parent[find(j)] = find(i)
    groups: dict[int, list[AccessPointConfig]] = {}
    for i, a in enumerate(aps):
        groups.setdefault(find(i), []).append(a)
    per_channel = Counter(g[0].channel for g in groups.values())
    seen: Counter[int] = Counter()
    out = []
    for members in groups.values():
        ch = members[0].channel
        seen[ch] += 1
        name = f"ch{ch}" if per_channel[ch] == 1 else f"ch{ch}-{seen[ch]}"
        out.append(Domain(name, ch, _width(scenario, members[0]), tuple(a.name for a in members)))
    return out


def initial_association(scenario: Any) -> dict[str, str]:
    """Robot -> the AP it associates with at its start position: the one that lists it in
    ``members``, else the strongest received power (the first listed AP on a tie), as a
    station picks the best BSS of its scan."""
    fleet: FleetConfig = scenario.fleet
    pos = _position(scenario)
    aps = fleet.ap_names()
    budget = _budget(scenario)
    pinned = {r: a.name for a in fleet.access_points for r in a.members}
    out = {}
    for s in scenario.stations:
        if s.name in aps:
            continue
        if s.name in pinned:
            out[s.name] = pinned[s.name]
            continue
        best = max(aps, key=lambda a: (budget.rx_power_dbm(math.dist(s.position_m, pos[a])),
                                       -aps.index(a)))  # fmt: skip
        out[s.name] = best
    return out


def hidden_pairs(scenario: Any) -> dict[str, tuple[int, int]]:
    """Per domain, at the start positions: (pairs of its stations that would not hear each
    other at the CCA threshold, all pairs). The simulator lets every station of a domain
    hear every other (no hidden nodes); this says how far that is from the geometry."""
    fleet: FleetConfig = scenario.fleet
    pos = _position(scenario)
    budget = _budget(scenario)
    assoc = initial_association(scenario)
    out = {}
    for d in contention_domains(scenario):
        members = [*d.access_points, *(r for r, a in assoc.items() if a in d.access_points)]
        cca = fleet.cca_dbm if fleet.cca_dbm is not None else cca_threshold_dbm(d.width_mhz)
        hidden = total = 0
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                total += 1
                if budget.rx_power_dbm(math.dist(pos[a], pos[b])) < cca:
                    hidden += 1
        out[d.name] = (hidden, total)
    return out


def route_position(
    start: tuple[float, float], route: RouteConfig, t_s: float
) -> tuple[float, float]:
    """Where a robot on ``route`` (from ``start``) is at ``t_s``: along the waypoints at
    its speed from ``start_s``; back and forth when ``repeat``, else it stays at the end."""
    pts = [start, *route.waypoints_m]
    legs = [math.dist(a, b) for a, b in itertools.pairwise(pts)]
    total = sum(legs)
    travelled = max(0.0, t_s - route.start_s) * route.speed_m_s
    if total <= 0:
        return start
    if route.repeat:
        travelled %= 2 * total
        if travelled > total:
            travelled = 2 * total - travelled
    else:
        travelled = min(travelled, total)
    for (a, b), leg in zip(itertools.pairwise(pts), legs, strict=True):
        if travelled <= leg:
            f = travelled / leg if leg > 0 else 0.0
            return (a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]))
        travelled -= leg
    return pts[-1]


# -- validation ---------------------------------------------------------------------------------
def fleet_problems(scenario: Any) -> list[_Problem]:
    """Cross-field rules of ``[fleet]`` (located at their fields)."""
    fleet: FleetConfig | None = scenario.fleet
    if fleet is None:
        return []
    problems: list[_Problem] = []
    if scenario.tcp.sender is not TcpSender.NONE:
        # A hand-over flushes a robot's queued bulk (Cells.handover); what a TCP sender
        # then does (an RTO, a new path's RTT) is not modelled for a fleet.
        problems.append((
            ("tcp", "sender"), scenario.tcp.sender.value,
            "TCP senders are not modelled in a fleet (a hand-over flushes queued bulk); "
            "allowed with [fleet]: \"none\"",
        ))  # fmt: skip
    names = [s.name for s in scenario.stations]
    known = set(names)
    aps = fleet.ap_names()
    dupes = sorted(n for n, c in Counter(aps).items() if c > 1)
    if dupes:
        problems.append((("fleet", "access_points"), dupes, f"access points listed twice: {dupes}"))
    blocks: list[tuple[int, tuple[float, float], int, str]] = []
    for i, ap in enumerate(fleet.access_points):
        at: tuple[str | int, ...] = ("fleet", "access_points", i)
        if ap.name not in known:
            problems.append((
                (*at, "name"), ap.name,
                f"is not a station; an access point is a [[stations]] entry (its radio): "
                f"stations: {sorted(known)}",
            ))  # fmt: skip
        width = _width(scenario, ap)
        if width != scenario.phy.width_mhz:
            problems.append((
                (*at, "width_mhz"), width,
                f"every access point uses phy.width_mhz ({scenario.phy.width_mhz} MHz): one "
                "width per scenario is modelled; allowed: unset or "
                f"{scenario.phy.width_mhz}",
            ))  # fmt: skip
            continue
        block = channel_block_mhz(ap.channel, width)
        if block is None:
            problems.append((
                (*at, "channel"), ap.channel,
                f"no {width} MHz channel has primary channel {ap.channel}; allowed "
                f"primaries: {_primaries(width)}",
            ))  # fmt: skip
            continue
        for j, other_block, other_ch, other in blocks:
            same = other_block == block and other_ch == ap.channel
            overlap = other_block[0] < block[1] and block[0] < other_block[1]
            if overlap and not same:
                problems.append((
                    (*at, "channel"), ap.channel,
                    f"{width} MHz at primary {ap.channel} overlaps {other!r} "
                    f"(fleet.access_points[{j}], primary {other_ch}) without being the same "
                    "channel: partially overlapping channels are not modelled; allowed: the "
                    "same primary channel, or one whose block does not overlap",
                ))  # fmt: skip
                break
        blocks.append((i, block, ap.channel, ap.name))
    robots = [n for n in names if n not in aps]
    pinned: set[str] = set()
    for i, ap in enumerate(fleet.access_points):
        for r in ap.members:
            if r not in robots or r in pinned:
                why = "is listed by two APs" if r in pinned else "is not a robot"
                problems.append((("fleet", "access_points", i, "members"), r, why))
            pinned.add(r)
    if not robots:
        problems.append((("fleet", "access_points"), aps, "every station is an AP: no robot"))
    routed: set[str] = set()
    for i, route in enumerate(fleet.routes):
        at = ("fleet", "routes", i, "robot")
        if route.robot not in robots:
            problems.append((at, route.robot, f"is not a robot (a station that is not an AP); "
                                          f"robots: {sorted(robots)[:20]}"))  # fmt: skip
        elif route.robot in routed:
            problems.append((at, route.robot, "has two routes"))
        routed.add(route.robot)
    for o in fleet.backbone.outages:
        if o.access_point not in aps:
            problems.append((
                ("fleet", "backbone", "outages"), o.access_point,
                f"is not an access point; access points: {aps}",
            ))  # fmt: skip
    if scenario.workload is not None:
        problems.append((
            ("workload",), "[workload]",
            "a fleet scenario's workload is [fleet.loop] and [fleet.learning] (every robot "
            "with its cell's leader); remove [workload]",
        ))  # fmt: skip
    if problems:
        return problems
    domains = {ap: d.name for d in contention_domains(scenario) for ap in d.access_points}
    assoc = initial_association(scenario)
    domain_of = {**{a: domains[a] for a in aps}, **{r: domains[a] for r, a in assoc.items()}}
    for i, f in enumerate(scenario.flows):
        if domain_of[f.src] != domain_of[f.dst]:
            problems.append((
                ("flows", i), f.name,
                f"{f.src!r} ({domain_of[f.src]}) and {f.dst!r} ({domain_of[f.dst]}) are not "
                "in one contention domain: they never hear each other",
            ))  # fmt: skip
        for end in (f.src, f.dst):
            if end in routed:
                problems.append((
                    ("flows", i), f.name,
                    f"{end!r} moves (fleet.routes): a moving robot's traffic is the fleet "
                    "workload's ([fleet.loop], [fleet.learning]), not [[flows]]",
                ))  # fmt: skip
    return problems


def association_pairs(scenario: Any) -> list[tuple[int, int]]:
    """Index pairs (robot, its initial AP) whose links must carry frames from the start."""
    index = {s.name: i for i, s in enumerate(scenario.stations)}
    return [(index[r], index[a]) for r, a in initial_association(scenario).items()]


def _primaries(width: int) -> list[int]:
    return [c for c in CHANNELS_5GHZ if channel_block_mhz(c, width) is not None]


def domain_of_station(scenario: Any) -> dict[str, str]:
    """Every station's contention domain at the start (APs by channel and range, robots
    by their initial AP)."""
    domains = {ap: d.name for d in contention_domains(scenario) for ap in d.access_points}
    assoc = initial_association(scenario)
    return {**domains, **{r: domains[a] for r, a in assoc.items()}}
