"""``coorp learn`` (RL over the team's simulated network) and ``coorp bench rl``
(coorp.flow against Ray on the same reactors)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from coorp._errors import UsageError
from coorp._manifest import build_manifest, json_safe, write_json
from coorp.cli._common import FormatOption, figure_formats, load_scenario_arg, require_out_dir
from coorp.cli._common import console as shared_console
from coorp.cli._learn_plot import plot_rewards
from coorp.cli._learn_real import learn_robot, learn_runtime

__all__ = ["register"]


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not vals:
        raise UsageError(f"{what} is empty")
    return vals


def _seeds(text: str) -> tuple[int, ...]:
    """``1-3``, ``1,2,5`` or ``1-3,7`` (sorted, each once)."""
    from coorp.seeds import seeds_option

    return tuple(seeds_option(text))


def _bench_group(app: typer.Typer) -> typer.Typer:
    for info in app.registered_groups:
        if info.name == "bench" and info.typer_instance is not None:
            return info.typer_instance
    group = typer.Typer(help="Benchmarks.", no_args_is_help=True)
    app.add_typer(group, name="bench")
    return group


def register(app: typer.Typer) -> None:
    """Add ``learn`` and ``bench rl``."""
    bench = _bench_group(app)

    @app.command("learn")
    def learn(
        scenario: Annotated[str, typer.Argument(help="Scenario file or built-in name (crl-5).")],
        policies: Annotated[
            str | None,
            typer.Option(help="Comma-separated policies (default edca,schedwifi,coorp)."),
        ] = None,
        seeds: Annotated[
            str | None, typer.Option(help="Seeds: 1-3 or 1,2,5 (default 1-3; --team: one, 1).")
        ] = None,
        sync: Annotated[
            str | None, typer.Option(help="bsp, ssp or asp (default: the scenario's).")
        ] = None,
        air_params: Annotated[
            int | None,
            typer.Option(
                help="Parameters counted on the air (x4 bytes); default the real model's. "
                "10000000 = the paper's 40 MB while the learned model stays small."
            ),
        ] = None,
        duration: Annotated[
            float | None,
            typer.Option(
                help="Seconds of learning: simulated, or wall time with --runtime/--team "
                "(default: the scenario's)."
            ),
        ] = None,
        hidden: Annotated[int, typer.Option(help="Hidden units per layer (2 layers).")] = 32,
        envs: Annotated[int, typer.Option(help="Formation-task copies per worker.")] = 8,
        lr: Annotated[float, typer.Option(help="Adam learning rate of the workers.")] = 1e-2,
        physics: Annotated[
            str,
            typer.Option(
                help="The task's physics: points (damped point masses, numpy) or mujoco "
                "(MuJoCo bodies with contacts)."
            ),
        ] = "points",
        target: Annotated[
            float | None,
            typer.Option(help="Target return (default: half-way from initial to best final)."),
        ] = None,
        out: Annotated[Path, typer.Option(help="Output directory.")] = Path("results/learn"),
        fmt: FormatOption = "png",
        runtime: Annotated[
            bool,
            typer.Option(
                "--runtime",
                help="Learn over real sockets (coorp.runtime) instead of the simulated "
                "channel: each robot a process; reward vs wall time. See docs/learn.md.",
            ),
        ] = False,
        modes: Annotated[
            str | None,
            typer.Option(
                help="--runtime: how syncs travel, comma-separated: coorp (permits + "
                "local preemption) and/or tcp (plain TCP) (default coorp,tcp). --team: one of "
                "them (default coorp)."
            ),
        ] = None,
        net: Annotated[
            str | None,
            typer.Option(
                help="--runtime: netns (network namespaces with a shaped bottleneck; root) "
                "or loopback (default netns)."
            ),
        ] = None,
        rate_mbit: Annotated[
            float | None,
            typer.Option(help="--runtime --net netns: bottleneck rate (default 50)."),
        ] = None,
        max_versions: Annotated[
            int | None,
            typer.Option(
                help="--runtime/--team: stop after this many model versions (and --duration)."
            ),
        ] = None,
        medium: Annotated[
            str | None,
            typer.Option(
                help="--runtime --net netns: split (uplink to the leader and its downlink "
                "shaped apart) or shared (one queue for every packet, like one WiFi "
                "channel) (default split)."
            ),
        ] = None,
        streams: Annotated[
            str | None,
            typer.Option(
                help="--runtime/--team --modes coorp: fresh (a new bulk stream per sync "
                "message) or reuse (one stream per peer for the whole run) (default fresh)."
            ),
        ] = None,
        team: Annotated[
            Path | None,
            typer.Option(
                help="Learn on a real team: run this robot's role (--robot) with its keys "
                "and the permit service from this team file. See docs/learn.md."
            ),
        ] = None,
        robot: Annotated[
            str | None, typer.Option(help="--team: the robot this machine is.")
        ] = None,
        host: Annotated[
            str | None,
            typer.Option(
                help="--team: this robot's own address (its inbox binds and is announced there)."
            ),
        ] = None,
        server: Annotated[
            str | None,
            typer.Option(help="--team, on a worker: the leader's learning inbox, host:port."),
        ] = None,
        port: Annotated[
            int | None,
            typer.Option(
                help="--team: this robot's inbox port (leader default 7410; workers: any)."
            ),
        ] = None,
    ) -> None:
        """Real PPO over the team's network: each robot a worker, parameter syncs as bulk
        transfers of the real tensor. Simulated channel: reward vs simulated time per
        policy. --runtime: real sockets, reward vs wall time per mode (95% CIs).
        --team: this machine's robot of a real team (run it on every robot)."""
        from rich.console import Console
        from rich.table import Table

        from coorp.learn import LearnSpec, PPOConfig, learn_on_channel, summarize
        from coorp.policies import get_policy
        from coorp.scenario import SyncMode

        t_wall = time.monotonic()
        path, sc = load_scenario_arg(scenario)
        try:
            mode = SyncMode(sync.lower()) if sync is not None else None
        except ValueError:
            raise UsageError(f"--sync must be bsp, ssp or asp, got {sync!r}") from None
        if air_params is not None and air_params < 1:
            raise UsageError(f"--air-params must be positive, got {air_params}")
        if duration is not None and not duration > 0:
            raise UsageError(f"--duration must be positive, got {duration:g}")
        formats = figure_formats(fmt)
        from coorp.learn import FormationSpec

        spec = LearnSpec(
            ppo=PPOConfig(hidden=hidden, envs=envs, lr=lr),
            task=FormationSpec(robots=3, horizon=30, physics=physics),
            air_params=air_params,
            sync=mode,
            duration_s=duration,
        )
        if team is not None:
            for flag, value in (("--runtime", runtime or None), ("--policies", policies),
                                ("--net", net), ("--rate-mbit", rate_mbit),
                                ("--medium", medium)):  # fmt: skip
                if value is not None:
                    raise UsageError(
                        f"{flag} does not apply with --team (a real team's own network)"
                    )
            learn_robot(
                scenario_path=str(path), sc=sc, spec=spec, team=team, robot=robot, host=host,
                server=server, port=port, seeds=_seeds(seeds or "1"), modes=modes,
                max_versions=max_versions, streams=streams, target=target, out=out,
                formats=formats, t_wall=t_wall,
            )  # fmt: skip
            return
        for flag, value in (("--robot", robot), ("--host", host), ("--server", server),
                            ("--port", port)):  # fmt: skip
            if value is not None:
                raise UsageError(f"{flag} applies only with --team")
        seeds = seeds or "1-3"
        if runtime:
            if policies is not None:
                raise UsageError(
                    "--policies is for the simulated channel; with --runtime use --modes "
                    "(allowed: coorp, tcp)"
                )
            learn_runtime(
                scenario_path=str(path), sc=sc, spec=spec, seeds=_seeds(seeds), modes=modes,
                net=net, rate_mbit=rate_mbit, max_versions=max_versions, medium=medium,
                streams=streams, target=target,
                out=out, formats=formats, t_wall=t_wall,
            )  # fmt: skip
            return
        for flag, value in (("--modes", modes), ("--net", net), ("--rate-mbit", rate_mbit),
                            ("--max-versions", max_versions), ("--medium", medium),
                            ("--streams", streams)):  # fmt: skip
            if value is not None:
                raise UsageError(f"{flag} applies only with --runtime")
        pols = [p.strip() for p in (policies or "edca,schedwifi,coorp").split(",") if p.strip()]
        for p in pols:
            get_policy(p)  # a clear error for an unknown name, before any run
        out_dir = require_out_dir(out)
        console = shared_console
        err = Console(stderr=True, quiet=not sys.stderr.isatty())
        curves = []
        for pol in pols:
            for seed in _seeds(seeds):
                err.log(f"{pol}, seed {seed}: simulating and learning")
                curves.append(learn_on_channel(sc, pol, seed, spec, source=str(path)))
        dur = duration if duration is not None else sc.duration_s
        summary = summarize(curves, dur, target)
        c0 = curves[0]
        summary["config"] = {
            "scenario": str(path), "sync": c0.sync, "params": c0.params,
            "air_bytes": c0.air_bytes, "duration_s": dur, "hidden": hidden, "envs": envs, "lr": lr,
            "physics": physics,
        }  # fmt: skip
        title = (
            f"learning over the air: {sc.name}, {c0.sync.upper()}, {c0.params} params, "
            f"{c0.air_bytes / 1e6:.3g} MB per sync on the air"
        )
        table = Table(title=title)
        for col in ("policy", "epochs", "final return", "time to target (s)", "reached",
                    "staleness mean/max", "MPC violations"):  # fmt: skip
            table.add_column(col, justify="right")

        def show(d: dict[str, float], scale: float = 1.0, unit: str = "") -> str:
            if d["n"] == 0:
                return "-"
            ci = d["ci95"]
            pm = "" if ci != ci else f" ± {ci * scale:.3g}"
            return f"{d['mean'] * scale:.3g}{pm}{unit}"

        for pol, row in summary["policies"].items():
            table.add_row(
                pol, show(row["epochs"]), show(row["final_reward"]), show(row["time_to_target_s"]),
                f"{row['reached_target']}/{len(row['seeds'])}",
                f"{row['staleness_mean']:.2f}/{row['staleness_max']}",
                show(row["violation_rate"], 100, "%"),
            )  # fmt: skip
        console.print(table)
        console.print(f"target return {summary['target']:.2f}; ± are 95% CIs over seeds")
        (out_dir / "learn.json").write_text(json.dumps(json_safe(summary), indent=1) + "\n")
        for fig in plot_rewards(summary, out_dir / "reward", formats,
                       f"{sc.name}: reward vs simulated time ({c0.sync.upper()}, "
                       f"{c0.air_bytes / 1e6:.3g} MB per sync on the air, "
                       f"{physics} task)"):  # fmt: skip
            console.print(f"figure: {fig}")
        write_json(out_dir / "manifest.json", build_manifest(
            scenario=sc.model_dump(mode="json"), scenario_path=str(path), seed=curves[0].seed,
            wall_s=time.monotonic() - t_wall,
            extra={"command": "learn", "policies": pols, "seeds": list(_seeds(seeds)),
                   "config": summary["config"]},
        ))  # fmt: skip
        console.print(f"json: {out_dir / 'learn.json'}")

    @bench.command("rl")
    def bench_rl(
        workers: Annotated[str, typer.Option(help="Worker counts for PPO and sampling.")] = "2,4",
        bcast_workers: Annotated[
            str, typer.Option(help="Worker counts for broadcast+gather.")
        ] = "2,4,8",
        bcast_mb: Annotated[str, typer.Option(help="Broadcast sizes in MB (10^6 B).")] = "1,10,100",
        iterations: Annotated[int, typer.Option(help="PPO iterations per run.")] = 8,
        reruns: Annotated[int, typer.Option(help="PPO reruns (bit-identity check).")] = 3,
        hidden: Annotated[int, typer.Option(help="Hidden units per layer (2 layers).")] = 64,
        contenders: Annotated[str, typer.Option(help="flow,ray (or one of them).")] = "flow,ray",
        ray_idiom: Annotated[
            bool,
            typer.Option(help="Also time PPO as Ray code is usually written (ray.wait)."),
        ] = True,
        json_path: Annotated[Path | None, typer.Option("--json", help="Write JSON here.")] = None,
    ) -> None:
        """The same PPO workload on coorp.flow and on Ray actors, plus broadcast+gather
        and sampling micro-benchmarks; prints flow's speedup over Ray (>1: flow wins)."""
        from rich.console import Console
        from rich.table import Table

        from coorp.learn import RlBenchConfig, run_rl_bench

        try:
            mbs = tuple(float(x) for x in bcast_mb.split(",") if x.strip())
        except ValueError:
            raise UsageError(f"--bcast-mb must be numbers, got {bcast_mb!r}") from None
        cfg = RlBenchConfig(
            workers=_ints(workers, "--workers"),
            bcast_workers=_ints(bcast_workers, "--bcast-workers"),
            bcast_mb=mbs,
            iterations=iterations,
            reruns=reruns,
            hidden=hidden,
            contenders=tuple(c.strip() for c in contenders.split(",") if c.strip()),
            ray_idiom=ray_idiom,
        )
        console = Console(highlight=False)
        err = Console(stderr=True, quiet=not sys.stderr.isatty())
        res = run_rl_bench(cfg, progress=lambda m: err.log(m))
        titles = {
            "ppo": ("PPO iteration time (s)", "s_per_iteration"),
            "sampling": ("sampling throughput (env steps/s)", "samples_per_s"),
            "broadcast": ("broadcast+gather (ms per round)", "ms_per_round"),
        }
        for kind, (title, metric) in titles.items():
            t = Table(title=title)
            keys = ["workers"] + (["mb"] if kind == "broadcast" else [])
            for k in keys:
                t.add_column(k, justify="right")
            for c in cfg.contenders:
                t.add_column(c, justify="right")
            if kind == "ppo":
                for c in cfg.contenders:
                    t.add_column(f"{c} bit-identical", justify="center")
                for c in cfg.contenders:
                    t.add_column(f"{c} worker CPU s/iter", justify="right")
            if len(cfg.contenders) == 2:
                t.add_column("flow speedup", justify="right")
            for row in res[kind]:
                cells = [f"{row[k]:g}" for k in keys]
                cells += [f"{row[f'{c}_{metric}']:.4g}" for c in cfg.contenders]
                if kind == "ppo":
                    cells += [
                        "yes" if row[f"{c}_bit_identical_reruns"] else "NO" for c in cfg.contenders
                    ]
                    cells += [
                        f"{row[f'{c}_worker_cpu_s_per_iteration']:.3g}" for c in cfg.contenders
                    ]
                if "flow_speedup" in row:
                    cells.append(f"{row['flow_speedup']:.2f}x")
                t.add_row(*cells)
            console.print(t)
        if res["ray_idiom_ppo"]:
            t = Table(title="PPO as Ray code is usually written (driver loop, ray.wait gathers)")
            for col in ("workers", "s per iteration", "bit-identical reruns", "flow speedup"):
                t.add_column(col, justify="right")
            for row, flow_row in zip(res["ray_idiom_ppo"], res["ppo"], strict=True):
                flow_s = flow_row.get("flow_s_per_iteration")
                vs = "-" if flow_s is None else f"{row['s_per_iteration'] / flow_s:.2f}x"
                same = (
                    "yes"
                    if row["bit_identical_reruns"]
                    else (f"NO ({row['distinct_results']} results in {row['reruns']} runs)")
                )
                t.add_row(str(row["workers"]), f"{row['s_per_iteration']:.4g}", same, vs)
            console.print(t)
        conf = res["config"]
        m = res["machine"]
        console.print(
            f"PPO: {conf['params']} parameters ({conf['param_bytes']} B), {conf['robots']} robots "
            f"x {conf['envs_per_worker']} envs x {conf['horizon']} steps per worker per "
            f"iteration; {m['cores']} cores, load {m['load_before']:.2f} -> {m['load_after']:.2f}"
        )
        if json_path is not None:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(res, indent=2) + "\n")
            console.print(f"json: {json_path}")
