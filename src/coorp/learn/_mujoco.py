"""The formation task on MuJoCo physics (``FormationSpec(physics="mujoco")``).

The same task, observations, actions and reward as :class:`~coorp.learn.FormationBatch`,
but the robots are MuJoCo bodies: spheres of diameter ``collide`` on two slide joints
(x, y) with viscous joint damping, pushed by force actuators. What MuJoCo adds over the
point masses: robots that touch collide (contacts; they cannot pass through each other),
the square's edges are joint limits (a robot stops at them), and the motion between two
decisions is integrated in ``dt / physics_step`` steps.

All ``envs`` copies live in one MuJoCo model, each in its own cell 10 m from the next, so
one ``mj_step`` advances every copy and robots of different copies never meet. The
damping matches the point model's velocity decay per decision (``damping`` per ``dt``:
``c = −ln(damping) / dt`` for a 1 kg body), so both physics ask the same of a policy.
MuJoCo runs single-threaded here: the same actions give bit-identical trajectories.
"""

from __future__ import annotations

import math

import numpy as np

from coorp._optional import import_mujoco
from coorp.learn._formation import PUSH, FormationBatch, FormationSpec

__all__ = ["PHYSICS_STEP_S", "MujocoFormationBatch"]

#: MuJoCo's time step; a decision (``FormationSpec.dt``) spans a whole number of them.
PHYSICS_STEP_S = 0.01
#: Distance between neighbouring copies of the task in the one model (m).
_CELL_M = 10.0
#: The square's half side: the point model clips positions to it.
_EDGE_M = 1.5


def _mjcf(spec: FormationSpec, envs: int) -> str:
    c = -math.log(spec.damping) / spec.dt if 0 < spec.damping < 1 else 0.0
    force = spec.accel  # N on a 1 kg body
    parts = [
        '<mujoco model="coorp-formation">',
        f'<option timestep="{PHYSICS_STEP_S!r}" gravity="0 0 0" integrator="implicitfast"/>',
        f'<default><joint type="slide" limited="true" range="{-_EDGE_M!r} {_EDGE_M!r}" '
        f'damping="{c!r}"/><motor ctrllimited="true" ctrlrange="{-force!r} {force!r}"/>'
        "</default>",
        "<worldbody>",
    ]
    for e in range(envs):
        for i in range(spec.robots):
            parts.append(
                f'<body name="e{e}r{i}" pos="{e * _CELL_M!r} 0 0">'
                f'<joint name="e{e}r{i}x" axis="1 0 0"/><joint name="e{e}r{i}y" axis="0 1 0"/>'
                f'<geom type="sphere" size="{spec.collide / 2!r}" mass="1"/></body>'
            )
    parts.append("</worldbody><actuator>")
    for e in range(envs):
        for i in range(spec.robots):
            parts.append(f'<motor joint="e{e}r{i}x"/><motor joint="e{e}r{i}y"/>')
    parts.append("</actuator></mujoco>")
    return "".join(parts)


class MujocoFormationBatch(FormationBatch):
    """``envs`` copies of the formation task on MuJoCo bodies (arrays ``(envs, robots, .)``)."""

    def __init__(self, spec: FormationSpec, envs: int) -> None:
        super().__init__(spec, envs)
        mujoco = import_mujoco()
        self._mj = mujoco
        self.model = mujoco.MjModel.from_xml_string(_mjcf(spec, envs))
        self.data = mujoco.MjData(self.model)
        self._substeps = max(1, round(spec.dt / PHYSICS_STEP_S))
        self._shape = (envs, spec.robots, 2)

    def _read(self) -> None:
        self.pos = self.data.qpos.reshape(self._shape).astype(np.float32)
        self.vel = self.data.qvel.reshape(self._shape).astype(np.float32)

    def reset(self, rng: np.random.Generator) -> np.ndarray:
        mj = self._mj
        mj.mj_resetData(self.model, self.data)
        self.data.qpos[:] = rng.uniform(-1, 1, size=self._shape).astype(np.float32).ravel()
        mj.mj_forward(self.model, self.data)
        self._read()
        self.t = 0
        return self.observe()

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """Apply ``actions`` (ints, ``(envs, robots)``) for ``dt``; (obs, rewards, done)."""
        s = self.spec
        self.data.ctrl[:] = (PUSH[actions] * s.accel).ravel()
        self._mj.mj_step(self.model, self.data, nstep=self._substeps)
        self._read()
        _, gap = self._nearest()
        dist = np.sqrt(((self.slots[None] - self.pos) ** 2).sum(-1))
        reward = (-dist - 0.5 * (gap < s.collide)).astype(np.float32)
        self.t += 1
        return self.observe(), reward, self.t >= s.horizon
