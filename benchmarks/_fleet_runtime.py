"""The runtime side of benchmarks/fleet.py (``--runtime``): a fleet in namespaces.

The topology and roles of tests/runtime/test_fleet_netns.py (every host on one bridge,
the port towards the sink shaped with tbf: one queue for every robot, like one channel;
cell-a's leader on ``a1``, cell-b's on ``a2``; a robot's cell is its default route's
gateway), run ``runs`` times, each run:

* **overlap**: robots a3 (cell-a), a4 and a5 (cell-b) send 2 MB each at once, LS at 30
  Hz; the BH write stretches the agents recorded themselves are compared pairwise.
  Two contenders side by side: ``peered`` (both cells on channel 36: the leaders peer,
  one coordinator for the channel) and ``per-team`` (the same team file with cell-b on
  channel 52: each leader grants its own cell only, issue 37's ``coorp-team``
  baseline; the air is still shared).
* **move**: a3 sends 9 MB in cell-a while a4 sends 3 MB in cell-b; once a3 says its
  bulk is on the air under its permit (``WRITING``) its default route moves to cell-b's
  gateway (the roam). LS messages a3 sent within 2 s of the move, lost or later than
  33.3 ms at the sink, over all it sent then; beside them (console only) those of a4,
  which did not move, in the same window, and how many of a3's late ones arrived while
  the sink's own process had not run for over 4 ms (its stall ticker: late at the
  receiver's CPU). A run whose robot never moved is run again (at most twice).

The robots take the team file's ``agent.scheduling`` and the sink nice −10, as agents
do (docs/runtime.md, "Busy CPUs"), whatever ``nice`` the benchmark itself runs at.

``overlapping_bh_senders``: overlapping pairs of write stretches of the peered runs, in
total (target 0). ``ls_miss_rate_across_move``: misses over sends pooled across runs
(target <= 1%).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests" / "runtime"
sys.path[:0] = [str(TESTS)]

from rt_netns import Topology, netns_unavailable  # noqa: E402
from test_fleet_netns import (  # noqa: E402
    LA,
    LB,
    LS_DEADLINE_NS,
    QUEUE_MS,
    RATE_MBIT,
    ROBOTS,
    SINK_SHARE,
    cell_stats,
    fleet_file,
    ls_late_lost,
    ls_misses,
    overlaps,
    route_via,
    start_cell,
    start_robot,
    wait_cell,
)
from test_runtime_netns import result_of, start_sink  # noqa: E402

__all__ = ["netns_unavailable", "run_runtime"]


def _overlap_run(topo: Topology, d: Path, *, peered: bool) -> dict[str, Any]:
    config = fleet_file(topo, d, channel_b=36 if peered else 52)
    procs = [start_cell(topo, config, LA, "cell-a"), start_cell(topo, config, LB, "cell-b")]
    for robot, host in zip(ROBOTS, (LA, LB, LB), strict=True):
        route_via(topo, robot, host)
    if peered:
        wait_cell(topo, LB, "hears cell-a", lambda c: c["alive_peers"] == 1)
    sink = start_sink(topo, expect_bulk=3, extra=SINK_SHARE)
    grid = time.monotonic_ns()
    robots = [start_robot(topo, r, config, bh_bytes=2_000_000, grid_ns=grid) for r in ROBOTS]
    results = [result_of(w, 120) for w in robots]
    result_of(sink, 60)
    pairs = overlaps(results)
    for p in [*procs, sink, *robots]:
        p.kill()
    return {
        "overlaps": len(pairs),
        "overlap_ms": sum(min(x[1], y[1]) - max(x[0], y[0]) for _, _, x, y in pairs) / 1e6,
    }


def _move_run(topo: Topology, d: Path) -> dict[str, Any]:
    config = fleet_file(topo, d)
    procs = [start_cell(topo, config, LA, "cell-a"), start_cell(topo, config, LB, "cell-b")]
    route_via(topo, "a3", LA)
    route_via(topo, "a4", LB)
    wait_cell(topo, LB, "hears cell-a", lambda c: c["alive_peers"] == 1)
    sink = start_sink(topo, expect_bulk=2, extra=(*SINK_SHARE, "--stall-ticker"))
    grid = time.monotonic_ns()
    mover = start_robot(topo, "a3", config, bh_bytes=9_000_000, grid_ns=grid, go_stdin=True,
                        announce_writing=True)  # fmt: skip
    other = start_robot(topo, "a4", config, bh_bytes=3_000_000, grid_ns=grid)
    mover.expect("WARM", 30)
    mover.send("go")
    mover.expect("BULK-START", 10)
    # Its own word that its bulk is on the air under cell-a's permit (a leader's counters,
    # read by a process started for it, came too late on a loaded machine: the transfer
    # had ended).
    mover.expect("WRITING", 60)
    changed_ns = time.monotonic_ns()
    route_via(topo, "a3", LB)
    res, res_other = result_of(mover, 120), result_of(other, 120)
    received = result_of(sink, 60)
    moves = res["moves"]
    if not moves:
        for p in [*procs, sink, mover, other]:
            p.kill()
        raise _NoMove("a3's transfer ended before its route changed")
    if len(moves) != 1:
        raise RuntimeError(f"a3 moved {len(moves)} times, expected once: {moves}")
    move_ns = moves[0][0]
    lo, hi = move_ns - 2_000_000_000, move_ns + 2_000_000_000
    misses, sends = ls_misses(received, "a3", 0, lo, hi)
    late, lost, _ = ls_late_lost(received, "a3", lo, hi)
    starved = _late_in_sink_stalls(received, "a3", lo, hi)
    # The control: the robot that did not move, same window, same air and CPU load.
    still_misses, still_sends = ls_misses(received, "a4", 0, lo, hi)
    joined = cell_stats(topo, LB)["counters"]["joins"]
    for p in [*procs, sink, mover, other]:
        p.kill()
    return {
        "misses": misses,
        "late": late,
        "lost": lost,
        "late_sink_starved": starved,
        "sends": sends,
        "follow_ms": (move_ns - changed_ns) / 1e6,
        "overlaps": len(overlaps([res, res_other])),
        "still_misses": still_misses,
        "still_sends": still_sends,
        "joins_b": joined,
    }


def _late_in_sink_stalls(received: dict[str, Any], robot: str, lo_ns: int, hi_ns: int) -> int:
    """``robot``'s LS messages sent in [lo, hi) that arrived late while the sink's own
    process had not run for more than 4 ms (its stall ticker, ``--stall-ticker``): late
    at the receiver's CPU, not on the network. Diagnostics for the console only."""
    stalls = received.get("stalls", [])
    n = 0
    for who, _seq, sent, got in received["ls"]:
        if who != robot or not lo_ns <= sent < hi_ns or got - sent <= LS_DEADLINE_NS:
            continue
        n += any(a <= got and b >= sent for a, b in stalls)
    return n


