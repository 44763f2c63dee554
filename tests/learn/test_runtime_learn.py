"""``coorp learn --runtime``: learning over real sockets, every robot a process.

Bounded by model versions (``max_versions``), never by wall-clock time; every wait inside
a run is bounded (``RuntimeSpec.timeout_s``) and every process and namespace is removed
in the orchestrator's ``finally``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_run import run_cli
from coorp import UsageError
from coorp.learn import FormationSpec, PPOConfig
from coorp.learn._network import LearnSpec
from coorp.learn._ppo import PPO, Layout
from coorp.learn._runtime import Model, RuntimeSpec, encode, learn_on_runtime
from coorp.learn._sync import merge_mean_delta
from coorp.scenario import Scenario, load_scenario, resolve_scenario

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "learn_sync_timeline.py"
_spec = importlib.util.spec_from_file_location("learn_sync_timeline", _BENCH)
assert _spec is not None and _spec.loader is not None
_timeline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_timeline)

TINY = LearnSpec(
    ppo=PPOConfig(hidden=8, envs=2, epochs=1, minibatches=1),
    task=FormationSpec(robots=2, horizon=10),
    duration_s=600.0,  # never the bound: max_versions is
    air_params=50_000,  # 200 kB per sync: several chunks, gated and paced
    eval_episodes=4,
)
VERSIONS = 2


def _two_workers() -> Scenario:
    sc = load_scenario(resolve_scenario("crl-5"))
    assert sc.workload is not None
    wl = sc.workload.model_copy(update={"workers": ["r1", "r2"]})
    return sc.model_copy(update={"workload": wl})


def _replay(seed: int, workers: int, spec: LearnSpec = TINY) -> list[np.ndarray]:
    """BSP in one process with the same PPO, seeds and merge: what the runtime must give."""
    ppos = [PPO(spec.ppo, spec.task, seed * 1000 + i + 1) for i in range(workers)]
    versions = [Layout(spec.ppo.hidden, spec.ppo.layers).init(spec.init_seed)]
    for _ in range(VERSIONS):
        base = versions[-1]
        versions.append(merge_mean_delta(base, base, [p.local_update(base)[0] for p in ppos]))
    return versions


@pytest.mark.parametrize("mode", ["coorp", "tcp"])
def test_loopback_syncs_arrive_whole_and_learning_matches_the_replay(
    mode: str, tmp_path: Path
) -> None:
    sc = _two_workers()
    rt = RuntimeSpec(net="loopback", max_versions=VERSIONS, timeout_s=60)
    run = learn_on_runtime(sc, mode, 3, TINY, rt, workdir=tmp_path)
    # Every message: hello, models v0..v1, updates, stop — digests equal at both ends.
    assert run.syncs_intact and run.syncs_checked == 2 * (1 + 2 * VERSIONS + 1)
    assert run.curve.epochs == VERSIONS and run.final_changed
    d = tmp_path / f"{mode}-seed3"
    versions = np.load(d / "leader.json.npy")
    # Recompute each model message from the leader's tensor: the worker received exactly it.
    for w in ("r1", "r2"):
        got = {
            (k, v): dg for _p, k, v, dg, _n in json.loads((d / f"{w}.json").read_text())["received"]
        }
        for v in range(VERSIONS):
            want = encode(Model(v), versions[v], pad_to=TINY.air_bytes())
            assert got[("model", v)] == hashlib.sha256(want).hexdigest()
    # Same algorithm code everywhere: bit-identical to BSP replayed in one process.
    for a, b in zip(versions, _replay(3, 2), strict=True):
        assert np.array_equal(a, b)
    if mode == "coorp":
        assert run.leader["max_holders"] == 1 and run.leader["grants"] >= 2 * VERSIONS
        # The leader hands its models to the transport at once (one sender per peer),
        # yet its bytes go out one message at a time (loopback is ``split``: the
        # leader's downlink has a permit of its own, the workers' uploads share one).
        _one_at_a_time_on_the_air(d, [["leader"], ["r1", "r2"]])
        # The timeline benchmark takes the run apart: its parts add up to each round.
        t = _timeline.analyse(d, 50.0)
        assert t["rounds"] == VERSIONS and t["messages"] == 4
        parts = t["start_s"] + t["writing_s"] + t["handover_s"] + t["end_s"]
        assert parts == pytest.approx(t["round_s"], abs=1e-6)


def _one_at_a_time_on_the_air(run_dir: Path, queues: list[list[str]]) -> None:
    """Within each permit queue (robots sharing a permit), no message's first byte is
    written before the previous message's last one: early hand-over (the turn and the
    permit pass at the last byte written, the next message already connected) never
    lets two messages write at once. Every role shares the host's monotonic clock."""
    for robots in queues:
        stretches = []
        for robot in robots:
            res = json.loads((run_dir / f"{robot}.json").read_text())
            for r in res["receipts"]:
                assert r["start_ns"] <= r["first_write_ns"] <= r["last_write_ns"] <= r["end_ns"]
                stretches.append((r["first_write_ns"], r["last_write_ns"], robot, r["kind"]))
        stretches.sort()
        assert len(stretches) >= 4
        for prev, nxt in itertools.pairwise(stretches):
            assert nxt[0] >= prev[1], f"{nxt} began writing before {prev} ended"


