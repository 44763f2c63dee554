"""Scenario sections for timing as real robots have it: extra LS flows, link changes.

Plain data. ``[[workload.ls_flows]]`` declares latency-sensitive flows beside the MPC
loop (a lidar at 10 Hz, a 60 Hz teleoperation stream, a guest station's voice call):
each with its own period, size, ends, deadline, send jitter (Gaussian, or with a
heavy Pareto tail), phase, clock drift and a start/stop schedule, and whether the team
coordinates it. ``[[workload.link_changes]]`` changes a link's rate at an instant of the
run (a robot that drives behind a shelf).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["JitterKind", "LinkChange", "LsFlowConfig", "timing_problems"]

#: The largest clock drift a scenario may give a flow (±5 %): crystal oscillators stay
#: within ±100 ppm, but a 30 Hz software timer on a 1 ms tick fires every 34 ms
#: (+2 %), which is drift as far as a receiver's time model is concerned.
MAX_DRIFT_PPM = 50_000.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JitterKind(StrEnum):
    """Distribution of a worker's send delay after its sample instant."""

    GAUSSIAN = "gaussian"
    """|N(0, jitter_us)|."""
    PARETO_TAIL = "pareto-tail"
    """|N(0, jitter_us)| plus, with probability ``tail_probability``, a Pareto delay
    (scale ``tail_scale_us``, shape ``tail_shape``, capped at ``tail_max_us``): the rare
    millisecond-scale wakeup latencies of a kernel without PREEMPT_RT."""


class LsFlowConfig(_Model):
    """One periodic latency-sensitive flow beside the MPC loop."""

    name: str = Field(
        min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$",
        description="unique among flows; results name the flow by it",
    )  # fmt: skip
    src: str = Field(description="sending station")
    dst: str = Field(description="receiving station, ≠ `src`")
    size_bytes: int = Field(gt=0, le=64 * 1024 * 1024, description="message payload (UDP)")
    period_us: float = Field(gt=0, description="one message every period (on the sender's clock)")
    deadline_us: float | None = Field(
        None, gt=0, description="latency bound of one message; unset: the period"
    )
    category: Literal["BK", "BE", "VI", "VO"] = Field("VO", description="access category")
    coordinated: bool = Field(
        True,
        description="the team protects it: its sender's COORP gate learns its sends (needs "
        "a team robot as `src`); false: a flow the team does not know of",
    )
    phase_us: float | Literal["random"] = Field(
        0.0,
        description="first send after the start of each active interval, ≥ 0; `random`: "
        "a fixed offset in [0, period) drawn once per run",
    )
    drift_ppm: float = Field(
        0.0,
        ge=-MAX_DRIFT_PPM,
        le=MAX_DRIFT_PPM,
        description="sender's clock error: the true period is period_us·(1 + drift_ppm·1e-6)",
    )
    jitter: JitterKind = Field(JitterKind.GAUSSIAN, description="send-delay distribution")
    jitter_us: float = Field(
        0.0, ge=0, description="std. dev. of the Gaussian send delay (its absolute value is drawn)"
    )
    tail_probability: float = Field(
        0.01, ge=0, le=1, description="pareto-tail: share of sends that get a tail delay"
    )
    tail_scale_us: float = Field(1_000.0, gt=0, description="pareto-tail: smallest tail delay")
    tail_shape: float = Field(1.5, gt=0, description="pareto-tail: Pareto shape (alpha)")
    tail_max_us: float = Field(20_000.0, gt=0, description="pareto-tail: largest tail delay")
    active_us: list[tuple[float, float]] | None = Field(
        None,
        description="[start, stop) intervals in which the flow sends, sorted and disjoint; "
        "each restarts its phase; unset: the whole run",
    )

    @model_validator(mode="after")
    def _consistent(self) -> LsFlowConfig:
        if self.tail_max_us < self.tail_scale_us:
            raise ValueError(
                f"tail_max_us = {self.tail_max_us} is below tail_scale_us = "
                f"{self.tail_scale_us}; allowed: tail_max_us >= tail_scale_us"
            )
        if isinstance(self.phase_us, float) and not (
            math.isfinite(self.phase_us) and self.phase_us >= 0
        ):
            raise ValueError(f"phase_us = {self.phase_us}: allowed: a number >= 0 or 'random'")
        if self.active_us is not None:
            end = -math.inf
            for i, (a, b) in enumerate(self.active_us):
                if not (0 <= a < b):
                    raise ValueError(f"active_us[{i}] = [{a}, {b}]: allowed: 0 <= start < stop")
                if a < end:
                    raise ValueError(
                        f"active_us[{i}] = [{a}, {b}] starts before the previous interval "
                        f"ends ({end}); allowed: sorted, disjoint intervals"
                    )
                end = b
        return self

    @property
    def deadline(self) -> float:
        """The latency bound in µs (the period when unset)."""
        return self.period_us if self.deadline_us is None else self.deadline_us


