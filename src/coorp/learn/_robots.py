"""Learning on a real team: one role per robot, from a team file (``coorp learn --team``).

The same roles as :mod:`coorp.learn._runtime` — the scenario's leader runs the parameter
server, each of its workers runs PPO with the same seeds and merge rules — started by
hand on each machine instead of by an orchestrator on one host:

* **Keys** come from the team file (``coorp keys``): a robot uses its own key file
  (``team.key_dir/<robot>.key``) and can act only as itself; the team key (``team.key_file``
  or ``COORP_TEAM_KEY``) is the fallback, as for ``coorp agent``.
* **Permits** (``--modes coorp``) come from the team's permit service, ``coorp leader``,
  at ``agent.leader``; bulk settings (chunk, in-flight budget, local preemption) from
  ``[agent]``. ``--modes tcp`` sends the syncs over plain TCP, without permits.
* **No shared clock.** The leader sends every worker a few datagrams carrying the MPC
  loop's grid on the leader's clock (``CLOCK_ROUNDS``); a worker maps it to its own
  clock with the smallest (arrival − sent) it saw, which is off by at most the smallest
  one-way delay, and sends its perceptions on that grid. The first model goes out once
  ``WARM_LOOPS`` loops had every worker's perception.

Each node writes its own result. What a node can say without another's clock: the
leader the learning curve (model versions scored after the run) and each worker's
perception latency above its smallest one (the queueing a perception met); a worker its
**reaction**: from sending its perception of loop ``k`` to receiving the control of loop
``k``, on its own clock, and the loops that missed the deadline (or got no control).
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from coorp._errors import UsageError
from coorp.learn._network import LearnCurve, LearnSpec
from coorp.learn._runtime import (
    RuntimeSpec,
    ServerResult,
    WorkerResult,
    percentiles,
    role_config,
    score_versions,
)
from coorp.learn._runtime.results import read_result
from coorp.learn._runtime.role import Role
from coorp.learn._runtime.server import Server
from coorp.learn._runtime.worker import Worker
from coorp.scenario import Scenario

__all__ = ["DEFAULT_LEADER_PORT", "leader_report", "run_robot", "worker_report"]

#: The leader's learning inbox (LS and bulk; ``--modes tcp`` also uses the port after it).
DEFAULT_LEADER_PORT = 7410


def _check_host(host: str) -> None:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return  # a name: resolved when binding
    if ip.is_unspecified:
        raise UsageError(
            f"--host {host}: name this robot's own address, the one the others reach it "
            "at (it is announced to the leader), not a wildcard"
        )


def run_robot(
    scenario: Scenario,
    team_file: str | Path,
    robot: str,
    *,
    mode: str,
    seed: int,
    spec: LearnSpec,
    host: str,
    server: str | None,
    port: int | None,
    out_dir: Path,
    max_versions: int | None = None,
    reuse_streams: bool = False,
    timeout_s: float = 600.0,
    on_progress: Callable[[str], None] | None = None,
) -> ServerResult | WorkerResult:
    """Run this robot's role until the leader stops the run; its result (also written
    to ``out_dir/<robot>.json``, the leader's versions to ``<robot>.json.npy``). Every
    wait — the team's hellos, a model, an update — is bounded by ``timeout_s`` (robots
    are started by hand, one after another)."""
    wl = scenario.workload
    if wl is None:
        raise UsageError("the scenario needs [workload.mpc] and [workload.drlc]")
    roles = [wl.leader, *scenario.workers]
    if robot not in roles:
        raise UsageError(
            f"--robot {robot!r} has no role in the scenario: its leader is {wl.leader!r}, "
            f"its workers {', '.join(scenario.workers)}"
        )
    _check_host(host)
    leads = robot == wl.leader
    if not leads and not server:
        raise UsageError(
            f"--server is needed on a worker: the leader's learning inbox, host:port "
            f"(the leader listens on port {DEFAULT_LEADER_PORT} unless --port says otherwise)"
        )
    srv_host, _, srv_port = (server or "").rpartition(":")
    if not leads and (not srv_host or not srv_port.isdigit()):
        raise UsageError(f"--server {server!r}: expected host:port")
    # RuntimeSpec's network fields are the orchestrator's; a team's network is its own.
    rt = RuntimeSpec(
        net="loopback", max_versions=max_versions, reuse_streams=reuse_streams,
        timeout_s=timeout_s,
    )  # fmt: skip
    cfg = role_config(scenario, mode, spec, rt)
    cfg.seed = seed * 1000 + roles.index(robot)  # the simulated path's seeds
    out_dir.mkdir(parents=True, exist_ok=True)
    conf = out_dir / f"{robot}.json.in"
    conf.write_bytes(cfg.to_json())
    result = out_dir / f"{robot}.json"
    args = argparse.Namespace(
        robot=robot, host=host, config=str(conf), result=str(result), team=str(team_file),
        port=(DEFAULT_LEADER_PORT if port is None else port) if leads else (port or 0),
    )  # fmt: skip
    if not leads:
        args.server = server
        args.server_tcp = f"{srv_host}:{int(srv_port) + 1}"
    role: Role = Server(args) if leads else Worker(args)
    if on_progress is not None:
        role.progress = on_progress
    try:
        role.run()
    finally:
        role.close()
    if leads:
        return read_result(result, ServerResult)
    return read_result(result, WorkerResult)


def worker_report(result: ServerResult | WorkerResult, deadline_ns: int) -> dict[str, Any]:
    """A worker's reaction per loop while it learned (its first model to the stop): its
    perception of loop ``k`` sent → the control of loop ``k`` received, its own clock.
    Loops sent less than a deadline before the stop are left out (undecided)."""
    if not isinstance(result, WorkerResult):
        raise UsageError(f"{result.robot} is the leader: its report is leader_report's")
    start, stop = result.learning_ns
    if start is None:
        start = stop
    stop -= deadline_ns
    controls: dict[int, int] = {}
    for c in result.controls:
        controls.setdefault(c.k, c.received_ns)
    reactions: list[float] = []
    missed = loops = 0
    for k, sent in result.perceptions:
        if not start <= sent <= stop:
            continue
        loops += 1
        got = controls.get(k)
        if got is None or got - sent > deadline_ns:
            missed += 1
        if got is not None:
            reactions.append((got - sent) / 1e6)
    offset = result.clock_offset_ns
    return {
        "loops": loops,
        "missed": missed,
        "miss_rate": missed / loops if loops else 0.0,
        "reaction_ms": percentiles(reactions),
        "clock_offset_ms": None if offset is None else offset / 1e6,
        "updates": result.updates,
    }


def leader_report(
    result: ServerResult | WorkerResult,
    versions: np.ndarray,
    spec: LearnSpec,
    *,
    mode: str,
    seed: int,
    sync: str,
    duration_s: float,
) -> tuple[LearnCurve, dict[str, Any]]:
    """The learning curve, and per worker its perceptions' latency above the smallest
    one seen (sender and leader clocks differ by a constant, which the subtraction
    cancels): what the perceptions waited in queues while the team learned."""
    if not isinstance(result, ServerResult):
        raise UsageError(f"{result.robot} is a worker: its report is worker_report's")
    t0, t1 = result.t0_ns, result.t_end_ns
    by_robot: dict[str, list[int]] = {}
    for p in result.perceptions:
        by_robot.setdefault(p.robot, []).append(p.received_ns - p.sent_ns)
    above: dict[str, Any] = {}
    for robot, deltas in sorted(by_robot.items()):
        floor = min(deltas)
        during = [
            (p.received_ns - p.sent_ns - floor) / 1e6
            for p in result.perceptions
            if p.robot == robot and t0 <= p.received_ns <= t1
        ]
        above[robot] = percentiles(during)
    # The loop's misses are the workers' to measure (worker_report): not a number here.
    curve = score_versions(
        result, versions, spec, mode=mode, seed=seed, sync=sync, duration_s=duration_s,
        violation_rate=float("nan"),
    )  # fmt: skip
    return curve, {"perception_above_min_ms": above}
