"""``coorp learn``'s figure on the simulated channel shows both effects of the network:
reward against time per policy, and beside it the MPC loop's miss rate per policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest

from coorp.cli._learn._plot import plot_rewards


def _summary() -> dict[str, Any]:
    grid = [0.0, 1.0, 2.0]
    row = {"reward_mean": [-30.0, -25.0, -20.0], "reward_ci95": [1.0, 1.0, 1.0],
           "seeds": [1, 2, 3], "curves": [{"t_s": [1.0], "staleness": [0]}]}  # fmt: skip
    rates = {"edca": (0.138, 0.011), "schedwifi": (0.001, 0.002), "coorp": (0.0, 0.0)}
    pols = {p: {**row, "violation_rate": {"mean": m, "ci95": c, "n": 3}}
            for p, (m, c) in rates.items()}  # fmt: skip
    return {"grid_s": grid, "policies": pols, "target": -24.0}


@pytest.mark.parametrize("misses", [True, False])
def test_the_miss_panel_shows_each_policys_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, misses: bool
) -> None:
    kept: list[Any] = []
    close = plt.close
    monkeypatch.setattr(plt, "close", kept.append)
    (png,) = plot_rewards(_summary(), tmp_path / "reward", ("png",), "t", misses=misses)
    assert png.stat().st_size > 0
    (fig,) = kept
    try:
        axes = fig.get_axes()
        assert len(axes) == (2 if misses else 1)
        if misses:
            bars = axes[1]
            assert [t.get_text() for t in bars.get_xticklabels()] == ["edca", "schedwifi", "coorp"]
            heights = [round(p.get_height(), 6) for p in bars.patches]
            assert heights == [13.8, 0.1, 0.0]
    finally:
        close(fig)
