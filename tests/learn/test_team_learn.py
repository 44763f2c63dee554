"""``coorp learn --team``: a real team's roles, one per robot, keys and permits from a
team file and no shared clock (the leader hands out the loop grid).

On loopback, every role in its own thread of this process (each with its own
``coorp.runtime`` team, as on its own machine); workers start before the leader, as on
robots switched on in any order. Bounded by model versions; every thread is joined with
a time bound.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_run import run_cli
from coorp.learn import FormationSpec, PPOConfig
from coorp.learn._network import LearnSpec
from coorp.learn._ppo import PPO, Layout
from coorp.learn._robots import leader_report, run_robot, worker_report
from coorp.learn._runtime import ServerResult, WorkerResult, check_syncs
from coorp.learn._sync import merge_mean_delta
from coorp.runtime import LeaderSettings, PermitService, TeamKey, load_team_config, write_team_keys
from coorp.runtime.robot._threaded import _LoopThread
from coorp.scenario import Scenario, load_scenario, resolve_scenario

TINY = LearnSpec(
    ppo=PPOConfig(hidden=8, envs=2, epochs=1, minibatches=1),
    task=FormationSpec(robots=2, horizon=10),
    duration_s=600.0,  # never the bound: max_versions is
    air_params=20_000,
    eval_episodes=2,
)
#: Enough rounds that each worker's learning spans several MPC periods: its report counts
#: the loops sent from its first model to a deadline before the stop, and two rounds of
#: the tiny model on loopback could end within a period or two (0 loops, seen once under
#: a loaded parallel suite).
VERSIONS = 4
ROBOTS = ["leader", "r1", "r2"]


def _scenario() -> Scenario:
    sc = load_scenario(resolve_scenario("crl-5"))
    assert sc.workload is not None
    return sc.model_copy(
        update={"workload": sc.workload.model_copy(update={"workers": ROBOTS[1:]})}
    )


def _free_port() -> int:
    """A port that is free with the next one (a leader binds ``port`` and ``port + 1``)."""
    for _ in range(100):  # bounded: a free pair turns up within a few tries
        with socket.socket() as s, socket.socket() as t:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
            try:
                t.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two consecutive free ports on 127.0.0.1")


class _Permits:
    """The team's permit service (what `coorp leader` runs) on a loop thread."""

    def __init__(self, key: TeamKey, robots: list[str] = ROBOTS) -> None:
        self.runner = _LoopThread("test-permits")
        self.service = PermitService(robots, key, LeaderSettings())
        self.port = self.runner.run(self._start(), 10)

    async def _start(self) -> int:
        _, port = await self.service.start(("127.0.0.1", 0))
        return port

    def close(self) -> None:
        self.runner.run(self.service.close(), 10)
        self.runner.stop()


def _team_file(d: Path, permits_port: int, robots: list[str] = ROBOTS) -> Path:
    path = d / "team.toml"
    path.write_text(
        f'[team]\nname = "t"\nkey_file = "team.key"\nrobots = {robots!r}\n'.replace("'", '"')
        + f'[agent]\nleader = "127.0.0.1:{permits_port}"\n'
    )
    return path


