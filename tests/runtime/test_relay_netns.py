"""The relay probed as a hostile local user would, in namespaces (issue 33).

Topology (rt_netns.py): ``a1`` runs one robot's transparent mode (``rt_relay.py agent``:
bulk selector ports 9000-9010, at most 8 relayed connections), ``ld`` the destinations
(``rt_relay.py sink``: 9000 hashes uploads, 9002 sends downloads, 9003 holds
connections; 9001 has no listener). Processes are started with ``nsenter --net`` (not
``ip netns exec``, which remounts /sys and hides the cgroup hierarchy the relay's
connectors need). Checked, by behaviour: a connection made to the relay port directly is
reset and makes no connection anywhere, fds flat; an egress rule that blocks a uid, a gid
or a cgroup blocks it through the relay too; a refused or unreachable destination fails
the program's ``connect()`` with the error it gets without the relay; connections over
the cap are refused at once and counted; after ``kill -9`` of the agent mid-transfer,
both receivers (upload and download) see a reset, never a clean end.

The tests share one topology and agent (module scope); the last one kills the agent.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rt_netns import netns_unavailable
from rt_policy import host_policy, make_cgroup, remove_cgroup
from rt_relay import (
    DIRECT,
    DOWNLOAD,
    HOLD,
    NOBODY,
    NOGROUP,
    REFUSED,
    RELAY,
    UPLOAD,
    RelayNet,
    relay_net,
)

pytestmark = pytest.mark.netns
Net = RelayNet


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with relay_net(tmp_path_factory.mktemp("relay"), max_flows=8) as n:
        yield n


def test_a_direct_connect_to_the_relay_port_is_reset_and_connects_nowhere(net: Net) -> None:
    before, sink_before = net.stats(net.agent), net.stats(net.sink)
    # Another user connects straight to 127.0.0.1:7409 and writes, 20 times.
    r = net.probe("direct", "--count", "20", "--bytes", "1000",
                  "--uid", str(NOBODY), "--gid", str(NOGROUP))  # fmt: skip
    assert all(x in ("ECONNRESET", "EPIPE", "eof") for x in r["results"]), r
    after = net.stats(net.agent)
    assert after["relay"]["not_redirected"] - before["relay"]["not_redirected"] == 20
    assert after["relay"]["accepted"] == before["relay"]["accepted"]  # nothing relayed
    assert after["gate"]["approved"] == before["gate"]["approved"]  # nothing connected
    assert net.stats(net.sink)["ends"] == sink_before["ends"]  # no connection arrived
    assert after["fds"] == before["fds"]  # nothing held


def test_the_programs_egress_policy_holds_through_the_relay(net: Net) -> None:
    """An egress rule against a uid, a gid or a cgroup blocks that program's upload with
    the relay running, as it does without it; another user's goes through intact."""
    cg = make_cgroup()
    # meta skuid / meta skgid / socket cgroupv2 ... tcp dport 9000 reject with tcp reset
    rules: list[dict[str, Any]] = [
        {"uid": NOBODY, "dport": UPLOAD},
        {"gid": NOGROUP, "dport": UPLOAD},
    ]
    if cg is not None:
        rules.append({"cgroup": Path(cg[0]).name, "dport": UPLOAD})
    try:
        with host_policy(net, rules):
            ends = len(net.stats(net.sink)["ends"])
            to = ["--to", net.dest(UPLOAD), "--bytes", "100000"]
            by_uid = net.probe("upload", *to, "--uid", str(NOBODY), "--gid", "100")
            by_gid = net.probe("upload", *to, "--uid", "1000", "--gid", str(NOGROUP))
            allowed = net.probe("upload", *to, "--uid", "1000", "--gid", "1000")
            assert by_uid["connect"] == by_gid["connect"] == "ECONNREFUSED", (by_uid, by_gid)
            assert allowed["connect"] == "ok" and allowed["intact"], allowed
            if cg is not None:
                in_cg = net.probe(
                    "upload", *to, "--uid", "1000", "--gid", "1000", "--cgroup", cg[0]
                )
                assert in_cg["connect"] == "ECONNREFUSED", in_cg
            sink_ends = net.stats(net.sink)["ends"][ends:]
            assert [e["end"] for e in sink_ends] == ["eof"]  # only the allowed upload arrived
            st = net.stats(net.agent)
            assert st["gate"]["upstream_refused"] >= 2
            if cg is not None:
                assert st["gate"]["identities"]["via_connector"] >= 1
    finally:
        if cg is not None:
            remove_cgroup(cg[0])


