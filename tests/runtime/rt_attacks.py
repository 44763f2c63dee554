"""What one member, or a flood, can do to the others: the namespace scenarios shared by
``test_runtime_members_netns.py`` (small loads, asserted) and
``benchmarks/runtime_faults.py --only members,distributed-flood,impaired-ls`` (the
issue's loads, measured).

Topology (``rt_netns.Topology``, tag ``c23``): leader ``ld`` and hosts ``a1``..``a5`` on
one bridge. Every process is started through the topology (killed by its ``destroy``);
every wait is bounded. The services under attack (leader, inboxes) log to files in
``tmp``; :func:`log_lines_per_s_max` counts their lines per kind and second.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from rt_netns import Proc, Topology

__all__ = [
    "distributed_flood",
    "eviction",
    "impaired_ls",
    "inbox_flood",
    "log_lines_per_s_max",
    "request_flood",
]

KEY_HEX = "c2" * 32
ROLES = [sys.executable, str(Path(__file__).with_name("rt_roles.py"))]
_coorp = Path(sys.executable).with_name("coorp")
COORP = [str(_coorp)] if _coorp.exists() else [sys.executable, "-m", "coorp.cli"]
LEADER_PORT, INBOX_PORT, RELAY_PORT = 7400, 7500, 7600
PROBES = [f"p{i}" for i in range(1, 9)]
#: The flood's source addresses (last octets on the leader's /24).
FLOOD_SOURCES = range(100, 250)
#: How long a member stays joined at most, and a helper program may take to run (a
#: loaded machine's runs take longer: the benchmark raises them under its CPU hog).
MEMBER_TIMEOUT_S = 300
RUN_TIMEOUT_S = 30


def team_file(tmp: Path) -> Path:
    (tmp / "team.key").write_text(KEY_HEX + "\n")
    (tmp / "team.key").chmod(0o600)
    robots = ", ".join(f'"{r}"' for r in ["ld", "a1", "a2", "a3", "a4", "a5", *PROBES])
    p = tmp / "team.toml"
    p.write_text(
        f'[team]\nname = "c23"\nkey_file = "team.key"\nrobots = [{robots}]\n'
        f'[leader]\nlisten = "0.0.0.0:{LEADER_PORT}"\nlimit = 1\nheartbeat_ms = 200\n'
    )
    return p


def _start(topo: Topology, host: str, argv: list[str], name: str, log: Path | None = None) -> Proc:
    """A process with stdin (roles stop on a line) and, for services, stderr to ``log``."""
    if log is None:
        return topo.start(host, argv, name=name, stdin=True)
    with log.open("ab") as f:
        popen = topo.popen(host, argv, stdin=True, stderr=f)
    proc = Proc(name, popen)
    topo.procs.append(proc)
    return proc


def _result(proc: Proc, timeout: float) -> Any:
    return json.loads(proc.expect("RESULT ", timeout).removeprefix("RESULT "))


def _stop(proc: Proc, timeout: float = 30) -> Any:
    proc.send("stop")
    return _result(proc, timeout)


def start_leader(topo: Topology, tmp: Path, *, nofile: int | None = None) -> Proc:
    pre = ["prlimit", f"--nofile={nofile}:{nofile}"] if nofile else []
    argv = [*pre, *COORP, "leader", "--config", str(team_file(tmp)), "--log-level", "info"]
    p = _start(topo, "ld", argv, "leader", tmp / "leader.log")
    p.expect("coorp leader: serving", 30)
    return p


def leader_stats(topo: Topology, attempts: int = 5) -> dict[str, Any]:
    """The leader's counters (an observer connection from ``ld``; retried, bounded)."""
    last: Exception | None = None
    for _ in range(attempts):
        try:
            out = topo.run(
                "ld",
                [
                    *ROLES,
                    "stats",
                    "--leader",
                    f"{topo.addr('ld')}:{LEADER_PORT}",
                    "--key-hex",
                    KEY_HEX,
                ],
                timeout=RUN_TIMEOUT_S,
            )
            counters: dict[str, Any] = json.loads(out)["counters"]
            return counters
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            last = exc
    raise RuntimeError(f"leader stats unavailable: {last}")


def wait_leader(topo: Topology, what: str, pred: Any, attempts: int = 40) -> dict[str, Any]:
    st: dict[str, Any] = {}
    for _ in range(attempts):
        st = leader_stats(topo)
        if pred(st):
            return st
    raise AssertionError(f"leader never reached: {what}; last {st}")


