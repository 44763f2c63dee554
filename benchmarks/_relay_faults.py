"""Issue 33: transparent mode's relay as a privileged proxy, and what a hostile member
costs the others — the measurements behind ``runtime_faults.py --only relay,members``.

Relay (``tests/runtime/rt_relay.py``: robot ``a1`` runs transparent mode, ``ld`` the
destinations behind a 50 Mbit/s ``tbf``):

* ``relay_self_loop_fds_max`` — another user connects straight to the relay port for 5 s,
  as fast as it can; the agent's open fds at most (sampled every 10 ms), against its
  count before; how many connections the relay made meanwhile (target 0), a 2 MB upload's
  time through the relay meanwhile;
* ``relay_rss_mb_max_2000_flows`` — 2,000 intercepted connections open at once, each
  with bytes relayed; the agent's RSS at most (target ≤ 200 MB);
* ``uncoordinated_s_under_fd_pressure`` — the agent under ``nofile`` 1,024, 2,000
  connections opened through it and held, and meanwhile its connection to the leader
  destroyed three times (``ss -K`` on the leader's host: a reset), so it must reconnect
  under the pressure; seconds it spent uncoordinated (target 0);
* ``silent_truncations`` — 20 times: an upload (40 MB) and a download (20 MB) through the
  relay, the agent killed with ``kill -9`` mid-transfer; receivers that saw a clean end
  of stream before all the bytes (target 0);
* ``egress_policy_bypassed`` — uploads by programs a host egress rule rejects (by uid, by
  gid, by cgroup), 5 each: how many reached the destination (target 0).

Members (``tests/runtime/rt_bounds.py``, ``rt_attacks.py``; tag ``c33``):

* ``inbox_hog_rejections_of_others`` — a member opens two 1 GiB messages at another
  robot's inbox and sends nothing; two other robots send 5 messages of 1 MB there: how
  many are refused (target 0);
* ``laundered_flood_fallbacks`` — a member authenticates once from each of 150
  addresses, then floods the leader (``nofile`` 1,024) from all of them while three
  robots stay joined and six join: fallbacks to uncoordinated (target 0); whether
  ``coorp leader --status`` answered is printed;
* ``flood_join_s_max_loaded`` — the slowest of those joins and of the distributed flood's
  (``rt_attacks.distributed_flood``), all with a CPU hog running (``--cpu-hog`` busy
  processes; load ≥ 10 on the 2-core machine; target ≤ 0.5 s).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

KILLS = 20


def _tmp(name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"coorp-c33-{name}-"))


def _wait(pred: Any, what: str, rounds: int = 200, every_s: float = 0.05) -> None:
    for _ in range(rounds):
        if pred():
            return
        time.sleep(every_s)
    raise AssertionError(f"never: {what}")


# -- relay ------------------------------------------------------------------------------------
def self_loop(seconds: float = 5.0) -> dict[str, Any]:
    from rt_relay import NOBODY, NOGROUP, RELAY, UPLOAD, relay_net

    with relay_net(_tmp("loop"), max_flows=1024, tag="c33") as net:
        before = net.stats(net.agent)
        ends = len(net.stats(net.sink)["ends"])
        net.agent.send("reset-max")
        direct = net.start(
            "a1",
            [
                *RELAY,
                "probe",
                "direct",
                "--count",
                "0",
                "--seconds",
                str(seconds),
                "--bytes",
                "1000",
                "--uid",
                str(NOBODY),
                "--gid",
                str(NOGROUP),
            ],
            "direct",
        )
        time.sleep(seconds / 3)  # the upload runs in the middle of the attack
        upload = net.probe("upload", "--to", net.dest(UPLOAD), "--bytes", "2000000")
        tried = json.loads(direct.expect_rest("RESULT ", 120))["results"]
        after = net.stats(net.agent)
        reached = net.stats(net.sink)["ends"][ends:]
    return {
        "connections_tried": sum(tried.values()) if isinstance(tried, dict) else len(tried),
        "outcomes": tried,
        "relay_connections_made": after["gate"]["approved"] - before["gate"]["approved"] - 1,
        "reached_destination": len(reached) - 1,  # the upload's is the one expected
        "fds_before": before["fds"],
        "fds_max": after["sampled"]["fds_max"],
        "rss_mb_before": round(before["rss_mb"], 1),
        "rss_mb_max": round(after["sampled"]["rss_mb_max"], 1),
        "upload_2mb_s": upload.get("seconds"),
        "upload_intact": upload.get("intact"),
    }


def many_flows(n: int = 2000) -> dict[str, Any]:
    from rt_relay import HOLD, RELAY, relay_net

    with relay_net(_tmp("flows"), max_flows=4096, tag="c33") as net:
        before = net.stats(net.agent)
        net.agent.send("reset-max")
        hold = ["probe", "hold", "--to", net.dest(HOLD), "--count", str(n), "--bytes", "1000"]
        holder = net.start("a1", [*RELAY, *hold, "--timeout", "60"], "holder")
        held = json.loads(holder.expect_rest("HELD ", 300))
        _wait(lambda: net.stats(net.agent)["relay"]["bytes_up"] >= 1000 * n, "every byte relayed")
        during = net.stats(net.agent)
        holder.send("done")
        holder.expect("RESULT ", 120)
        _wait(lambda: net.stats(net.agent)["relay"]["open"] == 0, "all closed", rounds=600)
        after = net.stats(net.agent)
    return {
        "connections": n,
        "held": held,
        "open_at_most": during["relay"]["open"],
        "rss_mb_before": round(before["rss_mb"], 1),
        "rss_mb_max": round(after["sampled"]["rss_mb_max"], 1),
        "rss_mb_after": round(after["rss_mb"], 1),
        "fds_max": after["sampled"]["fds_max"],
        "buffer_bytes_allocated": after["relay"]["buffer_bytes_allocated"],
    }


def fd_pressure(n: int = 2000, nofile: int = 1024) -> dict[str, Any]:
    from rt_relay import HOLD, LEADER_PORT, RELAY, relay_net

    with relay_net(_tmp("fds"), max_flows=1024, leader=True, nofile=nofile, tag="c33") as net:
        _wait(lambda: net.stats(net.agent)["mode"] == "coordinated", "joined", rounds=100)
        net.agent.send("reset-max")
        hold = ["probe", "hold", "--to", net.dest(HOLD), "--count", str(n), "--bytes", "1000"]
        holder = net.start("a1", [*RELAY, *hold, "--timeout", "10"], "holder")
        held = json.loads(holder.expect_rest("HELD ", 300))
        # The leader drops the agent's connection while the fds are taken (ss -K: the
        # kernel destroys the socket, the agent sees a reset): the agent must reconnect
        # under the pressure, three times.
        for k in range(3):
            net.topo.run("ld", ["ss", "-K", "state", "established", f"( sport = :{LEADER_PORT} )"])
            _wait(
                lambda k=k: net.stats(net.agent)["link"].get("joins", 0) >= k + 2,
                "rejoined",
                rounds=600,
            )
        st = net.stats(net.agent)
        holder.send("done")
        holder.expect("RESULT ", 120)
    return {
        "nofile": nofile,
        "connections": n,
        "held": held,
        "budget": st["budget"],
        "over_limit": st["gate"]["over_limit"],
        "accept_fd_errors": st["relay"]["accept_fd_errors"],
        "uncoordinated_s": st["sampled"]["uncoordinated_s"],
        "not_coordinated_s": st["sampled"]["not_coordinated_s"],
        "link": {
            k: st["link"].get(k) for k in ("joins", "disconnects", "fallbacks", "failed_attempts")
        },
        "fds_max": st["sampled"]["fds_max"],
    }


def kills(count: int = KILLS) -> dict[str, Any]:
    from rt_relay import DOWNLOAD, RELAY, UPLOAD, relay_net

    up_bytes, down_bytes = 40_000_000, 20_000_000
    rows = []
    with relay_net(_tmp("kills"), max_flows=64, tag="c33") as net:
        for k in range(count):
            if k:
                net.start_agent()
            ends = len(net.stats(net.sink)["ends"])
            probe = [*RELAY, "probe", "--timeout", "60"]
            up = net.start(
                "a1",
                [*probe, "upload", "--to", net.dest(UPLOAD), "--bytes", str(up_bytes)],
                f"up{k}",
            )
            down = net.start(
                "a1",
                [
                    *probe,
                    "download",
                    "--to",
                    net.dest(DOWNLOAD),
                    "--bytes",
                    str(down_bytes),
                    "--rate-mbps",
                    "40",
                ],
                f"down{k}",
            )
            up.expect("STARTED", 60)
            down.expect("STARTED", 60)
            _wait(lambda: net.stats(net.agent)["relay"]["bytes_up"] > 1_000_000, "upload under way")
            time.sleep(random.Random(k).uniform(0, 3))  # kills at different points
            net.agent.popen.kill()
            net.agent.popen.wait(timeout=10)
            u = json.loads(up.expect_rest("RESULT ", 60))
            d = json.loads(down.expect_rest("RESULT ", 60))
            got: list[dict[str, Any]] = []

            def both_ended(got: list[dict[str, Any]] = got, ends: int = ends) -> bool:
                got[:] = net.stats(net.sink)["ends"][ends:]
                return len(got) >= 2

            _wait(both_ended, "the sink saw both ends")
            by_port = {e["port"]: e for e in got}
            rows.append(
                {
                    "upload_sink": by_port[UPLOAD],
                    "upload_program": u.get("end"),
                    "download_program": {"end": d.get("end"), "bytes": d.get("bytes")},
                    "download_sink": by_port[DOWNLOAD],
                }
            )
    silent = sum(
        (r["upload_sink"]["end"] == "eof" and r["upload_sink"]["bytes"] < up_bytes)
        + (r["download_program"]["end"] == "eof" and r["download_program"]["bytes"] < down_bytes)
        for r in rows
    )
    return {
        "kills": count,
        "silent_truncations": silent,
        "upload_receiver_ends": sorted({r["upload_sink"]["end"] for r in rows}),
        "download_receiver_ends": sorted({str(r["download_program"]["end"]) for r in rows}),
        "upload_bytes_at_kill_mb": [round(r["upload_sink"]["bytes"] / 1e6, 1) for r in rows],
        "download_bytes_at_kill_mb": [
            round((r["download_program"]["bytes"] or 0) / 1e6, 1) for r in rows
        ],
    }


def egress(each: int = 5) -> dict[str, Any]:
    from rt_policy import host_policy, make_cgroup, remove_cgroup
    from rt_relay import NOBODY, NOGROUP, UPLOAD, relay_net

    with relay_net(_tmp("egress"), max_flows=64, tag="c33") as net:
        cg = make_cgroup()
        rules: list[dict[str, Any]] = [
            {"uid": NOBODY, "dport": UPLOAD},
            {"gid": NOGROUP, "dport": UPLOAD},
        ]
        who = {
            "uid": ["--uid", str(NOBODY), "--gid", "100"],
            "gid": ["--uid", "1000", "--gid", str(NOGROUP)],
        }
        if cg is not None:
            rules.append({"cgroup": Path(cg[0]).name, "dport": UPLOAD})
            who["cgroup"] = ["--uid", "1000", "--gid", "1000", "--cgroup", cg[0]]
        outcomes: dict[str, list[str]] = {}
        try:
            with host_policy(net, rules):
                ends = len(net.stats(net.sink)["ends"])
                for name, ident in who.items():
                    outcomes[name] = [
                        net.probe("upload", "--to", net.dest(UPLOAD), "--bytes", "10000", *ident)[
                            "connect"
                        ]
                        for _ in range(each)
                    ]
                allowed = net.probe(
                    "upload",
                    "--to",
                    net.dest(UPLOAD),
                    "--bytes",
                    "10000",
                    "--uid",
                    "1000",
                    "--gid",
                    "1000",
                )
                reached = net.stats(net.sink)["ends"][ends:]
        finally:
            if cg is not None:
                remove_cgroup(cg[0])
    return {
        "blocked_attempts": sum(len(v) for v in outcomes.values()),
        "bypassed": len(reached) - 1,  # the allowed upload's is the one expected
        "outcomes": outcomes,
        "allowed_intact": allowed.get("intact"),
    }


# -- members ----------------------------------------------------------------------------------
@contextlib.contextmanager
def cpu_hog(processes: int | None, min_load: float = 10.0, wait_s: float = 150) -> Iterator[float]:
    """``processes`` busy processes while inside (None: as many as bring the load to
    ``min_load`` + 2 over what other jobs already make, at least 2); waits (bounded)
    until the 1-minute load average reaches ``min_load``; yields it."""
    from rt_bounds import cpu_hog as start

    if processes is None:
        processes = max(2, math.ceil(min_load + 2 - os.getloadavg()[0]))
    procs = start(processes)
    try:
        t0 = time.monotonic()
        while os.getloadavg()[0] < min_load and time.monotonic() - t0 < wait_s:
            time.sleep(1)
        yield os.getloadavg()[0]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _scenario(name: str, fn: Any, **kw: Any) -> dict[str, Any]:
    from rt_netns import Topology

    tmp = _tmp(name)
    topo = Topology(agents=5, tag="c33")
    try:
        topo.create(rate_mbit=50, queue_ms=100)
        r: dict[str, Any] = fn(topo, tmp, **kw)
    finally:
        topo.destroy()
    r["load"] = round(os.getloadavg()[0], 1)
    print(name, json.dumps(r), flush=True)
    return r


def members(runs: int, hog_processes: int | None) -> dict[str, Any]:
    import rt_attacks as attacks
    import rt_bounds as bounds

    # Under the CPU hog a Python program takes many seconds to start: a scenario takes
    # minutes, the helpers' queries need room.
    attacks.MEMBER_TIMEOUT_S = 1800
    attacks.RUN_TIMEOUT_S = 240
    hogged = [_scenario("inbox-hog", bounds.inbox_hog) for _ in range(runs)]
    with cpu_hog(hog_processes) as load:
        print(f"cpu hog: {hog_processes or 'auto'} busy processes, load {load:.1f}", flush=True)
        laundered = [
            _scenario("laundered-flood", bounds.laundered_flood, nofile=1024) for _ in range(runs)
        ]
        flooded = [
            _scenario(
                "distributed-flood-loaded",
                attacks.distributed_flood,
                nofile=1024,
                count=2000,
                probes=6,
            )
            for _ in range(runs)
        ]
    joins = [j for r in laundered + flooded for j in r["joins"]]
    loads = [j["load"] for j in joins]
    print(
        f"loaded joins: {len(joins)}, load {min(loads):.1f}-{max(loads):.1f} while they ran; "
        f"join_s {sorted(j['join_s'] for j in joins)}; status answered "
        f"{[r['status_answered'] for r in laundered]} in "
        f"{[round(r['status_s'], 1) for r in laundered]} s",
        flush=True,
    )
    return {
        "inbox_hog_rejections_of_others": sum(r["others_refused"] for r in hogged),
        "laundered_flood_fallbacks": sum(
            r["member_fallbacks"] + sum(j["mode"] != "coordinated" for j in r["joins"])
            for r in laundered
        ),
        "flood_join_s_max_loaded": max(
            j["join_s"] if j["mode"] == "coordinated" else float("inf") for j in joins
        ),
    }


def relay(runs: int) -> dict[str, Any]:
    def show(name: str, r: dict[str, Any]) -> dict[str, Any]:
        r["load"] = round(os.getloadavg()[0], 1)
        print(name, json.dumps(r), flush=True)
        return r

    loops = [show("self-loop", self_loop()) for _ in range(runs)]
    flows = [show("2000-flows", many_flows()) for _ in range(runs)]
    fds = [show("fd-pressure", fd_pressure()) for _ in range(runs)]
    killed = show("kills", kills())
    policy = [show("egress", egress()) for _ in range(runs)]
    made = sum(r["relay_connections_made"] + r["reached_destination"] for r in loops)
    print(f"self-loop: {made} connections made by the relay (target 0)", flush=True)
    return {
        "relay_self_loop_fds_max": max(r["fds_max"] for r in loops),
        "relay_rss_mb_max_2000_flows": max(r["rss_mb_max"] for r in flows),
        "uncoordinated_s_under_fd_pressure": max(r["uncoordinated_s"] for r in fds),
        "silent_truncations": killed["silent_truncations"],
        "egress_policy_bypassed": sum(r["bypassed"] for r in policy),
    }
