"""Transparent mode, measured: unmodified ROS 2-style programs with and without Coorp.

A leader and N robots (4 by default) in network namespaces, on one of two media
(``--medium``): ``split`` — the leader's link a 50 Mbit/s bottleneck shaped both ways
(``tbf``, 100 ms queue), one queue for what the robots send to the leader and another
for what it sends back; ``shared`` — one queue for every packet both ways, as on one
WiFi channel (an upload and a download take turns on it). Every robot runs, for
``--duration`` seconds after a warm-up:

* the MPC loop of ``examples/unmodified/mpc_loop.py`` — a 12 KB perception at 30 Hz to
  the leader, a 1 KB command back for each — over Cyclone DDS (``--apps dds``) or Zenoh
  (``zenoh``), programs that know nothing of Coorp;
* bulk transfers for the whole window (``examples/unmodified/bulk_tcp.py``, plain TCP),
  ``--direction``: ``up`` (uploads to the leader, as a parameter push or an rsync),
  ``down`` (each robot downloads from the leader on a connection it opened, as a model
  broadcast or a checkpoint fetch: the leader's replies are the bulk), or ``both``;
  ``--streams K`` connections per robot and way;
* with ``--cpu-hog N``, N busy processes on every host (robots' CPUs are busy with
  perception, MPC and training).

With ``--medium wifi`` the leader and robots are stations of an emulated 802.11 channel
instead (``coorp.emulate``: ``--scenario``, crl-5 by default, its NICs' rings per
``--ring``): the programs contend for the air, their DSCP picks the access category.
(``wire`` is the old name of ``split``.)

Modes, interleaved per repetition (the same programs; every contender timed over the
same window):

* ``none``: no Coorp at all — what a team gets today;
* ``marking``: transparent agents with the LS selectors only: LS marked (EF), no bulk
  interception, no permits;
* ``transparent``: ``coorp leader`` and ``coorp agent --transparent`` on every host,
  the team file selecting the middleware's LS traffic (preset ``dds``/``zenoh``), the
  uploads' port as client-side bulk and the download port as server-side bulk (the
  leader's replies go under its permit);
* ``api``: the loop and the transfers rewritten on Coorp's own API (LS channels, bulk
  streams of 4 MB messages; ``benchmarks/_transparent_api.py``), app ``coorp``.

Reported per cell (medium, direction, streams, cpu_hog) and (app, mode), pooled over
repetitions: LS one-way latency p50/p99 and miss rate (every perception and every
command; late > 33 ms or lost), bulk Mb/s inside the window up (received by the leader)
and down (received by the robots), ``bytes_intact`` (every transfer arrived whole, once,
in order: SHA-256 at both ends), and the ``none`` runs' of the same cell and
repetitions as ``plain_tcp_*``. Two measurements without LS traffic, per repetition
(direction up, one stream, the first medium): ``interception_cost`` (1 − bulk through
the relay / plain bulk) and ``untouched_flow_ratio`` (a TCP flow that matches no
selector, with transparent agents running vs without). Per-repetition values are in
``runs``; a ``manifest.json`` lands next to ``--json``; every row quotes the 1-minute
load average at its start and end.

    sudo .venv/bin/python benchmarks/transparent.py --repetitions 5 --json results/transparent.json
    sudo .venv/bin/python benchmarks/transparent.py --direction up,down,both --streams 1,4 \
        --medium split,shared --json results/transparent-both.json

Needs root, iproute2 and the ``team`` and ``transparent`` extras (``make test`` installs them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from coorp._manifest import build_manifest, write_json
from coorp._netns import Proc, StarNetwork
from coorp.emulate import GRO_DEFAULT
from coorp.runtime import load_team_config, write_team_keys
from coorp.stats import mean_ci
from coorp.teambench._netns import Network, netns_unavailable

ROOT = Path(__file__).resolve().parents[1]
#: How long a process may take to start (a Python program at load 30-40, niced, took
#: more than 30 s here).
START_S = 120.0
APPS = ROOT / "examples" / "unmodified"
API = Path(__file__).resolve().with_name("_transparent_api.py")
COORP = [str(Path(sys.executable).with_name("coorp"))]
PY = [sys.executable, "-u"]
BULK_PORT = 9000
DOWN_PORT = 9001
OTHER_PORT = 9100
BOUND_MS = 33.0
DIRECTIONS = ("up", "down", "both")
MEDIA = ("split", "shared")


def _env(net: Network) -> dict[str, str]:
    # Cyclone DDS on the namespace's veth only (discovery and data on the bridge). On the
    # shared medium the hosts are routed through the hub, which forwards no multicast:
    # discovery goes to every host's address instead.
    general = '<General><Interfaces><NetworkInterface name="eth0"/></Interfaces>'
    discovery = ""
    if getattr(net, "medium", None) == "shared":
        general += "<AllowMulticast>false</AllowMulticast>"
        peers = "".join(f'<Peer address="{net.addr(h)}"/>' for h in net.hosts)
        discovery = f"<Discovery><Peers>{peers}</Peers><ParticipantIndex>auto</ParticipantIndex>"
        discovery += "<MaxAutoParticipantIndex>20</MaxAutoParticipantIndex></Discovery>"
    uri = f"<CycloneDDS><Domain>{general}</General>{discovery}</Domain></CycloneDDS>"
    return {**os.environ, "CYCLONEDDS_URI": uri, "PYTHONUNBUFFERED": "1"}


def team_file(
    d: Path,
    net: Network,
    app: str,
    timeslice_ms: float,
    *,
    bulk: bool = True,
    scheduling: str = "nice:-10",
    inflight_budget_ms: float | None = None,
    medium: str = "shared",
    gate_completion: str | None = None,
    ack_category: str | None = None,
    ls_category: str | None = None,
) -> Path:
    """The team file: Coorp on ports 7300/7301 (DDS domain 0 owns 7400-7649), LS by the
    middleware's preset, bulk = TCP to the upload port (client side: the robots'
    uploads) and connections accepted on the download port (server side: the leader's
    replies); none with ``bulk=False`` (marking only). ``inflight_budget_ms``: the agents'
    ``[agent] inflight_budget_ms`` (None: the default; 0: no bound). On split queues the
    leader's replies leave through a queue of their own: ``leader.downlink`` gives the
    leader host a permit of its own (one sender at a time per queue)."""
    robots = ["leader", *net.hosts[1:]]
    hosts = ", ".join(f'{"leader" if h == "ld" else h} = "{net.addr(h)}"' for h in net.hosts)
    ls = '{ preset = "zenoh" }' if app == "zenoh" else '{ preset = "dds", domain_id = 0 }'
    ld = net.addr("ld")
    path = d / f"team-{app}{'' if bulk else '-marking'}.toml"
    bulk_line = f"bulk = [{{ ports = {BULK_PORT} }}, {{ listen = {DOWN_PORT} }}]\n" if bulk else ""
    downlink = 'downlink = ["leader"]\n' if medium == "split" else ""
    path.write_text(
        f'[team]\nname = "tbench"\nkey_file = "team.key"\nrobots = {json.dumps(robots)}\n'
        f"hosts = {{ {hosts} }}\n"
        f'[leader]\nlisten = "{ld}:7300"\ntimeslice_ms = {timeslice_ms}\n'
        f"{downlink}"
        f'[agent]\nleader = "{ld}:7300"\nlisten = "0.0.0.0:7301"\n'
        f'scheduling = "{scheduling}"\n'
        + ("" if inflight_budget_ms is None else f"inflight_budget_ms = {inflight_budget_ms}\n")
        + ("" if gate_completion is None else f'gate_completion = "{gate_completion}"\n')
        + ("" if ack_category is None else f'inbox_ack_category = "{ack_category}"\n')
        + ("" if ls_category is None else f'ls_category = "{ls_category}"\n')
        + f"[transparent]\nls = [{ls}]\n{bulk_line}"
        + ("" if ack_category is None else f'ack_category = "{ack_category}"\n')
        + ("" if ls_category is None else f'ls_category = "{ls_category}"\n')
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
            popen = StarNetwork.popen(
                self.net, host, argv, env=_env(self.net), stdin=stdin, stderr=err
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


def result(p: Proc, timeout: float) -> dict[str, Any]:
    return dict(json.loads(p.expect_rest("RESULT ", timeout)))


def start_coorp(
    run: Run, team: Path, robots: list[str], *, transparent: bool, rt_priority: int = 0
) -> None:
    """``coorp leader`` and (``transparent``) an agent per host, at SCHED_FIFO
    ``rt_priority`` when it is > 0 (0: ordinary scheduling, what the daemons ask for)."""
    coorp = [*(["chrt", "-f", str(rt_priority)] if rt_priority > 0 else []), *COORP]
    leader = run.start("ld", [*coorp, "leader", "--config", str(team)], "coorp-leader")
    leader.expect("coorp leader: serving", START_S)
    if not transparent:
        return
    for host in ["ld", *robots]:
        name = "leader" if host == "ld" else host
        # Its control socket in this run's folder: the default one under /tmp is shared
        # with every other run on the machine as the same user.
        argv = [*coorp, "agent", "--config", str(team), "--robot", name, "--transparent",
                "--control", str(team.parent / f"ctl-{name}.sock")]  # fmt: skip
        a = run.start(host, [*argv, "--log-level", "warning"], f"agent-{name}")
        a.expect("coorp agent: transparent mode on", START_S)


def measure(
    net: Network,
    d: Path,
    args: argparse.Namespace,
    *,
    app: str,
    mode: str,
    direction: str = "up",
    streams: int = 1,
    medium: str = "split",
    ls: bool = True,
    bulk_port: int = BULK_PORT,
) -> dict[str, Any]:
    """One (app, mode) run of one cell: LS latencies, and bulk bytes inside the window."""
    robots = net.hosts[1:]
    run = Run(net, d)
    load0 = os.getloadavg()[0]
    drops0 = _qdisc_drops(net)
    try:
        team = team_file(d, net, app, args.timeslice_ms, bulk=mode != "marking",
                         scheduling=args.agent_scheduling, medium=medium,
                         inflight_budget_ms=getattr(args, "inflight_budget_ms", None),
                         gate_completion=getattr(args, "gate_completion", None),
                         ack_category=getattr(args, "ack_category", None),
                         ls_category=getattr(args, "ls_category", None))  # fmt: skip
        for host in net.hosts:  # busy processes on every host, started first
            for i in range(args.cpu_hog):
                run.start(host, ["sh", "-c", "while :; do :; done"], f"hog-{host}-{i}")
        if mode != "none":
            start_coorp(run, team, robots, transparent=mode in ("transparent", "marking"),
                        rt_priority=int(getattr(args, "agent_rt_priority", 0) or 0))  # fmt: skip
        # Time for every program to start before the warm-up: on a saturated machine a
        # Python program with DDS takes seconds to import and discover its peers.
        lead = args.warmup + args.lead
        start_at = time.monotonic_ns() + int(lead * 1e9)
        end_at = start_at + int(args.duration * 1e9)
        timeout = lead + args.duration + 60
        window = [
            "--start-at", str(start_at), "--duration", str(args.duration),
            "--warmup", str(args.warmup), "--seed", str(args.seed),
        ]  # fmt: skip
        # start_at_ns: the window's start (time.monotonic_ns), where the bulk programs
        # started about args.warmup + args.lead before it
        cell = {"direction": direction, "streams": streams, "medium": medium,
                "cpu_hog": args.cpu_hog, "start_at_ns": start_at}  # fmt: skip
        rt = _ls_priority(args, medium)
        if mode == "api":
            row = _measure_api(run, net, team, window, timeout, direction, streams, rt)
            drops = {k: v - drops0.get(k, 0) for k, v in _qdisc_drops(net).items()}
            return {**row, **cell, "load": [load0, os.getloadavg()[0]], "qdisc_drops": drops}
        up = direction in ("up", "both")
        down = direction in ("down", "both")
        bulk_tcp = [*PY, str(APPS / "bulk_tcp.py")]
        sink = server = None
        if up:
            sink_rt = int(getattr(args, "sink_rt_priority", 0) or 0)
            chrt = ["chrt", "-f", str(sink_rt)] if sink_rt > 0 else []
            sink = run.start("ld", [*chrt, *bulk_tcp, "sink", "--listen", f"0.0.0.0:{bulk_port}"],
                             "sink", stdin=True)  # fmt: skip
            sink.expect("READY", START_S)
        if down:
            server = run.start("ld", [*bulk_tcp, "serve", "--listen", f"0.0.0.0:{DOWN_PORT}"],
                               "serve", stdin=True)  # fmt: skip
            server.expect("READY", START_S)
        loops: list[Proc] = []
        if ls:
            mpc = [*rt, *PY, str(APPS / "mpc_loop.py")]
            common = ["--transport", app, *window]
            leader = [*mpc, "leader", "--robots", ",".join(robots), "--addr", net.addr("ld")]
            loops.append(run.start("ld", [*leader, *common], "mpc-ld"))
            loops += [run.start(r, [*mpc, "robot", "--name", r, "--leader", net.addr("ld"),
                                    *common], f"mpc-{r}") for r in robots]  # fmt: skip
        k = ["--streams", str(streams), "--until", str(end_at)]
        senders = [
            run.start(r, [*bulk_tcp, "send", "--to", f"{net.addr('ld')}:{bulk_port}",
                          "--seed", str(i + 1), *k], f"send-{r}")
            for i, r in enumerate(robots) if up
        ]  # fmt: skip
        fetchers = [
            run.start(r, [*bulk_tcp, "fetch", "--to", f"{net.addr('ld')}:{DOWN_PORT}",
                          "--seed", str(i + 1), "--window", f"{start_at},{end_at}", *k],
                      f"fetch-{r}")
            for i, r in enumerate(robots) if down
        ]  # fmt: skip
        sent = [result(p, timeout) for p in senders]
        got = [result(p, timeout) for p in fetchers]
        outs = [result(p, timeout) for p in loops]
        up_bytes = 0
        if sink is not None:
            sink.send(json.dumps({"cmd": "count", "t0": start_at, "t1": end_at}))
            up_bytes = json.loads(sink.expect_rest("COUNT ", 30))["bytes"]
        down_bytes = sum(g["window_bytes"] for g in got)
        row = {
            "app": app,
            "mode": mode,
            **cell,
            "up_mbps": up_bytes * 8 / args.duration / 1e6,
            "down_mbps": down_bytes * 8 / args.duration / 1e6,
            "bytes_intact": all(x["intact"] for x in sent + got),
            "load": [load0, os.getloadavg()[0]],
        }
        row["bulk_mbps"] = row["up_mbps"] + row["down_mbps"]
        row["intact"] = row["bytes_intact"]
        row["qdisc_drops"] = {k: v - drops0.get(k, 0) for k, v in _qdisc_drops(net).items()}
        return {**row, **(_ls(outs) if ls else {})}
    finally:
        run.stop()


def _qdisc_drops(net: Network) -> dict[str, int]:
    """Packets each bottleneck queue dropped so far (``tc -s``): where a late or lost
    LS datagram may have gone."""
    medium = getattr(net, "medium", None)
    if medium not in MEDIA:
        return {}  # the emulated channel: its own report (out["emulator"])
    where = (
        {"air": ("ap", "air0")}
        if medium == "shared"
        else {"uplink": ("sw", net.port("ld")), "downlink": ("ld", "eth0")}
    )
    out = {}
    for name, (host, dev) in where.items():
        text = subprocess.run(
            ["ip", "netns", "exec", net.ns(host), "tc", "-s", "qdisc", "show", "dev", dev],
            capture_output=True, text=True, timeout=10,
        ).stdout  # fmt: skip
        m = re.search(r"dropped (\d+)", text)
        out[name] = int(m.group(1)) if m else 0
    return out


def _measure_api(
    run: Run,
    net: Network,
    team: Path,
    window: list[str],
    timeout: float,
    direction: str,
    streams: int,
    rt: list[str],
) -> dict[str, Any]:
    robots = net.hosts[1:]
    # LS and bulk are one program on the API: all of it at the loop's priority.
    api = [*rt, *PY, str(API)]
    way = ["--direction", direction, "--streams", str(streams)]
    ldr = run.start("ld", [*api, "leader", "--config", str(team), "--robots", ",".join(robots),
                           *window, *way], "api-ld")  # fmt: skip
    ldr.expect("READY", START_S)
    procs = [run.start(r, [*api, "robot", "--config", str(team), "--name", r, "--leader-host",
                           net.addr("ld"), *window, *way], f"api-{r}") for r in robots]  # fmt: skip
    outs = [result(p, timeout) for p in procs]
    lead = result(ldr, timeout)
    # Every confirmed message was received (as a multiset: 4 MB messages of one stream
    # repeat), and every message received is one a stream sent. A message its sender
    # stopped waiting for at the window's end (a timeout while the confirmation was on
    # its way) may still have been delivered: counted apart, not as damage.
    sent_n = Counter(h for o in [lead, *outs] for h in o["sent_digests"])
    got_n = Counter(h for o in [lead, *outs] for h in o["bulk_digests"])
    intact = not (sent_n - got_n) and set(got_n) <= set(sent_n)
    duration = float(window[window.index("--duration") + 1])
    up = lead["bulk_bytes"] * 8 / duration / 1e6
    down = sum(o["bulk_bytes"] for o in outs) * 8 / duration / 1e6
    row = {"app": "coorp", "mode": "api", "bytes_intact": intact, "intact": intact,
           "delivered_unconfirmed": sum((got_n - sent_n).values()),
           "up_mbps": up, "down_mbps": down, "bulk_mbps": up + down,
           "api_robots": {o["name"]: {k: o.get(k) for k in ("pacing", "permits", "ls_stats")}
                          for o in outs}}  # fmt: skip
    return {**row, **_ls([lead, *outs])}


def ls_rt_priority(args: argparse.Namespace, medium: str | None = None) -> int:
    """The loop programs' SCHED_FIFO priority: ``--ls-rt-priority``, else 5 on the
    emulated air (below the emulator's 10) and 0 (ordinary) on the wire. ``medium``: the
    cell's (``args.medium`` may list several)."""
    given = getattr(args, "ls_rt_priority", None)
    if given is not None:
        return int(given)
    if medium is None:
        medium = getattr(args, "medium", "split")
    return 5 if medium == "wifi" else 0


def _ls_priority(args: argparse.Namespace, medium: str) -> list[str]:
    prio = ls_rt_priority(args, medium)
    return ["chrt", "-f", str(prio)] if prio > 0 else []


def _ls(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every perception and every command: one-way latencies, late and lost."""
    ldr = next(x for x in outs if x["role"] == "leader")
    lat: list[float] = []
    up: list[float] = []
    reaction: list[float] = []
    expected = 0
    for r in (x for x in outs if x["role"] == "robot"):
        expected += 2 * r["sent"]
        up += ldr["perception_ms"].get(r["name"], [])
        reaction += r.get("reaction_ms", [])
        lat += r["command_ms"] + ldr["perception_ms"].get(r["name"], [])

    def p(xs: list[float], q: float) -> float | None:
        return float(np.percentile(xs, q)) if xs else None

    down = [x for r in outs if r["role"] == "robot" for x in r["command_ms"]]
    return {
        "ls_latencies_ms": lat,
        "ls_expected": expected,
        "ls_late": sum(1 for x in lat if x > BOUND_MS),
        "ls_lost": max(expected - len(lat), 0),
        # Where the delay is: the robots' perceptions to the leader, or its commands.
        "perception_p50_p99_ms": [p(up, 50), p(up, 99)],
        "command_p50_p99_ms": [p(down, 50), p(down, 99)],
        "perception_max_ms": {r: max(v) for r, v in ldr["perception_ms"].items() if v},
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


CELL = ("medium", "direction", "streams", "cpu_hog")


def _cell(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[k] for k in CELL)


def _plain(
    rows: list[dict[str, Any]], like: dict[str, Any], key: str, rep: int | None = None
) -> float:
    """Plain TCP's ``key`` (mode none) in the same cell and repetitions: of the same
    app, or of every app for ``api`` (its LS traffic is Coorp's own)."""
    plain = [
        r[key]
        for r in rows
        if r["mode"] == "none"
        and _cell(r) == _cell(like)
        and (like["mode"] == "api" or r["app"] == like["app"])
        and (rep is None or r["repetition"] == rep)
    ]
    return float(np.mean(plain)) if plain else float("nan")


SAMPLES = ("ls_latencies_ms", "perception_ms", "command_ms", "reaction_ms")


def _without_samples(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in SAMPLES} | pooled([row])


def _none_if_nan(x: float) -> float | None:
    return None if np.isnan(x) else x


def summarize(rows: list[dict[str, Any]], extras: list[dict[str, float]]) -> dict[str, Any]:
    results = []
    ratios: dict[str, dict[str, dict[str, float]]] = {}
    groups = dict.fromkeys((*_cell(r), r["app"], r["mode"]) for r in rows)
    for group in groups:
        mine = [r for r in rows if (*_cell(r), r["app"], r["mode"]) == group]
        first = mine[0]
        row = {
            "app": first["app"],
            "mode": first["mode"],
            **pooled(mine),
            "bulk_mbps": float(np.mean([r["bulk_mbps"] for r in mine])),
            "plain_tcp_bulk_mbps": _none_if_nan(_plain(rows, first, "bulk_mbps")),
            **{k: first[k] for k in CELL},
            "up_mbps": float(np.mean([r["up_mbps"] for r in mine])),
            "down_mbps": float(np.mean([r["down_mbps"] for r in mine])),
            "plain_tcp_up_mbps": _none_if_nan(_plain(rows, first, "up_mbps")),
            "plain_tcp_down_mbps": _none_if_nan(_plain(rows, first, "down_mbps")),
            "bytes_intact": all(r["bytes_intact"] for r in mine),
        }
        results.append(row)
        if first["mode"] == "none":
            continue
        name = "/".join(str(x) for x in group)
        ratios[name] = {}
        for key in ("bulk_mbps", "up_mbps", "down_mbps"):
            plains = [(r[key], _plain(rows, r, key, r["repetition"])) for r in mine]
            per_rep = [x / p for x, p in plains if np.isfinite(p) and p > 0]
            if per_rep:
                m = mean_ci(per_rep)
                ratios[name][key.removesuffix("_mbps")] = {"mean": m.mean, "ci95": m.ci95, "n": m.n}

    def mean(key: str) -> float | None:
        return float(np.mean([e[key] for e in extras])) if extras else None

    loads = [x for r in rows for x in r.get("load", [])]
    return {
        "results": results,
        "interception_cost": mean("interception_cost"),
        "untouched_flow_ratio": mean("untouched_flow_ratio"),
        "bulk_ratio_to_plain_tcp": ratios,
        "load": [min(loads), max(loads)] if loads else None,
        "runs": [_without_samples(r) for r in rows],
        "extras": extras,
    }


def _line(rep: int, row: dict[str, Any]) -> str:
    s = pooled([row])
    cell = f"{row['medium']}/{row['direction']}/x{row['streams']}/hog{row['cpu_hog']}"
    p50, p99, miss = s["ls_p50_ms"], s["ls_p99_ms"], s["ls_miss_rate"]
    return (
        f"rep {rep} {cell} {row['app']:5s} {row['mode']:11s}: "
        f"LS p50 {p50 if p50 is None else round(p50, 2)} ms, "
        f"p99 {p99 if p99 is None else round(p99, 2)} ms, "
        f"misses {miss if miss is None else f'{miss:.2%}'} "
        f"({len(row['ls_latencies_ms'])} of {row['ls_expected']} received); "
        f"up {row['up_mbps']:.1f} down {row['down_mbps']:.1f} Mb/s, "
        f"intact {row['bytes_intact']}; load {row['load'][0]:.1f}-{row['load'][1]:.1f}; "
        f"perception p50/p99 {_ms(row.get('perception_p50_p99_ms'))}, "
        f"command {_ms(row.get('command_p50_p99_ms'))}; queue drops {row.get('qdisc_drops')}; "
        f"perception max per robot {row.get('perception_max_ms')}"
    )


def _ms(pair: list[float | None] | None) -> str:
    if not pair:
        return "-"
    return "/".join("-" if x is None else f"{x:.1f}" for x in pair) + " ms"


def _list(text: str, allowed: tuple[str, ...] | None, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = sorted(set(items) - set(allowed)) if allowed is not None else []
    if not items or bad:
        raise argparse.ArgumentTypeError(
            f"{what} {text!r}: expected a comma-separated list of {', '.join(allowed or ())}"
        )
    return items


def _counts(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(k < 1 for k in out):
        raise argparse.ArgumentTypeError(f"--streams {text!r}: expected counts >= 1, e.g. 1,4")
    return out


WIFI_SYSCTLS = [
    "net.ipv4.ipfrag_time=1",
    "net.ipv4.ipfrag_high_thresh=33554432",
    "net.ipv4.ipfrag_low_thresh=25165824",
    "net.ipv4.tcp_no_metrics_save=1",
]  # as the wired star's (teambench)


def network(args: argparse.Namespace, medium: str) -> Any:
    """The wired star (``split``), one shared queue (``shared``), or the emulated channel
    of ``--scenario`` with ``--ring`` NICs (``wifi``)."""
    if medium != "wifi":
        return Network(args.robots, medium=medium)
    from coorp.emulate import EmulatedStar
    from coorp.scenario import apply_overrides, load_scenario, resolve_scenario

    path = resolve_scenario(args.scenario)
    ring = args.ring.replace("-", "_")
    sc = apply_overrides(load_scenario(path), [("hw_queue.mode", ring)], source=str(path))
    hosts = ["ld", *(f"r{i}" for i in range(1, args.robots + 1))]
    return EmulatedStar(hosts, sc, tag="coorptb", seed=args.seed,
                        queue_packets=getattr(args, "emu_queue_packets", 1000),
                        trace_dir=getattr(args, "emu_trace", None),
                        split_cpus=getattr(args, "emu_split_cpus", True),
                        gro=getattr(args, "emu_gro", GRO_DEFAULT))  # fmt: skip


def route_congestion_control(net: Any, cc: str, *, quickack: bool = False) -> None:
    """Every host's TCP uses congestion control ``cc``: its subnet route gets ``congctl
    cc`` (a namespace may not make a restricted algorithm its default, and this host
    allows only reno and bbr, its default; a route may name any). Programs unchanged.
    ``quickack``: the route also gets ``quickack 1``, so every TCP receiver acks each
    segment at once (no delayed ACKs), whatever its program's reads."""
    extra = ["quickack", "1"] if quickack else []
    for host in net.hosts:
        ns = net.ns(host)
        routes = subprocess.run(["ip", "-n", ns, "-o", "route", "show", "proto", "kernel"],
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
        for line in routes.splitlines():
            words = line.split()
            if "dev" not in words or "congctl" in words:
                continue
            subprocess.run(["ip", "-n", ns, "route", "replace", *words, "congctl", cc, *extra],
                           check=True, capture_output=True)  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--robots", type=int, default=4)
    p.add_argument("--rate-mbit", type=float, default=50.0)
    p.add_argument("--duration", type=float, default=15.0, help="seconds measured per run")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--lead", type=float, default=3.0,
                   help="seconds for the programs to start before the warm-up")  # fmt: skip
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--apps", default="dds,zenoh")
    p.add_argument("--modes", default="none,transparent,api")
    p.add_argument("--direction", default=["up"], help="up,down,both (cells)",
                   type=lambda t: _list(t, DIRECTIONS, "--direction"))  # fmt: skip
    p.add_argument("--streams", default=[1], type=_counts, help="connections per robot and "
                   "way, e.g. 1,4 (cells)")  # fmt: skip
    p.add_argument("--medium", default=["split"], help="split,shared,wifi (cells; wire = split)",
                   type=lambda t: _list(t.replace("wire", "split"), (*MEDIA, "wifi"),
                                        "--medium"))  # fmt: skip
    p.add_argument("--scenario", default="crl-5", help="--medium wifi: the channel")
    p.add_argument("--ring", choices=("shared", "per-ac"), default="shared",
                   help="--medium wifi: the NICs' ring model")  # fmt: skip
    p.add_argument("--cpu-hog", type=int, default=0, help="busy processes on every host")
    p.add_argument("--timeslice-ms", type=float, default=5000.0, help="the team's timeslice")
    p.add_argument("--inflight-budget-ms", type=float, default=None,
                   help="the agents' [agent] inflight_budget_ms (default: Coorp's; 0: no "
                   "bound)")  # fmt: skip
    p.add_argument("--gate-completion", choices=("departure", "ack"), default=None,
                   help="the agents' [agent] gate_completion (default: departure)")  # fmt: skip
    p.add_argument("--ack-category", choices=("AC_VI", "AC_BE"), default=None,
                   help="the access category of the team's TCP acks: [agent] "
                   "inbox_ack_category (api) and [transparent] ack_category (default: "
                   "Coorp's, AC_VI)")  # fmt: skip
    p.add_argument("--ls-category", choices=("AC_VO", "AC_VI"), default=None,
                   help="the category Coorp marks LS packets for: [agent] ls_category (api) "
                   "and [transparent] ls_category (default: Coorp's, AC_VO)")  # fmt: skip
    p.add_argument("--sink-rt-priority", type=int, default=0,
                   help="SCHED_FIFO priority of the upload sink (0: ordinary scheduling; on "
                   "a loaded host a descheduled receiver stalls the acks)")  # fmt: skip
    p.add_argument("--agent-scheduling", default="nice:-10",
                   help="the agents' agent.scheduling (none, nice:N, rr:P)")  # fmt: skip
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
    p.add_argument("--emu-no-split-cpus", dest="emu_split_cpus", action="store_false",
                   help="--medium wifi: the emulator not pinned to one CPU and the "
                   "stations' receives not steered to the others (the default splits)")  # fmt: skip
    p.add_argument(
        "--emu-gro",
        action=argparse.BooleanOptionalAction,
        default=GRO_DEFAULT,
        help="--medium wifi: the receivers' stacks get each exchange's TCP segments "
        "coalesced, as a NIC driver's GRO hands them (coorp emulate --gro, the default); "
        "--no-emu-gro: one packet per frame, as before 2026-12-03's GRO writes",
    )
    p.add_argument("--emu-queue-packets", type=int, default=1000,
                   help="--medium wifi: each station's kernel queue per access category "
                   "(coorp emulate --queue-packets)")  # fmt: skip
    p.add_argument("--tcp-cc", default=None,
                   help="every host's TCP congestion control, by route (default: the host's, "
                   "bbr on this machine; the simulator's uploads are cubic)")  # fmt: skip
    p.add_argument("--emu-trace", type=Path, default=None,
                   help="--medium wifi: write the emulator's traces (frames, exchanges) "
                   "here (coorp emulate --trace); benchmarks/_edca_gap.py reads them")  # fmt: skip
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-extras", action="store_true", help="skip the runs without LS")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--logs", type=Path, default=None, help="keep every process's stderr here")
    args = p.parse_args()
    if args.cpu_hog < 0:
        p.error(f"--cpu-hog must be >= 0, got {args.cpu_hog}")
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
    with tempfile.TemporaryDirectory(prefix="coorp-transparent-") as tmp:
        d = args.logs or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        emulator = None
        for m, medium in enumerate(args.medium):
            with network(args, medium) as net:
                if medium == "wifi":
                    net.create(sysctls=WIFI_SYSCTLS)
                else:
                    net.create(rate_mbit=args.rate_mbit, queue_ms=100.0)
                if args.tcp_cc:
                    route_congestion_control(net, args.tcp_cc)
                for rep in range(args.repetitions):
                    for direction in args.direction:
                        for streams in args.streams:
                            todo = [(a, md) for a in apps for md in modes if md != "api"]
                            todo += [("coorp", "api")] if "api" in modes else []
                            for app, mode in todo:
                                row = measure(net, d, args, app=app, mode=mode, medium=medium,
                                              direction=direction, streams=streams)  # fmt: skip
                                row["repetition"] = rep
                                rows.append(row)
                                print(_line(rep, row), flush=True)
                                if args.json is not None:  # what is done so far, kept
                                    write_json(args.json.with_suffix(".partial.json"),
                                               {"runs": rows})  # fmt: skip
                    if args.no_extras or m > 0:
                        continue
                    extras.append(_extras(net, d, args, medium))
                    print(f"rep {rep} no LS: {extras[-1]}", flush=True)
                if medium == "wifi":
                    emulator = net.stop().data
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


def _extras(net: Network, d: Path, args: argparse.Namespace, medium: str) -> dict[str, float]:
    """Without LS: the relay's cost to an upload, and a flow no selector names."""
    runs = {
        (port, mode): measure(net, d, args, app="dds", mode=mode, ls=False, medium=medium,
                              bulk_port=port)["bulk_mbps"]
        for port in (BULK_PORT, OTHER_PORT) for mode in ("none", "transparent")
    }  # fmt: skip
    return {
        "interception_cost": 1 - runs[BULK_PORT, "transparent"] / runs[BULK_PORT, "none"],
        "untouched_flow_ratio": runs[OTHER_PORT, "transparent"] / runs[OTHER_PORT, "none"],
        **{f"{'relayed' if port == BULK_PORT else 'untouched'}_{mode}_mbps": v
           for (port, mode), v in runs.items()},
    }  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
