"""The legend of a sweep figure lies inside the figure: the demo's one-panel figure once
set five columns below a 4.6-inch panel and cut "oracle (not deployable)" off."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from coorp.sweep import sweep_figures

POLICIES = ["edca", "schedwifi", "coorp", "coorp-paper", "coorp-global", "coorp-local", "oracle"]


def _agg(scenarios: list[str]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for s in scenarios:
        for i, p in enumerate(POLICIES):
            for metric, mean in (("violation_rate", 0.01 * i), ("utilization", 0.5 + 0.05 * i)):
                rows.append({"scenario": s, "overrides": "", "policy": p, "metric": metric,
                             "mean": mean, "ci95": 0.01, "n": 5, "team_size": 4})  # fmt: skip
    return rows


@pytest.mark.parametrize("panels", [1, 2, 3])
def test_the_legend_is_inside_the_figure(panels: int) -> None:
    fig = sweep_figures(_agg([f"crl-{k}" for k in range(panels)]))["miss_vs_utilization"]
    try:
        fig.canvas.draw()
        (legend,) = fig.legends
        box, page = legend.get_window_extent(), fig.bbox
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0
        labels = [t.get_text() for t in legend.get_texts()]
        assert "oracle (not deployable)" in labels and len(labels) == len(POLICIES)
    finally:
        plt.close(fig)
