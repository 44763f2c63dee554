"""Bulk ``[[flows]]`` in a team run: the team's (``coordinated = true``) go through the
policy's permits and gate; the others are never gated and are reported as other Mb/s."""

from __future__ import annotations

from typing import Any

from coorp.workload import run_crl
from crl_scenarios import crl_scenario

MS = 1_000_000


def _scenario(**flow: Any) -> Any:
    return crl_scenario(
        stations=[{"name": "leader"}, {"name": "r1", "position_m": [3.0, 0.0]},
                  {"name": "r2", "position_m": [0.0, 3.0]}, {"name": "laptop"}],
        flows=[{"kind": "bulk", "name": "download", "src": "leader", "dst": "laptop", **flow}],
        workload={"workers": ["r1", "r2"], "drlc": {"enabled": False}},
    )  # fmt: skip


def test_traffic_outside_the_team_is_not_held_by_the_permits() -> None:
    # No DRLC: nobody ever holds a permit. The leader's download to a non-team station
    # still flows under COORP's permits, and is reported beside the team's (none).
    r = run_crl(_scenario(), "coorp-global", duration_ns=200 * MS)
    assert r.bh_bytes == 0
    assert r.other_bytes["download"] > 1_000_000
    m = r.metrics()
    assert m["other_mbps"] > 40 and m["flow_mbps"]["download"] == m["other_mbps"]
    assert r.policy_stats["permits"]["requests"] == 0


def test_team_bulk_flows_ask_for_permits() -> None:
    r = run_crl(_scenario(src="r1", dst="leader", coordinated=True), "coorp-global",
                duration_ns=200 * MS)  # fmt: skip
    assert r.policy_stats["permits"]["requests"] >= 1
    assert r.bh_bytes > 1_000_000 and r.other_bytes == {}
