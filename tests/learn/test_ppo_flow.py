"""PPO on coorp.flow: learning improves reward; same seed => bit-identical parameters."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest

from coorp.flow import run
from coorp.learn import FormationParallelEnv, FormationSpec, PPOConfig
from coorp.learn._graphs import broadcast_graph, ppo_graph, sampling_graph
from coorp.learn._ppo import PPO
from coorp.transport import iceoryx2_available

TINY = PPOConfig(hidden=16, envs=4, epochs=2, minibatches=2)
SPEC = FormationSpec(robots=2, horizon=20)

needs_iox = pytest.mark.skipif(not iceoryx2_available(), reason="needs iceoryx2 (transport extra)")


def test_ppo_improves_reward_on_a_trivial_task() -> None:
    w = PPO(PPOConfig(hidden=16, envs=8), FormationSpec(robots=1, horizon=30), seed=1)
    p = w.layout.init(0)
    returns = []
    for _ in range(30):
        p, ro = w.local_update(p)
        returns.append(ro.episode_return)
    first, last = np.mean(returns[:5]), np.mean(returns[-5:])
    assert last > first + 5.0, (first, last)


def test_parallel_env_follows_the_pettingzoo_parallel_api() -> None:
    env = FormationParallelEnv(FormationSpec(robots=3, horizon=5))
    obs, infos = env.reset(seed=3)
    assert sorted(obs) == env.possible_agents == env.agents and set(infos) == set(obs)
    assert obs["robot_0"].shape == env.observation_space("robot_0").shape
    steps = 0
    while env.agents:
        obs, rew, term, trunc, _ = env.step({a: 1 for a in env.agents})
        steps += 1
        assert set(rew) == set(term) == set(trunc) == set(env.possible_agents)
    assert steps == 5 and all(trunc.values())
    again, _ = env.reset(seed=3)
    first, _ = FormationParallelEnv(FormationSpec(robots=3, horizon=5)).reset(seed=3)
    assert all(np.array_equal(again[a], first[a]) for a in first)


def test_data_parallel_ppo_learns_inline() -> None:
    out = run(ppo_graph(2, PPOConfig(hidden=16, envs=4), SPEC, seed=1), 16, executor="inline")
    ret = out.results["server"]["returns"]
    assert len(ret) == 15 and np.mean(ret[-4:]) > np.mean(ret[:4])


@needs_iox
def test_same_seed_gives_bit_identical_parameters_across_process_reruns() -> None:
    ref = run(ppo_graph(3, TINY, SPEC, seed=7), 4, executor="inline").results["server"]
    for _ in range(3):
        got = run(ppo_graph(3, TINY, SPEC, seed=7), 4, executor="processes", timeout=60.0)
        server = got.results["server"]
        assert server["params"].tobytes() == ref["params"].tobytes()
        assert server["returns"] == ref["returns"]
    other = run(ppo_graph(3, TINY, SPEC, seed=8), 4, executor="inline").results["server"]
    assert other["params"].tobytes() != ref["params"].tobytes()


@needs_iox
def test_micro_benchmark_graphs_run_on_processes() -> None:
    out = run(broadcast_graph(2, 1 << 20), 3, executor="processes", timeout=60.0)
    assert out.results["source"] == 4  # two gathers of two answers (tags 1 and 2)
    out = run(sampling_graph(2, TINY, SPEC, seed=1), 3, executor="processes", timeout=60.0)
    assert out.results["collector"] == 2 * 2 * TINY.envs * SPEC.robots * SPEC.horizon


@pytest.mark.parametrize("physics", ["points", "mujoco"])
def test_pettingzoo_parallel_api_test_passes(physics: str) -> None:
    pz_test = pytest.importorskip("pettingzoo.test", reason="needs the learn extra")
    pz_test.parallel_api_test(
        FormationParallelEnv(FormationSpec(robots=3, horizon=8, physics=physics)), num_cycles=20
    )


_RAY_SCRIPT = """
import hashlib
from coorp.flow import run
from coorp.learn import FormationSpec, PPOConfig, ppo_graph
cfg = PPOConfig(hidden=16, envs=4, epochs=2, minibatches=2)
out = run(ppo_graph(2, cfg, FormationSpec(robots=2, horizon=20), 7), 3, executor="ray")
print("digest", hashlib.sha256(out.results["server"]["params"].tobytes()).hexdigest())
"""


def test_the_same_graph_on_ray_actors_gives_the_same_parameters() -> None:
    """Ray runs in a child interpreter: its threads and daemons never share this
    process with the tests that fork."""
    pytest.importorskip("ray", reason="needs the ray extra")
    ref = run(ppo_graph(2, TINY, SPEC, seed=7), 3, executor="inline").results["server"]
    want = hashlib.sha256(ref["params"].tobytes()).hexdigest()
    done = subprocess.run(
        [sys.executable, "-c", _RAY_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"digest {want}" in done.stdout
