"""A tiny sweep in network namespaces: raw UDP (bare and with a MAC) and coorp.runtime,
counts and cleanup."""

from __future__ import annotations

import os
import subprocess

import pytest

from coorp.teambench import TeamBenchConfig, run_team
from coorp.teambench._netns import netns_unavailable


def _ours() -> list[str]:
    """This process's benchmark namespaces (named ``coorptb-<pid>-...``): another run on
    the same machine has its own."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    mine = f"coorptb-{os.getpid()}-"
    return [line for line in out.stdout.splitlines() if line.startswith(mine)]


def test_echoes_over_udp_and_coorp_and_nothing_left_behind() -> None:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    before = _ours()
    cfg = TeamBenchConfig(
        robots=[2], rates_hz=[20], sizes_bytes=[1200], carriers=["udp", "udp-mac", "coorp"],
        bulk=["none"], duration_s=0.25, drain_s=1.0,
    )  # fmt: skip
    res = run_team(cfg)
    assert _ours() == before  # namespaces deleted, processes gone with them
    assert [(r["carrier"], r["robots"]) for r in res.rows] == [
        ("udp", 2),
        ("udp-mac", 2),
        ("coorp", 2),
    ]
    for r in res.rows:
        assert r["sent"] == 2 * 5
        # Loopback-class veths, nothing else on the link: every ping comes back.
        assert r["echoed"] == r["sent"], r
        assert 0 < r["rtt_p50_ms"] <= r["rtt_p99_ms"] <= r["rtt_max_ms"]
        assert set(r["cpu_s"]) == {"leader", "r1", "r2"}
    # Coorp reports where an LS message could have gone missing (nothing did here);
    # a raw socket has no counters of its own.
    udp, udp_mac, coorp = res.rows
    assert udp["counters"] == udp_mac["counters"] == {}
    assert coorp["counters"] == {
        "ls_superseded": 0, "ls_expired": 0, "ls_failed": 0, "inbox_dropped": 0,
    }  # fmt: skip
    assert res.network["shaper"] in ("tbf", "htb")
    assert set(res.network["qdiscs_available"]) | set(res.network["qdiscs_missing"]) >= {
        "tbf",
        "htb",
    }


def test_namespace_carriers_refused_with_the_reason_when_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coorp._errors import ConfigurationError
    from coorp.teambench import _netns

    monkeypatch.setattr(_netns, "netns_unavailable", lambda: "not root: (simulated)")
    cfg = TeamBenchConfig(robots=[1], rates_hz=[10], sizes_bytes=[100], carriers=["sim", "udp"])
    with pytest.raises(ConfigurationError, match=r"\['udp'\].*not root: \(simulated\).*sim"):
        run_team(cfg)
