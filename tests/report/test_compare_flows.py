"""``coorp compare`` with LS flows beside the loop and traffic outside the team: the JSON
and the table report each flow and the other traffic's throughput beside the team's."""

from __future__ import annotations

from rich.console import Console

from coorp.cli._compare import render_comparison
from coorp.report import compare
from crl_scenarios import crl_scenario


def test_json_and_table_report_every_flow_and_the_other_traffic() -> None:
    sc = crl_scenario(
        stations=[{"name": "leader"}, {"name": "r1", "position_m": [3.0, 0.0]},
                  {"name": "r2", "position_m": [0.0, 3.0]}, {"name": "guest"}],
        flows=[{"kind": "bulk", "name": "guest-up", "src": "guest", "dst": "leader"}],
        workload={"workers": ["r1", "r2"], "ls_flows": [
            {"name": "lidar:r1", "src": "r1", "dst": "leader", "size_bytes": 4000,
             "period_us": 50_000.0, "deadline_us": 20_000.0}]},
    )  # fmt: skip
    cmp = compare(sc, ["edca", "coorp"], duration_ns=400_000_000)
    data = cmp.to_json()
    for name in ("edca", "coorp"):
        block = data["policies"][name]
        assert set(block["flow_miss_rate"]) == {"mpc-loop", "lidar:r1"}
        assert block["other_mbps"] == block["flow_mbps"]["guest-up"] > 0
        assert block["violation_rate"] == max(block["flow_miss_rate"].values())
    assert data["reference"]["other_mbps"] > 0
    console = Console(width=200, record=True)
    console.print(render_comparison(cmp))
    text = console.export_text()
    assert "other Mb/s" in text and "per flow:" in text and "lidar:r1" in text
    assert "guest-up" in text
