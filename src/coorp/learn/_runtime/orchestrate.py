"""``coorp learn --runtime``: every robot of the scenario's team as a process on this
host (in network namespaces or on loopback), the run bounded in time, every process and
namespace removed on every exit path, then the results read back and scored."""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from coorp._errors import ConfigurationError, UsageError
from coorp.learn._network import LearnCurve, LearnSpec
from coorp.learn._runtime.config import (
    KEY_ENV,
    MODES,
    RuntimeSpec,
    role_config,
    runtime_workload,
)
from coorp.learn._runtime.network import NetworkFactory, RuntimeNetwork, wired
from coorp.learn._runtime.results import ServerResult, WorkerResult, read_result
from coorp.learn._runtime.scoring import check_syncs, ls_metrics, score_versions
from coorp.scenario import Scenario

__all__ = ["RuntimeRun", "learn_on_runtime"]


@dataclass
class RuntimeRun:
    """One run: the learning curve against wall time, the MPC loop's latencies, the
    transfers, and whether every sync arrived intact."""

    curve: LearnCurve
    mode: str
    wall_s: float
    ls: dict[str, Any]
    transfers: dict[str, Any]
    syncs_intact: bool
    syncs_checked: int
    leader: dict[str, Any]
    final_changed: bool
    #: What the network reported about the run (the emulated channel's real-time
    #: verdict, lag and frames per access category); None for a wired one.
    network: dict[str, Any] | None = None


