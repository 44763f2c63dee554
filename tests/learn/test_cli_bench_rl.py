"""``coorp bench rl`` end to end on the flow contender (Ray's start-up is too slow here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coorp.cli import main
from coorp.transport import iceoryx2_available


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    code = info.value.code
    return (0 if code is None else int(code)), out + err


@pytest.mark.skipif(not iceoryx2_available(), reason="needs iceoryx2 (transport extra)")
def test_bench_rl_flow_only_writes_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "rl.json"
    code, out = _cli(
        capsys, "bench", "rl", "--contenders", "flow", "--workers", "1",
        "--bcast-workers", "1", "--bcast-mb", "0.1", "--iterations", "2", "--reruns", "2",
        "--hidden", "8", "--json", str(path),
    )  # fmt: skip
    assert code == 0, out
    assert "PPO iteration time" in out and "broadcast+gather" in out
    res = json.loads(path.read_text())
    assert res["ppo"][0]["flow_bit_identical_reruns"] is True
    assert res["broadcast"][0]["mb"] == 0.1


def test_bench_rl_refuses_an_unknown_contender(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _cli(capsys, "bench", "rl", "--contenders", "flow,dask")
    assert code == 2 and "unknown contender(s) ['dask']" in out


def test_learn_prints_table_and_writes_figure_and_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = _cli(
        capsys, "learn", "crl-2", "--policies", "edca,coorp", "--seeds", "1-2",
        "--duration", "3", "--hidden", "8", "--envs", "2", "--air-params", "model",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0, out
    assert "learning over the air: crl-2, BSP" in out and "time to target" in out
    res = json.loads((tmp_path / "learn.json").read_text())
    assert set(res["policies"]) == {"edca", "coorp"}
    assert res["policies"]["edca"]["seeds"] == [1, 2]
    assert (tmp_path / "reward.png").stat().st_size > 0


def test_learn_counts_the_scenarios_parameters_on_the_air_by_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The scenario says what travels per sync (crl-2: 40 MB); the learned model stays
    small. --air-params model / N choose otherwise."""
    args = ("learn", "crl-2", "--policies", "coorp", "--seeds", "1", "--duration", "1",
            "--hidden", "8", "--envs", "2")  # fmt: skip
    for extra, air_bytes in (((), 40_000_000), (("--air-params", "1000"), 4000)):
        code, out = _cli(capsys, *args, *extra, "--out", str(tmp_path))
        assert code == 0, out
        cfg = json.loads((tmp_path / "learn.json").read_text())["config"]
        assert cfg["air_bytes"] == air_bytes
    code, out = _cli(capsys, *args, "--air-params", "model", "--out", str(tmp_path))
    cfg = json.loads((tmp_path / "learn.json").read_text())["config"]
    assert code == 0 and cfg["air_bytes"] == 4 * cfg["params"] < 40_000
    code, out = _cli(capsys, *args, "--air-params", "huge")
    assert code == 2 and "--air-params 'huge': give scenario, model or a parameter count" in out


def test_learn_refuses_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _cli(capsys, "learn", "crl-2", "--sync", "bulk")
    assert code == 2 and "'--sync'" in out and "'bsp', 'ssp', 'asp'" in out
    code, out = _cli(capsys, "learn", "crl-2", "--seeds", "3-1")
    assert code == 2 and "is empty" in out
    code, out = _cli(capsys, "learn", "crl-2", "--physics", "bullet")
    assert code == 2 and "'--physics'" in out and "'points', 'mujoco'" in out


def test_learn_on_the_mujoco_task(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out = _cli(
        capsys, "learn", "crl-2", "--policies", "coorp", "--seeds", "1", "--physics", "mujoco",
        "--duration", "3", "--hidden", "8", "--envs", "2", "--air-params", "model",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0, out
    res = json.loads((tmp_path / "learn.json").read_text())
    assert res["config"]["physics"] == "mujoco" and res["policies"]["coorp"]["epochs"]["mean"] >= 1


def test_learn_asp_reports_staleness(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out = _cli(
        capsys, "learn", "crl-5", "--policies", "edca", "--seeds", "1", "--sync", "asp",
        "--duration", "3", "--hidden", "8", "--envs", "2", "--air-params", "model",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0, out
    row = json.loads((tmp_path / "learn.json").read_text())["policies"]["edca"]
    assert row["sync"] == "asp" and row["staleness_max"] >= 1
    assert len(row["curves"][0]["staleness"]) == len(row["curves"][0]["t_s"])
    assert (tmp_path / "reward.png").stat().st_size > 0


def test_steady_state_timing_reads_the_sinks_reaction_spacing() -> None:
    from coorp.learn._bench import _first, _steady

    extra = {"react_starts_s": {"server": [0.0, 0.5, 0.6, 0.7, 0.8]}}
    assert _steady(extra, "server", 9.9, 5) == pytest.approx(0.1)  # tags 1..4
    assert _first(extra, "server") == pytest.approx(0.5)
    assert _steady({}, "server", 1.0, 4) == 0.25  # no reaction times: end to end