def test_a_team_learns_from_a_team_file_without_a_shared_clock(tmp_path: Path) -> None:
    sc = _scenario()
    keys_for = _team_file(tmp_path, 1)  # the keys first: the permit service needs the team's
    write_team_keys(load_team_config(keys_for), keys_for)
    permits = _Permits(TeamKey.from_file(tmp_path / "team.key"))
    team = _team_file(tmp_path, permits.port)
    leader_port = _free_port()
    results: dict[str, Any] = {}
    said: dict[str, list[str]] = {r: [] for r in ROBOTS}

    def role(robot: str) -> None:
        try:
            results[robot] = run_robot(
                sc, team, robot, mode="coorp", seed=3, spec=TINY, host="127.0.0.1",
                server=f"127.0.0.1:{leader_port}", port=leader_port if robot == "leader" else None,
                out_dir=tmp_path / robot, max_versions=VERSIONS, timeout_s=60,
                on_progress=said[robot].append,
            )  # fmt: skip
        except BaseException as exc:  # reported by the assertion below
            results[robot] = exc

    threads = [
        threading.Thread(target=role, args=(r,), daemon=True) for r in ["r1", "r2", "leader"]
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=180)
    finally:
        permits.close()
    assert not any(t.is_alive() for t in threads), "a role did not finish"
    errors = {r: v for r, v in results.items() if isinstance(v, BaseException)}
    assert not errors, errors
    leader, workers = results["leader"], {w: results[w] for w in ("r1", "r2")}
    # Progress, as the CLI shows it: the handshake, then every version and update.
    assert said["leader"][0].startswith("every worker said hello")
    assert [x.split(" at ")[0] for x in said["leader"][1:]] == [
        f"model version {v}" for v in range(1, VERSIONS + 1)
    ]
    for w in ("r1", "r2"):
        assert said[w][0].startswith("loop grid from the leader (clock offset")
        assert said[w][1:] == [
            f"update {u + 1} sent (trained on model version {u})" for u in range(VERSIONS)
        ]

    # Every sync arrived whole, and the learning is BSP replayed in one process.
    assert isinstance(leader, ServerResult)
    assert all(isinstance(w, WorkerResult) for w in workers.values())
    intact, checked = check_syncs(leader, workers)
    assert intact and checked == 2 * (1 + 2 * VERSIONS + 1)
    versions = np.load(tmp_path / "leader" / "leader.json.npy")
    ppos = [PPO(TINY.ppo, TINY.task, 3 * 1000 + i + 1) for i in range(2)]
    want = [Layout(TINY.ppo.hidden, TINY.ppo.layers).init(TINY.init_seed)]
    for _ in range(VERSIONS):
        want.append(
            merge_mean_delta(want[-1], want[-1], [p.local_update(want[-1])[0] for p in ppos])
        )
    assert all(np.array_equal(a, b) for a, b in zip(versions, want, strict=True))

    # The grid handshake: one host, so each worker's offset is a one-way delay; the two
    # workers' perceptions of a loop reach the leader within a fraction of the period.
    period = round(sc.workload.mpc.period_us * 1e3)  # type: ignore[union-attr]
    for res in workers.values():
        assert res.clock_samples >= 1 and 0 <= res.clock_offset_ns < 50_000_000
    arrivals: dict[int, dict[str, int]] = {}
    for robot, k, _sent, recv in leader.perceptions:
        arrivals.setdefault(k, {})[robot] = recv
    both = [abs(a["r1"] - a["r2"]) for a in arrivals.values() if len(a) == 2]
    assert len(both) >= 8 and float(np.median(both)) < period / 4

    # What each node reports on its own.
    for res in workers.values():
        rep = worker_report(res, round(sc.workload.mpc.deadline_us * 1e3))  # type: ignore[union-attr]
        assert rep["loops"] >= 1 and rep["reaction_ms"]["p50"] is not None
        assert rep["updates"] == VERSIONS
    curve, extra = leader_report(
        leader, versions, TINY, mode="coorp", seed=3, sync="bsp", duration_s=600.0
    )
    assert curve.epochs == VERSIONS and set(extra["perception_above_min_ms"]) == {"r1", "r2"}
    assert all(
        p["p50"] is not None and p["p50"] >= 0 for p in extra["perception_above_min_ms"].values()
    )


