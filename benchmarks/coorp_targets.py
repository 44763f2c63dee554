"""Issues 9 and 22's targets, checked on a saved sweep: does COORP keep the loop AND the
bandwidth?

Reads ``runs.parquet`` of a ``coorp sweep`` directory (policies ``edca``, ``schedwifi``,
``coorp``, ``oracle``, optionally ``coorp-paper``) and, per scenario and override
combination, prints the mean and 95% CI (Student's t over seeds) of the miss rate and
the utilization of every policy, then checks:

* **loop**: COORP's miss rate ≤ max(SchedWiFi's, 1%) (an infeasible SchedWiFi counts
  as no bound beyond the 1%), and ≤ 2% wherever the oracle's is 0;
* **bandwidth**: COORP's utilization ≥ 0.9 × EDCA's, or ≥ 0.9 × the oracle's where the
  oracle itself is below that (the oracle is a reference that cannot be deployed).

With ``--loop-alone DIR`` (a second sweep of the same scenarios and overrides with the
MPC loop alone: ``--policies edca --set workload.drlc.enabled=false``) the rules are
issue 22's, for its scenario families:

* **loop**: COORP's miss rate ≤ max(SchedWiFi's, 1%, the loop alone's + 0.5 points);
* **bandwidth**: COORP's utilization ≥ 0.9 × min(EDCA's, the oracle's);
* **other**: every flow outside the team (``flow_mbps_<name>``) keeps ≥ 0.9 × its
  throughput under EDCA;
* a cell counts towards "met in every cell" only where the loop alone fits the air
  (its misses ≤ 1%); the others are printed and marked.

Means are compared (the CIs are printed beside them). ``--markdown`` prints the table
for docs/compare.md::

    coorp sweep --scenarios crl-2,crl-5,crl-10,crl-20,one-low,all-low \\
        --policies edca,schedwifi,coorp,coorp-paper,oracle --seeds 1-5 --duration 20 \\
        --set workload.mpc.phase=aligned,random --out results/issue9
    python benchmarks/coorp_targets.py results/issue9 --markdown

    FAMILIES=crl-5-heavy-tail,crl-5-guest,crl-5-guest-leader,crl-5-download,crl-5-multiflow,\\
crl-5-60hz,crl-5-drift-pause,crl-5-links
    coorp sweep --scenarios $FAMILIES --policies edca,schedwifi,coorp,coorp-paper,oracle \\
        --seeds 1-5 --duration 20 --set workload.mpc.phase=aligned,random --out results/issue22
    coorp sweep --scenarios $FAMILIES --policies edca --seeds 1-5 --duration 20 \\
        --set workload.drlc.enabled=false --set workload.mpc.phase=aligned,random \\
        --out results/issue22-loop
    python benchmarks/coorp_targets.py results/issue22 --loop-alone results/issue22-loop
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pyarrow.parquet as pq

from coorp.sweep import MeanCI, mean_ci

POLICIES = ("edca", "schedwifi", "coorp", "coorp-paper", "oracle")
LABEL = {"oracle": "oracle (not deployable)"}
DRLC_OFF = "workload.drlc.enabled=false"

#: The issues' scenarios in the order of the table; any others follow by name.
ORDER = ("crl-2", "crl-5", "crl-10", "crl-20", "one-low", "all-low", "crl-5-heavy-tail",
         "crl-5-guest", "crl-5-guest-leader", "crl-5-download", "crl-5-multiflow", "crl-5-60hz",
         "crl-5-drift-pause", "crl-5-links")  # fmt: skip

Data = dict[tuple[str, str, str, str], list[float]]


def _rank(scenario: str) -> int:
    return ORDER.index(scenario) if scenario in ORDER else len(ORDER)


def pct(m: MeanCI) -> str:
    if m.n == 0 or math.isnan(m.mean):
        return "–"
    ci = f" ± {100 * m.ci95:.1f}" if m.n > 1 and math.isfinite(m.ci95) else ""
    return f"{100 * m.mean:.1f}{ci}"


def mbps(m: MeanCI) -> str:
    if m.n == 0 or math.isnan(m.mean):
        return "–"
    ci = f" ± {m.ci95:.0f}" if m.n > 1 and math.isfinite(m.ci95) else ""
    return f"{m.mean:.0f}{ci}"


def load(path: Path) -> Data:
    """(scenario, overrides, policy, metric) -> values over seeds (feasible runs)."""
    runs = path / "runs.parquet"
    if not runs.is_file():
        raise SystemExit(
            f"{path}: no runs.parquet here; give the --out directory of a finished `coorp sweep`"
        )
    table = pq.read_table(runs).to_pylist()
    out: Data = {}
    for row in table:
        if row.get("infeasible"):
            continue
        value = row["value"]
        key = (row["scenario"], row["overrides"] or "", row["policy"], row["metric"])
        out.setdefault(key, []).append(math.nan if value is None else float(value))
    return out


def _without_drlc(overrides: str) -> str:
    return "; ".join(p for p in overrides.split("; ") if p and p != DRLC_OFF)


def _loop_alone(path: Path) -> dict[tuple[str, str], MeanCI]:
    """(scenario, overrides without the DRLC switch) -> the loop alone's miss rate."""
    out: dict[tuple[str, str], list[float]] = {}
    for (sc, ov, policy, metric), values in load(path).items():
        if policy == "edca" and metric == "violation_rate":
            out.setdefault((sc, _without_drlc(ov)), []).extend(values)
    return {k: mean_ci(v) for k, v in out.items()}


