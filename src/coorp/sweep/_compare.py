"""``coorp compare --seeds``: one scenario, every policy, several seeds, through the sweep
machinery; the JSON keeps ``coorp compare``'s shape with ``{mean, ci95, n}`` per value."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from coorp.report import BH_ONLY, deployable
from coorp.sweep._results import aggregate, aggregate_warnings, clean_json
from coorp.sweep._run import SweepResult, split_warnings

__all__ = ["multi_seed_json"]

#: Flat metric name -> (block, key) in ``coorp compare``'s JSON.
_NESTED = {
    "reaction_p50_ms": ("reaction_ms", "p50"),
    "reaction_p90_ms": ("reaction_ms", "p90"),
    "reaction_p99_ms": ("reaction_ms", "p99"),
    "ls_latency_p50_ms": ("ls_latency_ms", "p50"),
    "ls_latency_p99_ms": ("ls_latency_ms", "p99"),
}
_SKIP = {"events"}


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in flat.items():
        if name in _SKIP:
            continue
        if name in _NESTED:
            block, key = _NESTED[name]
            out.setdefault(block, {})[key] = value
        else:
            out[name] = value
    return out


def multi_seed_json(result: SweepResult, *, deadline_ms: float) -> dict[str, Any]:
    """The JSON of a multi-seed comparison of one scenario (see ``docs/compare.md``)."""
    plan = result.plan
    (scenario,) = plan.scenarios
    rows = result.rows()
    agg = aggregate(rows)
    stats: dict[str, dict[str, Any]] = defaultdict(dict)
    reasons: dict[str, tuple[int, str | None]] = {}
    for a in agg:
        stats[a["policy"]][a["metric"]] = {"mean": a["mean"], "ci95": a["ci95"], "n": a["n"]}
        reasons[a["policy"]] = (a["infeasible"], a["reason"])
    warned: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for w in aggregate_warnings(rows):
        warned[w["policy"]].append(w)
    policies = {}
    for name in plan.policies:
        block = _nest(stats[name])
        block["infeasible"] = reasons[name][1]
        block["infeasible_runs"] = reasons[name][0]
        block["deployable"] = deployable(name)
        block["warnings"] = [w["warning"] for w in warned[name]]
        policies[name] = block
    ref = stats[BH_ONLY]
    per_seed: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["policy"] == BH_ONLY:
            continue
        seed_block = per_seed.setdefault(str(r["seed"]), {})
        block = seed_block.setdefault(r["policy"], {
            "infeasible": r["infeasible"], "warnings": split_warnings(r["warnings"]),
        })  # fmt: skip
        block[r["metric"]] = r["value"]
    per_seed = {s: {p: _nest(b) for p, b in blocks.items()} for s, blocks in per_seed.items()}
    duration_s = next(iter(plan.duration_s.values()))
    return clean_json({
        "scenario": scenario, "seeds": plan.spec.seeds, "confidence": 0.95,
        "policies": policies,
        "reference": {"name": BH_ONLY, "bh_mbps": ref["bh_mbps"], "epoch_s": ref["epoch_s"],
                      "warnings": [w["warning"] for w in warned[BH_ONLY]]},
        "duration_s": duration_s, "deadline_ms": deadline_ms, "code_version": result.code_version,
        # Every distinct warning, named by its run and how many of its seeds gave it.
        "warnings": [f"{w['policy']}: {w['warning']} ({w['count']} of {w['runs']} runs)"
                     for ws in warned.values() for w in ws],
        "per_seed": per_seed,
    })  # fmt: skip
