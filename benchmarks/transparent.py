"""Transparent mode, measured: unmodified ROS 2-style programs with and without Coorp.

A leader and N robots (4 by default) in network namespaces; the leader's link is a
50 Mbit/s bottleneck shaped both ways (``tbf``, 100 ms queue), like the air in front of
an access point. Every robot runs, for ``--duration`` seconds after a warm-up:

* the MPC loop of ``examples/unmodified/mpc_loop.py`` — a 12 KB perception at 30 Hz to
  the leader, a 1 KB command back for each — over Cyclone DDS (``--apps dds``) or Zenoh
  (``zenoh``), programs that know nothing of Coorp;
* a bulk upload to the leader for the whole window (``examples/unmodified/bulk_tcp.py``:
  plain TCP, as a parameter push or an rsync would be).

With ``--medium wifi`` the leader and robots are stations of an emulated 802.11 channel
instead (``coorp.emulate``: ``--scenario``, crl-5 by default, its NICs' rings per
``--ring``): the programs contend for the air, their DSCP picks the access category.

Modes, interleaved per repetition (the same programs; every contender timed over the
same window):

* ``none``: no Coorp at all — what a team gets today;
* ``marking``: transparent agents with the LS selectors only: LS marked (EF), no bulk
  interception, no permits;
* ``transparent``: ``coorp leader`` and ``coorp agent --transparent`` on every host,
  the team file selecting the middleware's LS traffic (preset ``dds``/``zenoh``) and
  the uploads' TCP port as bulk;
* ``api``: the loop and the uploads rewritten on Coorp's own API (LS channels, bulk
  streams of 4 MB messages; ``benchmarks/_transparent_api.py``), app ``coorp``.

Reported per (app, mode), pooled over repetitions: LS one-way latency p50/p99 and miss
rate (every perception and every command; late > 33 ms or lost), bulk Mb/s that reached
the leader inside the window, and ``plain_tcp_bulk_mbps``: the ``none`` runs' in the same
repetitions. Two measurements without LS traffic, per repetition: ``interception_cost``
(1 − bulk through the relay / plain bulk) and ``untouched_flow_ratio`` (a TCP flow that
matches no selector, with transparent agents running vs without). Per-repetition values
are in ``runs``; a ``manifest.json`` lands next to ``--json``.

    sudo .venv/bin/python benchmarks/transparent.py --repetitions 5 --json results/transparent.json

Needs root, iproute2 and the ``team`` and ``transparent`` extras (``make test`` installs them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from coorp._manifest import build_manifest, write_json
from coorp._netns import Proc, StarNetwork
from coorp.runtime import load_team_config, write_team_keys
from coorp.stats import mean_ci
from coorp.teambench._netns import Network, netns_unavailable

ROOT = Path(__file__).resolve().parents[1]
APPS = ROOT / "examples" / "unmodified"
API = Path(__file__).resolve().with_name("_transparent_api.py")
COORP = [str(Path(sys.executable).with_name("coorp"))]
PY = [sys.executable, "-u"]
BULK_PORT = 9000
OTHER_PORT = 9100
BOUND_MS = 33.0


def _env() -> dict[str, str]:
    # Cyclone DDS on the namespace's veth only (discovery and data on the bridge).
    uri = (
        '<CycloneDDS><Domain><General><Interfaces><NetworkInterface name="eth0"/>'
        "</Interfaces></General></Domain></CycloneDDS>"
    )
    return {**os.environ, "CYCLONEDDS_URI": uri, "PYTHONUNBUFFERED": "1"}


def team_file(d: Path, net: Network, app: str, *, bulk: bool = True) -> Path:
    """The team file: Coorp on ports 7300/7301 (DDS domain 0 owns 7400-7649), LS by the
    middleware's preset, bulk = TCP to the upload port (none: marking only)."""
    robots = ["leader", *net.hosts[1:]]
    hosts = ", ".join(f'{"leader" if h == "ld" else h} = "{net.addr(h)}"' for h in net.hosts)
    ls = '{ preset = "zenoh" }' if app == "zenoh" else '{ preset = "dds", domain_id = 0 }'
    ld = net.addr("ld")
    path = d / f"team-{app}{'' if bulk else '-marking'}.toml"
    bulk_line = f"bulk = [{{ ports = {BULK_PORT} }}]\n" if bulk else ""
    path.write_text(
        f'[team]\nname = "tbench"\nkey_file = "team.key"\nrobots = {json.dumps(robots)}\n'
        f"hosts = {{ {hosts} }}\n"
        f'[leader]\nlisten = "{ld}:7300"\n'
        f'[agent]\nleader = "{ld}:7300"\nlisten = "0.0.0.0:7301"\n'
        f"[transparent]\nls = [{ls}]\n{bulk_line}"
    )
    write_team_keys(load_team_config(path), path, force=True)
    return path


