"""The echo workload on the simulated channel: robots ping the leader, it echoes.

Robot ``r<i>`` sends an S-byte datagram (AC_VO, best effort: a dropped fragment loses
the message) at ``start + phase_i + k/f``; the leader sends the same S bytes back the
instant the ping is delivered. RTT = echo delivered − ping handed to the NIC, in
integer nanoseconds. Phases are drawn from the run's seed, so a cell is deterministic.
With bulk on, every robot keeps a bulk transfer to the leader backlogged, started by
the ``edca`` policy (bulk ``tcp``: uncoordinated) or the ``coorp`` policy.
"""

from __future__ import annotations

import math
import time

import numpy as np

from coorp._errors import UsageError
from coorp.policies import Team, get_policy
from coorp.scenario import (
    AccessCategory,
    Scenario,
    StationConfig,
    load_scenario,
    resolve_scenario,
)
from coorp.sim import Simulation
from coorp.sim.packets import FlowState, Message
from coorp.teambench._carriers import CellMeasurement
from coorp.teambench._config import TeamBenchConfig

__all__ = ["SimSession", "echo_scenario", "run_echo"]

#: Start of the first ping (lets nothing else happen first; the same for every cell).
START_NS = 10_000_000
#: Robots sit on a circle of this radius around the leader.
RADIUS_M = 5.0
_BULK_POLICY = {"tcp": "edca", "coorp": "coorp"}


def echo_scenario(base: Scenario, robots: int, *, seed: int) -> Scenario:
    """``base``'s PHY, MAC, NIC queues and link model with a leader and ``robots``
    robots on a circle, and no traffic of its own."""
    stations = [StationConfig(name="leader", position_m=(0.0, 0.0))]
    for i in range(robots):
        a = 2 * math.pi * i / robots
        stations.append(
            StationConfig(
                name=f"r{i + 1}", position_m=(RADIUS_M * math.cos(a), RADIUS_M * math.sin(a))
            )
        )
    links = base.links.model_copy(update={"overrides": []})
    return Scenario.model_validate({
        **base.model_dump(exclude={"stations", "flows", "workload", "links", "name", "seed"}),
        "name": f"{base.name}-echo-{robots}", "seed": seed,
        "stations": [s.model_dump() for s in stations], "links": links.model_dump(),
    })  # fmt: skip


def run_echo(
    scenario: Scenario,
    *,
    rate_hz: float,
    size: int,
    duration_ns: int,
    drain_ns: int,
    bulk: str = "none",
    bulk_message_bytes: int = 524_288,
    seed: int = 1,
) -> CellMeasurement:
    """One cell on the simulated channel (every robot of ``scenario`` but ``leader``)."""
    t0, c0 = time.perf_counter(), _cpu()
    sim = Simulation(scenario, seed=seed, source=f"<echo {scenario.name}>")
    robots = [s.name for s in scenario.stations if s.name != "leader"]
    period = round(1e9 / rate_hz)
    ping = {r: sim.flow(f"ping:{r}", r, "leader", AccessCategory.VO, bulk=False) for r in robots}
    pong = {r: sim.flow(f"pong:{r}", "leader", r, AccessCategory.VO, bulk=False) for r in robots}
    rtts: list[int] = []
    sent = [0]

    def echoed(sent_ns: int, m: Message) -> None:
        rtts.append(m.delivered_ns - sent_ns)

    def arrived(r: str, m: Message) -> None:
        sent_ns = m.created_ns
        sim.send_message(pong[r], size, lambda e: echoed(sent_ns, e))

    def send(r: str, k: int, at: int) -> None:
        sent[0] += 1
        sim.send_message(ping[r], size, lambda m: arrived(r, m))
        nxt = at + period
        if nxt < START_NS + duration_ns:
            sim.call_at(nxt, send, r, k + 1, nxt)

    for r in robots:
        phase = int(sim.rng(f"teambench-phase:{r}").integers(0, period))
        sim.call_at(START_NS + phase, send, r, 0, START_NS + phase)
    bulk_flows: list[FlowState] = []
    if bulk != "none":
        pol = get_policy(_BULK_POLICY[bulk])(Team(
            sim=sim, leader="leader", workers=tuple(robots),
            ls_flows=frozenset(f.name for f in (*ping.values(), *pong.values())),
            mpc=None, options=scenario.policy,
        ))  # fmt: skip
        pol.install()
        for r in robots:
            flow = sim.flow(f"bulk:{r}", r, "leader", AccessCategory.BE, bulk=True)
            bulk_flows.append(flow)

            def again(_now: int, r: str = r, flow: FlowState = flow) -> None:
                pol.send_bulk(r, flow, bulk_message_bytes, again)

            sim.call_at(START_NS, again, START_NS)
    sim.run(START_NS + duration_ns + drain_ns)
    return CellMeasurement(
        rtt_ns=np.array(rtts, dtype=np.int64), sent=sent[0], echoed=len(rtts),
        cpu_s={"simulator": _cpu() - c0}, wall_s=time.perf_counter() - t0,
        bulk_bytes=sum(f.delivered_bytes for f in bulk_flows),
        bulk_window_s=(duration_ns + drain_ns) / 1e9,
    )  # fmt: skip


def _cpu() -> float:
    t = time.process_time()  # user + system of this process (os.times would do too)
    return t


class SimSession:
    """Cells on the simulated channel of ``cfg.scenario`` (loaded once)."""

    def __init__(self, cfg: TeamBenchConfig) -> None:
        self.cfg = cfg
        self.base = load_scenario(resolve_scenario(cfg.scenario))

    def cell(self, robots: int, rate_hz: float, size: int, bulk: str, rep: int) -> CellMeasurement:
        if bulk not in _BULK_POLICY and bulk != "none":
            raise UsageError(f"bulk mode {bulk!r} is not one the simulated channel runs")
        seed = self.cfg.seed + rep
        sc = echo_scenario(self.base, robots, seed=seed)
        return run_echo(
            sc, rate_hz=rate_hz, size=size, duration_ns=round(self.cfg.duration_s * 1e9),
            drain_ns=round(self.cfg.drain_s * 1e9), bulk=bulk,
            bulk_message_bytes=self.cfg.bulk_message_bytes, seed=seed,
        )  # fmt: skip

    def close(self) -> None:
        pass
