"""Runtime under faults: floods, replays, random-phase LS under bulk, leader restarts.

Measures the targets of issue 11 (numbers go to docs/runtime.md, "Faults: measured"):

1. **flood** (netns): a leader under ``ulimit -n 1024`` gets 2,000 connections held
   open from one host; how long a legitimate join from another host takes
   (target ≤ 1 s).
2. **replay** (loopback): captured LS datagrams replayed to their receiver, to another
   robot, and to the receiver after it restarted; how many are accepted (target 0).
3. **phases** (netns, 50 Mbit/s tbf bottleneck): three robots with random LS phases
   (30 Hz, 4 kB) and a bulk transfer each; LS one-way latency while bulk flows
   (target p99 ≤ 10 ms, none > 33 ms): marking only, coordinated without an in-flight
   budget, coordinated (default budget), interleaved for each phase draw; bulk
   throughput of each, and its ratio to the run without a budget.
4. **restart** (netns): one robot sends 20 MB; undisturbed vs with the leader killed
   (SIGKILL) and restarted once the transfer runs (target ≤ 1.5× the undisturbed
   time, 0 bytes lost).
5. **overhead** (loopback): LS one-way p50, Coorp vs raw UDP, in 5 interleaved runs
   (target ≤ 50 µs more in every run); uses ``runtime_latency.py``'s measurement.

And the targets of issue 23 (what one member, or a flood, costs the others; scenarios
in ``tests/runtime/rt_attacks.py``, namespaces ``c23-*``):

6. **distributed-flood**: 2,000 connections from 150 source addresses, each reopened as
   soon as the leader closes it, against a leader under ``ulimit -n`` 256 and 1,024,
   while three members stay joined; six robots join from the members' hosts (target:
   every join ≤ 1 s, 0 fallbacks to uncoordinated). One more joins from a host no
   member joined from (printed, not in the target: see docs/runtime.md). Then the same
   flood against a robot's inbox while three robots send it 100 kB each (printed).
7. **members**: a member opens 4,200 LS sessions at another robot's inbox while a third
   sends LS there at 100 Hz (target: 0 of its messages lost); a member holds 1,030
   observer connections and floods Request/Ping frames while six robots join (target:
   every join ≤ 1 s).
8. **impaired-ls**: 100 Hz LS through a user-space relay with 10 % loss and 20 ± 10 ms
   delay (target: 0 reordered datagrams counted as replays; the receiver's loss count
   = sent − received).

And the targets of issue 33 (transparent mode's relay as a privileged proxy, and what a
hostile member costs the others; scenarios in ``benchmarks/_relay_faults.py``, whose
docstring says what each measures):

9. **relay**: a self-loop attempt, 2,000 intercepted connections, the agent under
   ``nofile`` 1,024 with the leader restarted, 20 ``kill -9`` mid-transfer, programs an
   egress rule rejects;
10. **members** (with ``relay``): a member hogging an inbox's partial-bulk space, a
    member laundering 150 addresses then flooding the leader, and flood joins with a CPU
    hog running (``--cpu-hog N`` busy processes; by default enough for load ≥ 12, at
    least 2).

``--only relay,members`` prints the details and, with ``--json``, writes exactly
``{"relay_self_loop_fds_max", "relay_rss_mb_max_2000_flows",
"uncoordinated_s_under_fd_pressure", "silent_truncations", "egress_policy_bypassed",
"inbox_hog_rejections_of_others", "laundered_flood_fallbacks",
"flood_join_s_max_loaded"}`` (maxima and sums over ``--runs``). ``members`` without
``relay`` is issue 23's part (7. above).

All of 6–8 also count the log lines of the leader and inboxes under attack (target: ≤ 5
per second per warning kind). With ``--only`` naming only 6–8, ``--json`` writes
exactly ``{"distributed_flood": {"join_s_max", "fallbacks"}, "eviction":
{"other_ls_lost"}, "request_flood": {"join_s_max"}, "impaired_ls":
{"reorders_as_replay", "lost", "lost_counted"}, "log_lines_per_s_max"}`` (maxima and
sums over ``--runs``); the details go to stdout.

Needs root and iproute2 for 1, 3, 4, 6, 7, 8 (skipped otherwise, with the reason).

Usage::

    python benchmarks/runtime_faults.py [--only flood,replay,phases,restart,overhead]
        [--runs 3] [--trace] [--nice N] [--pm-qos] [--json out.json]
    python benchmarks/runtime_faults.py --only members,distributed-flood,impaired-ls
        [--runs 3] [--impaired-seconds 20] --json out.json
    python benchmarks/runtime_faults.py --only relay,members [--runs 1] [--cpu-hog 10]
        --json out.json

``--pm-qos`` holds ``/dev/cpu_dma_latency`` at 0 µs for the whole run (root), as
``cyclictest`` does by default and latency-sensitive hosts are configured: no CPU enters
an idle state it needs time to wake from. Both contenders of every measurement run under
it alike.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from coorp.stats import mean_ci as _mean_ci

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests" / "runtime"
sys.path[:0] = [str(HERE), str(TESTS)]

from rt_netns import Proc, Topology, netns_unavailable  # noqa: E402

KEY_HEX = "6b" * 32
ROLES = [sys.executable, str(TESTS / "rt_roles.py")]
_coorp = Path(sys.executable).with_name("coorp")
COORP = [str(_coorp)] if _coorp.exists() else [sys.executable, "-m", "coorp.cli"]
LEADER_PORT, SINK_PORT = 7400, 7500
RATE_MBIT, QUEUE_MS = 50, 100
PERIOD_MS = 33.3
PHASE_BYTES = 4_000_000
NICE: list[str] = []  # --nice N: ["nice", "-n", "N"] before every team process


def team_file(d: Path, timeslice_ms: float = 5000) -> Path:
    (d / "team.key").write_text(KEY_HEX + "\n")
    (d / "team.key").chmod(0o600)
    p = d / "team.toml"
    p.write_text(
        '[team]\nname = "bench"\nkey_file = "team.key"\nrobots = ["ld", "a1", "a2", "a3"]\n'
        f'[leader]\nlisten = "0.0.0.0:{LEADER_PORT}"\nlimit = 1\ntimeslice_ms = {timeslice_ms}\n'
    )
    return p


def result(proc: Proc, timeout: float) -> Any:
    return json.loads(proc.expect("RESULT ", timeout).removeprefix("RESULT "))


def stats(topo: Topology) -> dict[str, Any]:
    out = topo.run(
        "ld",
        [*ROLES, "stats", "--leader", f"{topo.addr('ld')}:{LEADER_PORT}", "--key-hex", KEY_HEX],
    )
    parsed: dict[str, Any] = json.loads(out)
    return parsed


def wait_leader(topo: Topology, pred: Any, what: str, attempts: int = 60) -> None:
    for _ in range(attempts):
        with contextlib.suppress(RuntimeError):
            if pred(stats(topo)):
                return
    raise RuntimeError(f"leader never reached: {what}")


def start_leader(topo: Topology, cfg: Path, *, nofile: int | None = None) -> Proc:
    pre = ["prlimit", f"--nofile={nofile}:{nofile}"] if nofile else []
    p = topo.start(
        "ld", [*NICE, *pre, *COORP, "leader", "--config", str(cfg), "--log-level", "error"]
    )
    p.expect("coorp leader: serving", 30)
    return p


def start_sink(topo: Topology, expect: int, extra: tuple[str, ...] = ()) -> Proc:
    p = topo.start(
        "ld",
        [*NICE, *ROLES, "sink", "--listen", f"{topo.addr('ld')}:{SINK_PORT}", "--expect-bulk",
         str(expect), "--key-hex", KEY_HEX, "--timeout", "180", *extra],
        name="sink",
    )  # fmt: skip
    p.expect("READY", 30)
    return p


def start_worker(
    topo: Topology, host: str, nbytes: int, grid_ns: int, *, coordinated: bool, extra: list[str]
) -> Proc:
    argv = [*NICE, *ROLES, "worker", "--robot", host, "--dest", f"{topo.addr('ld')}:{SINK_PORT}",
            "--bh-bytes", str(nbytes), "--seed", host[1:], "--grid-ns", str(grid_ns),
            "--key-hex", KEY_HEX, "--timeout", "180", *extra]  # fmt: skip
    argv += ["--leader", f"{topo.addr('ld')}:{LEADER_PORT}"] if coordinated else ["--no-local"]
    return topo.start(host, argv, name=host)


class Net:
    def __init__(self, rate_mbit: float = RATE_MBIT) -> None:
        self.topo = Topology(agents=3)
        self.rate = rate_mbit

    def __enter__(self) -> Topology:
        self.topo.create(rate_mbit=self.rate, queue_ms=QUEUE_MS)
        return self.topo

    def __exit__(self, *exc: object) -> None:
        self.topo.destroy()


# -- 1. flood -----------------------------------------------------------------------------------
def flood(tmp: Path) -> dict[str, Any]:
    with Net() as topo:
        start_leader(topo, team_file(tmp), nofile=1024)
        addr = f"{topo.addr('ld')}:{LEADER_PORT}"
        fl = topo.start("a3", [*ROLES, "flood", "--leader", addr, "--count", "2000"])
        held = int(fl.expect("FLOODED", 60).split()[1])
        probe = topo.start(
            "a1", [*ROLES, "joinprobe", "--leader", addr, "--robot", "a1", "--key-hex", KEY_HEX]
        )
        line = probe.expect("JOINED", 60).split()
        c = stats(topo)["counters"]
        return {
            "connections_held": held,
            "join_mode": line[1],
            "join_ms": float(line[2]),
            "limited": c["limited_connections"],
            "handshake_timeouts": c["handshake_timeouts"],
            "fd_exhaustions": c["fd_exhaustions"],
            "accept_healthy": c["accept_healthy"],
            "max_connections": c["max_connections"],
        }


# -- 2. replay ----------------------------------------------------------------------------------
def replay(n: int = 200) -> dict[str, Any]:
    from coorp.runtime import TeamKey, join

    class Rec:
        def __init__(self, s: socket.socket) -> None:
            self.s, self.sent = s, []

        def sendmsg(self, bufs: Any) -> int:
            d = b"".join(bufs)
            self.sent.append(d)
            return self.s.send(d)

        def __getattr__(self, k: str) -> Any:
            return getattr(self.s, k)

    key = TeamKey(os.urandom(32))
    lead, r1, r2 = join(None, "ld", key), join(None, "r1", key), join(None, "r2", key)
    try:
        in1, in2 = r1.listen("127.0.0.1:0"), r2.listen("127.0.0.1:0")
        ch = lead.latency_sensitive("control", f"127.0.0.1:{in1.address[1]}", deadline_ms=33)
        rec = Rec(ch._sock)
        ch._sock = rec  # type: ignore[assignment]
        for k in range(n):
            ch.send(b"cmd %d" % k)
        genuine = sum(1 for _ in range(n) if in1.recv(timeout=5))

        def blast(port: int) -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
                for d in rec.sent:
                    a.sendto(d, ("127.0.0.1", port))

        def accepted(inbox: Any, drop_key: str) -> int:
            got = 0
            for _ in range(n * 4):
                with contextlib.suppress(TimeoutError):
                    inbox.recv(timeout=0.05)
                    got += 1
                if inbox.stats().get(drop_key, 0) + got >= n:
                    break
            return got

        blast(in1.address[1])
        same = accepted(in1, "dropped_replayed")
        blast(in2.address[1])
        cross = accepted(in2, "dropped_unauthenticated")
        port = in1.address[1]
        in1.close()
        fresh = r1.listen(f"127.0.0.1:{port}")
        blast(port)
        restarted = accepted(fresh, "dropped_stale")
        return {
            "genuine_delivered": genuine,
            "replayed": n,
            "accepted_same_receiver": same,
            "accepted_other_robot": cross,
            "accepted_after_restart": restarted,
        }
    finally:
        for t in (lead, r1, r2):
            t.close()


# -- 3. random phases ----------------------------------------------------------------
PHASE_VARIANTS = {
    # name: (coordinated, extra worker arguments)
    "marking": (False, []),
    "coordinated, no budget": (True, ["--inflight-budget-ms", "0"]),
    "coordinated": (True, []),  # the default in-flight budget (BulkSettings)
}


def phases(tmp: Path, *, variant: str, seed: int, trace: bool = False) -> dict[str, Any]:
    coordinated, extra = PHASE_VARIANTS[variant]
    extra = [*extra, "--trace-outq"] if trace else extra
    rng = random.Random(seed)
    with Net() as topo:
        if coordinated:
            start_leader(topo, team_file(tmp))
        else:
            team_file(tmp)
        sink = start_sink(topo, 3, ("--stall-ticker",) if trace else ())
        base = time.monotonic_ns()
        offsets = {h: rng.randrange(round(PERIOD_MS * 1e6)) for h in ("a1", "a2", "a3")}
        ws = [
            start_worker(topo, h, PHASE_BYTES, base + off, coordinated=coordinated, extra=extra)
            for h, off in offsets.items()
        ]
        res = [result(w, 180) for w in ws]
        got = result(sink, 60)
    start = min(b["first_ns"] for b in got["bulk"])
    end = max(b["done_ns"] for b in got["bulk"])
    lat = np.array([(r - s) / 1e6 for _, _, s, r in got["ls"] if start <= r <= end])
    late = sorted(
        ([rb, (r - s) / 1e6, s, r] for rb, _, s, r in got["ls"] if start <= r <= end),
        key=lambda x: -x[1],
    )[:5]
    return {
        "variant": variant,
        "seed": seed,
        "phases_ms": {h: round(o / 1e6, 1) for h, o in offsets.items()},
        "n": len(lat),
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "max_ms": float(lat.max()),
        "over_33ms": int((lat > 33).sum()),
        "bulk_s": (end - start) / 1e9,
        "bulk_mbit_s": 3 * PHASE_BYTES * 8 / ((end - start) / 1e3),
        "inflight_max_bytes": max(r["bulk"]["inflight_max_bytes"] for r in res),
        "inflight_waits": sum(r["bulk"]["inflight_waits"] for r in res),
        "load": os.getloadavg()[0],
        "late": [where_late(m, res, got.get("stalls", [])) for m in late] if trace else [],
    }


def where_late(
    m: list[Any], workers: list[dict[str, Any]], stalls: list[list[int]]
) -> dict[str, Any]:
    """Where one LS message's delay came from: the bulk holder's bytes outstanding
    when it was sent (what it could have queued behind at the bottleneck, in ms of
    the bottleneck's rate) and whether the receiving process was stalled meanwhile."""
    robot, ms, sent, recv = m
    holder, outq = None, None
    for w in workers:
        if any(a <= sent <= b for a, b, _ in w["intervals"]):
            holder = w["robot"]
            trace = w.get("outq", [])
            near = min(trace, key=lambda x: abs(x[0] - sent), default=None)
            outq = near[1] if near else None
    stalled = sum(min(b, recv) - max(a, sent) for a, b in stalls if a < recv and b > sent)
    return {
        "robot": robot,
        "ms": round(ms, 2),
        "holder": holder,
        "holder_outq": outq,
        "bottleneck_ms": None if outq is None else round(outq * 8 / (RATE_MBIT * 1e3), 2),
        "receiver_stalled_ms": round(stalled / 1e6, 2),
    }


def mean_ci(xs: list[float]) -> str:
    """mean ± 95% CI half-width (Student t, :func:`coorp.stats.mean_ci`) of a few runs."""
    m = _mean_ci(xs)
    return f"{m.mean:.2f}" if m.n < 2 else f"{m.mean:.2f} ± {m.ci95:.2f}"


def summarize_phases(rows: list[dict[str, Any]]) -> None:
    base = {r["seed"]: r for r in rows if r["variant"] == "coordinated, no budget"}
    for v in PHASE_VARIANTS:
        rs = [r for r in rows if r["variant"] == v]
        ratio = [r["bulk_mbit_s"] / base[r["seed"]]["bulk_mbit_s"] for r in rs if r["seed"] in base]
        per_run = ", ".join(f"{r['p99_ms']:.1f}" for r in rs)
        print(
            f"phases {v:24s} runs {len(rs)}: p50 {mean_ci([r['p50_ms'] for r in rs])} ms, "
            f"p99 {mean_ci([r['p99_ms'] for r in rs])} ms (per run "
            f"{per_run}), max "
            f"{max(r['max_ms'] for r in rs):.1f} ms, over 33 ms {sum(r['over_33ms'] for r in rs)}"
            f"/{sum(r['n'] for r in rs)}; bulk {mean_ci([r['bulk_mbit_s'] for r in rs])} Mbit/s, "
            f"vs no budget {mean_ci(ratio)}",
            flush=True,
        )


# -- 4. leader restart ----------------------------------------------------------------
def restart(tmp: Path, *, kill: bool) -> dict[str, Any]:
    nbytes = 20_000_000
    with Net() as topo:
        cfg = team_file(tmp, timeslice_ms=600_000)
        leader = start_leader(topo, cfg)
        sink = start_sink(topo, 2)
        w = start_worker(
            topo, "a1", nbytes, time.monotonic_ns(), coordinated=True, extra=["--start-msg"]
        )
        w.expect("STARTED", 60)
        wait_leader(topo, lambda s: s["holders"] == ["a1"], "a1 holds the permit")
        killed_ns = None
        if kill:
            killed_ns = time.monotonic_ns()
            os.kill(leader.popen.pid, signal.SIGKILL)
            leader.kill()
            start_leader(topo, cfg)
        r = result(w, 180)
        got = result(sink, 60)
    params = [b for b in got["bulk"] if b["channel"] == "params"]
    intact = len(params) == 1 and params[0]["sha"] == r["sha"] and params[0]["nbytes"] == nbytes
    return {
        "killed": kill,
        "seconds": (r["finished_ns"] - r["started_ns"]) / 1e9,
        "intact": intact,
        "bytes_received": got["stats"]["bulk_bytes"] - 1,  # minus the start message's byte
        "bytes_lost": nbytes - (params[0]["nbytes"] if params else 0),
        "link": r["link"],
        "leader_down_to_done_s": None
        if killed_ns is None
        else (r["finished_ns"] - killed_ns) / 1e9,
    }


# -- 5. LS overhead -----------------------------------------------------------------------------
def overhead(runs: int, count: int) -> list[dict[str, float]]:
    from runtime_latency import ls_latency

    out = []
    for _ in range(runs):  # interleaved: raw, coorp, raw, coorp...
        raw = float(np.percentile(ls_latency("raw", count, 1000, 0.0005), 50)) / 1e3
        coorp = float(np.percentile(ls_latency("coorp", count, 1000, 0.0005), 50)) / 1e3
        out.append({"raw_p50_us": raw, "coorp_p50_us": coorp, "overhead_us": coorp - raw})
    return out


# -- 6-8. what one member, or a flood, costs the others (issue 23) ---------------------------
ISSUE23 = ("members", "distributed-flood", "impaired-ls")


def members_and_floods(todo: set[str], runs: int, impaired_s: float) -> dict[str, Any]:
    """Runs 6-8 ``runs`` times each; the issue's summary (maxima and sums)."""
    import tempfile

    import rt_attacks as attacks

    out: dict[str, Any] = {}
    logs: list[Path] = []

    def scenario(name: str, fn: Any, **kw: Any) -> dict[str, Any]:
        tmp = Path(tempfile.mkdtemp(prefix=f"coorp-c23-{name}-"))
        topo = Topology(agents=5, tag="c23")
        try:
            topo.create(rate_mbit=RATE_MBIT, queue_ms=QUEUE_MS)
            r: dict[str, Any] = fn(topo, tmp, **kw)
        finally:
            topo.destroy()
        worst, kind = attacks.log_lines_per_s_max(tmp.glob("*.log"))
        r["log_lines_per_s_max"], r["log_kind"] = worst, kind
        r["load"] = os.getloadavg()[0]
        logs.extend(tmp.glob("*.log"))
        print(name, json.dumps(r), flush=True)
        return r

    if "distributed-flood" in todo:
        rows = [
            scenario("distributed-flood", attacks.distributed_flood, nofile=n, count=2000, probes=6)
            for _ in range(runs)
            for n in (256, 1024)
        ]
        joins = [j for r in rows for j in r["joins"]]
        fresh = [r["fresh_host_join"] for r in rows]
        print(
            f"distributed-flood: {len(joins)} joins from members' hosts: max "
            f"{max(j['join_s'] for j in joins):.3f} s, modes "
            f"{sorted({j['mode'] for j in joins})}; from a fresh host: "
            + ", ".join(f"{f['mode']} {f['join_s']:.3f} s" for f in fresh),
            flush=True,
        )
        inbox = [scenario("inbox-flood", attacks.inbox_flood, count=2000) for _ in range(runs)]
        sends = [x for r in inbox for x in r["sends"]]
        print(
            f"inbox-flood: {sum(r['delivered'] for r in inbox)}/{len(sends)} bulk messages of "
            f"100 kB delivered, max {max(x['bulk_s'] for x in sends):.3f} s, reconnects "
            f"{sum(x['reconnects'] for x in sends)}",
            flush=True,
        )
        out["distributed_flood"] = {
            "join_s_max": max(j["join_s"] for j in joins),
            "fallbacks": sum(r["member_fallbacks"] for r in rows)
            + sum(j["mode"] != "coordinated" for j in joins),
        }
    if "members" in todo:
        ev = [scenario("eviction", attacks.eviction, count=4200) for _ in range(runs)]
        out["eviction"] = {"other_ls_lost": sum(r["other_ls_lost"] for r in ev)}
        rq = [scenario("request-flood", attacks.request_flood, observers=1030) for _ in range(runs)]
        rq_joins = [j for r in rq for j in r["joins"]]
        out["request_flood"] = {
            "join_s_max": max(j["join_s"] if j["mode"] == "coordinated" else 1e9 for j in rq_joins)
        }
    if "impaired-ls" in todo:
        im = [
            scenario("impaired-ls", attacks.impaired_ls, seconds=impaired_s, seed=k + 1)
            for k in range(runs)
        ]
        out["impaired_ls"] = {
            "reorders_as_replay": sum(r["reorders_as_replay"] for r in im),
            "lost": sum(r["lost"] for r in im),
            "lost_counted": sum(r["lost_counted"] for r in im),
        }
    worst, kind = attacks.log_lines_per_s_max(logs)
    print(f"log lines per second per kind: at most {worst} ({kind})", flush=True)
    out["log_lines_per_s_max"] = worst
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", default="flood,replay,phases,restart,overhead")
    p.add_argument("--runs", type=int, default=3, help="runs of the netns measurements")
    p.add_argument("--ls-count", type=int, default=2000)
    p.add_argument(
        "--impaired-seconds", type=float, default=20, help="impaired-ls: seconds of 100 Hz LS"
    )
    p.add_argument("--json", type=Path)
    p.add_argument(
        "--cpu-hog",
        type=int,
        default=None,
        help="relay,members: busy processes running during the loaded flood joins "
        "(default: enough to bring the load to 12 over what other jobs make, at least 2)",
    )
    p.add_argument(
        "--trace",
        action="store_true",
        help="phases: sample each holder's bytes outstanding and the sink's stalls, and "
        "say for the 5 latest LS messages of each run where they waited",
    )
    p.add_argument(
        "--pm-qos",
        action="store_true",
        help="hold /dev/cpu_dma_latency at 0 for the whole run (no deep CPU idle states; root)",
    )
    p.add_argument(
        "--nice",
        type=int,
        help="run leader, sink and workers at this nice value (e.g. -10, as a robot "
        "would run its control stack; needs root): separates the network mechanism from "
        "other jobs' CPU load",
    )
    args = p.parse_args()
    if args.pm_qos:
        try:  # the request lasts while the file is open: until this process exits
            qos = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
            os.write(qos, (0).to_bytes(4, sys.byteorder))
        except OSError as exc:
            p.error(f"--pm-qos: cannot hold /dev/cpu_dma_latency ({exc}); it needs root")
    if args.nice is not None:
        NICE[:] = ["nice", "-n", str(args.nice)]
    todo = set(args.only.split(","))
    if "relay" in todo:  # issue 33's summary, exactly its keys
        if todo - {"relay", "members"}:
            p.error("--only: relay goes with members only (issue 33's summary)")
        why = netns_unavailable()
        if why is not None:
            raise SystemExit(f"runtime_faults.py: needs network namespaces: {why}")
        import _relay_faults

        print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
        summary = _relay_faults.relay(args.runs)
        if "members" in todo:
            summary.update(_relay_faults.members(args.runs, args.cpu_hog))
        print(f"load after: {os.getloadavg()[0]:.2f}", flush=True)
        print(json.dumps(summary), flush=True)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2))
        return
    unknown = todo - {"flood", "replay", "phases", "restart", "overhead", *ISSUE23}
    if unknown:
        p.error(f"--only: unknown part(s) {', '.join(sorted(unknown))}")
    if todo <= set(ISSUE23):  # the issue's summary, exactly its keys
        why = netns_unavailable()
        if why is not None:
            raise SystemExit(f"runtime_faults.py: needs network namespaces: {why}")
        print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
        summary = members_and_floods(todo, args.runs, args.impaired_seconds)
        print(f"load after: {os.getloadavg()[0]:.2f}", flush=True)
        print(json.dumps(summary), flush=True)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2))
        return
    res: dict[str, Any] = {
        "load_before": os.getloadavg()[0],
        "nice": args.nice,
        "pm_qos": args.pm_qos,
    }
    why = netns_unavailable()
    import tempfile

    def tmpdir() -> Path:
        return Path(tempfile.mkdtemp(prefix="coorp-faults-"))

    if "replay" in todo:
        res["replay"] = replay()
        print("replay", json.dumps(res["replay"]), flush=True)
    if "overhead" in todo:
        res["overhead"] = overhead(5, args.ls_count)
        print("overhead", json.dumps(res["overhead"]), flush=True)
    if why is not None:
        print(f"netns measurements skipped: {why}")
    else:
        if "flood" in todo:
            res["flood"] = [flood(tmpdir()) for _ in range(args.runs)]
            print("flood", json.dumps(res["flood"]), flush=True)
        if "phases" in todo:
            res["phases"] = [
                phases(tmpdir(), variant=v, seed=s, trace=args.trace)
                for s in range(args.runs)
                for v in PHASE_VARIANTS  # interleaved: every variant for each phase draw
            ]
            print("phases", json.dumps(res["phases"]), flush=True)
            summarize_phases(res["phases"])
            for r in res["phases"]:
                for m in r["late"]:
                    print(f"phases late: {r['variant']} seed {r['seed']}: {json.dumps(m)}")
        if set(ISSUE23) & todo:
            res.update(members_and_floods(todo, args.runs, args.impaired_seconds))
        if "restart" in todo:
            res["restart"] = [
                restart(tmpdir(), kill=k) for _ in range(args.runs) for k in (False, True)
            ]
            print("restart", json.dumps(res["restart"]), flush=True)
    res["load_after"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
