"""The formation task itself: its parameters and its numpy physics.

``n`` robots (point masses with damping) start at random places in the square
``[-1, 1]^2`` and must take the slots of a formation (a circle of radius 0.5 around the
origin; robot ``i`` owns slot ``i``) without bumping into each other. Each robot sees its
position, velocity, the vector to its slot and the vector to its nearest neighbour (8
numbers); it picks one of 5 actions (coast, push +x, -x, +y, -y). Its reward per step is
minus its distance to its slot, minus 0.5 whenever another robot is closer than
``collide``. An episode is ``horizon`` steps (truncation, no termination).

:class:`FormationBatch` steps ``envs`` independent copies at once (what a training
worker uses); other physics (:mod:`._mujoco`) subclass it. Which physics runs a task
is :mod:`._env`'s choice (``make_batch``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coorp._errors import UsageError

__all__ = ["N_ACTIONS", "OBS_DIM", "PHYSICS", "PUSH", "FormationBatch", "FormationSpec"]

#: The physics a formation task may run on (``FormationSpec.physics``).
PHYSICS = ("points", "mujoco")
OBS_DIM = 8
N_ACTIONS = 5
PUSH = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.float32)


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
        acc = PUSH[actions] * s.accel
        self.vel = (self.vel * s.damping + acc * s.dt).astype(np.float32)
        self.pos = np.clip(self.pos + self.vel * s.dt, -1.5, 1.5).astype(np.float32)
        _, gap = self._nearest()
        dist = np.sqrt(((self.slots[None] - self.pos) ** 2).sum(-1))
        reward = (-dist - 0.5 * (gap < s.collide)).astype(np.float32)
        self.t += 1
        return self.observe(), reward, self.t >= s.horizon