def join_probe(topo: Topology, host: str, robot: str, timeout_s: float = 5) -> dict[str, Any]:
    """A robot joining (fresh process): its mode and the time ``join`` took."""
    out = topo.run(
        host,
        [
            *ROLES,
            "joinprobe",
            "--leader",
            f"{topo.addr('ld')}:{LEADER_PORT}",
            "--robot",
            robot,
            "--key-hex",
            KEY_HEX,
            "--timeout",
            str(timeout_s),
        ],
        timeout=max(60, RUN_TIMEOUT_S),
    )
    line = next(x for x in out.splitlines() if x.startswith("JOINED"))
    _, mode, ms, link = line.split(maxsplit=3)
    return {
        "host": host,
        "robot": robot,
        "mode": mode,
        "join_s": float(ms) / 1e3,
        "failed_attempts": json.loads(link).get("failed_attempts", 0),
        "load": round(os.getloadavg()[0], 1),
    }


def member(topo: Topology, host: str) -> Proc:
    p = _start(
        topo,
        host,
        [
            *ROLES,
            "member",
            "--leader",
            f"{topo.addr('ld')}:{LEADER_PORT}",
            "--robot",
            host,
            "--key-hex",
            KEY_HEX,
            "--timeout",
            str(MEMBER_TIMEOUT_S),
        ],
        host,
    )
    line = p.expect("READY", 120)
    if line.split()[1] != "coordinated":
        raise AssertionError(f"{host} did not join before the attack: {line}")
    return p


# -- 1. a distributed flood ---------------------------------------------------------------------
def distributed_flood(
    topo: Topology, tmp: Path, *, nofile: int, count: int = 2000, probes: int = 6, members: int = 3
) -> dict[str, Any]:
    """``count`` connections held from the 150 addresses of ``a4`` (reopened as soon as
    the leader closes them) against a leader under ``ulimit -n nofile``, while members
    ``a1``..``a3`` (the first ``members``) stay joined; ``probes`` robots join from
    their hosts, and one
    from ``a5``, a host no member ever joined from (reported apart: it competes with
    the flood for the unknown hosts' budget)."""
    topo.add_addresses("a4", FLOOD_SOURCES)
    start_leader(topo, tmp, nofile=nofile)
    leader_stats(topo)  # ld's observer connection authenticates before the flood
    hosts = ["a1", "a2", "a3"][:members]
    members_ = [member(topo, h) for h in hosts]
    src = f"{topo.subnet}.{FLOOD_SOURCES.start}-{FLOOD_SOURCES.stop - 1}"
    flood = _start(
        topo,
        "a4",
        [
            *ROLES,
            "dflood",
            "--to",
            f"{topo.addr('ld')}:{LEADER_PORT}",
            "--sources",
            src,
            "--count",
            str(count),
            "--timeout",
            "300",
        ],
        "dflood",
    )
    flood.expect("FLOODED", 60)
    wait_leader(topo, "the flood is over the pre-auth budget", lambda s: s["dropped_early"] > 0)
    joins = [join_probe(topo, hosts[i % len(hosts)], PROBES[i]) for i in range(probes)]
    fresh = join_probe(topo, "a5", PROBES[-1])
    counters = leader_stats(topo)
    flooded = _stop(flood)
    links = [_stop(m)["link"] for m in members_]
    return {
        "nofile": nofile,
        "joins": joins,
        "fresh_host_join": fresh,
        "member_fallbacks": sum(x.get("fallbacks", 0) for x in links),
        "member_disconnects": sum(x.get("disconnects", 0) for x in links),
        "flood": flooded,
        "leader": {
            k: counters[k]
            for k in (
                "max_connections",
                "open_connections",
                "preauth_budget",
                "preauth_evicted",
                "dropped_early",
                "limited_connections",
                "dropped_full",
                "handshake_timeouts",
                "fd_exhaustions",
                "accept_healthy",
                "known_hosts",
            )
        },
    }