def _phase(overrides: str) -> str:
    return overrides.replace("workload.mpc.phase=", "") or "scenario's"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument(
        "--loop-alone", type=Path, default=None,
        help="sweep of the same cells with the MPC loop alone (issue 22's rules)",
    )  # fmt: skip
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)
    data = load(args.sweep_dir)
    alone = _loop_alone(args.loop_alone) if args.loop_alone is not None else None
    groups = sorted({(s, o) for s, o, _, _ in data}, key=lambda g: (_rank(g[0]), g[0], g[1]))
    lines = []
    verdicts = []
    header = "| scenario | phases | " + " | ".join(LABEL.get(p, p) for p in POLICIES)
    if alone is None:
        lines.append(header + " | loop | bandwidth |")
        lines.append("|" + "---|" * (len(POLICIES) + 4))
    else:
        lines.append(header + " | loop alone | other Mb/s: edca / coorp | loop | bandwidth "
                     "| other |")  # fmt: skip
        lines.append("|" + "---|" * (len(POLICIES) + 7))
    for scenario, overrides in groups:

        def stat(policy: str, metric: str, sc: str = scenario, ov: str = overrides) -> MeanCI:
            return mean_ci(data.get((sc, ov, policy, metric), []))

        miss = {p: stat(p, "violation_rate") for p in POLICIES}
        util = {p: stat(p, "utilization") for p in POLICIES}
        c_miss, c_util = miss["coorp"], util["coorp"]
        if c_miss.n == 0:
            continue
        sched = miss["schedwifi"].mean if miss["schedwifi"].n else 0.0
        cells = [f"{pct(miss[p])} / {pct(util[p])}" for p in POLICIES]
        if alone is None:
            bound = max(sched, 0.01)
            loop_ok = c_miss.mean <= bound
            if miss["oracle"].n and miss["oracle"].mean == 0.0:
                loop_ok = loop_ok and c_miss.mean <= 0.02
            ref = util["edca"].mean
            if util["oracle"].n and util["oracle"].mean < 0.9 * ref:
                ref = util["oracle"].mean
            bw_ok = c_util.mean >= 0.9 * ref
            verdicts.append((loop_ok and bw_ok, True))
            lines.append(
                f"| {scenario} | {_phase(overrides)} | " + " | ".join(cells)
                + f" | {'yes' if loop_ok else 'no'} | {'yes' if bw_ok else 'no'} |"
            )  # fmt: skip
            continue
        by_itself = alone.get((scenario, overrides), MeanCI(math.nan, math.nan, 0))
        fits = by_itself.n > 0 and by_itself.mean <= 0.01
        base = by_itself.mean if by_itself.n else 0.0
        loop_ok = c_miss.mean <= max(sched, 0.01, base + 0.005)
        refs = [util[p].mean for p in ("edca", "oracle") if util[p].n]
        bw_ok = bool(refs) and c_util.mean >= 0.9 * min(refs)
        flows = sorted({m for s, o, _, m in data if (s, o) == (scenario, overrides)
                        and m.startswith("flow_mbps_")})  # fmt: skip
        other_ok = all(stat("coorp", m).mean >= 0.9 * stat("edca", m).mean for m in flows)
        other = " / ".join([mbps(stat("edca", "other_mbps")), mbps(stat("coorp", "other_mbps"))])
        verdicts.append((loop_ok and bw_ok and other_ok, fits))
        mark = "" if fits else " (loop alone does not fit)"
        lines.append(
            f"| {scenario}{mark} | {_phase(overrides)} | " + " | ".join(cells)
            + f" | {pct(by_itself)} | {other if flows else '–'} | {'yes' if loop_ok else 'no'} "
            f"| {'yes' if bw_ok else 'no'} | {('yes' if other_ok else 'no') if flows else '–'} |"
        )  # fmt: skip
    print("miss % / utilization % (mean ± 95% CI over seeds; – : infeasible or no data)")
    print("\n".join(lines))
    counted = [ok for ok, fits in verdicts if fits]
    print(f"\nevery target met in {sum(counted)} of {len(counted)} scenario × phase cells"
          + ("" if alone is None else " where the loop alone fits the air")
          + (f" ({len(verdicts) - len(counted)} more where it does not)"
             if len(counted) < len(verdicts) else ""))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