class LinkChange(_Model):
    """At ``at_s`` the link ``src -> dst`` (and back, with ``both_directions``) changes its
    rate, as a `[[links.overrides]]` entry would set it from then on."""

    at_s: float = Field(ge=0, description="when the change happens (simulated seconds)")
    src: str
    dst: str
    mcs: int = Field(ge=0, le=9, description="the link's MCS from then on")
    spatial_streams: int | None = Field(
        None, ge=1, le=4, description="its spatial streams (default: phy.spatial_streams)"
    )
    both_directions: bool = Field(True, description="also change `dst -> src`")


#: Name prefixes of the flows the workload and the policies create themselves.
RESERVED_PREFIXES = ("perception:", "control:", "permit:")

#: A problem at one field: (location, value found, what is wrong and what is allowed).
Problem = tuple[tuple[str | int, ...], object, str]


def timing_problems(scenario: Any, link_problems: Any) -> list[Problem]:
    """Cross-field rules of ``[[workload.ls_flows]]``, ``[[workload.link_changes]]`` and
    the ``coordinated`` flag of bulk flows, for :class:`~coorp.scenario.Scenario`.

    ``link_problems(overrides)``: the scenario's own check that every link carries a full
    packet, run with extra ``[[links.overrides]]``: a link change must give a rate the
    scenario could have had from the start.
    """
    problems: list[Problem] = []
    stations = [s.name for s in scenario.stations]
    known = set(stations)
    wl = scenario.workload
    team: set[str] = set()
    if wl is not None:
        team = {wl.leader, *scenario.workers}
    for i, f in enumerate(scenario.flows):
        if getattr(f, "coordinated", False) and f.src not in team:
            where = "the workload's team" if wl is not None else "a [workload] (there is none)"
            problems.append((
                ("flows", i, "coordinated"), True,
                f"flow {f.name!r}: coordinated bulk data needs a team robot as src; "
                f"{f.src!r} is not in {where}; allowed: false, or src one of "
                f"{sorted(team)}",
            ))  # fmt: skip
    if wl is None:
        return problems
    taken = {f.name for f in scenario.flows}
    seen: set[str] = set()
    for i, f in enumerate(wl.ls_flows):
        at: tuple[str | int, ...] = ("workload", "ls_flows", i)
        if f.name in seen or f.name in taken:
            problems.append(((*at, "name"), f.name, "is already the name of another flow; "
                             "allowed: a name unique among [[flows]] and ls_flows"))  # fmt: skip
        elif f.name.startswith(RESERVED_PREFIXES):
            prefixes = ", ".join(RESERVED_PREFIXES)
            problems.append(((*at, "name"), f.name, "starts like the workload's own flows; "
                             f"allowed: a name not starting with {prefixes}"))  # fmt: skip
        seen.add(f.name)
        for end in ("src", "dst"):
            value = getattr(f, end)
            if value not in known:
                problems.append(((*at, end), value, f"unknown station; stations: {stations}"))
        if f.src == f.dst:
            problems.append(((*at, "dst"), f.dst, "equals src; allowed: another station"))
        if f.coordinated and f.src in known and f.src not in team:
            problems.append((
                (*at, "coordinated"), True,
                f"{f.src!r} is not in the team, so nothing can protect its sends; allowed: "
                f"false, or src one of {sorted(team)}",
            ))  # fmt: skip
    changes = wl.link_changes
    for i, c in enumerate(changes):
        at = ("workload", "link_changes", i)
        bad = False
        for end in ("src", "dst"):
            value = getattr(c, end)
            if value not in known:
                problems.append(((*at, end), value, f"unknown station; stations: {stations}"))
                bad = True
        if c.src == c.dst:
            problems.append(((*at, "dst"), c.dst, "equals src; allowed: another station"))
            bad = True
        if bad:
            continue
        for msg in link_problems(_as_overrides(c)):
            problems.append(((*at, "mcs"), c.mcs, msg))
    return problems


def _as_overrides(c: LinkChange) -> Sequence[dict[str, Any]]:
    one = {"src": c.src, "dst": c.dst, "mcs": c.mcs, "spatial_streams": c.spatial_streams}
    if not c.both_directions:
        return [one]
    return [one, {**one, "src": c.dst, "dst": c.src}]
