"""The formation task behind the PettingZoo API, on the physics a spec asks for.

:func:`make_batch` picks the physics (:mod:`._formation`'s numpy point masses, or
MuJoCo bodies from :mod:`._mujoco`, imported only when asked for);
:class:`FormationParallelEnv` is one copy behind the PettingZoo *parallel* API
(``reset(seed=...) -> (obs, infos)``, ``step(actions) -> (obs, rewards, terminations,
truncations, infos)``, ``agents``, ``observation_space(agent)``...), with Gymnasium
spaces when Gymnasium is installed (``coorp[learn]``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from coorp._errors import UsageError
from coorp.learn._formation import N_ACTIONS, OBS_DIM, FormationBatch, FormationSpec

__all__ = ["FormationParallelEnv", "make_batch"]


def _mujoco_batch(spec: FormationSpec, envs: int) -> FormationBatch:
    from coorp.learn._mujoco import MujocoFormationBatch  # MuJoCo only when asked for

    return MujocoFormationBatch(spec, envs)


_BATCHES: dict[str, Callable[[FormationSpec, int], FormationBatch]] = {
    "points": FormationBatch,
    "mujoco": _mujoco_batch,
}


def make_batch(spec: FormationSpec, envs: int) -> FormationBatch:
    """``envs`` copies of the task on ``spec.physics``."""
    return _BATCHES[spec.physics](spec, envs)


class _Box:
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.dtype = np.float32

    def sample(self) -> np.ndarray:
        return np.zeros(self.shape, np.float32)


class _Discrete:
    def __init__(self, n: int) -> None:
        self.n = n

    def sample(self) -> int:
        return 0


class FormationParallelEnv:
    """One formation task behind the PettingZoo parallel API (agents ``robot_0``...)."""

    metadata: dict[str, Any] = {"name": "coorp_formation_v0", "render_modes": []}  # noqa: RUF012

    def __init__(self, spec: FormationSpec | None = None) -> None:
        self.spec = spec or FormationSpec()
        self.possible_agents = [f"robot_{i}" for i in range(self.spec.robots)]
        self.agents: list[str] = []
        self._batch = make_batch(self.spec, 1)
        self._rng = np.random.default_rng(0)
        try:
            from gymnasium import spaces

            self._obs_space: Any = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
            self._act_space: Any = spaces.Discrete(N_ACTIONS)
        except ImportError:
            self._obs_space, self._act_space = _Box((OBS_DIM,)), _Discrete(N_ACTIONS)

    @property
    def unwrapped(self) -> FormationParallelEnv:
        return self

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        return len(self.possible_agents)

    def observation_space(self, agent: str) -> Any:
        return self._obs_space

    def action_space(self, agent: str) -> Any:
        return self._act_space

    def _obs(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        return {a: obs[0, i].copy() for i, a in enumerate(self.possible_agents)}

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        obs = self._batch.reset(self._rng)
        return self._obs(obs), {a: {} for a in self.agents}

    def step(self, actions: dict[str, int]) -> tuple[dict[str, Any], ...]:
        if not self.agents:
            raise UsageError("step() after the episode ended: call reset() first")
        act = np.array([[int(actions[a]) for a in self.possible_agents]])
        obs, rew, done = self._batch.step(act)
        agents = self.possible_agents
        out_obs = self._obs(obs)
        rewards = {a: float(rew[0, i]) for i, a in enumerate(agents)}
        terms = dict.fromkeys(agents, False)
        truncs = dict.fromkeys(agents, done)
        infos: dict[str, dict[str, Any]] = {a: {} for a in agents}
        if done:
            self.agents = []
        return out_obs, rewards, terms, truncs, infos

    def render(self) -> None:
        return None

    def close(self) -> None:
        return None

    def state(self) -> np.ndarray:
        return self._batch.observe()[0].reshape(-1)