class _NoMove(RuntimeError):
    """The robot never moved: its transfer ended before the route change (a driver
    slower than the robots, on a loaded machine); not a measurement of a move."""


#: A move run whose robot never moved is run again (fresh namespaces), this often.
MOVE_ATTEMPTS = 3


def run_runtime(runs: int) -> dict[str, Any]:
    """``runs`` rounds of the three runs above, each on a fresh topology."""
    rounds: list[dict[str, Any]] = []
    for _ in range(runs):
        row: dict[str, Any] = {}
        for what in ("peered", "per-team", "move"):
            for attempt in range(MOVE_ATTEMPTS if what == "move" else 1):
                topo = Topology(agents=5, tag="coorpfb")
                try:
                    topo.create(rate_mbit=RATE_MBIT, queue_ms=QUEUE_MS)
                    with tempfile.TemporaryDirectory() as tmp:
                        if what == "move":
                            row[what] = _move_run(topo, Path(tmp))
                            row[what]["reruns"] = attempt
                        else:
                            row[what] = _overlap_run(topo, Path(tmp), peered=what == "peered")
                    break
                except _NoMove:
                    if attempt == MOVE_ATTEMPTS - 1:
                        raise
                finally:
                    topo.destroy()
        rounds.append(row)
    sends = sum(r["move"]["sends"] for r in rounds)
    misses = sum(r["move"]["misses"] for r in rounds)
    return {
        "overlapping_bh_senders": sum(r["peered"]["overlaps"] for r in rounds)
        + sum(r["move"]["overlaps"] for r in rounds),
        "ls_miss_rate_across_move": misses / sends if sends else None,
        "rounds": rounds,
    }