def test_refused_and_unreachable_fail_the_programs_connect_as_without_the_relay(
    net: Net,
) -> None:
    nowhere = f"{net.topo.subnet}.99"  # no host answers ARP for it
    relayed = net.probe("connect", "--to", net.dest(REFUSED))
    direct = net.probe("connect", "--to", f"{net.topo.addr('ld')}:{DIRECT}")
    assert relayed["connect"] == direct["connect"] == "ECONNREFUSED", (relayed, direct)
    before = net.stats(net.agent)
    relayed = net.probe("connect", "--to", f"{nowhere}:{UPLOAD}")
    after = net.stats(net.agent)
    direct = net.probe("connect", "--to", f"{nowhere}:{DIRECT}")
    # What the gate and the relay counted meanwhile: the story if this ever fails.
    moved = {
        f"{part}.{k}": v - before[part][k]
        for part in ("gate", "relay")
        for k, v in after[part].items()
        if isinstance(v, int) and v != before[part][k]
    }
    assert relayed["connect"] == direct["connect"] == "EHOSTUNREACH", (relayed, direct, moved)


def test_connections_over_the_cap_are_refused_at_once_and_counted(net: Net) -> None:
    before = net.stats(net.agent)["gate"]["over_limit"]
    holder = net.start("a1", [*RELAY, "probe", "hold", "--to", net.dest(HOLD), "--count", "20"],
                       "holder")  # fmt: skip
    results = json.loads(holder.expect_rest("HELD ", 60))
    assert results.count("ok") == 8 and results.count("ECONNREFUSED") == 12, results
    assert net.stats(net.agent)["gate"]["over_limit"] - before == 12
    holder.send("done")
    holder.expect("RESULT ", 30)
    # Room again once they are closed: a new connection is relayed.
    for _ in range(50):  # bounded: the relay notices the closes within a few polls
        if net.stats(net.agent)["relay"]["open"] == 0:
            break
        time.sleep(0.1)
    assert net.probe("upload", "--to", net.dest(UPLOAD), "--bytes", "1000")["intact"]


def test_a_relayed_downloads_acks_leave_in_ac_vi(net: Net) -> None:
    """The relay's acks of a download (the team's bulk data coming to this robot) leave
    with DSCP CS4 (AC_VI), as the simulator's coorp sends them; the data came as the
    sink sent it (CS0). ``[transparent] ack_category`` is AC_VI by default."""
    capture = net.start("a1", [sys.executable, str(Path(__file__).with_name("rt_capture.py")),
                               "--iface", "eth0", "--port", str(DOWNLOAD)], "capture")  # fmt: skip
    capture.expect("READY", 30)
    got = net.probe("download", "--to", net.dest(DOWNLOAD), "--bytes", "20000000")
    capture.send("stop")
    seen = json.loads(capture.expect_rest("RESULT ", 30))
    assert got["connect"] == "ok" and got["end"] == "eof" and got["bytes"] > 0, got
    assert set(seen["acks_out"]) == {str(0x80)}, seen  # CS4 << 2: every pure ack
    assert set(seen["data_in"]) == {"0"}, seen


def test_kill_9_mid_transfer_resets_both_receivers(net: Net) -> None:
    """Last in this module: it kills the agent."""
    ends = len(net.stats(net.sink)["ends"])
    probe = [*RELAY, "probe", "--timeout", "60"]
    up = net.start("a1", [*probe, "upload", "--to", net.dest(UPLOAD), "--bytes", "40000000"],
                   "upload")  # fmt: skip
    down = net.start("a1", [*probe, "download", "--to", net.dest(DOWNLOAD), "--bytes",
                            "20000000", "--rate-mbps", "40"], "download")  # fmt: skip
    up.expect("STARTED", 30)
    down.expect("STARTED", 30)
    for _ in range(100):  # bounded: until the sink holds part of the upload
        st = net.stats(net.agent)
        if st["relay"]["bytes_up"] > 1_000_000:
            break
        time.sleep(0.05)
    net.agent.popen.kill()  # SIGKILL: no code of the agent runs
    net.agent.popen.wait(timeout=10)
    uploaded = json.loads(up.expect_rest("RESULT ", 60))
    downloaded = json.loads(down.expect_rest("RESULT ", 60))
    assert uploaded["end"] in ("ECONNRESET", "EPIPE"), uploaded
    assert downloaded["end"] == "ECONNRESET" and downloaded["bytes"] < 20_000_000, downloaded
    for _ in range(100):  # bounded: the sink records both ends
        got = net.stats(net.sink)["ends"][ends:]
        if len(got) >= 2:
            break
        time.sleep(0.05)
    by_port = {e["port"]: e for e in got}
    assert by_port[UPLOAD]["end"] == "reset" and by_port[UPLOAD]["bytes"] < 40_000_000, got
    assert by_port[DOWNLOAD]["end"] == "reset", got
