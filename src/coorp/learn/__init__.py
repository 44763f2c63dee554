"""Real distributed RL for robot teams: a multi-robot task, PPO on numpy, data-parallel
workers on :mod:`coorp.flow` or Ray, and learning whose parameter syncs ride the
simulated channel (``coorp learn``). See ``docs/learn.md``."""

from coorp.learn._env import FormationBatch, FormationParallelEnv, FormationSpec
from coorp.learn._ppo import PPO, Layout, PPOConfig, Rollout

__all__ = [
    "PPO",
    "FormationBatch",
    "FormationParallelEnv",
    "FormationSpec",
    "Layout",
    "PPOConfig",
    "Rollout",
]
