"""Where a BSP round's time goes in a ``coorp learn --runtime`` run, from its results.

Every role's receipts carry host-monotonic instants (``start_ns``, ``first_write_ns``,
``last_write_ns``, ``end_ns``; the roles of a run share the clock), so the sync messages
of all robots line up on one timeline. Per run directory (``OUT/runs/<mode>-seed<n>``)
this prints the means over the rounds (one model version each):

* ``versions_30s``: model versions within the run's duration (the table's count);
* ``round_s``: the time between two model versions at the leader; on coordinated
  streams it is, exactly, ``start_s`` (the version -> the first byte of the next
  round's first message: the merge, the hand-off to the transport) + ``writing_s``
  (each message's first -> last byte written, summed) + ``handover_s`` (each
  message's last byte written -> the next message's first, summed: the release, the
  grant and the next stream's first chunk) + ``end_s`` (the round's last byte -> the
  version: its drain, the confirmation, the merge). The parts describe one permit
  queue (``--medium shared``); on split queues the leader's broadcasts overlap the
  uploads under a permit of their own, so hand-overs come out negative there;
* ``paused_s``: of the writing, the time the streams were paused by the gate (before
  their robot's own LS sends) and the permit's end, summed;
* ``line_s``: the round's payload at the rate the shaped queue leaves to bulk
  (``--rate-mbit`` less the perceptions and controls), TCP/IP and Ethernet headers
  counted: the floor no sender beats;
* with ``--queue`` (the readings of ``benchmarks/shared_queue_sampler.py`` taken
  during the runs; rounds the readings do not cover are left out): ``queue_mb``, what
  the shared queue sent during the round, every packet counted (bulk, LS, acks,
  headers, handshakes); ``queue_s``, those bytes at the queue's rate (the round's
  traffic on the air, back to back); ``queue_busy``, their share of the round.

Usage: ``python benchmarks/learn_sync_timeline.py OUT [--rate-mbit 50] [--queue FILE]``;
``--json`` prints the numbers as JSON. Read-only; run it after
``coorp learn --runtime --out OUT``.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def _load(run: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    leader = json.loads((run / "leader.json").read_text())
    workers = {
        p.stem: json.loads(p.read_text())
        for p in sorted(run.glob("*.json"))
        if p.stem != "leader" and not p.name.endswith(".in")
    }
    return leader, workers


def _queue_bytes(samples: list[list[Any]], t_ns: int) -> float | None:
    """Bytes the shared queue had sent by ``t_ns`` (linear between readings)."""
    times = [s[1] for s in samples]
    i = bisect.bisect_left(times, t_ns)
    if i == 0 or i == len(times):
        return None
    (_, t0, b0, *_r0), (_, t1, b1, *_r1) = samples[i - 1], samples[i]
    return float(b0 + (b1 - b0) * (t_ns - t0) / (t1 - t0))


def analyse(run: Path, rate_mbit: float, queue: list[list[Any]] | None = None) -> dict[str, Any]:
    leader, workers = _load(run)
    msgs: list[dict[str, Any]] = []
    for who, res in [("leader", leader), *workers.items()]:
        for r in res["receipts"]:
            if r["kind"] in ("model", "update") and r.get("end_ns"):
                msgs.append({**r, "robot": who})
    if not msgs:
        raise SystemExit(f"{run}: no timestamped sync receipts (a run before they were kept?)")
    coordinated = all(m.get("first_write_ns") for m in msgs)
    t0 = leader["t0_ns"]
    versions = [t0 + round(t * 1e9) for t in leader["times_s"]]
    cfg = json.loads((run / "leader.json.in").read_text())
    ls_mbit = (
        len(workers)
        * (cfg["perception_bytes"] + cfg["control_bytes"])
        * 8
        / (cfg["period_ns"] / 1e9)
        / 1e6
    )
    # This run's hub: the one whose readings cover most of the run (runs of other
    # commands may have been sampled at the same time).
    mine = _hub_readings(queue, versions[0], versions[-1]) if queue else []
    rounds: list[dict[str, float]] = []
    for a, b in itertools.pairwise(versions):
        row: dict[str, float] = {"round_s": (b - a) / 1e9}
        if coordinated:
            on_air = sorted(
                (m for m in msgs if a <= m["first_write_ns"] < b), key=lambda m: m["first_write_ns"]
            )
            if not on_air:
                continue
            # The round as one line of messages on the air: from the version before to
            # the first byte, each message's writing, the hand-overs, the last bytes'
            # confirmation and the merge to the version.
            row["start_s"] = (on_air[0]["first_write_ns"] - a) / 1e9
            row["writing_s"] = sum(m["last_write_ns"] - m["first_write_ns"] for m in on_air) / 1e9
            row["paused_s"] = sum(m["preempted_ns"] for m in on_air) / 1e9
            row["handover_s"] = (
                sum(n["first_write_ns"] - p["last_write_ns"] for p, n in itertools.pairwise(on_air))
                / 1e9
            )
            row["end_s"] = (b - on_air[-1]["last_write_ns"]) / 1e9
        else:
            inside = [m for m in msgs if a <= m["start_ns"] < b]
            if not inside:
                continue
        nbytes = sum(m["nbytes"] for m in msgs if a <= m["start_ns"] < b)
        row["messages"] = float(sum(1 for m in msgs if a <= m["start_ns"] < b))
        # The payload at the rate the queue leaves to bulk, TCP/IP and Ethernet headers
        # (66 bytes per 1448) counted: no sender finishes a round's bytes sooner.
        row["line_s"] = nbytes * 8 * (1514 / 1448) / ((rate_mbit - ls_mbit) * 1e6)
        if mine:
            sent = [_queue_bytes(mine, t) for t in (a, b)]
            if sent[0] is not None and sent[1] is not None:
                row["queue_mb"] = (sent[1] - sent[0]) / 1e6
                row["queue_s"] = (sent[1] - sent[0]) * 8 / (rate_mbit * 1e6)
                row["queue_busy"] = row["queue_s"] / ((b - a) / 1e9)
        rounds.append(row)
    out: dict[str, Any] = {
        "run": run.name,
        "versions_30s": sum(1 for t in leader["times_s"][1:] if t <= cfg["duration_s"]),
        "rounds": len(rounds),
    }
    for k in dict.fromkeys(k for r in rounds for k in r):
        out[k] = statistics.mean(r[k] for r in rounds if k in r)
    return out


def _hub_readings(queue: list[list[Any]], a: int, b: int) -> list[list[Any]]:
    spans: dict[str, list[int]] = {}
    for name, t, *_ in queue:
        span = spans.setdefault(name, [t, t])
        span[0], span[1] = min(span[0], t), max(span[1], t)
    best = max(spans, key=lambda n: min(spans[n][1], b) - max(spans[n][0], a), default=None)
    return [q for q in queue if q[0] == best]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="coorp learn --runtime's --out directory")
    ap.add_argument("--rate-mbit", type=float, default=50.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--queue",
        type=Path,
        help="readings of benchmarks/shared_queue_sampler.py taken during the runs: adds "
        "queue_busy, the share of each round the shared queue was sending",
    )
    args = ap.parse_args(argv)
    queue = None
    if args.queue is not None:
        queue = [json.loads(line) for line in args.queue.read_text().splitlines() if line]
        queue.sort(key=lambda q: q[1])
    runs = sorted(p for p in (args.out / "runs").iterdir() if (p / "leader.json").exists())
    if not runs:
        print(f"{args.out}/runs: no runs", file=sys.stderr)
        return 2
    rows = [analyse(r, args.rate_mbit, queue) for r in runs]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    keys = [k for k in rows[0] if k != "run"]
    for r in rows:
        for k in r:
            if k not in keys and k != "run":
                keys.append(k)
    print("run".ljust(14) + "".join(k[:10].rjust(11) for k in keys))
    for r in rows:
        cells = []
        for k in keys:
            v = r.get(k, "")
            cells.append((f"{v:.3f}" if isinstance(v, float) else str(v)).rjust(11))
        print(r["run"].ljust(14) + "".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
