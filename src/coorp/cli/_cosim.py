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
    FormatOption,
    PolicyModuleOption,
    console,
    duration_ns_option,
    figure_formats,
    load_policy_options,
    require_out_dir,
)

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
                help="Co-simulation scenario: a TOML file with a \\[cosim] section or a "
                "built-in name (cosim-5).",
            ),
        ],
        policies: Annotated[
            str, typer.Option(help="Policies, comma-separated (oracle: a reference bound).")
        ] = DEFAULT_POLICIES,
        seeds: Annotated[
            str | None,
            typer.Option(
                help="Seeds (1-5, 1,3,5): mean ± 95% CI over them (default: the scenario's seed)."
            ),
        ] = None,
        duration: Annotated[
            float | None, typer.Option(help="Simulated seconds (default: the scenario's).")
        ] = None,
        coupling: Annotated[
            str | None,
            typer.Option(
                help="exact (default), fixed-window or velocity-window: overrides cosim.coupling."
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
        out: Annotated[
            Path | None, typer.Option(help="Directory for summary.json and the figures.")
        ] = None,
        json_path: Annotated[
            Path | None, typer.Option("--json", help="Also write the summary JSON here.")
        ] = None,
        trace: Annotated[
            Path | None,
            typer.Option(
                help="Write an MCAP trace (Foxglove): FILE.mcap for one run; with "
                "several, FILE-<policy>-seed<N>.mcap each."
            ),
        ] = None,
        policy_module: PolicyModuleOption = None,
        fmt: FormatOption = "png",
    ) -> None:
        """Co-simulate robots (MuJoCo) and the channel: control outcomes per policy."""
        from coorp.cosim import Coupling, Tracer, aggregate, load_cosim, plot_cosim, run_cosim
        from coorp.policies import get_policy
        from coorp.scenario import resolve_scenario

        path = resolve_scenario(scenario)
        cs = load_cosim(path)
        if leader_prediction is not None:
            cosim = cs.cosim.model_copy(update={"leader_prediction": leader_prediction})
            cs = cs.model_copy(update={"cosim": cosim})
        duration_ns = duration_ns_option(duration)
        formats = figure_formats(fmt)
        out_dir = require_out_dir(out) if out is not None else None
        if json_path is not None and json_path.is_dir():
            raise UsageError(f"--json {json_path} is a directory; give a file name")
        load_policy_options(policy_module)
        names = [p.strip() for p in policies.split(",") if p.strip()]
        if not names or len(set(names)) != len(names):
            raise UsageError(f"--policies {policies!r}: give distinct policy names")
        for n in names:
            get_policy(n)  # UsageError naming the registered ones
        seed_list = _seed_list(seeds, cs.scenario.seed)
        mode: Coupling | None = None
        if coupling is not None:
            try:
                mode = Coupling(coupling)
            except ValueError:
                allowed = ", ".join(c.value for c in Coupling)
                raise UsageError(f"--coupling {coupling!r}: allowed: {allowed}") from None
        if trace is not None and trace.suffix != ".mcap":
            raise UsageError(f"--trace {trace}: the file name must end in .mcap")
        several = len(names) * len(seed_list) > 1
        results: dict[str, list[Any]] = {}
        t0 = time.perf_counter()
        for policy in names:
            for seed in seed_list:
                tracer = None
                if trace is not None:
                    tpath = (trace.with_name(f"{trace.stem}-{policy}-seed{seed}.mcap")
                             if several else trace)  # fmt: skip
                    tracer = Tracer(tpath)
                try:
                    r = run_cosim(cs, policy, seed=seed, duration_ns=duration_ns,
                                  coupling=mode, tracer=tracer)  # fmt: skip
                finally:
                    if tracer is not None:
                        tracer.close()
                console.print(f"  {policy:<12} seed {seed:<4} {r.wall_s:6.2f} s wall")
                results.setdefault(policy, []).append(r)
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