class Run:
    """The processes of one measurement; stderr of each kept in a file."""

    def __init__(self, net: Network, d: Path) -> None:
        self.net, self.d = net, d
        self.procs: list[Proc] = []

    def start(self, host: str, argv: list[str], name: str, stdin: bool = False) -> Proc:
        with open(self.d / f"{name}.log", "ab") as err:
            popen = StarNetwork.popen(self.net, host, argv, env=_env(), stdin=stdin, stderr=err)
        p = Proc(name, popen)
        self.procs.append(p)
        return p

    def stop(self) -> None:
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.popen.terminate()
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.popen.wait(timeout=10)
            p.kill()
        self.procs.clear()


def result(p: Proc, timeout: float) -> dict[str, Any]:
    return dict(json.loads(p.expect_rest("RESULT ", timeout)))


def start_coorp(
    run: Run, team: Path, robots: list[str], *, transparent: bool, rt_priority: int = 0
) -> None:
    """``coorp leader`` and (``transparent``) an agent per host, at SCHED_FIFO
    ``rt_priority`` when it is > 0 (0: ordinary scheduling, what the daemons ask for)."""
    coorp = [*(["chrt", "-f", str(rt_priority)] if rt_priority > 0 else []), *COORP]
    leader = run.start("ld", [*coorp, "leader", "--config", str(team)], "coorp-leader")
    leader.expect("coorp leader: serving", 30)
    if not transparent:
        return
    for host in ["ld", *robots]:
        name = "leader" if host == "ld" else host
        argv = [*coorp, "agent", "--config", str(team), "--robot", name, "--transparent"]
        a = run.start(host, [*argv, "--log-level", "warning"], f"agent-{name}")
        a.expect("coorp agent: transparent mode on", 30)


def measure(
    net: Network,
    d: Path,
    args: argparse.Namespace,
    *,
    app: str,
    mode: str,
    ls: bool = True,
    bulk_port: int = BULK_PORT,
) -> dict[str, Any]:
    """One (app, mode) run: LS latencies, and bulk bytes inside the window."""
    robots = net.hosts[1:]
    run = Run(net, d)
    load = os.getloadavg()[0]
    try:
        team = team_file(d, net, app, bulk=mode != "marking")
        if mode != "none":
            start_coorp(run, team, robots, transparent=mode in ("transparent", "marking"),
                        rt_priority=int(getattr(args, "agent_rt_priority", 0) or 0))  # fmt: skip
        lead = args.warmup + 3.0
        start_at = time.monotonic_ns() + int(lead * 1e9)
        end_at = start_at + int(args.duration * 1e9)
        timeout = lead + args.duration + 60
        window = [
            "--start-at", str(start_at), "--duration", str(args.duration),
            "--warmup", str(args.warmup), "--seed", str(args.seed),
        ]  # fmt: skip
        rt = _ls_priority(args)
        if mode == "api":
            return _measure_api(run, net, team, window, timeout, rt) | {"load": load}
        sink = run.start("ld", [*PY, str(APPS / "bulk_tcp.py"), "sink", "--listen",
                                f"0.0.0.0:{bulk_port}"], "sink", stdin=True)  # fmt: skip
        sink.expect("READY", 30)
        loops: list[Proc] = []
        if ls:
            mpc = [*rt, *PY, str(APPS / "mpc_loop.py")]
            common = ["--transport", app, *window]
            leader = [*mpc, "leader", "--robots", ",".join(robots), "--addr", net.addr("ld")]
            loops.append(run.start("ld", [*leader, *common], "mpc-ld"))
            loops += [run.start(r, [*mpc, "robot", "--name", r, "--leader", net.addr("ld"),
                                    *common], f"mpc-{r}") for r in robots]  # fmt: skip
        senders = [
            run.start(r, [*PY, str(APPS / "bulk_tcp.py"), "send", "--to",
                          f"{net.addr('ld')}:{bulk_port}", "--until", str(end_at),
                          "--seed", str(i)], f"send-{r}")
            for i, r in enumerate(robots)
        ]  # fmt: skip
        sent = [result(s, timeout) for s in senders]
        outs = [result(p, timeout) for p in loops]
        sink.send(json.dumps({"cmd": "count", "t0": start_at, "t1": end_at}))
        window_bytes = json.loads(sink.expect_rest("COUNT ", 30))["bytes"]
        row = {
            "app": app,
            "mode": mode,
            "bulk_mbps": window_bytes * 8 / args.duration / 1e6,
            "intact": all(s["intact"] for s in sent),
            "load": load,
        }
        return {**row, **(_ls(outs) if ls else {})}
    finally:
        run.stop()


