"""Test helpers shared by the TCP model's tests: losing chosen segments at the MAC, a
lossy channel, delivery exactly once."""

from __future__ import annotations

from typing import Any

from coorp.scenario import AccessCategory, Scenario, parse_scenario
from coorp.sim import SimResult, Simulation
from coorp.sim.station import BulkTransfer
from coorp.sim.tcp import TcpConnection

BE = AccessCategory.BE


def drop_queued(sim: Simulation, conn: TcpConnection, offsets: list[int]) -> list[int]:
    """Drop the segments ``offsets`` after the first one still queued in the sender's ring
    (not on the air), as the MAC does at its retry limit; their sequence numbers."""
    ring = sim.station(conn.flow.src.name).rings[BE]
    first = next(r.seq_base + r.pid for r in ring if not r.sealed)
    seqs = [first + k for k in offsets]
    for seq in seqs:
        for i, run in enumerate(list(ring)):
            lo = run.seq_base + run.pid
            if run.flow is conn.flow and not run.sealed and lo <= seq < lo + run.count:
                if seq > lo:
                    run = run.split(seq - lo)
                    i += 1
                    ring.insert(i, run)
                if run.count > 1:
                    ring.insert(i + 1, run.split(1))
                run.retries = sim.scenario.mac.retry_limit
                assert sim.channel._count_retry(run, sim.now_ns)
                break
        else:
            raise AssertionError(f"segment {seq} is not queued")
    return seqs


def lossy_scenario(tcp: dict[str, Any]) -> Scenario:
    """An AP and two uploaders at MCS 9 a little too far for it: MPDUs lost to errors,
    and after two attempts dropped by the MAC (retry limit 1): holes in every window."""
    return parse_scenario({
        "name": "lossy", "mac": {"retry_limit": 1},
        "links": {"mode": "fixed", "mcs": 9, "packet_errors": True},
        "stations": [{"name": "ap"}, {"name": "a", "position_m": [6.0, 0.0]},
                     {"name": "b", "position_m": [0.0, 6.5]}],
        "tcp": tcp,
    })  # fmt: skip


def assert_delivered_once(res: SimResult, transfers: list[BulkTransfer]) -> None:
    """Every transfer's bytes arrived, and each flow delivered exactly its transfers'."""
    for t in transfers:
        assert t.delivered_bytes == t.total_bytes
    for name in {t.flow.name for t in transfers}:
        mine = [t for t in transfers if t.flow.name == name]
        assert res.flows[name].delivered_bytes == sum(t.total_bytes for t in mine)
