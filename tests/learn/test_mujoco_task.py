"""The formation task on MuJoCo bodies: same interface as the point masses, plus what
physics adds (contacts, edges that stop a robot), deterministic, and PPO learns on it."""

from __future__ import annotations

import numpy as np
import pytest

from coorp import UsageError
from coorp.learn import PPO, FormationSpec, PPOConfig
from coorp.learn._env import make_batch


def test_unknown_physics_is_refused_naming_the_choices() -> None:
    with pytest.raises(UsageError, match="physics must be one of points, mujoco, got 'bullet'"):
        FormationSpec(physics="bullet")


def _head_on(physics: str) -> tuple[float, bool]:
    """Two robots pushed into each other for 3 s: the smallest gap between them, and
    whether they ended up past each other."""
    batch = make_batch(FormationSpec(robots=2, horizon=40, physics=physics), 1)
    batch.reset(np.random.default_rng(0))
    start = np.array([[[-0.5, 0.0], [0.5, 0.0]]], np.float32)
    if physics == "mujoco":
        batch.data.qpos[:] = start.ravel()  # type: ignore[attr-defined]
        batch._mj.mj_forward(batch.model, batch.data)  # type: ignore[attr-defined]
        batch._read()  # type: ignore[attr-defined]
    else:
        batch.pos = start.copy()
    gap = np.inf
    for _ in range(30):
        batch.step(np.array([[1, 2]]))  # push +x, push -x
        gap = min(gap, float(np.abs(batch.pos[0, 0, 0] - batch.pos[0, 1, 0])))
    return gap, bool(batch.pos[0, 0, 0] > batch.pos[0, 1, 0])


def test_bodies_collide_where_point_masses_pass_through() -> None:
    spec = FormationSpec()
    assert _head_on("points")[1]  # they pass through each other
    gap, crossed = _head_on("mujoco")
    assert not crossed and gap > 0.9 * spec.collide  # they touch and stop


def test_the_edge_stops_a_robot_and_free_motion_matches_the_point_model() -> None:
    mj = make_batch(FormationSpec(robots=1, horizon=60, physics="mujoco"), 1)
    pts = make_batch(FormationSpec(robots=1, horizon=60), 1)
    mj.reset(np.random.default_rng(3))
    pts.reset(np.random.default_rng(3))
    for _ in range(3):  # 0.3 s of pushing: same start, similar speed
        mj.step(np.array([[3]]))
        pts.step(np.array([[3]]))
    assert np.array_equal(mj.pos[..., 0], pts.pos[..., 0])  # no push along x: no motion
    assert 0.8 < mj.vel[0, 0, 1] / pts.vel[0, 0, 1] < 1.0  # damping matched per decision
    for _ in range(50):
        mj.step(np.array([[3]]))
    assert 1.45 < mj.pos[0, 0, 1] < 1.51  # held at the edge (a joint limit)


def test_same_seed_and_actions_give_bit_identical_trajectories() -> None:
    spec = FormationSpec(robots=3, horizon=10, physics="mujoco")
    runs = []
    for _ in range(2):
        b = make_batch(spec, 4)
        obs = [b.reset(np.random.default_rng(7))]
        acts = np.random.default_rng(1)
        for _ in range(10):
            obs.append(b.step(acts.integers(0, 5, (4, 3)))[0])
        runs.append(np.stack(obs))
    assert np.array_equal(runs[0], runs[1])


def test_ppo_learns_on_mujoco_and_is_bit_identical_per_seed() -> None:
    spec = FormationSpec(robots=2, horizon=20, physics="mujoco")
    cfg = PPOConfig(hidden=16, envs=4, epochs=2, minibatches=2, lr=1e-2)
    params = []
    for _ in range(2):
        ppo = PPO(cfg, spec, seed=5)
        p = ppo.layout.init(0)
        for _ in range(3):
            p, _ro = ppo.local_update(p)
        params.append(p)
    assert np.array_equal(params[0], params[1])
    judge = PPO(cfg, spec, seed=1)
    assert np.isfinite(judge.evaluate(params[0], episodes=4))
    assert not np.array_equal(params[0], PPO(cfg, spec, seed=5).layout.init(0))


def test_every_physics_a_spec_accepts_has_a_batch() -> None:
    from coorp.learn._env import _BATCHES
    from coorp.learn._formation import PHYSICS

    assert tuple(_BATCHES) == PHYSICS