def test_the_mujoco_task_learns_over_sockets_as_in_one_process(tmp_path: Path) -> None:
    """The physics travels in the task's spec: every role steps MuJoCo bodies, and the
    versions are BSP replayed in one process on the same physics."""
    import dataclasses

    spec = dataclasses.replace(TINY, task=dataclasses.replace(TINY.task, physics="mujoco"))
    rt = RuntimeSpec(net="loopback", max_versions=VERSIONS, timeout_s=60)
    run = learn_on_runtime(_two_workers(), "tcp", 3, spec, rt, workdir=tmp_path)
    assert run.syncs_intact and run.curve.epochs == VERSIONS
    versions = np.load(tmp_path / "tcp-seed3" / "leader.json.npy")
    for a, b in zip(versions, _replay(3, 2, spec), strict=True):
        assert np.array_equal(a, b)
    assert not np.array_equal(versions[-1], _replay(3, 2)[-1])  # not the point-mass model


@pytest.mark.netns
@pytest.mark.parametrize("medium", ["split", "shared"])
def test_netns_run_is_intact_and_cleans_up(medium: str, tmp_path: Path) -> None:
    from coorp.learn._netns import netns_unavailable

    why = netns_unavailable()
    if why is not None:
        pytest.skip(why)
    import subprocess

    rt = RuntimeSpec(net="netns", medium=medium, max_versions=1, timeout_s=60)
    run = learn_on_runtime(_two_workers(), "coorp", 1, TINY, rt, workdir=tmp_path)
    assert run.syncs_intact and run.final_changed and run.curve.epochs == 1
    if medium == "shared":  # one queue, one permit: the leader's models and the uploads
        _one_at_a_time_on_the_air(tmp_path / "coorp-seed1", [["leader", "r1", "r2"]])
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"coorpl-{__import__('os').getpid()}-" not in left


def test_cli_runtime_writes_results_and_manifest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run_cli(
        capsys, "learn", "crl-2", "--runtime", "--net", "loopback", "--modes", "tcp",
        "--seeds", "1", "--max-versions", "1", "--hidden", "8", "--envs", "2",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0, out + err
    res = json.loads((tmp_path / "learn.json").read_text())
    row = res["policies"]["tcp"]
    assert row["runtime"]["syncs_intact"] is True and row["epochs"]["mean"] == 1
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["command"] == "learn --runtime" and man["modes"] == ["tcp"] and man["git"]
    assert (tmp_path / "reward.png").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--modes", "coorp,udp"], "unknown mode(s) ['udp'] for --modes; allowed: coorp, tcp"),
        (["--sync", "ssp"], "--sync ssp is simulated only; --runtime supports bsp and asp"),
        (["--net", "wifi"], "'wifi' is not one of 'netns', 'loopback'"),
        (["--rate-mbit", "0"], "--rate-mbit must be positive, got 0.0"),
        (["--max-versions", "0"], "Invalid value for '--max-versions'"),
        (["--policies", "edca"], "with --runtime use --modes (allowed: coorp, tcp)"),
        (["--duration", "-1"], "--duration must be positive, got -1"),
        (["--medium", "air"], "'air' is not one of 'split', 'shared', 'wifi'"),
        (["--medium", "wifi", "--net", "loopback"], "--net loopback has no channel"),
        (["--medium", "wifi", "--rate-mbit", "10"], "--rate-mbit shapes the wired media"),
        (["--streams", "pooled"], "'pooled' is not one of 'fresh', 'reuse'"),
    ],
)
def test_runtime_flags_are_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    code, out, err = run_cli(
        capsys, "learn", "crl-2", "--runtime", *args, "--out", str(tmp_path / "o")
    )
    assert code == 2 and message in out + err, out + err
    assert not (tmp_path / "o").exists()  # refused before anything ran or was written


