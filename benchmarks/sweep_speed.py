"""How long a sweep takes: cold on local cores, rerun from cache, and Ray vs the pool.

The target (issue 10): 3 scenarios x 5 policies x 10 seeds x 20 s simulated finishes on
2 cores in <= 5 minutes, and a rerun from the cache in <= 5 s. Both are measured as a user
sees them, ``coorp sweep ... --quiet`` in a subprocess (imports, planning, writing the
tables and figures included). Then the same tasks (``--ray-seeds`` of them per policy,
no cache) run once on the process pool and once as Ray tasks on a new local Ray instance
(its start-up included), in this process; their results must be identical.

The cache key holds a hash of the coorp source, so an edit made to the tree while the
benchmark runs would (rightly) make the rerun recompute. The benchmark therefore runs on
a snapshot of ``src/`` and ``scenarios/`` taken when it starts (``--live`` to skip that).

    python benchmarks/sweep_speed.py                                   # the full target
    python benchmarks/sweep_speed.py --seeds 1-2 --duration 5 --ray-seeds 1   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import coorp as coorp_pkg
from coorp.sweep import parse_seeds, parse_sweep_spec, plan_sweep, run_sweep

POLICIES = "edca,schedwifi,coorp,coorp-global,coorp-local"


ROOT = Path(__file__).resolve().parents[1]
_SNAPSHOT_ENV = "COORP_SWEEP_BENCH_SNAPSHOT"


def _rerun_on_snapshot(argv: list[str]) -> int:
    """Copy ``src/`` and ``scenarios/`` aside and run this script again with that copy
    first on ``PYTHONPATH`` (the CLI subprocesses and Ray workers inherit it)."""
    snap = Path(tempfile.mkdtemp(prefix="coorp-src-snapshot-"))
    try:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
        shutil.copytree(ROOT / "src", snap / "src", ignore=ignore)
        shutil.copytree(ROOT / "scenarios", snap / "scenarios")
        path = os.pathsep.join([str(snap / "src"), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, _SNAPSHOT_ENV: str(snap), "PYTHONPATH": path}
        return subprocess.run([sys.executable, __file__, *argv], env=env).returncode
    finally:
        shutil.rmtree(snap, ignore_errors=True)


def _cli_sweep(args: list[str]) -> float:
    t0 = time.perf_counter()
    coorp = Path(sys.executable).with_name("coorp")
    subprocess.run([str(coorp), "sweep", *args, "--quiet"], check=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--scenarios", default="crl-2,crl-5,crl-10")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--duration", type=float, default=20.0, help="simulated seconds per run")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--ray-seeds", type=int, default=2, help="seeds per policy for Ray vs pool")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray comparison")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--live", action="store_true", help="run on the live tree, no snapshot")
    args = ap.parse_args(argv)
    if not args.live and _SNAPSHOT_ENV not in os.environ:
        return _rerun_on_snapshot(sys.argv[1:] if argv is None else argv)
    console = Console(width=None if sys.stdout.isatty() else 120)
    work = Path(tempfile.mkdtemp(prefix="coorp-sweep-bench-"))
    out: dict[str, Any] = {"scenarios": args.scenarios, "policies": args.policies,
                           "seeds": args.seeds, "duration_s": args.duration, "jobs": args.jobs,
                           "cpus": os.cpu_count(), "load_avg_start": os.getloadavg(),
                           "coorp_from": str(Path(coorp_pkg.__file__).parent)}  # fmt: skip
    try:
        sweep = ["--scenarios", args.scenarios, "--policies", args.policies, "--seeds",
                 args.seeds, "--duration", str(args.duration), "--jobs", str(args.jobs),
                 "--out", str(work / "out")]  # fmt: skip
        spec = parse_sweep_spec({"scenarios": args.scenarios, "policies": args.policies,
                                 "seeds": args.seeds, "duration_s": args.duration})  # fmt: skip
        out["runs"] = len(plan_sweep(spec).tasks)
        console.print(f"cold sweep: {out['runs']} runs on {args.jobs} processes ...")
        out["cold_s"] = _cli_sweep(sweep)
        console.print("rerun from the cache ...")
        out["cached_s"] = _cli_sweep(sweep)
        if not args.no_ray:
            seeds = parse_seeds(args.seeds)[: args.ray_seeds]
            small = plan_sweep(spec.model_copy(update={"seeds": seeds}))
            out["ray_runs"] = len(small.tasks)
            console.print(f"Ray vs pool: {len(small.tasks)} runs each ...")
            t0 = time.perf_counter()
            pool = run_sweep(small, jobs=args.jobs)
            out["pool_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            ray = run_sweep(small, jobs=args.jobs, use_ray=True)
            out["ray_s"] = time.perf_counter() - t0
            out["ray_identical"] = json.dumps(ray.rows()) == json.dumps(pool.rows())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["load_avg_end"] = os.getloadavg()

    t = Table(title=f"coorp sweep speed ({args.jobs} processes, {os.cpu_count()} CPUs)")
    for c in ("what", "runs", "wall s", "target"):
        t.add_column(c, justify="left" if c == "what" else "right")
    t.add_row("cold sweep (CLI)", str(out["runs"]), f"{out['cold_s']:.1f}", "<= 300 (full size)")
    t.add_row("rerun from cache (CLI)", str(out["runs"]), f"{out['cached_s']:.2f}", "<= 5")
    if "ray_s" in out:
        n = out["ray_runs"]
        t.add_row("process pool, no cache", str(n), f"{out['pool_s']:.1f}", "")
        over = out["ray_s"] - out["pool_s"]
        t.add_row("Ray (local, start-up included)", str(n), f"{out['ray_s']:.1f}",
                  f"overhead {over:+.1f} s; identical: {out['ray_identical']}")  # fmt: skip
    t.caption = (f"load average {out['load_avg_start'][0]:.1f} at start, "
                 f"{out['load_avg_end'][0]:.1f} at end")  # fmt: skip
    console.print(t)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if out.get("ray_identical", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())