def inbox_flood(topo: Topology, tmp: Path, *, count: int = 2000) -> dict[str, Any]:
    """The same flood against ``a2``'s inbox (no fd limit beyond its own bound of 256
    connections); robots that never sent to it (``a1``, ``a3``, ``a5``) each open an LS
    session there and send one 100 kB bulk message, one after the other."""
    topo.add_addresses("a4", FLOOD_SOURCES)
    inbox = f"{topo.addr('a2')}:{INBOX_PORT}"
    senders = ("a1", "a3", "a5")
    sink = _start(
        topo,
        "a2",
        [
            *ROLES,
            "sink",
            "--robot",
            "a2",
            "--listen",
            inbox,
            "--expect-bulk",
            str(len(senders)),
            "--key-hex",
            KEY_HEX,
            "--timeout",
            "300",
        ],
        "inbox-a2",
        tmp / "inbox-a2.log",
    )
    sink.expect("READY", 30)
    src = f"{topo.subnet}.{FLOOD_SOURCES.start}-{FLOOD_SOURCES.stop - 1}"
    flood = _start(
        topo,
        "a4",
        [
            *ROLES,
            "dflood",
            "--to",
            inbox,
            "--sources",
            src,
            "--count",
            str(count),
            "--timeout",
            "300",
        ],
        "dflood",
    )
    flood.expect("FLOODED", 60)
    sends = []
    for host in senders:
        w = _start(
            topo,
            host,
            [
                *ROLES,
                "worker",
                "--robot",
                host,
                "--dest",
                inbox,
                "--bh-bytes",
                "100000",
                "--grid-ns",
                str(time.monotonic_ns()),
                "--no-local",
                "--key-hex",
                KEY_HEX,
                "--timeout",
                "60",
            ],
            host,
        )
        r = _result(w, 90)
        sends.append(
            {
                "host": host,
                "bulk_s": (r["finished_ns"] - r["started_ns"]) / 1e9,
                "reconnects": r["reconnects"],
                "ls_sessions": r["ls"]["sessions"],
            }
        )
    flooded = _stop(flood)
    got = _result(sink, 60)
    st = got["stats"]
    return {
        "sends": sends,
        "delivered": len(got["bulk"]),
        "flood": flooded,
        "inbox": {
            k: st.get(f"bulk_{k}", 0)
            for k in (
                "dropped_early",
                "preauth_evicted",
                "open_connections",
                "max_connections",
                "fd_exhaustions",
            )
        },
    }


# -- 2. a member opening sessions at another robot's inbox ---------------------------------------
def eviction(topo: Topology, tmp: Path, *, count: int = 4200) -> dict[str, Any]:
    """``a1`` (its own key only) opens ``count`` LS sessions at ``a2``'s inbox while
    ``a3`` sends LS to that inbox at 100 Hz; how many of ``a3``'s messages were lost."""
    inbox = f"{topo.addr('a2')}:{INBOX_PORT}"
    sink = _start(
        topo,
        "a2",
        [
            *ROLES,
            "sink",
            "--robot",
            "a2",
            "--listen",
            inbox,
            "--expect-bulk",
            "0",
            "--until-stdin",
            "--key-hex",
            KEY_HEX,
            "--timeout",
            "300",
        ],
        "inbox-a2",
        tmp / "inbox-a2.log",
    )
    sink.expect("READY", 30)
    flow = _start(
        topo,
        "a3",
        [
            *ROLES,
            "lsflow",
            "--robot",
            "a3",
            "--dest",
            inbox,
            "--hz",
            "100",
            "--key-hex",
            KEY_HEX,
            "--timeout",
            "300",
        ],
        "lsflow",
    )
    if flow.expect("READY", 30).split()[1] != "True":
        raise AssertionError("a3's LS session did not open")
    attack = _start(
        topo,
        "a1",
        [
            *ROLES,
            "evict",
            "--robot",
            "a1",
            "--dest",
            inbox,
            "--count",
            str(count),
            "--key-hex",
            KEY_HEX,
            "--timeout",
            "240",
        ],
        "evict",
    )
    attacked = _result(attack, 250)
    sent = _stop(flow, 60)
    got = _stop(sink, 60)
    flows = got["flows"]
    a3 = flows.get("a3/control", {"received": 0, "lost": 0, "sessions": 0})
    return {
        "attack": attacked,
        "a3_sent": sent["stats"]["sent"],
        "a3_received": a3["received"],
        "other_ls_lost": sent["stats"]["sent"] - a3["received"],
        "a3_lost_counted": a3["lost"],
        "a3_sessions": a3["sessions"],
        "a1_sessions": sum(f["sessions"] for k, f in flows.items() if k.startswith("a1/")),
        "inbox": {
            k: v for k, v in got["stats"].items() if k.startswith(("ls_", "bulk_ls", "drop"))
        },
    }


# -- 3. a member flooding the leader with frames and connections -----------------------------------
def request_flood(
    topo: Topology, tmp: Path, *, observers: int = 1030, probes: int = 6
) -> dict[str, Any]:
    """``a1`` joins, opens ``observers`` observer connections and sends Request/Ping
    frames as fast as the leader takes them; ``probes`` other robots join meanwhile."""
    start_leader(topo, tmp)
    flood = _start(
        topo,
        "a1",
        [
            *ROLES,
            "reqflood",
            "--leader",
            f"{topo.addr('ld')}:{LEADER_PORT}",
            "--robot",
            "a1",
            "--observers",
            str(observers),
            "--key-hex",
            KEY_HEX,
            "--timeout",
            "300",
        ],
        "reqflood",
    )
    flood.expect("FLOODING", 120)
    wait_leader(topo, "a1's frames are paced", lambda s: s["throttled_frames"] > 0)
    joins = [join_probe(topo, f"a{2 + i % 2}", PROBES[i]) for i in range(probes)]
    counters = leader_stats(topo)
    flooded = _stop(flood)
    return {
        "joins": joins,
        "flood": flooded,
        "leader": {
            k: counters[k]
            for k in (
                "frames",
                "throttled_frames",
                "throttled_ms",
                "quota_refused",
                "joins",
                "open_connections",
            )
        },
    }


