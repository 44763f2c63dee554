"""``benchmarks/sim_speed.py --policies``: what it times and how it reports (not how fast)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import sim_speed


def test_policies_are_timed_against_edca_in_the_same_rounds(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    args = ["--policies", "coorp,oracle", "--scenarios", "crl-2", "--duration", "0.4"]
    assert sim_speed.main([*args, "--repeat", "2", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = {r["policy"]: r for r in doc["rows"]}
    assert list(rows) == ["edca", "coorp", "oracle"]  # EDCA added: every ratio is to it
    assert rows["edca"]["vs_edca"] == rows["edca"]["cpu_vs_edca"] == 1.0
    for r in rows.values():
        assert len(r["wall_s"]) == len(r["cpu_s"]) == 2 and r["scenario"] == "crl-2"
        # The median of two rounds is their mean.
        assert r["wall_per_sim_s"] == pytest.approx(sum(r["wall_s"]) / 2 / 0.4)
    # Per event: each policy's CPU ratio scaled by the work it simulated.
    assert rows["edca"]["cpu_per_event_vs_edca"] == 1.0
    for r in rows.values():
        assert r["events"] > 0 and r["loops"] > 0
        assert r["cpu_per_event_vs_edca"] == pytest.approx(
            r["cpu_vs_edca"] * rows["edca"]["events"] / r["events"]
        )
        assert r["cpu_us_per_event"] == pytest.approx(sum(r["cpu_s"]) / 2 / r["events"] * 1e6)
    assert rows["oracle"]["label"] == "oracle (not deployable)"
    assert not rows["oracle"]["deployable"]
    assert doc["repeat"] == 2 and len(doc["load_average_before"]) == 3


def test_bad_arguments_fail_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_speed.main(["--policies", "nope", "--scenarios", "crl-2"]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().out
    assert sim_speed.main(["--policies", "coorp", "--scenarios", "no-such"]) == 2
    assert "no-such" in capsys.readouterr().out
    assert sim_speed.main(["--policies", "coorp", "--repeat", "0"]) == 2
