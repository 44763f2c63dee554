"""A transparent agent that roams: an unmodified program's upload follows the robot's cell.

Topology and team file of test_fleet_netns.py (cell-a's leader on ``a1``, cell-b's on
``a2``, both on channel 36; a robot's cell is its default route's gateway), plus a
``[transparent]`` section: robot ``a3`` runs ``coorp agent --transparent`` and a plain
TCP upload (examples/unmodified/bulk_tcp.py, which imports nothing of Coorp) goes to the
edge host ``ld``. While the upload runs under cell-a's permit, a3's default route moves to
cell-b's gateway (the roam). Checked: the relay's permit was cell-a's, then cell-b's,
never both at once (the channel's coordinator never counted two holders); cell-a holds
nothing of a3 after the move; the agent followed once, its kernel rules are still in
place after the move; every byte arrived once, in order (SHA-256).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rt_netns import Topology, topology
from test_fleet_netns import LA, LB, QUEUE_MS, RATE_MBIT, fleet_file, route_via, wait_cell
from test_transparent_netns import APPS, COORP, PY, control, logs, result, sink, start, tables

pytestmark = pytest.mark.netns

#: How long the upload sends (whatever the rate): the move lands in its middle.
UPLOAD_S = 3.0


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Topology]:
    with topology(3, rate_mbit=RATE_MBIT, queue_ms=QUEUE_MS, tag="coorpft",
                  logs=tmp_path / "logs") as t:  # fmt: skip
        yield t


def test_a_transparent_agent_that_roams_moves_its_relayed_upload_to_the_new_cell(
    fleet: Topology, tmp_path: Path
) -> None:
    config = fleet_file(
        fleet,
        tmp_path,
        extra='[agent]\nlisten = "0.0.0.0:7401"\n'
        "[transparent]\nls = [{ ports = 9001 }]\nbulk = [{ ports = 9000 }]\n",
        team_key_fallback=True,
    )
    route_via(fleet, "a3", LA)
    # Both leaders and the agent start at once (each waits for its own start line).
    leaders = [fleet.start(h, [*COORP, "leader", "--config", str(config), "--cell", c,
                               "--log-level", "warning"], name=c)
               for h, c in ((LA, "cell-a"), (LB, "cell-b"))]  # fmt: skip
    argv = [*COORP, "agent", "--config", str(config), "--robot", "a3", "--transparent",
            "--control", control(config, "a3"), "--log-level", "info"]  # fmt: skip
    agent = start(fleet, "a3", argv, "agent-a3")
    for p in leaders:
        p.expect("coorp leader: serving", 30)
    agent.expect("coorp agent: transparent mode on", 30)
    sink(fleet, 9000)
    until = time.monotonic_ns() + round(UPLOAD_S * 1e9)
    argv = [*PY, str(APPS / "bulk_tcp.py"), "send", "--to", f"{fleet.addr('ld')}:9000",
            "--until", str(until)]  # fmt: skip
    up = start(fleet, "a3", argv, "send-a3")
    # The relay intercepted the upload and holds cell-a's permit for it.
    wait_cell(fleet, LA, "grants a3's relay a permit", lambda c: c["cell_grants"] >= 1)
    assert up.popen.poll() is None, "the upload ended before the move (a machine too slow?)"
    route_via(fleet, "a3", LB)  # the roam
    sent = result(up, topo=fleet)
    assert sent["intact"] and sent["bytes"] > 0, sent
    b = wait_cell(fleet, LB, "a3 joined", lambda c: c["joins"] >= 1)["counters"]
    a = wait_cell(fleet, LA, "a3 gone", lambda c: c["holders"] == 0)["counters"]
    # The rest of the upload went under cell-b's permit (relayed to the coordinator,
    # cell-a's leader), and never while cell-a's was still held for it.
    assert b["cell_grants"] >= 1 and b["relayed"] >= 1, (b, logs(fleet))
    assert a["is_coordinator"] == 1 and a["max_channel_holders"] == 1, a
    # The kernel rules it installed at start are still there (and its kernel lease).
    assert sorted(tables(fleet, "a3")) == ["coorp-a3", "coorp-lease-a3"]
    agent.popen.kill()
    agent.popen.wait(timeout=10)
    log = (fleet.logs / "agent-a3.log").read_text(errors="replace")  # type: ignore[attr-defined]
    assert log.count("roamed from cell cell-a to cell-b") == 1, log[-3000:]
