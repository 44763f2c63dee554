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