# -- 4. LS through an impaired link ----------------------------------------------------------------
def impaired_ls(
    topo: Topology,
    tmp: Path,
    *,
    seconds: float = 10,
    hz: float = 100,
    loss: float = 0.1,
    delay_ms: float = 20,
    jitter_ms: float = 10,
    seed: int = 1,
) -> dict[str, Any]:
    """``a1`` sends LS at ``hz`` to ``ld``'s inbox through a user-space relay on ``ld``
    (``loss``, ``delay_ms`` ± ``jitter_ms``, uniform): replays counted, and the
    receiver's loss count against sent − received."""
    inbox = f"{topo.addr('ld')}:{INBOX_PORT}"
    relay_at = f"{topo.addr('ld')}:{RELAY_PORT}"
    sink = _start(
        topo,
        "ld",
        [
            *ROLES,
            "sink",
            "--robot",
            "ld",
            "--listen",
            inbox,
            "--expect-bulk",
            "0",
            "--until-stdin",
            "--key-hex",
            KEY_HEX,
            "--timeout",
            "300",
        ],
        "inbox-ld",
        tmp / "inbox-ld.log",
    )
    sink.expect("READY", 30)
    relay = _start(
        topo,
        "ld",
        [
            *ROLES,
            "impair",
            "--listen",
            relay_at,
            "--to",
            inbox,
            "--loss",
            str(loss),
            "--delay-ms",
            str(delay_ms),
            "--jitter-ms",
            str(jitter_ms),
            "--seed",
            str(seed),
            "--timeout",
            "300",
        ],
        "impair",
    )
    relay.expect("READY", 30)
    flow = _start(
        topo,
        "a1",
        [
            *ROLES,
            "lsflow",
            "--robot",
            "a1",
            "--dest",
            relay_at,
            "--hz",
            str(hz),
            "--key-hex",
            KEY_HEX,
            "--timeout",
            "300",
        ],
        "lsflow",
    )
    if flow.expect("READY", 30).split()[1] != "True":
        raise AssertionError("a1's LS session did not open")
    threading.Event().wait(seconds)  # the flow runs this long (the measured load)
    sent = _stop(flow, 60)
    link = _stop(relay)
    got = _stop(sink)
    f = got["flows"]["a1/control"]
    return {
        "sent": sent["stats"]["sent"],
        "received": f["received"],
        "lost": sent["stats"]["sent"] - f["received"],
        "lost_counted": f["lost"],
        "sender_lost_counted": sent["stats"]["lost"],
        "reordered": f["reordered"],
        "reorders_as_replay": f["replayed"] + got["stats"].get("dropped_replayed", 0),
        "link": link,
    }


# -- logs ----------------------------------------------------------------------------------------
_TS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}|\d{9,}\.\d{3}) (\w+) ([\w.]+): (.*)$")
_KIND = re.compile(r"\[([\w:.-]+)\]$")


def log_lines_per_s_max(paths: Iterable[Path]) -> tuple[int, str]:
    """The most lines of one kind any log wrote within one second (a sliding window),
    and that kind. A line's kind is its trailing ``[kind]`` (rate-limited lines), else
    its logger and first words with numbers and addresses removed."""
    worst, worst_kind = 0, "-"
    for path in paths:
        if not path.exists():
            continue
        times: dict[str, list[float]] = defaultdict(list)
        for line in path.read_text(errors="replace").splitlines():
            m = _TS.match(line)
            if m is None:
                continue
            stamp, _level, logger, msg = m.groups()
            t = (
                float(stamp)
                if "-" not in stamp
                else datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
            )
            k = _KIND.search(msg)
            kind = (
                k.group(1)
                if k
                else f"{logger} "
                + " ".join(re.sub(r"[\d.:\[\]]+", "#", w) for w in msg.split()[:4])
            )
            times[f"{path.name}: {kind}"].append(t)
        for kind, ts in times.items():
            ts.sort()
            j = 0
            for i, t in enumerate(ts):
                while t - ts[j] >= 1.0:
                    j += 1
                if i - j + 1 > worst:
                    worst, worst_kind = i - j + 1, kind
    return worst, worst_kind


def elapsed(t0: float) -> float:
    return round(time.monotonic() - t0, 1)
