"""``coorp learn`` on the simulated channel: every policy and seed, then one table, the
JSON, the reward figure and the manifest."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from coorp._manifest import build_manifest, json_safe, write_json
from coorp.cli._common import console, load_average, step_progress, wall_note
from coorp.cli._learn._plot import plot_rewards
from coorp.cli._options import ensure_out_dir, parse_names

__all__ = ["learn_channel", "show_ci"]


def show_ci(d: dict[str, float], scale: float = 1.0, unit: str = "") -> str:
    """``mean ± ci95`` of a summary cell (``-`` without runs)."""
    if d["n"] == 0:
        return "-"
    ci = d["ci95"]
    pm = "" if ci != ci else f" ± {ci * scale:.3g}"
    return f"{d['mean'] * scale:.3g}{pm}{unit}"


def learn_channel(
    *,
    scenario_path: str,
    sc: Any,
    spec: Any,
    policies: str,
    seeds: tuple[int, ...],
    target: float | None,
    out: Path,
    formats: tuple[str, ...],
    t_wall: float,
) -> None:
    """Learn under every policy of ``policies`` for every seed on the simulated channel."""
    from coorp.learn import learn_on_channel, summarize
    from coorp.policies import get_policy

    pols = parse_names(policies) or []
    for p in pols:
        get_policy(p)  # a clear error for an unknown name, before any run
    out_dir = ensure_out_dir(out)
    load0 = load_average()
    curves = []
    with step_progress("learn", len(pols) * len(seeds)) as step:
        for pol in pols:
            for seed in seeds:
                step(f"{pol}, seed {seed}: simulating and learning")
                curves.append(learn_on_channel(sc, pol, seed, spec, source=scenario_path))
    dur = spec.duration_s if spec.duration_s is not None else sc.duration_s
    summary = summarize(curves, dur, target)
    c0 = curves[0]
    summary["config"] = {
        "scenario": scenario_path, "sync": c0.sync, "params": c0.params,
        "air_bytes": c0.air_bytes, "duration_s": dur, "hidden": spec.ppo.hidden,
        "envs": spec.ppo.envs, "lr": spec.ppo.lr, "physics": spec.task.physics,
    }  # fmt: skip
    mb = f"{c0.air_bytes / 1e6:.3g} MB per sync on the air"
    console.print(_table(summary, f"learning over the air: {sc.name}, {c0.sync.upper()}, "
                                  f"{c0.params} params, {mb}"))  # fmt: skip
    console.print(f"target return {summary['target']:.2f}; ± are 95% CIs over seeds")
    (out_dir / "learn.json").write_text(json.dumps(json_safe(summary), indent=1) + "\n")
    title = (f"{sc.name}: reward vs simulated time ({c0.sync.upper()}, {mb}, "
             f"{spec.task.physics} task)")  # fmt: skip
    for fig in plot_rewards(summary, out_dir / "reward", formats, title, misses=True):
        console.print(f"figure: {fig}")
    wall = time.monotonic() - t_wall
    write_json(out_dir / "manifest.json", build_manifest(
        scenario=sc.model_dump(mode="json"), scenario_path=scenario_path, seed=curves[0].seed,
        wall_s=wall,
        extra={"command": "learn", "policies": pols, "seeds": list(seeds),
               "config": summary["config"]},
    ))  # fmt: skip
    console.print(f"json: {out_dir / 'learn.json'}")
    console.print(f"{len(curves)} runs; {wall_note(wall, load0)}")


def _table(summary: dict[str, Any], title: str) -> Table:
    table = Table(title=title)
    for col in ("policy", "epochs", "final return", "time to target (s)", "reached",
                "staleness mean/max", "MPC violations"):  # fmt: skip
        table.add_column(col, justify="right")
    for pol, row in summary["policies"].items():
        table.add_row(
            pol, show_ci(row["epochs"]), show_ci(row["final_reward"]),
            show_ci(row["time_to_target_s"]), f"{row['reached_target']}/{len(row['seeds'])}",
            f"{row['staleness_mean']:.2f}/{row['staleness_max']}",
            show_ci(row["violation_rate"], 100, "%"),
        )  # fmt: skip
    return table
