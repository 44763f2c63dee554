"""Chaos between members, in network namespaces: a distributed flood, a member evicting
sessions, a member flooding the leader, LS through an impaired link (issue 23).

Scenarios in ``rt_attacks.py`` (shared with ``benchmarks/runtime_faults.py``, which runs
them at full load); here with small loads, a few seconds each. Namespaces are named
``c23-<pid>-<n>-*`` and removed, with every process started, in the fixture's
``finally``. Nothing asserts a duration: joins must end coordinated (a join that took
longer than its 5 s timeout, or fell back, fails), counters must add up.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import rt_attacks as attacks
from rt_netns import Topology

from coorp._netns import netns_unavailable

pytestmark = pytest.mark.netns


@pytest.fixture
def topo() -> Iterator[Topology]:
    reason = netns_unavailable("c23")
    if reason is not None:
        pytest.skip(reason)
    t = Topology(agents=5, tag="c23")
    try:
        t.create(rate_mbit=50, queue_ms=100)
        yield t
    finally:
        t.destroy()


def assert_logs_bounded(tmp: Path) -> None:
    worst, kind = attacks.log_lines_per_s_max(tmp.glob("*.log"))
    assert worst <= 5, f"{worst} lines of {kind} within one second"


def test_a_flood_from_150_addresses_does_not_keep_members_out(
    topo: Topology, tmp_path: Path
) -> None:
    r = attacks.distributed_flood(topo, tmp_path, nofile=256, count=2000, probes=2, members=1)
    print(f"NETNS DFLOOD {r}")
    assert [j["mode"] for j in r["joins"]] == ["coordinated"] * 2
    assert r["member_fallbacks"] == 0 and r["member_disconnects"] == 0
    ld = r["leader"]
    assert ld["accept_healthy"] == 1 and ld["fd_exhaustions"] == 0
    assert ld["open_connections"] <= ld["max_connections"] == 256 - 64
    assert ld["dropped_early"] + ld["preauth_evicted"] > 0  # the flood met the budget
    assert r["flood"]["reopened"] > 0
    assert_logs_bounded(tmp_path)


def test_a_member_opening_sessions_at_an_inbox_loses_only_its_own(
    topo: Topology, tmp_path: Path
) -> None:
    r = attacks.eviction(topo, tmp_path, count=600)
    print(f"NETNS EVICT {r}")
    assert r["other_ls_lost"] == 0 and r["a3_lost_counted"] == 0 and r["a3_sessions"] == 1
    # It opened far more than its quota of 64 (the rest closed by the per-source limit).
    assert r["a1_sessions"] == r["attack"]["accepted"] > 2 * 64
    assert r["inbox"]["bulk_ls_sessions_evicted"] >= r["a1_sessions"] - 64
    assert_logs_bounded(tmp_path)


def test_a_members_frame_and_connection_flood_leaves_others_joining(
    topo: Topology, tmp_path: Path
) -> None:
    r = attacks.request_flood(topo, tmp_path, observers=100, probes=2)
    print(f"NETNS REQFLOOD {r}")
    assert [j["mode"] for j in r["joins"]] == ["coordinated"] * 2
    assert r["flood"]["observers_held"] <= 7  # its agent + 7 = the quota of 8
    assert r["leader"]["quota_refused"] >= 100 - 7
    assert r["leader"]["throttled_frames"] > 0
    assert r["leader"]["frames"] < r["flood"]["frames_sent"]
    assert_logs_bounded(tmp_path)


def test_ls_through_an_impaired_link_reorders_without_replays_and_counts_loss(
    topo: Topology, tmp_path: Path
) -> None:
    r = attacks.impaired_ls(topo, tmp_path, seconds=3)
    print(f"NETNS IMPAIRED {r}")
    assert r["link"]["overtaken"] > 0 and r["link"]["dropped"] > 0
    assert r["reorders_as_replay"] == 0 and r["reordered"] == r["link"]["overtaken"]
    assert r["lost_counted"] == r["lost"] == r["link"]["dropped"] == r["sender_lost_counted"]
    assert_logs_bounded(tmp_path)