def _measure_api(
    run: Run, net: Network, team: Path, window: list[str], timeout: float, rt: list[str]
) -> dict[str, Any]:
    robots = net.hosts[1:]
    # LS and bulk are one program on the API: all of it at the loop's priority.
    api = [*rt, *PY, str(API)]
    ldr = run.start("ld", [*api, "leader", "--config", str(team), "--robots", ",".join(robots),
                           *window], "api-ld")  # fmt: skip
    ldr.expect("READY", 30)
    procs = [run.start(r, [*api, "robot", "--config", str(team), "--name", r, "--leader-host",
                           net.addr("ld"), *window], f"api-{r}") for r in robots]  # fmt: skip
    outs = [result(p, timeout) for p in procs]
    lead = result(ldr, timeout)
    sent = {h for o in outs for h in o["bulk_digests"]}
    got = lead["bulk_digests"]
    intact = len(got) == sum(len(o["bulk_digests"]) for o in outs) and set(got) <= sent
    duration = float(window[window.index("--duration") + 1])
    row = {"app": "coorp", "mode": "api", "intact": intact,
           "bulk_mbps": lead["bulk_bytes"] * 8 / duration / 1e6}  # fmt: skip
    return {**row, **_ls([lead, *outs])}


def ls_rt_priority(args: argparse.Namespace) -> int:
    """The loop programs' SCHED_FIFO priority: ``--ls-rt-priority``, else 5 on the
    emulated air (below the emulator's 10) and 0 (ordinary) on the wire."""
    given = getattr(args, "ls_rt_priority", None)
    if given is not None:
        return int(given)
    return 5 if getattr(args, "medium", "wire") == "wifi" else 0


def _ls_priority(args: argparse.Namespace) -> list[str]:
    prio = ls_rt_priority(args)
    return ["chrt", "-f", str(prio)] if prio > 0 else []


