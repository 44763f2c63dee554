"""``coorp learn --runtime`` (the team as processes on this host) and ``coorp learn
--team`` (this robot's role of a real team): learning over real sockets."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from coorp._errors import InvariantError, UsageError
from coorp._manifest import build_manifest, json_safe, write_json
from coorp.cli._common import console as shared_console
from coorp.cli._learn._channel import show_ci as _show
from coorp.cli._learn._plot import plot_rewards
from coorp.cli._options import ensure_out_dir

__all__ = ["learn_robot", "learn_runtime"]


def _ci(vals: list[float]) -> dict[str, float]:
    from coorp.stats import mean_ci

    m = mean_ci([v for v in vals if v is not None])
    return {"mean": m.mean, "ci95": m.ci95, "n": m.n}


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _reuse_streams(streams: str | None) -> bool:
    """``--streams reuse`` (one stream per peer) or fresh (the default)."""
    return streams == "reuse"


def _air_factory(sc: Any, scenario_path: str, *, net: str | None, rate_mbit: float | None) -> Any:
    """``--medium wifi``: the scenario's emulated channel for every run, after the flags
    that do not apply to it are refused."""
    from coorp._errors import ConfigurationError
    from coorp.cli._learn._air import air_network
    from coorp.emulate import emulation_unavailable

    if net is not None and str(net) != "netns":
        raise UsageError(
            f"--medium wifi runs every robot in a namespace of the emulated channel; "
            f"--net {net} has no channel (drop --net, or use --medium split|shared)"
        )
    if rate_mbit is not None:
        raise UsageError(
            "--rate-mbit shapes the wired media (split, shared); with --medium wifi the "
            f"rate is {sc.name}'s channel (its [phy] and [links]: change the scenario)"
        )
    why = emulation_unavailable()
    if why is not None:
        raise ConfigurationError(f"--medium wifi: {why}")
    return air_network(sc, source=scenario_path)


def learn_runtime(
    *,
    scenario_path: str,
    sc: Any,
    spec: Any,
    seeds: tuple[int, ...],
    modes: str | None,
    net: str | None,
    rate_mbit: float | None,
    max_versions: int | None,
    medium: str | None,
    streams: str | None,
    target: float | None,
    out: Path,
    formats: tuple[str, ...],
    t_wall: float,
) -> None:
    """``coorp learn --runtime``: every seed under every mode (interleaved, so that load
    drifts on a shared machine touch both alike), then one table, JSON, figure, manifest."""
    from rich.console import Console
    from rich.table import Table

    from coorp.learn import RUNTIME_MODES as MODES
    from coorp.learn import RuntimeSpec, learn_on_runtime, summarize

    chosen = [m.strip() for m in (modes or "coorp,tcp").split(",") if m.strip()]
    bad = [m for m in chosen if m not in MODES]
    if bad or not chosen:
        raise UsageError(
            f"unknown mode(s) {bad} for --modes; allowed: {', '.join(MODES)}"
            if bad
            else "--modes is empty; allowed: " + ", ".join(MODES)
        )
    from coorp.scenario import SyncMode

    wl = sc.workload
    if wl is not None and (spec.sync or wl.drlc.sync) is SyncMode.SSP:
        raise UsageError("--sync ssp is simulated only; --runtime supports bsp and asp")
    network = None
    if medium == "wifi":
        network = _air_factory(sc, scenario_path, net=net, rate_mbit=rate_mbit)
    rt = RuntimeSpec(
        net=str(net or "netns"),
        rate_mbit=50.0 if rate_mbit is None else rate_mbit,
        max_versions=max_versions,
        medium=str(medium or "split"),
        reuse_streams=_reuse_streams(streams),
    )
    if rt.net == "netns" and network is None:
        from coorp._errors import ConfigurationError
        from coorp.learn import netns_unavailable

        why = netns_unavailable()
        if why is not None:
            raise ConfigurationError(f"--net netns: {why}; use --net loopback instead")
    out_dir = ensure_out_dir(out)
    console = shared_console
    err = Console(stderr=True, quiet=not sys.stderr.isatty())
    import os
    import signal
    import threading

    load0 = os.getloadavg()[0]
    runs = []
    # SIGTERM unwinds like Ctrl-C, so every run's finally removes its processes and
    # namespaces (the default action would end the process without it).
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if main_thread else None
    try:
        for seed in seeds:
            for m in chosen:
                runs.append(
                    learn_on_runtime(
                        sc, m, seed, spec, rt, workdir=out_dir / "runs",
                        on_progress=lambda msg: err.log(msg), network=network,
                    )
                )  # fmt: skip
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    dur = spec.duration_s if spec.duration_s is not None else sc.duration_s
    summary = summarize([r.curve for r in runs], dur, target)
    c0 = runs[0].curve
    summary["config"] = {
        "scenario": scenario_path, "runtime": True, "net": rt.net, "rate_mbit": rt.rate_mbit,
        "medium": rt.medium, "streams": "reuse" if rt.reuse_streams else "fresh",
        "sync": c0.sync, "params": c0.params, "air_bytes": c0.air_bytes, "duration_s": dur,
        "hidden": spec.ppo.hidden, "envs": spec.ppo.envs, "lr": spec.ppo.lr,
        "physics": spec.task.physics,
        "max_versions": rt.max_versions, "modes": chosen, "seeds": list(seeds),
        "load_before": load0, "load_after": os.getloadavg()[0],
    }  # fmt: skip
    for m in chosen:
        mine = [r for r in runs if r.mode == m]
        row = summary["policies"][m]
        row["runtime"] = {
            "reaction_p50_ms": _ci([r.ls["reaction_ms"]["p50"] for r in mine]),
            "reaction_p99_ms": _ci([r.ls["reaction_ms"]["p99"] for r in mine]),
            "perception_p50_ms": _ci([r.ls["perception_ms"]["p50"] for r in mine]),
            "perception_p99_ms": _ci([r.ls["perception_ms"]["p99"] for r in mine]),
            "miss_rate": _ci([r.ls["miss_rate"] for r in mine]),
            "sync_s": _ci([r.transfers["mean_s"] for r in mine]),
            "syncs_intact": all(r.syncs_intact for r in mine),
            "runs": [
                {"seed": r.curve.seed, "wall_s": r.wall_s, "ls": r.ls, "transfers": r.transfers,
                 "syncs_intact": r.syncs_intact, "syncs_checked": r.syncs_checked,
                 "final_changed": r.final_changed, "leader": r.leader,
                 "network": r.network}
                for r in mine
            ],
        }  # fmt: skip
    if rt.medium == "wifi":
        where = f"emulated WiFi: {sc.name}'s channel"
    elif rt.net == "netns":
        where = f"netns, {rt.rate_mbit:g} Mbit/s {rt.medium}"
    else:
        where = "loopback"
    title = (
        f"learning over real sockets ({where}): {sc.name}, {c0.sync.upper()}, {c0.params} "
        f"params, {c0.air_bytes / 1e6:.3g} MB per sync, {dur:g} s"
    )
    table = Table(title=title)
    for col in ("mode", "versions", "final return", "time to target (s)", "reached",
                "MPC reaction p50/p99 (ms)", "MPC misses", "perception p99 (ms)",
                "s per sync", "syncs intact"):  # fmt: skip
        table.add_column(col, justify="right")
    for m in chosen:
        row = summary["policies"][m]
        rtd = row["runtime"]
        table.add_row(
            m, _show(row["epochs"]), _show(row["final_reward"]), _show(row["time_to_target_s"]),
            f"{row['reached_target']}/{len(row['seeds'])}",
            f"{_show(rtd['reaction_p50_ms'])} / {_show(rtd['reaction_p99_ms'])}",
            _show(rtd["miss_rate"], 100, "%"), _show(rtd["perception_p99_ms"]),
            _show(rtd["sync_s"]), "yes" if rtd["syncs_intact"] else "NO",
        )  # fmt: skip
    console.print(table)
    console.print(
        f"target return {summary['target']:.2f}; ± are 95% CIs over {len(seeds)} run(s) per "
        f"mode; load {load0:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    if rt.medium == "wifi":
        from coorp.cli._learn._air import describe_air

        console.print(describe_air([r.network for r in runs]))
    (out_dir / "learn.json").write_text(json.dumps(json_safe(summary), indent=1) + "\n")
    for fig in plot_rewards(summary, out_dir / "reward", formats,
                     f"{sc.name}: reward vs wall time over real sockets ({where}, "
                     f"{c0.sync.upper()}, {c0.air_bytes / 1e6:.3g} MB per sync)",
                     xlabel="wall time (s)"):  # fmt: skip
        console.print(f"figure: {fig}")
    write_json(out_dir / "manifest.json", build_manifest(
        scenario=sc.model_dump(mode="json"), scenario_path=scenario_path, seed=seeds[0],
        wall_s=time.monotonic() - t_wall,
        extra={"command": "learn --runtime", "modes": chosen, "seeds": list(seeds),
               "config": summary["config"]},
    ))  # fmt: skip
    console.print(f"json: {out_dir / 'learn.json'}")
    if not all(r.syncs_intact for r in runs):
        raise InvariantError("a parameter sync arrived altered or incomplete (see learn.json)")


def learn_robot(
    *,
    scenario_path: str,
    sc: Any,
    spec: Any,
    team: Path,
    robot: str | None,
    host: str | None,
    server: str | None,
    port: int | None,
    seeds: tuple[int, ...],
    modes: str | None,
    max_versions: int | None,
    streams: str | None,
    target: float | None,
    out: Path,
    formats: tuple[str, ...],
    t_wall: float,
) -> None:
    """``coorp learn --team``: this robot's role until the leader stops the run; the
    leader prints the learning, a worker its MPC reaction."""
    from rich.table import Table

    from coorp.learn import RUNTIME_MODES as MODES
    from coorp.learn import leader_report, run_robot, summarize, worker_report

    if robot is None or host is None:
        raise UsageError(
            "--team needs --robot (which robot this machine is) and --host (its address)"
        )
    mode = (modes or "coorp").strip()
    if mode not in MODES:
        raise UsageError(f"--modes with --team takes one of {', '.join(MODES)}, got {mode!r}")
    if len(seeds) != 1:
        raise UsageError(
            f"--seeds with --team takes one seed (the same on every robot), got {len(seeds)}"
        )
    if port is not None and not 0 <= port <= 65534:
        raise UsageError(f"--port must be within 0..65534, got {port}")
    # run_robot checks --host and --server before it creates the output folder.
    out_dir = out
    wl = sc.workload
    shared_console.print(
        f"{robot}: {'leader' if wl is not None and robot == wl.leader else 'worker'} of "
        f"{sc.name} ({mode}, seed {seeds[0]}); waiting for the team"
    )
    from rich.console import Console

    err = Console(stderr=True, quiet=not sys.stderr.isatty())
    result = run_robot(
        sc, team, robot, mode=mode, seed=seeds[0], spec=spec, host=host, server=server,
        port=port, out_dir=out_dir, max_versions=max_versions,
        reuse_streams=_reuse_streams(streams), on_progress=lambda line: err.log(line),
    )  # fmt: skip
    cfg = json.loads((out_dir / f"{robot}.json.in").read_text())
    report: dict[str, Any] = {"robot": robot, "mode": mode, "seed": seeds[0]}
    if wl is not None and robot == wl.leader:
        import numpy as np

        versions = np.load(out_dir / f"{robot}.json.npy")
        curve, extra = leader_report(
            result, versions, spec, mode=mode, seed=seeds[0], sync=cfg["sync"],
            duration_s=float(cfg["duration_s"]),
        )  # fmt: skip
        summary = summarize([curve], float(cfg["duration_s"]), target)
        report.update(summary=summary, **extra)
        row = summary["policies"][mode]
        table = Table(title=f"{sc.name} on the team ({mode}, {cfg['sync'].upper()}): the leader")
        for col in ("versions", "initial return", "final return", "time to target (s)"):
            table.add_column(col, justify="right")
        table.add_row(_show(row["epochs"]), f"{curve.initial_return:.2f}",
                      _show(row["final_reward"]), _show(row["time_to_target_s"]))  # fmt: skip
        shared_console.print(table)
        lat = Table(title="perception latency above each worker's smallest (ms; queueing)")
        for col in ("worker", "p50", "p99", "max"):
            lat.add_column(col, justify="right")
        for w, p in extra["perception_above_min_ms"].items():
            lat.add_row(w, *(_num(p[q]) for q in ("p50", "p99", "max")))
        shared_console.print(lat)
        for fig in plot_rewards(summary, out_dir / "reward", formats,
                         f"{sc.name}: reward vs wall time on the team ({mode})",
                         xlabel="wall time (s)"):  # fmt: skip
            shared_console.print(f"figure: {fig}")
    else:
        rep = worker_report(result, int(cfg["deadline_ns"]))
        report.update(rep)
        table = Table(title=f"{robot}: MPC reaction while learning ({mode}), its own clock")
        for col in ("loops", "reaction p50/p99/max (ms)", "misses", "clock offset (ms)", "updates"):
            table.add_column(col, justify="right")
        r = rep["reaction_ms"]
        table.add_row(
            str(rep["loops"]), f"{_num(r['p50'])} / {_num(r['p99'])} / {_num(r['max'])}",
            f"{rep['missed']} ({100 * rep['miss_rate']:.1f}%)", _num(rep["clock_offset_ms"]),
            str(rep["updates"]),
        )  # fmt: skip
        shared_console.print(table)
    (out_dir / f"{robot}-report.json").write_text(json.dumps(json_safe(report), indent=1) + "\n")
    write_json(out_dir / f"{robot}-manifest.json", build_manifest(
        scenario=sc.model_dump(mode="json"), scenario_path=scenario_path, seed=seeds[0],
        wall_s=time.monotonic() - t_wall,
        extra={"command": "learn --team", "robot": robot, "mode": mode, "team": str(team)},
    ))  # fmt: skip
    shared_console.print(f"json: {out_dir / f'{robot}-report.json'}")
