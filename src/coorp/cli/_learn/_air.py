"""``coorp learn --runtime --medium wifi``: the team's processes on the emulated WiFi
channel of the scenario (``coorp.emulate``): every robot a station in its own namespace,
the leader the access point, each run a fresh channel seeded with the run's seed.

``coorp.learn`` and ``coorp.emulate`` are peers (neither may import the other): the CLI
builds the network here and hands ``coorp.learn`` a factory
(:data:`coorp.learn.NetworkFactory`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["AIR_SYSCTLS", "air_network", "describe_air"]

#: As the wired namespaces of the runtime's tests and benchmarks: a lost fragment frees
#: its datagram's other fragments after 1 s instead of 30 (docs/runtime.md, "Limits").
AIR_SYSCTLS = (
    "net.ipv4.ipfrag_time=1",
    "net.ipv4.ipfrag_high_thresh=33554432",
    "net.ipv4.ipfrag_low_thresh=25165824",
)


class _Air:
    """One run's emulated channel (a :class:`coorp.learn.RuntimeNetwork`)."""

    def __init__(self, scenario: Any, seed: int, source: str, rt_priority: int) -> None:
        from coorp.emulate import Emulation

        self.em = Emulation(scenario, seed=seed, tag="coorpla", sysctls=AIR_SYSCTLS,
                            source=source, rt_priority=rt_priority)  # fmt: skip
        self.em.up()

    def addr(self, robot: str) -> str:
        return self.em.addr(robot)

    def popen(
        self, robot: str, argv: Sequence[str], env: Mapping[str, str], log: Path
    ) -> subprocess.Popen[bytes]:
        with log.open("ab") as err:
            return self.em.popen(robot, argv, env=env, stderr=err)

    def finish(self) -> dict[str, Any] | None:
        d = self.em.stop().data
        keep = ("verdict", "realtime_held", "frame_lag", "by_ac", "frames_in", "frames_out",
                "load_start", "load_end", "rt_priority")  # fmt: skip
        return {k: d[k] for k in keep if k in d}

    def destroy(self) -> None:
        self.em.destroy()


def air_network(scenario: Any, *, source: str, rt_priority: int = 10) -> Any:
    """A :data:`coorp.learn.NetworkFactory` making ``scenario``'s emulated channel for
    each run (its stations' names are the robots'; the AP is the workload's leader)."""
    from coorp.emulate import choose_ap

    def make(leader: str, workers: Sequence[str], seed: int) -> _Air:
        stations = {s.name for s in scenario.stations}
        missing = [r for r in (leader, *workers) if r not in stations]
        if missing:  # the scenario's own validation makes this unreachable
            raise AssertionError(f"robots {missing} are not stations of {scenario.name}")
        if choose_ap(scenario) != leader:
            raise AssertionError(f"the AP of {scenario.name} is not its leader {leader!r}")
        return _Air(scenario, seed, source, rt_priority)

    return make


def describe_air(runs: list[dict[str, Any] | None]) -> str:
    """One line on how the emulated channel kept real time over ``runs``' reports."""
    reps = [r for r in runs if r]
    if not reps:
        return "emulated channel: no report"
    held = sum(1 for r in reps if r.get("realtime_held"))
    worst = max(float(r["frame_lag"]["p99_ms"]) for r in reps)
    late = sum(int(r["frame_lag"]["late"]) for r in reps)
    frames = sum(int(r.get("frames_out", 0)) for r in reps)
    return (
        f"emulated channel: real time held in {held}/{len(reps)} runs (frame lag p99 at "
        f"most {worst:.2f} ms; {late} of {frames} frames late by > 1 ms)"
    )
