"""Transparent mode, measured: unmodified ROS 2-style programs with and without Coorp.

A leader and N robots (4 by default) in network namespaces; the leader's link is a
50 Mbit/s bottleneck shaped both ways (``tbf``, 100 ms queue), like the air in front of
an access point. Every robot runs, for ``--duration`` seconds after a warm-up:

* the MPC loop of ``examples/unmodified/mpc_loop.py`` — a 12 KB perception at 30 Hz to
  the leader, a 1 KB command back for each — over Cyclone DDS (``--apps dds``) or Zenoh
  (``zenoh``), programs that know nothing of Coorp;
* a bulk upload to the leader (``examples/unmodified/bulk_tcp.py``, plain TCP) for the
  whole window.

Modes, interleaved per repetition (the same programs, the same instant for every
contender):

* ``none``: no Coorp at all — what a team gets today;
* ``transparent``: ``coorp leader`` and ``coorp agent --transparent`` on every host,
  the team file selecting the middleware's LS traffic (preset ``dds``/``zenoh``) and
  the uploads' TCP port as bulk;
* ``api``: the loop and the uploads rewritten on Coorp's own API (LS channels and bulk
  streams), for comparison (app ``coorp``).

Reported per (app, mode), pooled over repetitions: LS one-way latency p50/p99 and miss
rate (every perception and command; late > 33 ms or lost), bulk Mb/s that reached the
leader inside the window, and ``plain_tcp_bulk_mbps``: the ``none`` run's in the same
repetitions. Two more measurements without LS traffic: ``interception_cost`` (1 −
bulk through the relay / plain bulk) and ``untouched_flow_ratio`` (a TCP flow that
matches no selector, with transparent agents running vs without).

    sudo .venv/bin/python benchmarks/transparent.py --repetitions 5 --json results/transparent.json

Needs root, iproute2 and ``pip install 'coorp[team,transparent]'``.
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

from coorp._netns import Proc, StarNetwork
from coorp.runtime import load_team_config, write_team_keys
from coorp.teambench._netns import Network, netns_unavailable

ROOT = Path(__file__).resolve().parents[1]
APPS = ROOT / "examples" / "unmodified"
COORP = [str(Path(sys.executable).with_name("coorp"))]
PY = [sys.executable, "-u"]
BULK_PORT = 9000
OTHER_PORT = 9100
BOUND_MS = 33.0


def _cyclone_env() -> dict[str, str]:
    uri = (
        '<CycloneDDS><Domain><General><Interfaces><NetworkInterface name="eth0"/>'
        "</Interfaces></General></Domain></CycloneDDS>"
    )
    return {**os.environ, "CYCLONEDDS_URI": uri, "PYTHONUNBUFFERED": "1"}


def team_file(d: Path, net: Network, app: str) -> Path:
    robots = ["leader", *net.hosts[1:]]
    hosts = {("leader" if h == "ld" else h): net.addr(h) for h in net.hosts}
    ls = '{ preset = "dds", domain_id = 0 }' if app == "dds" else '{ preset = "zenoh" }'
    path = d / f"team-{app}.toml"
    host_lines = ", ".join(f'{k} = "{v}"' for k, v in hosts.items())
    path.write_text(
        f'[team]\nname = "tbench"\nkey_file = "team.key"\nrobots = {json.dumps(robots)}\n'
        f"hosts = {{ {host_lines} }}\n"
        f'[leader]\nlisten = "{net.addr("ld")}:7300"\n'
        f'[agent]\nleader = "{net.addr("ld")}:7300"\nlisten = "0.0.0.0:7301"\n'
        f"[transparent]\nls = [{ls}]\nbulk = [{{ ports = {BULK_PORT} }}]\n"
    )
    write_team_keys(load_team_config(path), path, force=True)
    return path


class Run:
    """One measurement: processes started in the network, stopped at the end."""

    def __init__(self, net: Network, d: Path) -> None:
        self.net, self.d = net, d
        self.procs: list[Proc] = []

    def start(self, host: str, argv: list[str], name: str, stdin: bool = False) -> Proc:
        # stderr to a file per process (kept with --logs): what went wrong, afterwards.
        with open(self.d / f"{name}.log", "ab") as err:
            popen = StarNetwork.popen(
                self.net, host, argv, env=_cyclone_env(), stdin=stdin, stderr=err
            )
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


def start_coorp(run: Run, team: Path, robots: list[str]) -> None:
    leader = run.start("ld", [*COORP, "leader", "--config", str(team)], "coorp-leader")
    leader.expect("coorp leader: serving", 30)
    for host in ["ld", *robots]:
        name = "leader" if host == "ld" else host
        a = run.start(
            host,
            [
                *COORP,
                "agent",
                "--config",
                str(team),
                "--robot",
                name,
                "--transparent",
                "--log-level",
                "warning",
            ],
            f"agent-{name}",
        )
        a.expect("coorp agent: transparent mode on", 30)


def result(p: Proc, timeout: float) -> dict[str, Any]:
    return dict(json.loads(p.expect_rest("RESULT ", timeout)))


def measure(
    net: Network,
    d: Path,
    *,
    app: str,
    mode: str,
    args: argparse.Namespace,
    ls: bool = True,
    bulk_port: int = BULK_PORT,
) -> dict[str, Any]:
    """One (app, mode) run; LS latencies and bulk bytes inside the window."""
    robots = net.hosts[1:]
    run = Run(net, d)
    try:
        if mode == "transparent":
            start_coorp(run, team_file(d, net, app if app != "none" else "dds"), robots)
        sink = run.start(
            "ld",
            [*PY, str(APPS / "bulk_tcp.py"), "sink", "--listen", f"0.0.0.0:{bulk_port}"],
            "sink",
            stdin=True,
        )
        sink.expect("READY", 30)
        lead = args.warmup + 3.0
        start_at = time.monotonic_ns() + int(lead * 1e9)
        end_at = start_at + int(args.duration * 1e9)
        loop_procs: list[Proc] = []
        if ls:
            common = [
                "--transport",
                app,
                "--start-at",
                str(start_at),
                "--duration",
                str(args.duration),
                "--warmup",
                str(args.warmup),
                "--seed",
                str(args.seed),
            ]
            ldr = run.start(
                "ld",
                [
                    *PY,
                    str(APPS / "mpc_loop.py"),
                    "leader",
                    "--robots",
                    ",".join(robots),
                    "--addr",
                    net.addr("ld"),
                    *common,
                ],
                "mpc-ld",
            )
            loop_procs.append(ldr)
            for r in robots:
                loop_procs.append(
                    run.start(
                        r,
                        [
                            *PY,
                            str(APPS / "mpc_loop.py"),
                            "robot",
                            "--name",
                            r,
                            "--leader",
                            net.addr("ld"),
                            *common,
                        ],
                        f"mpc-{r}",
                    )
                )
        senders = [
            run.start(
                r,
                [
                    *PY,
                    str(APPS / "bulk_tcp.py"),
                    "send",
                    "--to",
                    f"{net.addr('ld')}:{bulk_port}",
                    "--until",
                    str(end_at),
                    "--seed",
                    str(i),
                ],
                f"send-{r}",
            )
            for i, r in enumerate(robots)
        ]
        timeout = lead + args.duration + 60
        sent = [result(s, timeout) for s in senders]
        loops = [result(p, timeout) for p in loop_procs]
        sink.send(json.dumps({"cmd": "count", "t0": start_at, "t1": end_at}))
        window_bytes = json.loads(sink.expect_rest("COUNT ", 30))["bytes"]
        return {
            "app": app,
            "mode": mode,
            "bulk_mbps": window_bytes * 8 / args.duration / 1e6,
            "intact": all(s["intact"] for s in sent),
            **(_ls_stats(loops) if ls else {}),
        }
    finally:
        run.stop()


def _ls_stats(loops: list[dict[str, Any]]) -> dict[str, Any]:
    ldr = next(x for x in loops if x["role"] == "leader")
    robots = [x for x in loops if x["role"] == "robot"]
    lat: list[float] = []
    expected = 0
    for r in robots:
        expected += 2 * r["sent"]  # its perceptions and their commands
        lat += r["command_ms"]
        lat += ldr["perception_ms"].get(r["name"], [])
    late = sum(1 for x in lat if x > BOUND_MS)
    lost = max(expected - len(lat), 0)
    return {"ls_latencies_ms": lat, "ls_expected": expected, "ls_late": late, "ls_lost": lost}


def pooled(rows: list[dict[str, Any]]) -> dict[str, Any]:
    lat = np.array([x for r in rows for x in r["ls_latencies_ms"]], dtype=float)
    expected = sum(r["ls_expected"] for r in rows)
    misses = sum(r["ls_late"] + r["ls_lost"] for r in rows)
    return {
        "ls_p50_ms": float(np.percentile(lat, 50)) if lat.size else None,
        "ls_p99_ms": float(np.percentile(lat, 99)) if lat.size else None,
        "ls_miss_rate": misses / expected if expected else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--robots", type=int, default=4)
    p.add_argument("--rate-mbit", type=float, default=50.0)
    p.add_argument("--duration", type=float, default=15.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--apps", default="dds,zenoh")
    p.add_argument("--modes", default="none,transparent")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-extras", action="store_true", help="skip the no-LS measurements")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--logs", type=Path, default=None, help="keep every process's stderr here")
    args = p.parse_args()
    why = netns_unavailable()
    if why:
        print(f"benchmarks/transparent.py: {why}", file=sys.stderr)
        return 2
    apps = [a for a in args.apps.split(",") if a]
    modes = [m for m in args.modes.split(",") if m]
    rows: list[dict[str, Any]] = []
    extras: list[dict[str, float]] = []
    with (
        tempfile.TemporaryDirectory(prefix="coorp-transparent-") as tmp,
        Network(args.robots) as net,
    ):
        net.create(rate_mbit=args.rate_mbit, queue_ms=100.0)
        d = Path(tmp) if args.logs is None else args.logs
        d.mkdir(parents=True, exist_ok=True)
        for rep in range(args.repetitions):
            for app in apps:
                for mode in modes:
                    row = measure(net, d, app=app, mode=mode, args=args)
                    row["repetition"] = rep
                    rows.append(row)
                    s = pooled([row])
                    print(
                        f"rep {rep} {app:5s} {mode:11s}: LS p50 {s['ls_p50_ms']:.2f} ms, "
                        f"p99 {s['ls_p99_ms']:.2f} ms, misses {s['ls_miss_rate']:.1%}; "
                        f"bulk {row['bulk_mbps']:.1f} Mb/s, intact {row['intact']}",
                        flush=True,
                    )
            if not args.no_extras:
                plain = measure(net, d, app="none", mode="none", args=args, ls=False)
                relayed = measure(net, d, app="none", mode="transparent", args=args, ls=False)
                other_plain = measure(
                    net, d, app="none", mode="none", args=args, ls=False, bulk_port=OTHER_PORT
                )
                other_tp = measure(
                    net,
                    d,
                    app="none",
                    mode="transparent",
                    args=args,
                    ls=False,
                    bulk_port=OTHER_PORT,
                )
                extras.append(
                    {
                        "interception_cost": 1 - relayed["bulk_mbps"] / plain["bulk_mbps"],
                        "untouched_flow_ratio": other_tp["bulk_mbps"] / other_plain["bulk_mbps"],
                    }
                )
                print(
                    f"rep {rep} no LS: plain {plain['bulk_mbps']:.1f}, relayed "
                    f"{relayed['bulk_mbps']:.1f} Mb/s; untouched {other_plain['bulk_mbps']:.1f}"
                    f" -> {other_tp['bulk_mbps']:.1f} Mb/s",
                    flush=True,
                )
    results = []
    for app in apps:
        plain = [r["bulk_mbps"] for r in rows if r["app"] == app and r["mode"] == "none"]
        for mode in modes:
            mine = [r for r in rows if r["app"] == app and r["mode"] == mode]
            results.append(
                {
                    "app": app,
                    "mode": mode,
                    **pooled(mine),
                    "bulk_mbps": float(np.mean([r["bulk_mbps"] for r in mine])),
                    "plain_tcp_bulk_mbps": float(np.mean(plain)) if plain else None,
                }
            )
    out = {
        "results": results,
        "interception_cost": float(np.mean([e["interception_cost"] for e in extras]))
        if extras
        else None,
        "untouched_flow_ratio": float(np.mean([e["untouched_flow_ratio"] for e in extras]))
        if extras
        else None,
    }
    print(json.dumps(out, indent=2))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
