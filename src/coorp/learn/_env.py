"""A multi-robot formation task on a 2-D plane, written on numpy.

``n`` robots (point masses with damping) start at random places in the square
``[-1, 1]^2`` and must take the slots of a formation (a circle of radius 0.5 around the
origin; robot ``i`` owns slot ``i``) without bumping into each other. Each robot sees its
position, velocity, the vector to its slot and the vector to its nearest neighbour (8
numbers); it picks one of 5 actions (coast, push +x, -x, +y, -y). Its reward per step is
minus its distance to its slot, minus 0.5 whenever another robot is closer than
``collide``. An episode is ``horizon`` steps (truncation, no termination).

:class:`FormationBatch` steps ``envs`` independent copies at once (what a training
worker uses); :class:`FormationParallelEnv` is one copy behind the PettingZoo *parallel*
API (``reset(seed=...) -> (obs, infos)``, ``step(actions) -> (obs, rewards,
terminations, truncations, infos)``, ``agents``, ``observation_space(agent)``...), with
Gymnasium spaces when Gymnasium is installed (``coorp[learn]``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from coorp._errors import UsageError

__all__ = [
    "N_ACTIONS",
    "OBS_DIM",
    "PHYSICS",
    "FormationBatch",
    "FormationParallelEnv",
    "FormationSpec",
    "make_batch",
]

OBS_DIM = 8
N_ACTIONS = 5
_PUSH = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.float32)


@dataclass(frozen=True, slots=True)
class FormationSpec:
    robots: int = 3
    horizon: int = 40
    dt: float = 0.1
    accel: float = 2.0
    damping: float = 0.8
    collide: float = 0.1
    radius: float = 0.5
    #: Who moves the robots: ``points`` (the damped point masses above, numpy) or
    #: ``mujoco`` (MuJoCo bodies with contacts, :mod:`coorp.learn._mujoco`).
    physics: str = "points"

    def __post_init__(self) -> None:
        if self.robots < 1 or self.horizon < 1:
            raise UsageError(f"robots and horizon must be >= 1, got {self.robots}, {self.horizon}")
        if self.physics not in PHYSICS:
            raise UsageError(f"physics must be one of {', '.join(PHYSICS)}, got {self.physics!r}")


class FormationBatch:
    """``envs`` copies of the formation task stepped together (arrays ``(envs, robots, .)``)."""

    def __init__(self, spec: FormationSpec, envs: int) -> None:
        if envs < 1:
            raise UsageError(f"envs must be >= 1, got {envs}")
        self.spec = spec
        self.envs = envs
        n = spec.robots
        angle = 2 * np.pi * np.arange(n) / n
        slots = spec.radius * np.stack([np.cos(angle), np.sin(angle)], axis=1)
        self.slots = (slots if n > 1 else np.zeros((1, 2))).astype(np.float32)
        self.pos = np.zeros((envs, n, 2), np.float32)
        self.vel = np.zeros((envs, n, 2), np.float32)
        self.t = 0

    def reset(self, rng: np.random.Generator) -> np.ndarray:
        self.pos = rng.uniform(-1, 1, size=self.pos.shape).astype(np.float32)
        self.vel[:] = 0
        self.t = 0
        return self.observe()

    def _nearest(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.spec.robots
        if n == 1:
            return np.zeros_like(self.pos), np.full(self.pos.shape[:2], np.inf, np.float32)
        rel = self.pos[:, None, :, :] - self.pos[:, :, None, :]  # (E, i, j, 2): j - i
        dist = np.sqrt((rel**2).sum(-1))
        dist[:, np.arange(n), np.arange(n)] = np.inf
        j = dist.argmin(-1)
        e = np.arange(self.envs)[:, None]
        i = np.arange(n)[None, :]
        return rel[e, i, j], dist[e, i, j]

    def observe(self) -> np.ndarray:
        near, _ = self._nearest()
        to_slot = self.slots[None] - self.pos
        return np.concatenate([self.pos, self.vel, to_slot, near], axis=-1).astype(np.float32)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """Apply ``actions`` (ints, ``(envs, robots)``); returns (obs, rewards, done)."""
        s = self.spec
        acc = _PUSH[actions] * s.accel
        self.vel = (self.vel * s.damping + acc * s.dt).astype(np.float32)
        self.pos = np.clip(self.pos + self.vel * s.dt, -1.5, 1.5).astype(np.float32)
        _, gap = self._nearest()
        dist = np.sqrt(((self.slots[None] - self.pos) ** 2).sum(-1))
        reward = (-dist - 0.5 * (gap < s.collide)).astype(np.float32)
        self.t += 1
        return self.observe(), reward, self.t >= s.horizon


def _mujoco_batch(spec: FormationSpec, envs: int) -> FormationBatch:
    from coorp.learn._mujoco import MujocoFormationBatch  # MuJoCo only when asked for

    return MujocoFormationBatch(spec, envs)


_BATCHES: dict[str, Callable[[FormationSpec, int], FormationBatch]] = {
    "points": FormationBatch,
    "mujoco": _mujoco_batch,
}
#: The physics a formation task may run on (``FormationSpec.physics``).
PHYSICS = tuple(_BATCHES)


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
