"""``coorp cosim``: robots that move — physics and network co-simulation per policy.

Runs the scenario's ``[cosim]`` world under each policy and seed (MuJoCo physics on the
channel simulator's timeline, the MPC loop's perceptions and commands through the
simulated channel, DRLC bulk traffic alongside), prints the outcome table (mean ± 95% CI
over seeds) and writes ``summary.json`` and figures to ``--out``. See docs/cosim.md.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from coorp._errors import UsageError
from coorp._manifest import build_manifest, json_safe, write_json
from coorp.cli._common import (
    console,
    duration_ns_option,
    figure_formats,
    load_average,
    load_policy_options,
    step_progress,
    wall_note,
)
from coorp.cli._options import (
    FormatOption,
    JsonFileOption,
    OutOption,
    PolicyModuleOption,
    check_out_dir,
    check_out_file,
    duration_opt,
    ensure_out_dir,
    parse_names,
    policies_opt,
    seeds_opt,
)
from coorp.cosim import Coupling

__all__ = ["register", "render_cosim"]

DEFAULT_POLICIES = "edca,schedwifi,coorp,oracle"


def _cell(m: dict[str, Any], scale: float, digits: int) -> str:
    mean, ci = m["mean"], m["ci95"]
    if mean is None:
        return "-"
    text = f"{mean * scale:.{digits}f}"
    if ci is not None and math.isfinite(ci):
        text += f" ± {ci * scale:.{digits}f}"
    return text


def render_cosim(agg: dict[str, Any], title: str) -> Table:
    from coorp.cosim import METRICS
    from coorp.policies import policy_label

    t = Table(title=escape(title))
    t.add_column("policy")
    for _, header, _, _ in METRICS:
        t.add_column(header, justify="right")
    notes = []
    for policy, block in agg.items():
        t.add_row(escape(policy_label(policy)),
                  *(_cell(block["metrics"][k], sc, d) for k, _, sc, d in METRICS))  # fmt: skip
        handovers = block["metrics"].get("handovers", {}).get("mean")
        if handovers:
            notes.append(
                f"{policy}: {handovers:.1f} hand-overs per run (a fleet's robots roaming "
                "between APs; their loops lost in the gap count as misses)"
            )
        if block["incomplete_runs"]:
            notes.append(f"{policy}: {block['incomplete_runs']} run(s) did not complete the "
                         "patrol in the simulated time (done s over the others)")  # fmt: skip
    t.caption = escape(
        "mean ± 95% CI over seeds (Student t). track err: distance to the reference, "
        "per worker every record period; min sep: smallest gap between robot surfaces; "
        "cmd age: pose sample -> command applied; stopped: worker-steps with a stale command"
        + ("".join(f"\nnote: {n}" for n in notes))
    )
    return t


def _seed_list(text: str | None, default: int) -> list[int]:
    if text is None:
        return [default]
    from coorp.seeds import seeds_option

    return seeds_option(text)


def register(app: typer.Typer) -> None:
    @app.command()
    def cosim(
        scenario: Annotated[
            str,
            typer.Argument(
                metavar="SCENARIO",
                help="A co-simulation scenario: a TOML file with a [cosim] section, or a "
                "built-in name (cosim-5).",
            ),
        ],
        policies: Annotated[str, policies_opt("shown")] = DEFAULT_POLICIES,
        seeds: Annotated[str | None, seeds_opt("the scenario's seed")] = None,
        duration: Annotated[float | None, duration_opt()] = None,
        coupling: Annotated[
            Coupling | None,
            typer.Option(
                case_sensitive=False,
                help="How physics and network share time; overrides cosim.coupling "
                "(default: the scenario's, exact unless set).",
            ),
        ] = None,
        leader_prediction: Annotated[
            bool | None,
            typer.Option(
                "--leader-prediction/--no-leader-prediction",
                help="Overrides cosim.leader_prediction: the leader predicts each pose "
                "forward to the command's creation (docs/cosim.md).",
                show_default=False,
            ),
        ] = None,
        out: OutOption = None,
        json_path: JsonFileOption = None,
        trace: Annotated[
            Path | None,
            typer.Option(
                metavar="FILE.mcap",
                help="Write an MCAP trace (Foxglove): FILE.mcap for one run; with "
                "several, FILE-<policy>-seed<N>.mcap each.",
            ),
        ] = None,
        policy_module: PolicyModuleOption = None,
        fmt: FormatOption = "png",
    ) -> None:
        """Co-simulate moving robots (MuJoCo) and the channel, per policy.

        Prints the control outcomes in physical units (tracking error, separation,
        collisions, command age) as mean ± 95% CI over the seeds (docs/cosim.md)."""
        from coorp.cosim import aggregate, load_cosim, plot_cosim
        from coorp.policies import get_fleet_policy, get_policy
        from coorp.scenario import resolve_scenario

        path = resolve_scenario(scenario)
        cs = load_cosim(path)
        if leader_prediction is not None:
            cosim = cs.cosim.model_copy(update={"leader_prediction": leader_prediction})
            cs = cs.model_copy(update={"cosim": cosim})
        duration_ns = duration_ns_option(duration)
        formats = figure_formats(fmt)
        if out is not None:
            check_out_dir(out)
        if json_path is not None:
            check_out_file(json_path, "--json", made=out)
        load_policy_options(policy_module)
        names = parse_names(policies) or []
        if not names or len(set(names)) != len(names):
            raise UsageError(f"--policies {policies!r}: give distinct policy names")
        for n in names:
            # UsageError naming the registered ones (a fleet's: the fleet policies)
            (get_fleet_policy if cs.scenario.fleet is not None else get_policy)(n)
        seed_list = _seed_list(seeds, cs.scenario.seed)
        if trace is not None:
            if trace.suffix != ".mcap":
                raise UsageError(f"--trace {trace}: the file name must end in .mcap")
            check_out_file(trace, "--trace", made=out)
        out_dir = ensure_out_dir(out) if out is not None else None
        several = len(names) * len(seed_list) > 1
        results: dict[str, list[Any]] = {}
        t0, load0 = time.perf_counter(), load_average()
        with step_progress("cosim", len(names) * len(seed_list)) as step:
            for policy in names:
                for seed in seed_list:
                    step(f"{policy}, seed {seed}")
                    results.setdefault(policy, []).append(
                        _run_one(cs, policy, seed, duration_ns, coupling, trace, several)
                    )
        wall = time.perf_counter() - t0
        agg = aggregate(results)
        dur_s = (duration_ns or round(cs.scenario.duration_s * 1e9)) / 1e9
        first = next(iter(results.values()))[0]
        title = (f"{cs.scenario.name} · {len(cs.cosim.robots)} robots · {dur_s:g} s simulated"
                 f" · {first.coupling} coupling · seeds {seed_list}")  # fmt: skip
        console.print(render_cosim(agg, title))
        data = {
            "scenario": cs.scenario.name,
            "duration_s": dur_s,
            "coupling": first.coupling,
            "seeds": seed_list,
            "policies": agg,
            "runs": {p: [r.summary() for r in rs] for p, rs in results.items()},
            "manifest": build_manifest(
                scenario=cs.scenario.model_dump(mode="json")
                | {"cosim": cs.cosim.model_dump(mode="json")},
                scenario_path=str(path), seed=seed_list[0], wall_s=wall,
                extra={"policies": names, "seeds": seed_list},
            ),
        }  # fmt: skip
        data = json_safe(data)
        if json_path is not None:
            write_json(json_path, data)
        if out_dir is not None:
            write_json(out_dir / "summary.json", data)
            for p in plot_cosim(results, cs.cosim, out_dir, formats):
                console.print(f"  wrote {p}")
        console.print(f"{len(names) * len(seed_list)} runs; {wall_note(wall, load0)}")


def _run_one(
    cs: Any,
    policy: str,
    seed: int,
    duration_ns: int | None,
    coupling: Coupling | None,
    trace: Path | None,
    several: bool,
) -> Any:
    """One policy and seed, with its MCAP trace when asked for."""
    from coorp.cosim import Tracer, run_cosim

    tracer = None
    if trace is not None:
        tpath = trace.with_name(f"{trace.stem}-{policy}-seed{seed}.mcap") if several else trace
        tracer = Tracer(tpath)
    try:
        return run_cosim(cs, policy, seed=seed, duration_ns=duration_ns, coupling=coupling,
                         tracer=tracer)  # fmt: skip
    finally:
        if tracer is not None:
            tracer.close()