def test_the_emulated_channel_is_the_callers_to_build() -> None:
    with pytest.raises(UsageError, match="cannot run with --net loopback"):
        RuntimeSpec(net="loopback", medium="wifi")
    rt = RuntimeSpec(medium="wifi", max_versions=1)
    with pytest.raises(UsageError, match="the emulated channel is built by the caller"):
        learn_on_runtime(_two_workers(), "tcp", 1, TINY, rt, workdir=Path("/nonexistent"))


class _Recorded:
    """A network on loopback that records what the orchestrator asked of it."""

    def __init__(self, calls: list[str]) -> None:
        from coorp.learn._runtime import wired

        self.calls = calls
        make = wired(net="loopback", medium="split", rate_mbit=1.0, queue_ms=1.0,
                     downlink=False)  # fmt: skip
        self.inner = make("leader", ["r1", "r2"], 0)

    def addr(self, robot: str) -> str:
        self.calls.append(f"addr {robot}")
        return "127.0.0.1"

    def popen(self, robot: str, argv: Any, env: Any, log: Path) -> Any:
        self.calls.append(f"popen {robot} {argv[3]}")
        return self.inner.popen(robot, argv, env, log)

    def finish(self) -> dict[str, Any]:
        self.calls.append("finish")
        return {"frames_out": 7}

    def destroy(self) -> None:
        self.calls.append("destroy")
        self.inner.destroy()


def test_a_run_takes_the_network_it_is_given(tmp_path: Path) -> None:
    calls: list[str] = []
    seeds: list[int] = []

    def make(leader: str, workers: Any, seed: int) -> _Recorded:
        assert (leader, list(workers)) == ("leader", ["r1", "r2"])
        seeds.append(seed)
        return _Recorded(calls)

    rt = RuntimeSpec(net="netns", medium="wifi", max_versions=1, timeout_s=60)
    run = learn_on_runtime(_two_workers(), "coorp", 2, TINY, rt, workdir=tmp_path, network=make)
    assert run.syncs_intact and run.curve.epochs == 1
    assert run.network == {"frames_out": 7} and seeds == [2]
    started = [c.split()[1:] for c in calls if c.startswith("popen")]
    assert started == [["leader", "permits"], ["leader", "server"], ["r1", "worker"],
                       ["r2", "worker"]]  # fmt: skip
    assert calls[-2:] == ["finish", "destroy"]


def test_runtime_only_flags_need_runtime(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "learn", "crl-2", "--modes", "tcp")
    assert code == 2 and "--modes applies only with --runtime" in out + err
    code, out, err = run_cli(capsys, "learn", "crl-2", "--streams", "reuse")
    assert code == 2 and "--streams applies only with --runtime" in out + err


@pytest.mark.netns
def test_cli_runtime_on_the_emulated_air_delivers_model_versions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import os
    import subprocess

    from coorp.emulate import emulation_unavailable

    why = emulation_unavailable()
    if why is not None:
        pytest.skip(why)
    code, out, err = run_cli(
        capsys, "learn", "crl-2", "--runtime", "--medium", "wifi", "--modes", "coorp,tcp",
        "--seeds", "1", "--max-versions", "1", "--hidden", "8", "--envs", "2",
        "--air-params", "50000", "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0, out + err
    res = json.loads((tmp_path / "learn.json").read_text())
    assert res["config"]["medium"] == "wifi"
    for mode in ("coorp", "tcp"):
        row = res["policies"][mode]
        assert row["runtime"]["syncs_intact"] is True and row["epochs"]["mean"] == 1
        (run,) = row["runtime"]["runs"]
        assert run["final_changed"]
        air = run["network"]
        # The syncs crossed the channel as best effort, the MPC loop's LS datagrams
        # (DSCP CS6) as voice.
        assert air["frames_out"] > 0 and air["by_ac"]["BE"] > 0 and air["by_ac"]["VO"] > 0
    assert "emulated channel: real time held in" in out
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"coorpla-{os.getpid()}-" not in left