def _ls(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every perception and every command: one-way latencies, late and lost."""
    ldr = next(x for x in outs if x["role"] == "leader")
    lat: list[float] = []
    up: list[float] = []
    down: list[float] = []
    reaction: list[float] = []
    expected = 0
    for r in (x for x in outs if x["role"] == "robot"):
        expected += 2 * r["sent"]
        up += ldr["perception_ms"].get(r["name"], [])
        down += r["command_ms"]
        reaction += r.get("reaction_ms", [])
        lat += r["command_ms"] + ldr["perception_ms"].get(r["name"], [])
    return {
        "ls_latencies_ms": lat,
        "ls_expected": expected,
        "ls_late": sum(1 for x in lat if x > BOUND_MS),
        "ls_lost": max(expected - len(lat), 0),
        # Per direction (each expected ls_expected / 2 times), and each robot's reaction
        # (its perception sent -> that perception's command received, its own clock).
        "perception_ms": up,
        "command_ms": down,
        "reaction_ms": reaction,
    }


def pooled(rows: list[dict[str, Any]]) -> dict[str, Any]:
    lat = np.array([x for r in rows for x in r["ls_latencies_ms"]], dtype=float)
    expected = sum(r["ls_expected"] for r in rows)
    misses = sum(r["ls_late"] + r["ls_lost"] for r in rows)
    return {
        "ls_p50_ms": float(np.percentile(lat, 50)) if lat.size else None,
        "ls_p99_ms": float(np.percentile(lat, 99)) if lat.size else None,
        "ls_miss_rate": misses / expected if expected else None,
    }


def _plain(rows: list[dict[str, Any]], app: str, mode: str, rep: int | None = None) -> float:
    """Plain TCP's bulk (mode none) in the same repetitions: of the same app, or of
    every app for ``api`` (its LS traffic is Coorp's own)."""
    plain = [
        r["bulk_mbps"]
        for r in rows
        if r["mode"] == "none"
        and (mode == "api" or r["app"] == app)
        and (rep is None or r["repetition"] == rep)
    ]
    return float(np.mean(plain)) if plain else float("nan")


SAMPLES = ("ls_latencies_ms", "perception_ms", "command_ms", "reaction_ms")


def _without_samples(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in SAMPLES} | pooled([row])


def summarize(rows: list[dict[str, Any]], extras: list[dict[str, float]]) -> dict[str, Any]:
    results = []
    ratios: dict[str, dict[str, float]] = {}
    for app, mode in dict.fromkeys((r["app"], r["mode"]) for r in rows):
        mine = [r for r in rows if (r["app"], r["mode"]) == (app, mode)]
        plain = _plain(rows, app, mode)
        results.append(
            {
                "app": app,
                "mode": mode,
                **pooled(mine),
                "bulk_mbps": float(np.mean([r["bulk_mbps"] for r in mine])),
                "plain_tcp_bulk_mbps": None if np.isnan(plain) else plain,
            }
        )
        if mode != "none" and not np.isnan(plain):
            per_rep = [r["bulk_mbps"] / _plain(rows, app, mode, r["repetition"]) for r in mine]
            m = mean_ci(per_rep)
            ratios[f"{app}/{mode}"] = {"mean": m.mean, "ci95": m.ci95, "n": m.n}

    def mean(key: str) -> float | None:
        return float(np.mean([e[key] for e in extras])) if extras else None

    return {
        "results": results,
        "interception_cost": mean("interception_cost"),
        "untouched_flow_ratio": mean("untouched_flow_ratio"),
        "bulk_ratio_to_plain_tcp": ratios,
        "runs": [_without_samples(r) for r in rows],
        "extras": extras,
    }


def _line(rep: int, row: dict[str, Any]) -> str:
    s = pooled([row])
    return (
        f"rep {rep} {row['app']:5s} {row['mode']:11s}: LS p50 {s['ls_p50_ms']:.2f} ms, "
        f"p99 {s['ls_p99_ms']:.2f} ms, misses {s['ls_miss_rate']:.2%}; "
        f"bulk {row['bulk_mbps']:.1f} Mb/s, intact {row['intact']}"
    )


WIFI_SYSCTLS = [
    "net.ipv4.ipfrag_time=1",
    "net.ipv4.ipfrag_high_thresh=33554432",
    "net.ipv4.ipfrag_low_thresh=25165824",
]  # as the wired star's (teambench)


def network(args: argparse.Namespace) -> Any:
    """The wired star, or the emulated channel of ``--scenario`` with ``--ring`` NICs."""
    if args.medium == "wire":
        return Network(args.robots)
    from coorp.emulate import EmulatedStar
    from coorp.scenario import apply_overrides, load_scenario, resolve_scenario

    path = resolve_scenario(args.scenario)
    ring = args.ring.replace("-", "_")
    sc = apply_overrides(load_scenario(path), [("hw_queue.mode", ring)], source=str(path))
    hosts = ["ld", *(f"r{i}" for i in range(1, args.robots + 1))]
    return EmulatedStar(hosts, sc, tag="coorptb", seed=args.seed)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--robots", type=int, default=4)
    p.add_argument("--rate-mbit", type=float, default=50.0)
    p.add_argument("--duration", type=float, default=15.0, help="seconds measured per run")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--apps", default="dds,zenoh")
    p.add_argument("--modes", default="none,transparent,api")
    p.add_argument(
        "--medium",
        choices=("wire", "wifi"),
        default="wire",
        help="wire: the shaped star; wifi: the emulated channel (coorp emulate)",
    )
    p.add_argument("--scenario", default="crl-5", help="--medium wifi: the channel")
    p.add_argument(
        "--ring",
        choices=("shared", "per-ac"),
        default="shared",
        help="--medium wifi: the NICs' ring model",
    )
    p.add_argument(
        "--ls-rt-priority",
        type=int,
        default=None,
        help="SCHED_FIFO priority of the MPC loop's programs (api: the whole program); "
        "default 5 with --medium wifi (below the emulator's 10: the loop's latency then "
        "measures the channel and the middleware, not this host's scheduler), 0 "
        "(ordinary scheduling) on the wire",
    )
    p.add_argument(
        "--agent-rt-priority",
        type=int,
        default=0,
        help="SCHED_FIFO priority of coorp leader and the agents (0: ordinary scheduling, "
        "as the daemons run by default)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-extras", action="store_true", help="skip the runs without LS")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--logs", type=Path, default=None, help="keep every process's stderr here")
    args = p.parse_args()
    why = netns_unavailable()
    if why:
        print(f"benchmarks/transparent.py: {why}", file=sys.stderr)
        return 2
    if args.ls_rt_priority is not None and not 0 <= args.ls_rt_priority <= 98:
        p.error(
            f"--ls-rt-priority {args.ls_rt_priority}: SCHED_FIFO priorities are 1..98 "
            "(0: ordinary scheduling)"
        )
    apps = [a for a in args.apps.split(",") if a]
    modes = [m for m in args.modes.split(",") if m]
    allowed = {"none", "marking", "transparent", "api"}
    bad = sorted(set(apps) - {"dds", "zenoh"}) + sorted(set(modes) - allowed)
    if bad:
        p.error(f"unknown app or mode {bad}: apps dds, zenoh; modes {', '.join(sorted(allowed))}")
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    extras: list[dict[str, float]] = []
    with (
        tempfile.TemporaryDirectory(prefix="coorp-transparent-") as tmp,
        network(args) as net,
    ):
        if args.medium == "wire":
            net.create(rate_mbit=args.rate_mbit, queue_ms=100.0)
        else:
            net.create(sysctls=WIFI_SYSCTLS)
        d = args.logs or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        for rep in range(args.repetitions):
            todo = [(a, m) for a in apps for m in modes if m != "api"]
            todo += [("coorp", "api")] if "api" in modes else []
            for app, mode in todo:
                row = measure(net, d, args, app=app, mode=mode) | {"repetition": rep}
                rows.append(row)
                print(_line(rep, row), flush=True)
            if args.no_extras:
                continue
            runs = {
                (port, mode): measure(net, d, args, app="dds", mode=mode, ls=False,
                                      bulk_port=port)["bulk_mbps"]
                for port in (BULK_PORT, OTHER_PORT) for mode in ("none", "transparent")
            }  # fmt: skip
            extras.append({
                "interception_cost": 1 - runs[BULK_PORT, "transparent"] / runs[BULK_PORT, "none"],
                "untouched_flow_ratio": runs[OTHER_PORT, "transparent"] / runs[OTHER_PORT, "none"],
                **{f"{'relayed' if port == BULK_PORT else 'untouched'}_{mode}_mbps": v
                   for (port, mode), v in runs.items()},
            })  # fmt: skip
            print(f"rep {rep} no LS: {extras[-1]}", flush=True)
        emulator = net.stop().data if args.medium == "wifi" else None
    out = summarize(rows, extras)
    if emulator is not None:  # how well the emulated channel kept real time
        out["emulator"] = {k: emulator[k] for k in ("verdict", "frame_lag", "load_start")}
    print(json.dumps({k: v for k, v in out.items() if k not in ("runs", "extras")}, indent=2))
    if args.json is not None:
        write_json(args.json, out)
        config = {k: v for k, v in vars(args).items() if k not in ("json", "logs")}
        manifest = build_manifest(
            scenario=config,
            scenario_path=None,
            seed=args.seed,
            wall_s=time.monotonic() - t0,
            extra={"benchmark": "transparent"},
        )
        write_json(args.json.with_name("manifest.json"), manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
