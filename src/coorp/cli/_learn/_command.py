"""``coorp learn``: real PPO over the team's network.

Three places the learning can run, one command: the simulated channel (the default,
:mod:`coorp.cli._learn._channel`), real sockets on this host (``--runtime``) and this
machine's robot of a real team (``--team``, both :mod:`coorp.cli._learn._real`). The
options are declared here by concept (the model, the simulated channel, the runtime,
the team); each path refuses the flags of another by name.
"""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from coorp._errors import UsageError
from coorp.cli._common import figure_formats, load_scenario_arg
from coorp.cli._options import (
    FormatOption,
    OutOption,
    ScenarioArg,
    check_out_dir,
    duration_opt,
    policies_opt,
    seeds_opt,
)
from coorp.scenario import SyncMode

__all__ = ["AIR_MODEL", "AIR_SCENARIO", "Net", "Physics", "Streams", "air_params", "register"]

#: ``--air-params`` words: the scenario's DRLC parameter size, or the learned model's.
AIR_SCENARIO = "scenario"
AIR_MODEL = "model"


class Physics(StrEnum):
    """``--physics``: what the formation task runs on."""

    POINTS = "points"
    MUJOCO = "mujoco"


class Net(StrEnum):
    """``--net``: where ``--runtime`` runs the team."""

    NETNS = "netns"
    LOOPBACK = "loopback"


class Medium(StrEnum):
    """``--medium``: how the namespaces' bottleneck is shaped, or the emulated channel."""

    SPLIT = "split"
    SHARED = "shared"
    WIFI = "wifi"


class Streams(StrEnum):
    """``--streams``: bulk streams per sync message or per peer."""

    FRESH = "fresh"
    REUSE = "reuse"


# -- the model and the task --------------------------------------------------------------------
AirParamsOption = Annotated[
    str | None,
    typer.Option(
        "--air-params",
        metavar="scenario|model|N",
        help="Parameters counted on the air per sync (x4 bytes): 'scenario' (its "
        "workload.drlc.param_bytes: crl-5's 40 MB), 'model' (the learned model's real "
        "size, 11.5 KB by default) or a count. Default: scenario on the simulated channel, "
        "model with --runtime/--team.",
        show_default=False,
    ),
]
SyncOption = Annotated[
    SyncMode | None,
    typer.Option(case_sensitive=False, help="Parameter sync (default: the scenario's)."),
]
HiddenOption = Annotated[
    int, typer.Option(min=1, metavar="N", help="Hidden units per layer (2 layers).")
]
EnvsOption = Annotated[int, typer.Option(min=1, metavar="N", help="Task copies per worker.")]
LrOption = Annotated[float, typer.Option(metavar="RATE", help="The workers' Adam learning rate.")]
PhysicsOption = Annotated[
    Physics,
    typer.Option(
        case_sensitive=False,
        help="The task's physics: damped point masses (numpy) or MuJoCo bodies with contacts.",
    ),
]
TargetOption = Annotated[
    float | None,
    typer.Option(
        metavar="RETURN", help="Target return (default: half-way from initial to best final)."
    ),
]

# -- over real sockets (--runtime) ------------------------------------------------------------
RuntimeFlag = Annotated[
    bool,
    typer.Option(
        "--runtime",
        help="Learn over real sockets (coorp.runtime), each robot a process on this host; "
        "reward vs wall time (docs/learn.md).",
    ),
]
ModesOption = Annotated[
    str | None,
    typer.Option(
        metavar="LIST",
        help="--runtime: how syncs travel, comma-separated: coorp (permits and local "
        "preemption) and/or tcp (plain TCP) (default coorp,tcp). --team: one of them "
        "(default coorp).",
    ),
]
NetOption = Annotated[
    Net | None,
    typer.Option(
        case_sensitive=False,
        help="--runtime: network namespaces with a shaped bottleneck (root), or loopback "
        "(default netns).",
    ),
]
RateOption = Annotated[
    float | None,
    typer.Option(metavar="MBIT", help="--runtime --net netns: the bottleneck (default 50)."),
]
MaxVersionsOption = Annotated[
    int | None,
    typer.Option(
        min=1, metavar="N", help="--runtime/--team: stop after N model versions (or --duration)."
    ),
]
MediumOption = Annotated[
    Medium | None,
    typer.Option(
        case_sensitive=False,
        help="--runtime --net netns: uplink and downlink shaped apart (split), one queue "
        "for every packet like one WiFi channel (shared), or the scenario's emulated WiFi "
        "channel (wifi: coorp emulate's, real time; docs/emulate.md) (default split).",
    ),
]
StreamsOption = Annotated[
    Streams | None,
    typer.Option(
        case_sensitive=False,
        help="--runtime/--team --modes coorp: a new bulk stream per sync message (fresh) or "
        "one per peer for the whole run (reuse) (default fresh).",
    ),
]

# -- on a real team (--team) ------------------------------------------------------------------
TeamOption = Annotated[
    Path | None,
    typer.Option(
        metavar="TEAM.toml",
        help="Learn on a real team: run this robot's role (--robot) with its keys and the "
        "team's permit service (docs/learn.md).",
    ),
]
TeamRobotOption = Annotated[
    str | None, typer.Option(metavar="NAME", help="--team: the robot this machine is.")
]
HostOption = Annotated[
    str | None,
    typer.Option(
        metavar="ADDRESS", help="--team: this robot's own address (its inbox binds there)."
    ),
]
ServerOption = Annotated[
    str | None,
    typer.Option(metavar="HOST:PORT", help="--team, on a worker: the leader's learning inbox."),
]
PortOption = Annotated[
    int | None,
    typer.Option(metavar="PORT", help="--team: this robot's inbox port (leader default 7410)."),
]