@pytest.mark.parametrize("cli_robot", ["leader", "w1"])
def test_the_cli_runs_one_robot_of_the_team(
    cli_robot: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """crl-2 (leader + w1): one robot through ``coorp learn --team``, the other as on
    another machine; the CLI's node prints and writes its own report and manifest."""
    robots = ["leader", "w1"]
    keys_for = _team_file(tmp_path, 1, robots)
    write_team_keys(load_team_config(keys_for), keys_for)
    permits = _Permits(TeamKey.from_file(tmp_path / "team.key"), robots)
    team = _team_file(tmp_path, permits.port, robots)
    port = _free_port()
    other = "w1" if cli_robot == "leader" else "leader"
    spec = LearnSpec(ppo=PPOConfig(hidden=8, envs=2, lr=1e-2), air_params=20_000)
    failed: list[BaseException] = []

    def peer() -> None:
        try:
            run_robot(
                load_scenario(resolve_scenario("crl-2")), team, other, mode="coorp", seed=1,
                spec=spec, host="127.0.0.1", server=f"127.0.0.1:{port}",
                port=port if other == "leader" else None, out_dir=tmp_path / other,
                max_versions=1, timeout_s=60,
            )  # fmt: skip
        except BaseException as exc:
            failed.append(exc)

    where = ["--port", str(port)] if cli_robot == "leader" else ["--server", f"127.0.0.1:{port}"]
    thread = threading.Thread(target=peer, daemon=True)
    thread.start()
    try:
        code, out, err = run_cli(
            capsys, "learn", "crl-2", "--team", str(team), "--robot", cli_robot,
            "--host", "127.0.0.1", *where, "--hidden", "8", "--envs", "2",
            "--air-params", "20000", "--max-versions", "1", "--out", str(tmp_path / cli_robot),
        )  # fmt: skip
        thread.join(timeout=120)
    finally:
        permits.close()
    assert code == 0 and not failed and not thread.is_alive(), (out + err, failed)
    report = json.loads((tmp_path / cli_robot / f"{cli_robot}-report.json").read_text())
    manifest = json.loads((tmp_path / cli_robot / f"{cli_robot}-manifest.json").read_text())
    assert manifest["command"] == "learn --team" and manifest["robot"] == cli_robot
    if cli_robot == "leader":
        assert report["summary"]["policies"]["coorp"]["epochs"]["mean"] == 1
        assert "w1" in report["perception_above_min_ms"] and "perception latency" in out
        assert (tmp_path / "leader" / "reward.png").exists()
    else:
        assert report["updates"] == 1 and report["clock_offset_ms"] is not None
        assert "MPC reaction while learning" in out


def _crl2_team(tmp_path: Path) -> Path:
    """crl-2's robots (leader, w1) with their keys; no permit service (``--modes tcp``)."""
    robots = ["leader", "w1"]
    team = _team_file(tmp_path, 1, robots)
    write_team_keys(load_team_config(team), team)
    return team


def test_a_worker_with_other_settings_is_refused_on_both_ends(tmp_path: Path) -> None:
    """Different learning flags on one robot: the leader names what differs, and the
    worker hears it instead of waiting for a model."""
    from coorp._errors import ConfigurationError

    team, port, sc = _crl2_team(tmp_path), _free_port(), load_scenario(resolve_scenario("crl-2"))
    errors: dict[str, BaseException] = {}

    def role(robot: str, hidden: int) -> None:
        spec = LearnSpec(ppo=PPOConfig(hidden=hidden, envs=2), air_params=20_000)
        try:
            run_robot(
                sc, team, robot, mode="tcp", seed=1, spec=spec, host="127.0.0.1",
                server=f"127.0.0.1:{port}", port=port if robot == "leader" else None,
                out_dir=tmp_path / robot, max_versions=1, timeout_s=60,
            )  # fmt: skip
        except BaseException as exc:
            errors[robot] = exc

    threads = [
        threading.Thread(target=role, args=a, daemon=True) for a in [("leader", 8), ("w1", 16)]
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert isinstance(errors.get("leader"), ConfigurationError)
    assert "w1 runs with other settings than the leader: ppo" in str(errors["leader"])
    assert isinstance(errors.get("w1"), ConfigurationError)
    assert "the leader refused w1" in str(errors["w1"])


def test_a_leader_names_the_workers_it_never_heard_from(tmp_path: Path) -> None:
    from coorp._errors import ConfigurationError

    team = _crl2_team(tmp_path)
    with pytest.raises(ConfigurationError, match="no hello from w1 within 1 s"):
        run_robot(
            load_scenario(resolve_scenario("crl-2")), team, "leader", mode="tcp", seed=1,
            spec=TINY, host="127.0.0.1", server=None, port=_free_port(),
            out_dir=tmp_path / "leader", max_versions=1, timeout_s=1,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--team", "t.toml"], "--team needs --robot"),
        (["--team", "t.toml", "--runtime"], "--runtime does not apply with --team"),
        (["--team", "t.toml", "--net", "loopback"], "--net does not apply with --team"),
        (["--robot", "r1"], "--robot applies only with --team"),
        (["--server", "h:1"], "--server applies only with --team"),
        (["--team", "t.toml", "--robot", "r1", "--host", "10.0.0.2", "--modes", "coorp,tcp"],
         "--modes with --team takes one of coorp, tcp, got 'coorp,tcp'"),
        (["--team", "t.toml", "--robot", "r1", "--host", "10.0.0.2", "--seeds", "1-2"],
         "--seeds with --team takes one seed"),
        (["--team", "t.toml", "--robot", "r1", "--host", "10.0.0.2", "--port", "70000"],
         "--port must be within 0..65534, got 70000"),
    ],
)  # fmt: skip
def test_team_flags_are_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, "learn", "crl-2", *args, "--out", str(tmp_path / "o"))
    assert code == 2 and message in out + err, out + err
    assert not (tmp_path / "o").exists()


def test_run_robot_refuses_what_cannot_work(tmp_path: Path) -> None:
    """A robot without a role, a wildcard address, a worker without the leader's
    address: each named before anything binds."""
    from coorp import UsageError

    sc = _scenario()
    kw: dict[str, Any] = {"mode": "tcp", "seed": 1, "spec": TINY, "out_dir": tmp_path / "o"}
    with pytest.raises(UsageError, match="'r9' has no role in the scenario"):
        run_robot(sc, tmp_path / "t.toml", "r9", host="127.0.0.1", server=None, port=None, **kw)
    with pytest.raises(UsageError, match="not a wildcard"):
        run_robot(sc, tmp_path / "t.toml", "r1", host="0.0.0.0", server="h:1", port=None, **kw)
    with pytest.raises(UsageError, match="--server is needed on a worker"):
        run_robot(sc, tmp_path / "t.toml", "r1", host="127.0.0.1", server=None, port=None, **kw)
    with pytest.raises(UsageError, match="--server 'leaderhost': expected host:port"):
        run_robot(
            sc, tmp_path / "t.toml", "r1", host="127.0.0.1", server="leaderhost", port=None, **kw
        )
    assert not (tmp_path / "o").exists()
