"""Real distributed RL for robot teams: a multi-robot task, PPO on numpy, data-parallel
workers on :mod:`coorp.flow` or Ray, and learning whose parameter syncs ride the
simulated channel or real sockets (``coorp learn``, ``coorp learn --runtime``). See
``docs/learn.md``."""

from coorp.learn._bench import RlBenchConfig, run_rl_bench
from coorp.learn._env import FormationParallelEnv
from coorp.learn._formation import FormationBatch, FormationSpec
from coorp.learn._graphs import (
    Collector,
    Echo,
    ParamServer,
    PPOWorker,
    Sampler,
    Source,
    broadcast_graph,
    ppo_graph,
    sampling_graph,
)
from coorp.learn._netns import netns_unavailable
from coorp.learn._network import LearnCurve, LearnSpec, learn_on_channel, summarize
from coorp.learn._ppo import PPO, Layout, PPOConfig, Rollout
from coorp.learn._robots import leader_report, run_robot, worker_report
from coorp.learn._runtime import MEDIA as RUNTIME_MEDIA
from coorp.learn._runtime import MODES as RUNTIME_MODES
from coorp.learn._runtime import (
    NetworkFactory,
    RuntimeNetwork,
    RuntimeRun,
    RuntimeSpec,
    learn_on_runtime,
)

__all__ = [
    "PPO",
    "RUNTIME_MEDIA",
    "RUNTIME_MODES",
    "Collector",
    "Echo",
    "FormationBatch",
    "FormationParallelEnv",
    "FormationSpec",
    "Layout",
    "LearnCurve",
    "LearnSpec",
    "NetworkFactory",
    "PPOConfig",
    "PPOWorker",
    "ParamServer",
    "RlBenchConfig",
    "Rollout",
    "RuntimeNetwork",
    "RuntimeRun",
    "RuntimeSpec",
    "Sampler",
    "Source",
    "broadcast_graph",
    "leader_report",
    "learn_on_channel",
    "learn_on_runtime",
    "netns_unavailable",
    "ppo_graph",
    "run_rl_bench",
    "run_robot",
    "sampling_graph",
    "summarize",
    "worker_report",
]
