"""SimResult: summary JSON, tables, and the per-flow / per-station numbers, checked by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coorp import ScenarioError, UsageError
from coorp.scenario import AccessCategory, Scenario, parse_scenario
from coorp.sim import FlowStats, SimResult, Simulation, StationStats, simulate

US = 1_000


def _scenario(flows: list[dict], duration_s: float = 0.02, **kw: object) -> Scenario:
    return parse_scenario({
        "duration_s": duration_s,
        "phy": {"width_mhz": 20, "spatial_streams": 1},
        "links": {"mcs": 7},
        "mac": {"edca": {ac: {"cw_min": 0, "cw_max": 0} for ac in ("VO", "VI", "BE", "BK")}},
        "stations": [{"name": "ap"}, {"name": "sta"}],
        "flows": flows,
        **kw,
    })  # fmt: skip


@pytest.fixture(scope="module")
def result() -> SimResult:
    # Two 1000-byte VO datagrams at 0 and 5 ms (one 1028-byte fragment each) and a 3000-byte
    # bulk transfer with TCP acks at 10 ms, on an otherwise idle channel: no contention.
    flows = [
        {"kind": "datagram", "name": "ls", "src": "sta", "dst": "ap", "size_bytes": 1000,
         "times_us": [0, 5000]},
        {"kind": "bulk", "name": "bh", "src": "sta", "dst": "ap", "total_bytes": 3000,
         "start_us": 10000},
    ]  # fmt: skip
    return simulate(_scenario(flows), trace=True)


def test_flow_numbers(result: SimResult) -> None:
    ls, bh, ack = result.flows["ls"], result.flows["bh"], result.flows["bh:ack"]
    assert list(result.flows) == ["ls", "bh", "bh:ack"]
    assert (ls.kind, ls.src, ls.dst, ls.category) == ("datagram", "sta", "ap", "VO")
    assert (bh.kind, bh.category) == ("bulk", "BE")
    assert (ack.kind, ack.src, ack.dst, ack.category) == ("tcp-ack", "ap", "sta", "BE")
    # Datagram: 2 messages x 1 fragment of 1000 + 8 (UDP) + 20 (IP) bytes.
    assert (ls.sent_packets, ls.delivered_packets, ls.delivered_bytes) == (2, 2, 2 * 1028)
    assert (ls.messages_sent, ls.messages_delivered, ls.messages_lost) == (2, 2, 0)
    # Each message: AIFS is over (or 34 µs at t = 0), then 176 + 16 + 28 = 220 µs.
    assert ls.latency_ms_p50 == pytest.approx((0.254 + 0.220) / 2)
    assert ls.latency_ms_max == pytest.approx(0.254)
    assert bh.delivered_bytes == 3000 and bh.messages_sent == 0
    assert bh.latency_ms_p50 is None
    assert ack.delivered_packets == 1  # one TCP ack per two segments
    secs = result.duration_ns / 1e9
    for f in result.flows.values():
        assert f.throughput_mbps == pytest.approx(f.delivered_bytes * 8 / secs / 1e6)
    assert result.total_throughput_mbps == pytest.approx((2 * 1028 + 3000) * 8 / secs / 1e6)


def test_station_numbers(result: SimResult) -> None:
    sta, ap = result.stations["sta"], result.stations["ap"]
    assert (sta.tx_attempts, sta.tx_success, sta.tx_failed, sta.dropped_packets) == (3, 3, 0, 0)
    assert (ap.tx_attempts, ap.tx_success) == (1, 1)
    assert result.trace is not None
    by_station: dict[str, int] = {"sta": 0, "ap": 0}
    for e in result.trace:
        by_station[e[3][0]] += e[1] - e[0]
    assert sta.airtime_ns == by_station["sta"]
    assert ap.airtime_ns == by_station["ap"]
    assert sta.airtime_fraction == pytest.approx(sta.airtime_ns / result.duration_ns)
    # Only LS packets record a hardware depth: the second message found an empty ring too.
    assert result.ls_hw_depths["sta"].tolist() == [0, 0]
    assert (sta.ls_hw_depth_mean, sta.ls_hw_depth_max) == (0.0, 0)
    assert ap.ls_hw_depth_mean is None and result.ls_hw_depths["ap"].size == 0


def test_message_table(result: SimResult) -> None:
    m = result.messages
    assert set(m) == {"flow", "msg_id", "size_bytes", "created_ns", "delivered_ns",
                      "latency_ns", "lost", "hw_depth_first"}  # fmt: skip
    assert m["flow"].tolist() == ["ls", "ls"]
    assert m["msg_id"].tolist() == [0, 1]
    assert m["created_ns"].tolist() == [0, 5_000 * US]
    assert m["delivered_ns"].tolist() == [254 * US, 5_220 * US]
    assert np.array_equal(m["latency_ns"], m["delivered_ns"] - m["created_ns"])
    assert m["lost"].dtype == bool and not m["lost"].any()
    assert m["created_ns"].dtype == np.int64


def test_summary_is_json_and_consistent(result: SimResult) -> None:
    s = json.loads(json.dumps(result.summary()))
    assert s["seed"] == result.seed and s["duration_s"] == 0.02
    assert s["channel"]["exchanges"] == 4 and s["channel"]["collisions"] == 0
    ch = result.channel
    assert s["channel"]["busy_fraction"] == pytest.approx(ch.busy_ns / result.duration_ns)
    assert set(s["flows"]) == set(result.flows)
    assert set(s["flows"]["ls"]) == set(FlowStats.__slots__)
    assert set(s["stations"]["sta"]) == set(StationStats.__slots__)
    assert s["throughput_mbps"] == pytest.approx(result.total_throughput_mbps)
    for key in ("wall_s", "sim_s_per_wall_s", "events_processed"):
        assert key in s


def test_tables_are_columnar(result: SimResult) -> None:
    t = result.tables()
    assert set(t) == {"messages", "flows", "stations"}
    assert t["flows"]["name"] == ["ls", "bh", "bh:ack"]
    assert all(len(col) == 3 for col in t["flows"].values())
    assert t["stations"]["name"] == ["ap", "sta"]
    assert t["messages"] is result.messages


@pytest.mark.parametrize("datagram_first", [False, True])
def test_flow_named_like_a_tcp_ack_flow(datagram_first: bool) -> None:
    flows = [
        {"kind": "bulk", "name": "up", "src": "sta", "dst": "ap", "total_bytes": 30000},
        {"kind": "datagram", "name": "up:ack", "src": "sta", "dst": "ap", "size_bytes": 100,
         "times_us": [10]},
    ]  # fmt: skip
    if datagram_first:
        flows.reverse()
    # The datagram would share its name (and results row) with the TCP acks of "up": the
    # scenario is refused when it is loaded, at the datagram's name.
    with pytest.raises(ScenarioError) as info:
        _scenario(flows, duration_s=0.1)
    dg, bulk = (0, 1) if datagram_first else (1, 0)
    assert str(info.value).splitlines()[1:] == [
        f"  - flows[{dg}].name = 'up:ack': is the name of the TCP-ack flow of bulk flow 'up' "
        f"(flows[{bulk}]); rename this flow, or set tcp_acks = false on 'up'"
    ]


def test_datagram_flow_ending_in_ack_is_a_datagram() -> None:
    flows = [{"kind": "datagram", "name": "cmd:ack", "src": "sta", "dst": "ap",
              "size_bytes": 100, "times_us": [10]}]  # fmt: skip
    r = simulate(_scenario(flows))
    assert r.flows["cmd:ack"].kind == "datagram"
    assert r.total_throughput_mbps > 0


def test_a_flow_named_like_an_ack_flow_of_a_bulk_flow_without_acks_is_allowed() -> None:
    # "up" sends no TCP acks, so there is no "up:ack" flow to collide with.
    flows = [
        {"kind": "bulk", "name": "up", "src": "sta", "dst": "ap", "total_bytes": 3000,
         "tcp_acks": False},
        {"kind": "datagram", "name": "up:ack", "src": "ap", "dst": "sta", "size_bytes": 100,
         "times_us": [10]},
    ]  # fmt: skip
    r = simulate(_scenario(flows))
    assert [(f.name, f.kind) for f in r.flows.values()] == [("up", "bulk"), ("up:ack", "datagram")]
    assert r.flows["up:ack"].messages_delivered == 1


def test_the_flow_api_refuses_a_name_taken_by_an_ack_flow() -> None:
    sim = Simulation(_scenario([]))
    up = sim.flow("up", "sta", "ap", AccessCategory.BE, bulk=True)
    assert up.ack_flow is sim.flows["up:ack"]
    with pytest.raises(UsageError, match="TCP-ack flow of bulk flow 'up'"):
        sim.flow("up:ack", "ap", "sta", AccessCategory.BE, bulk=False)  # even the same shape
    sim.flow("cmd:ack", "sta", "ap", AccessCategory.VO, bulk=False)
    with pytest.raises(UsageError, match="'cmd:ack', which is already a flow"):
        sim.flow("cmd", "ap", "sta", AccessCategory.BE, bulk=True)
    assert "cmd" not in sim.flows
    assert sim.flow("cmd", "ap", "sta", AccessCategory.BE, bulk=True, tcp_acks=False).bulk


def test_the_flow_api_returns_an_existing_flow_only_if_it_matches() -> None:
    sim = Simulation(_scenario([]))
    f = sim.flow("ls", "sta", "ap", AccessCategory.VO, bulk=False)
    assert sim.flow("ls", "sta", "ap", AccessCategory.VO, bulk=False) is f
    for args in (("ap", "sta", AccessCategory.VO, False), ("sta", "ap", AccessCategory.VI, False),
                 ("sta", "ap", AccessCategory.VO, True)):  # fmt: skip
        src, dst, ac, bulk = args
        with pytest.raises(UsageError, match="already exists as a datagram flow sta -> ap"):
            sim.flow("ls", src, dst, ac, bulk=bulk)