def air_params(text: str | None, sc: Any, *, real_network: bool) -> int | None:
    """``--air-params``: the parameter count on the air, ``None`` for the model's own."""
    word = text if text is not None else (AIR_MODEL if real_network else AIR_SCENARIO)
    if word == AIR_MODEL:
        return None
    if word == AIR_SCENARIO:
        wl = sc.workload
        if wl is None:
            raise UsageError(f"--air-params {AIR_SCENARIO}: {sc.name} has no [workload]")
        return -(-int(wl.drlc.param_bytes) // 4)
    try:
        n = int(word)
    except ValueError:
        raise UsageError(
            f"--air-params {word!r}: give {AIR_SCENARIO}, {AIR_MODEL} or a parameter count"
        ) from None
    if n < 1:
        raise UsageError(f"--air-params must be positive, got {n}")
    return n


def _refuse(given: dict[str, object], why: str) -> None:
    """A :class:`UsageError` for the first flag of ``given`` that was set."""
    for flag, value in given.items():
        if value is not None and value is not False:
            raise UsageError(f"{flag} {why}")


def register(app: typer.Typer) -> None:
    """Add ``learn``."""

    @app.command("learn")
    def learn(
        scenario: ScenarioArg,
        policies: Annotated[str | None, policies_opt("edca,schedwifi,coorp")] = None,
        seeds: Annotated[str | None, seeds_opt("1-3; --team: 1")] = None,
        sync: SyncOption = None,
        air: AirParamsOption = None,
        duration: Annotated[
            float | None,
            duration_opt("Seconds of learning: simulated, or wall time with --runtime/--team"),
        ] = None,
        hidden: HiddenOption = 32,
        envs: EnvsOption = 8,
        lr: LrOption = 1e-2,
        physics: PhysicsOption = Physics.POINTS,
        target: TargetOption = None,
        out: OutOption = Path("results/learn"),
        fmt: FormatOption = "png",
        runtime: RuntimeFlag = False,
        modes: ModesOption = None,
        net: NetOption = None,
        rate_mbit: RateOption = None,
        max_versions: MaxVersionsOption = None,
        medium: MediumOption = None,
        streams: StreamsOption = None,
        team: TeamOption = None,
        robot: TeamRobotOption = None,
        host: HostOption = None,
        server: ServerOption = None,
        port: PortOption = None,
    ) -> None:
        """Real PPO over the team's network; reward vs time per policy.

        Each robot is a worker; parameter syncs are bulk transfers of the real tensor.
        By default over the simulated channel (reward vs simulated time per policy, with
        the scenario's parameter size on the air); --runtime: real sockets on this host,
        reward vs wall time per mode; --team: this machine's robot of a real team (run
        it on every robot). Means and 95% CIs over the seeds."""
        from coorp.learn import FormationSpec, LearnSpec, PPOConfig

        t_wall = time.monotonic()
        path, sc = load_scenario_arg(scenario)
        real = runtime or team is not None
        if duration is not None and not duration > 0:
            raise UsageError(f"--duration must be positive, got {duration:g}")
        formats = figure_formats(fmt)
        assert out is not None  # it has a default
        check_out_dir(out)
        spec = LearnSpec(
            ppo=PPOConfig(hidden=hidden, envs=envs, lr=lr),
            task=FormationSpec(robots=3, horizon=30, physics=physics.value),
            air_params=air_params(air, sc, real_network=real),
            sync=sync,
            duration_s=duration,
        )
        common: dict[str, Any] = {
            "scenario_path": str(path), "sc": sc, "spec": spec, "target": target, "out": out,
            "formats": formats, "t_wall": t_wall,
        }  # fmt: skip
        if team is not None:
            from coorp.cli._learn._real import learn_robot

            _refuse({"--runtime": runtime, "--policies": policies, "--net": net,
                     "--rate-mbit": rate_mbit, "--medium": medium},
                    "does not apply with --team (a real team's own network)")  # fmt: skip
            learn_robot(
                team=team, robot=robot, host=host, server=server, port=port,
                seeds=_seeds(seeds or "1"), modes=modes, max_versions=max_versions,
                streams=streams, **common,
            )  # fmt: skip
            return
        _refuse({"--robot": robot, "--host": host, "--server": server, "--port": port},
                "applies only with --team")  # fmt: skip
        if runtime:
            from coorp.cli._learn._real import learn_runtime

            if policies is not None:
                raise UsageError(
                    "--policies is for the simulated channel; with --runtime use --modes "
                    "(allowed: coorp, tcp)"
                )
            learn_runtime(
                seeds=_seeds(seeds or "1-3"), modes=modes, net=net, rate_mbit=rate_mbit,
                max_versions=max_versions, medium=None if medium is None else medium.value,
                streams=streams, **common,
            )  # fmt: skip
            return
        _refuse({"--modes": modes, "--net": net, "--rate-mbit": rate_mbit,
                 "--max-versions": max_versions, "--medium": medium, "--streams": streams},
                "applies only with --runtime")  # fmt: skip
        from coorp.cli._learn._channel import learn_channel

        learn_channel(policies=policies or "edca,schedwifi,coorp", seeds=_seeds(seeds or "1-3"),
                      **common)  # fmt: skip


def _seeds(text: str) -> tuple[int, ...]:
    """``1-3``, ``1,2,5`` or ``1-3,7`` (sorted, each once)."""
    from coorp.seeds import seeds_option

    return tuple(seeds_option(text))
