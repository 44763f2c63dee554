"""Transparent mode's marking on the emulated air: what the kernel rules mark is what
the channel carries as voice (AC_VO), every fragment of it (root; skipped with the
reason where namespaces, TUN or pyroute2 are unavailable).

Cyclone DDS, as shipped (``Discovery/ParticipantIndex`` ``none``), receives its unicast
data on ephemeral ports, outside the DDSI-RTPS port mapping: the ``dds`` preset must
mark RTPS datagrams on whatever port they go to, and leave other datagrams to that port
alone. The emulator's frame trace records the access category of every frame.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from coorp.emulate import Emulation, emulation_unavailable
from coorp.scenario import parse_scenario

pytestmark = pytest.mark.netns

PY = [sys.executable, "-u"]
_coorp = Path(sys.executable).with_name("coorp")
COORP = [str(_coorp)] if _coorp.exists() else [*PY, "-c", "from coorp.cli import main; main()"]
EPHEMERAL = 40123  # where Cyclone's default unicast data goes (any port outside 7400-7649)
SIZE = 12_000  # a 12 KB perception sample: one RTPS datagram, nine IP fragments
FRAGMENTS = -(-(SIZE + 8) // 1480)
COUNT = 5

# An unmarked socket: what a DDS program sends (RTPS header, then the sample), and the
# same sizes without an RTPS header to the same port (a program no selector names).
SEND = f"""
import socket, struct, sys, time
leader, r2 = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
rtps = b"RTPS" + bytes([2, 3, 1, 16]) + bytes(range(12))
for k in range({COUNT}):
    s.sendto(rtps + struct.pack("!I", k) + bytes({SIZE} - len(rtps) - 4), (r2, {EPHEMERAL}))
    s.sendto(rtps + struct.pack("!I", k) + bytes({SIZE} - len(rtps) - 4), (r2, 7411))
    s.sendto(b"data" + bytes({SIZE} - 4), (leader, {EPHEMERAL}))
    time.sleep(0.02)
print("sent", flush=True)
"""
# Counts the datagrams each port receives until it has them all (or 30 s passed).
RECV = f"""
import json, selectors, socket, sys, time
ports = [int(p) for p in sys.argv[1:]]
sel = selectors.DefaultSelector()
for p in ports:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", p))
    sel.register(s, selectors.EVENT_READ, p)
got = dict.fromkeys(ports, 0)
print("up", flush=True)
deadline = time.monotonic() + 30
while min(got.values()) < {COUNT} and time.monotonic() < deadline:
    for key, _ in sel.select(0.5):
        key.fileobj.recv(65536); got[key.data] += 1
print(json.dumps(got), flush=True)
"""


@pytest.fixture(autouse=True)
def _needs_emulation() -> None:
    why = emulation_unavailable()
    if why is not None:
        pytest.skip(why)
    pytest.importorskip("pyroute2")
    pytest.importorskip("pyarrow")


def _three() -> object:
    return parse_scenario({
        "name": "three", "phy": {"width_mhz": 20, "spatial_streams": 1},
        "links": {"mode": "fixed", "mcs": 5},
        "stations": [{"name": "leader"}, {"name": "r1"}, {"name": "r2"}],
    })  # fmt: skip


def _team(tmp: Path, em: Emulation) -> Path:
    hosts = ", ".join(f'{s} = "{em.addr(s)}"' for s in ("leader", "r1", "r2"))
    ld = em.addr("leader")
    path = tmp / "team.toml"
    path.write_text(
        '[team]\nname = "air"\nkey_file = "team.key"\nrobots = ["leader", "r1", "r2"]\n'
        f'hosts = {{ {hosts} }}\n[leader]\nlisten = "{ld}:7300"\n'
        f'[agent]\nleader = "{ld}:7300"\nlisten = "0.0.0.0:7301"\n'
        '[transparent]\nls = [{ preset = "dds", domain_id = 0 }]\n'
    )
    subprocess.run([*COORP, "keys", "--config", str(path)], check=True, capture_output=True)
    return path


def test_dds_samples_on_ephemeral_ports_reach_the_air_as_voice(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    trace = tmp_path / "trace"
    with Emulation(_three(), seed=1, trace_dir=trace) as em:  # type: ignore[arg-type]
        team = _team(tmp_path, em)
        agent = em.start("r1", [*COORP, "agent", "--config", str(team), "--robot", "r1",
                                "--transparent", "--log-level", "warning"])  # fmt: skip
        try:
            agent.expect("coorp agent: transparent mode on", 60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{agent.stderr_tail()}") from None
        rx = [em.start("r2", [*PY, "-c", RECV, str(EPHEMERAL), "7411"], "rx-r2"),
              em.start("leader", [*PY, "-c", RECV, str(EPHEMERAL)], "rx-leader")]  # fmt: skip
        for p in rx:
            p.expect("up", 30)
        out = em.run("r1", [*PY, "-c", SEND, em.addr("leader"), em.addr("r2")], timeout=60)
        assert out.strip() == "sent"
        got = [json.loads(p.expect("{", 60)) for p in rx]  # every datagram arrived
        assert got == [{str(EPHEMERAL): COUNT, "7411": COUNT}, {str(EPHEMERAL): COUNT}]
        em.stop()
    frames = pq.read_table(trace / "frames.parquet").to_pydict()
    names = ["leader", "r1", "r2"]
    up = Counter(
        (names[final], ac, size)
        for src, final, ac, size in zip(
            frames["src"], frames["final"], frames["ac"], frames["bytes"], strict=True
        )
        if names[src] == "r1" and final >= 0
    )
    # Every fragment of every RTPS datagram to r2 (ephemeral and mapped port) went up as
    # voice (nothing else of r1's goes to r2).
    to_r2 = {k: v for k, v in up.items() if k[0] == "r2"}
    assert sum(to_r2.values()) == 2 * COUNT * FRAGMENTS, to_r2
    assert {ac for _, ac, _ in to_r2} == {"VO"}, to_r2
    # The datagrams without an RTPS header to the same port are untouched (best effort;
    # their full-size fragments: the agent's own small frames to the leader aside).
    full = {ac: n for (dst, ac, size), n in up.items() if dst == "leader" and size == 1500}
    assert full == {"BE": COUNT * (FRAGMENTS - 1)}, full