def _ready(p: subprocess.Popen[bytes], timeout: float, log: Path) -> list[str]:
    """The fields of the process's ``READY ...`` line (bounded wait)."""
    assert p.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(p.stdout, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                break
            chunk = os.read(p.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
    line = buf.split(b"\n", 1)[0].decode(errors="replace")
    if not line.startswith("READY"):
        raise ConfigurationError(
            f"a coorp learn process did not start (exit {p.poll()}): {_tail(log)}"
        )
    return line.split()[1:]


def _tail(log: Path, n: int = 1500) -> str:
    with contextlib.suppress(OSError):
        return log.read_text(errors="replace")[-n:].strip() or "(no output)"
    return "(no log)"


def _role_argv() -> list[str]:
    return [sys.executable, "-m", "coorp.learn._runtime"]


def learn_on_runtime(
    scenario: Scenario,
    mode: str,
    seed: int,
    spec: LearnSpec,
    rt: RuntimeSpec,
    *,
    workdir: Path,
    on_progress: Callable[[str], None] | None = None,
    network: NetworkFactory | None = None,
) -> RuntimeRun:
    """Run the scenario's team as processes on real sockets and learn for
    ``spec.duration_s`` wall seconds; score every model version afterwards.

    ``network`` makes the run's network (:mod:`coorp.learn._runtime.network`); None:
    loopback or the wired namespaces ``rt`` names (``medium`` ``wifi`` needs one)."""
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
    wl, sync = runtime_workload(scenario, spec)
    if network is None:
        if rt.medium == "wifi":
            raise UsageError(
                "--medium wifi: the emulated channel is built by the caller "
                "(coorp learn --runtime --medium wifi) and passed as network="
            )
        if rt.net == "netns":
            from coorp.learn._netns import netns_unavailable

            why = netns_unavailable()
            if why is not None:
                raise ConfigurationError(f"--net netns: {why}; use --net loopback instead")
        network = wired(net=rt.net, medium=rt.medium, rate_mbit=rt.rate_mbit,
                        queue_ms=rt.queue_ms, downlink=rt.downlink)  # fmt: skip
    names = list(scenario.workers)
    duration = spec.duration_s if spec.duration_s is not None else scenario.duration_s
    run_dir = workdir / f"{mode}-seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, KEY_ENV: os.urandom(32).hex()}
    opts = scenario.policy.coorp if scenario.policy is not None else None
    cfg = role_config(scenario, mode, spec, rt)
    say = on_progress or (lambda _m: None)
    t_start = time.monotonic()
    net: RuntimeNetwork | None = None
    try:
        net = network(wl.leader, names, seed)
        permits = None
        if mode == "coorp":
            limit = opts.limit if opts is not None else 1
            timeslice = opts.timeslice_s if opts is not None else 5.0
            log = run_dir / "permits.log"
            # On split queues the leader's broadcasts leave through a queue no upload
            # enters: a permit of its own (one sender at a time per queue).
            downlink = wl.leader if rt.medium == "split" else ""
            permits = net.popen(wl.leader, [*_role_argv(), "permits", "--host",
                                net.addr(wl.leader), "--robots", ",".join([wl.leader, *names]),
                                "--limit", str(limit), "--timeslice-s", str(timeslice),
                                "--downlink", downlink], env, log)  # fmt: skip
            cfg.permits = f"{net.addr(wl.leader)}:{_ready(permits, rt.timeout_s, log)[0]}"
        cfg.grid_ns = time.monotonic_ns()
        procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        for i, robot in enumerate([wl.leader, *names]):
            # worker i (1-based) = the simulated seeds
            conf = msgspec.structs.replace(cfg, seed=seed * 1000 + i)
            (run_dir / f"{robot}.json.in").write_bytes(conf.to_json())
            role = "server" if robot == wl.leader else "worker"
            argv = [*_role_argv(), role, "--robot", robot, "--host", net.addr(robot),
                    "--config", str(run_dir / f"{robot}.json.in"),
                    "--result", str(run_dir / f"{robot}.json")]  # fmt: skip
            if role == "worker":
                assert cfg.server is not None and cfg.server_tcp is not None
                argv += ["--server", cfg.server, "--server-tcp", cfg.server_tcp]
            log = run_dir / f"{robot}.log"
            p = net.popen(robot, argv, env, log)
            procs[robot] = (p, log)
            if role == "server":
                inbox_port, tcp_port = _ready(p, rt.timeout_s, log)
                cfg.server = f"{net.addr(robot)}:{inbox_port}"
                cfg.server_tcp = f"{net.addr(robot)}:{tcp_port}"
        say(f"{mode}, seed {seed}: {len(names)} workers learning for {duration:g} s")
        bound = time.monotonic() + duration + 4 * rt.timeout_s
        for robot, (p, log) in procs.items():
            try:
                code = p.wait(timeout=max(bound - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                raise ConfigurationError(f"{robot} did not finish: {_tail(log)}") from None
            if code != 0:
                raise ConfigurationError(f"{robot} exited with {code}: {_tail(log)}")
        if permits is not None:
            permits.terminate()
            permits.wait(timeout=10)
        reported = net.finish()
        server = read_result(run_dir / f"{wl.leader}.json", ServerResult)
        versions = np.load(run_dir / f"{wl.leader}.json.npy")
        workers = {w: read_result(run_dir / f"{w}.json", WorkerResult) for w in names}
    finally:
        if net is not None:
            net.destroy()
    wall = time.monotonic() - t_start
    intact, checked = check_syncs(server, workers)
    ls = ls_metrics(server, workers, cfg)
    # Score the versions in place within the duration (after the run: no CPU taken from it).
    curve = score_versions(
        server, versions, spec, mode=mode, seed=seed, sync=sync.value, duration_s=duration,
        violation_rate=ls["miss_rate"],
    )  # fmt: skip
    recs = [*server.receipts, *(r for res in workers.values() for r in res.receipts)]
    syncs = [r for r in recs if r.kind in ("model", "update")]
    transfers = {
        "messages": len(syncs),
        "bytes": int(sum(r.nbytes for r in syncs)),
        "mean_s": float(np.mean([r.ns for r in syncs]) / 1e9) if syncs else 0.0,
        "permit_wait_s": float(sum(r.permit_wait_ns for r in syncs) / 1e9),
        "preemptions": int(sum(r.preemptions for r in syncs)),
        "worker_compute_s": {w: res.compute_s for w, res in workers.items()},
    }
    return RuntimeRun(
        curve=curve,
        mode=mode,
        wall_s=wall,
        ls=ls,
        transfers=transfers,
        syncs_intact=intact,
        syncs_checked=checked,
        leader=server.leader,
        final_changed=bool(len(versions) > 1 and not np.array_equal(versions[-1], versions[0])),
        network=reported,
    )
