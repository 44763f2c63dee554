"""``coorp learn --team`` in network namespaces: every robot started by hand, as on a real
team (its own key file, the `coorp leader` daemon for permits, no shared clock), next to
the orchestrated ``coorp learn --runtime`` (one clock) on the same 50 Mbit/s bottleneck.

Per seed and mode, interleaved: a namespace per robot (``coorp.learn._netns``), the
team's permit service (``coorp leader``, mode ``coorp`` only) and one ``coorp learn
--team`` process per robot; then ``coorp learn --runtime`` for the same seed and mode.
Root and iproute2 needed::

    sudo .venv/bin/python benchmarks/learn_team_netns.py --seeds 1-5 --modes coorp,tcp \\
        --air-params 500000 --duration 30 --out results/learn-team-netns

Reported per mode, mean ± 95% CI over seeds: model versions, final return, and the MPC
loop as each path measures it — ``--team`` per worker on its own clock (its perception
sent → its control received; misses over the deadline or without control), ``--runtime``
per loop on the shared clock (loop start → the last control; the same deadline).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from coorp._netns import Proc
from coorp.learn._netns import Topology, netns_unavailable
from coorp.runtime import load_team_config, write_team_keys
from coorp.stats import mean_ci

COORP = [str(Path(sys.executable).with_name("coorp"))]
ROBOTS = ["leader", "r1", "r2", "r3", "r4"]


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def _extra(args: argparse.Namespace) -> list[str]:
    """Flags both paths take alike (a smaller run for the test)."""
    out = ["--hidden", str(args.hidden), "--envs", str(args.envs)]
    return out + ([] if args.max_versions is None else ["--max-versions", str(args.max_versions)])


def team_file(out: Path, topo: Topology) -> Path:
    ld = topo.addr("ld")
    path = out / "team.toml"
    path.write_text(
        '[team]\nname = "netns"\nkey_file = "team.key"\n'
        f"robots = {json.dumps(ROBOTS)}\n"
        f'[leader]\nlisten = "{ld}:7400"\n[agent]\nleader = "{ld}:7400"\n'
    )
    if not (out / "team.key").exists():
        write_team_keys(load_team_config(path), path)
    return path


def team_run(args: argparse.Namespace, seed: int, mode: str, out: Path) -> dict[str, Any]:
    topo = Topology(len(ROBOTS) - 1)
    run = out / f"team-{mode}-seed{seed}"
    run.mkdir(parents=True, exist_ok=True)

    def start(host: str, argv: list[str], name: str) -> Proc:
        return Proc(name, topo.popen(host, argv, os.environ, run / f"{name}.log"))

    try:
        topo.create(rate_mbit=args.rate_mbit, queue_ms=100.0)
        team = team_file(out, topo)
        if mode == "coorp":
            daemon = start("ld", [*COORP, "leader", "--config", str(team)], "permits")
            daemon.expect("coorp leader: serving", 30)
        common = [
            "learn", args.scenario, "--team", str(team), "--seeds", str(seed), "--modes", mode,
            "--air-params", str(args.air_params), "--duration", str(args.duration),
            *_extra(args),
        ]  # fmt: skip
        procs = {}
        for i, robot in enumerate(ROBOTS):
            host = "ld" if i == 0 else f"w{i}"
            argv = [*COORP, *common, "--robot", robot, "--host", topo.addr(host),
                    "--out", str(run / robot)]  # fmt: skip
            if i:
                argv += ["--server", f"{topo.addr('ld')}:7410"]
            procs[robot] = start(host, argv, robot)
        bound = time.monotonic() + args.duration + 300
        for robot, proc in procs.items():
            try:
                code = proc.popen.wait(timeout=max(bound - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                raise SystemExit(f"{robot} did not finish; {proc.lines[-5:]}") from None
            if code != 0:
                log = (run / f"{robot}.log").read_text(errors="replace")[-2000:]
                raise SystemExit(f"{robot} exited with {code}: {log}")
    finally:
        topo.destroy()
    leader = json.loads((run / "leader" / "leader-report.json").read_text())
    row = leader["summary"]["policies"][mode]
    workers = [json.loads((run / r / f"{r}-report.json").read_text()) for r in ROBOTS[1:]]
    return {
        "versions": row["epochs"]["mean"],
        "final_return": row["final_reward"]["mean"],
        "reaction_p50_ms": float(np.mean([w["reaction_ms"]["p50"] for w in workers])),
        "reaction_p99_ms": float(np.mean([w["reaction_ms"]["p99"] for w in workers])),
        "miss_rate": float(np.mean([w["miss_rate"] for w in workers])),
        "clock_offset_ms": [w["clock_offset_ms"] for w in workers],
    }


def runtime_run(args: argparse.Namespace, seed: int, mode: str, out: Path) -> dict[str, Any]:
    d = out / f"runtime-{mode}-seed{seed}"
    subprocess.run(
        [*COORP, "learn", args.scenario, "--runtime", "--seeds", str(seed), "--modes", mode,
         "--air-params", str(args.air_params), "--duration", str(args.duration),
         "--rate-mbit", str(args.rate_mbit), "--out", str(d), *_extra(args)],
        check=True, capture_output=True, timeout=args.duration + 600,
    )  # fmt: skip
    row = json.loads((d / "learn.json").read_text())["policies"][mode]
    rt = row["runtime"]
    return {
        "versions": row["epochs"]["mean"],
        "final_return": row["final_reward"]["mean"],
        "reaction_p50_ms": rt["reaction_p50_ms"]["mean"],
        "reaction_p99_ms": rt["reaction_p99_ms"]["mean"],
        "miss_rate": rt["miss_rate"]["mean"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="crl-5")
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--modes", default="coorp,tcp")
    ap.add_argument("--air-params", type=int, default=500_000)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--rate-mbit", type=float, default=50.0)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--max-versions", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("results/learn-team-netns"))
    args = ap.parse_args(argv)
    why = netns_unavailable()
    if why is not None:
        raise SystemExit(f"needs network namespaces: {why}")
    args.out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for seed in _seeds(args.seeds):
        for mode in args.modes.split(","):
            for path, fn in (("team", team_run), ("runtime", runtime_run)):
                r = fn(args, seed, mode, args.out)
                rows.setdefault(mode, {}).setdefault(path, []).append(r)
                print(f"seed {seed} {mode:5} {path:7} " + json.dumps(r), flush=True)
    print(f"\n{'mode':6} {'path':8} {'versions':>10} {'final return':>14} "
          f"{'reaction p50 ms':>16} {'p99 ms':>14} {'misses %':>12}")  # fmt: skip
    for mode, paths in rows.items():
        for path, rs in paths.items():

            def ci(key: str, scale: float = 1.0, rs: list[dict[str, Any]] = rs) -> str:
                m = mean_ci([r[key] * scale for r in rs])
                return f"{m.mean:.3g} ± {m.ci95:.2g}"

            print(f"{mode:6} {path:8} {ci('versions'):>10} {ci('final_return'):>14} "
                  f"{ci('reaction_p50_ms'):>16} {ci('reaction_p99_ms'):>14} "
                  f"{ci('miss_rate', 100):>12}")  # fmt: skip
    (args.out / "summary.json").write_text(json.dumps({"args": vars(args) | {"out": str(args.out)},
                                                       "rows": rows}, indent=1))  # fmt: skip
    os.sync()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
