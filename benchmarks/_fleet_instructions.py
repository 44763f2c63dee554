"""Instructions a fleet run executes: a deterministic measure of the simulator's cost.

CPU time on a shared virtual machine moves 20-30 % from one run to the next (steal,
neighbours), more than most single speed steps; the instructions executed do not. This
runs ``run_fleet(SCENARIO, POLICY, seed, SECONDS)`` in a child process under valgrind's
callgrind, counting only inside ``Simulation.run`` (the event loop and the result
table; the compiled build's symbol), and prints one JSON line per tree. With
``--cache-sim`` it also counts level-1 and last-level cache misses (a step that saves
instructions but misses the cache more is not faster).

Compare two builds side by side (a worktree of the old commit with its own ``make
native``), e.g.:

    .venv/bin/python benchmarks/_fleet_instructions.py --trees ../old,. --policy coorp

valgrind must be installed (``apt install valgrind``); ~45x slower than a plain run.
Instruction counts move ~0.2 % between runs (Python's string hashing is seeded per
process). Not a speed claim by itself: docs/compare.md quotes it beside CPU times.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = """
import sys
from coorp.scenario import load_scenario, resolve_scenario
from coorp.workload import run_fleet
sc = load_scenario(resolve_scenario(sys.argv[1]))
run_fleet(sc, sys.argv[2], seed=int(sys.argv[3]), duration_ns=round(float(sys.argv[4]) * 1e9))
"""
_SYMBOL = "CPyDef_coorp___sim___engine___Simulation___run"
_EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")


def measure(tree: Path, args: argparse.Namespace) -> dict[str, object]:
    python = tree / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{tree}: no .venv/bin/python (run `make native` there first)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            "--collect-atstart=no", f"--toggle-collect={_SYMBOL}",
            *(["--cache-sim=yes"] if args.cache_sim else []),
            str(python), "-c", _CHILD, args.scenario, args.policy, str(args.seed),
            str(args.seconds),
        ]  # fmt: skip
        run = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, check=False)
        if run.returncode != 0 or not out.exists():
            raise SystemExit(f"{tree}: the run failed:\n{run.stderr[-2000:]}")
        totals = next(
            line.split()[1:]
            for line in out.read_text().splitlines()
            if line.startswith(("summary:", "totals:"))
        )
    counts = dict(zip(_EVENTS, (int(x) for x in totals), strict=False))
    if counts.get("Ir", 0) == 0:
        raise SystemExit(f"{tree}: nothing counted: is the compiled build fresh (make native)?")
    return {"tree": str(tree), "scenario": args.scenario, "policy": args.policy,
            "seed": args.seed, "seconds": args.seconds, **counts}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--trees", default=".", help="comma-separated checkouts, each with .venv")
    ap.add_argument("--scenario", default="fleet-200")
    ap.add_argument("--policy", default="coorp")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=2.0, help="simulated seconds")
    ap.add_argument("--cache-sim", action="store_true", help="also count cache misses")
    args = ap.parse_args(argv)
    if args.seconds <= 0:
        ap.error(f"--seconds {args.seconds}: must be > 0")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt install valgrind)", file=sys.stderr)
        return 2
    for tree in (Path(t.strip()).resolve() for t in args.trees.split(",") if t.strip()):
        print(json.dumps(measure(tree, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
