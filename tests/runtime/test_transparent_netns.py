"""Transparent mode for real: programs that know nothing of Coorp, in namespaces.

Topology (rt_netns.py): a leader ``ld`` and agents ``a1``, ``a2`` on a bridge, the
leader's port shaped (30 Mbit/s) so a queue builds there. Every host runs ``coorp agent
--transparent``; the programs are ``examples/unmodified/`` (a Cyclone DDS or Zenoh MPC
loop, plain TCP and HTTP uploads) and import nothing of Coorp. Checked: every uploaded
byte arrives exactly once (SHA-256), the uploads were intercepted and the LS sends
observed (the leader's ``coorp top --json``), a flow that matches no selector is not
touched, Zenoh's TCP (LS) is never intercepted even under a catch-all bulk selector,
LS packets arrive marked CS6 (CS5 with ``ls_category = "AC_VI"``) with a valid header
whether fragmented or not, and the observer sees them, and no rule
outlives its agent, however it ended.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rt_netns import Proc, Topology, topology

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "examples" / "unmodified"
PY = [sys.executable, "-u"]
_coorp = Path(sys.executable).with_name("coorp")
COORP = [str(_coorp)] if _coorp.exists() else [*PY, "-c", "from coorp.cli import main; main()"]
ENV = {
    **os.environ,
    "PYTHONUNBUFFERED": "1",
    "CYCLONEDDS_URI": '<CycloneDDS><Domain><General><Interfaces><NetworkInterface name="eth0"/>'
    "</Interfaces></General></Domain></CycloneDDS>",
}


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    with topology(2, rate_mbit=30, queue_ms=100, logs=tmp_path / "logs") as t:
        yield t


def team_file(tmp: Path, topo: Topology, ls: str, bulk: str, extra: str = "") -> Path:
    hosts = ", ".join(f'{"leader" if h == "ld" else h} = "{topo.addr(h)}"' for h in topo.hosts)
    ld = topo.addr("ld")
    path = tmp / "team.toml"
    path.write_text(
        '[team]\nname = "tp"\nkey_file = "team.key"\nrobots = ["leader", "a1", "a2"]\n'
        f"hosts = {{ {hosts} }}\n"
        f'[leader]\nlisten = "{ld}:7300"\n[agent]\nleader = "{ld}:7300"\n'
        f'listen = "0.0.0.0:7301"\n[transparent]\nls = [{ls}]\nbulk = [{bulk}]\n{extra}'
    )
    subprocess.run([*COORP, "keys", "--config", str(path)], check=True, capture_output=True)
    return path


def control(team: Path, robot: str) -> str:
    """The agent's control socket, in the test's own folder: the default one under
    /tmp is shared with every other run on the machine as the same user."""
    return str(team.parent / f"{robot}.sock")


def start(topo: Topology, host: str, argv: list[str], name: str, stdin: bool = False) -> Proc:
    """A process in ``host``'s namespace, its stderr kept in the test's log folder."""
    with open(topo.logs / f"{name}.log", "ab") as err:  # type: ignore[attr-defined]
        proc = Proc(name, topo.popen(host, argv, env=ENV, stdin=stdin, stderr=err))
    topo.procs.append(proc)
    return proc


def logs(topo: Topology) -> str:
    """The end of every process's stderr (for a failure message)."""
    out = []
    for path in sorted(topo.logs.iterdir()):  # type: ignore[attr-defined]
        text = path.read_text(errors="replace").strip()
        if text:
            out.append(f"--- {path.name}\n{text[-1500:]}")
    return "\n".join(out)


def start_team(topo: Topology, team: Path) -> dict[str, Proc]:
    ldr = start(topo, "ld", [*COORP, "leader", "--config", str(team)], "leader")
    ldr.expect("coorp leader: serving", 30)
    agents = {}
    for host in topo.hosts:
        robot = "leader" if host == "ld" else host
        argv = [*COORP, "agent", "--config", str(team), "--robot", robot, "--transparent",
                "--control", control(team, robot)]  # fmt: skip
        agents[host] = start(topo, host, argv, f"agent-{robot}")
    for p in agents.values():
        p.expect("coorp agent: transparent mode on", 30)
    return agents


def result(p: Proc, timeout: float = 60, topo: Topology | None = None) -> dict[str, Any]:
    try:
        return dict(json.loads(p.expect_rest("RESULT ", timeout)))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{logs(topo) if topo is not None else ''}") from None


def team_status(topo: Topology, team: Path) -> dict[str, dict[str, Any]]:
    out = topo.run("ld", [*COORP, "top", "--config", str(team), "--json"], timeout=30)
    return {r["robot"]: r for r in json.loads(out)["robots"]}


def wait_status(topo: Topology, team: Path, pred: Any, what: str) -> dict[str, dict[str, Any]]:
    """The team's status once ``pred`` holds (reports come every second; bounded)."""
    for _ in range(30):
        status = team_status(topo, team)
        if pred(status):
            return status
        time.sleep(0.5)  # the next report, not a synchronization by sleeping alone
    raise AssertionError(f"{what}: last status {status}")


def loop(topo: Topology, transport: str, seconds: float) -> list[Proc]:
    start_at = time.monotonic_ns() + int(4e9)
    common = ["--transport", transport, "--start-at", str(start_at), "--duration", str(seconds),
              "--warmup", "1.5", "--leader", topo.addr("ld")]  # fmt: skip
    mpc = [*PY, str(APPS / "mpc_loop.py")]
    procs = [start(topo, "ld", [*mpc, "leader", "--robots", "a1,a2", "--addr", topo.addr("ld"),
                                *common], "mpc-ld")]  # fmt: skip
    procs += [
        start(topo, h, [*mpc, "robot", "--name", h, *common], f"mpc-{h}") for h in ("a1", "a2")
    ]
    return procs


def upload(topo: Topology, host: str, port: int, nbytes: int, *, http: bool = False) -> Proc:
    argv = [*PY, str(APPS / "bulk_tcp.py"), "send", "--to", f"{topo.addr('ld')}:{port}",
            "--bytes", str(nbytes), *(["--http"] if http else [])]  # fmt: skip
    return start(topo, host, argv, f"send-{host}-{port}")


def sink(topo: Topology, port: int, *, http: bool = False) -> Proc:
    argv = [*PY, str(APPS / "bulk_tcp.py"), "sink", "--listen", f"0.0.0.0:{port}",
            *(["--http"] if http else [])]  # fmt: skip
    p = start(topo, "ld", argv, f"sink-{port}", stdin=True)
    p.expect("READY", 20)
    return p


def test_unmodified_dds_loop_and_uploads_are_protected_and_intact(
    topo: Topology, tmp_path: Path
) -> None:
    team = team_file(tmp_path, topo, '{ preset = "dds", domain_id = 0 }',
                     "{ ports = 9000 }, { ports = 9080 }")  # fmt: skip
    start_team(topo, team)
    sink(topo, 9000)
    sink(topo, 9080, http=True)
    sink(topo, 9100)  # matches no selector
    procs = loop(topo, "dds", 3.0)
    ups = [upload(topo, "a1", 9000, 3_000_000), upload(topo, "a2", 9080, 2_000_000, http=True)]
    sent = [result(u, topo=topo) for u in ups]
    assert all(s["intact"] for s in sent), sent  # every byte once, in order (SHA-256)
    outs = [result(p, topo=topo) for p in procs]
    robots = [o for o in outs if o["role"] == "robot"]
    assert all(len(r["command_ms"]) >= 0.8 * r["sent"] for r in robots), robots
    status = wait_status(topo, team, lambda s: s["a1"]["relayed"] >= 1 and s["a2"]["relayed"] >= 1,
                         "both uploads intercepted")  # fmt: skip
    assert status["a1"]["ls_flows"] >= 1 and status["a2"]["ls_flows"] >= 1  # LS observed
    # A flow no selector names goes direct: the relay of a1 sees no new connection.
    other = result(upload(topo, "a1", 9100, 1_000_000), topo=topo)
    assert other["intact"]
    assert team_status(topo, team)["a1"]["relayed"] == status["a1"]["relayed"]


def test_zenoh_tcp_is_marked_never_intercepted_even_by_a_catch_all(
    topo: Topology, tmp_path: Path
) -> None:
    team = team_file(tmp_path, topo, '{ preset = "zenoh" }', "{ to_team = true }")
    start_team(topo, team)
    sink(topo, 9000)
    procs = loop(topo, "zenoh", 3.0)
    up = upload(topo, "a1", 9000, 2_000_000)
    assert result(up, topo=topo)["intact"]
    robots = [o for o in (result(p, topo=topo) for p in procs) if o["role"] == "robot"]
    assert all(len(r["command_ms"]) >= 0.8 * r["sent"] for r in robots), robots
    status = wait_status(topo, team, lambda s: s["a1"]["relayed"] >= 1, "upload intercepted")
    # Only the upload went through a relay: Zenoh's connection (TCP to a team member,
    # which the catch-all selects) returned before the redirect.
    assert status["a1"]["relayed"] == 1 and status["a2"]["relayed"] == 0, json.dumps(status)
    assert all(f["dest"].endswith(":9000") for f in status["a1"]["intercepted"])


MARK_CHECK = textwrap.dedent(
    """
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    s.bind(("0.0.0.0", 9001)); s.settimeout(5)
    print("READY", flush=True)
    got = []
    try:
        while len(got) < 4:
            data, anc, _, _ = s.recvmsg(65535, 64)
            tos = [c[2][0] for c in anc if c[1] == socket.IP_TOS]
            got.append([len(data), tos[0] if tos else None])
    except TimeoutError:
        pass
    print("RESULT " + __import__("json").dumps(got), flush=True)
    """
)


@pytest.mark.parametrize(("category", "tos"), [("AC_VO", 0xC0), ("AC_VI", 0xA0)])
def test_ls_datagrams_arrive_marked_with_a_valid_header(
    topo: Topology, tmp_path: Path, category: str, tos: int
) -> None:
    extra = f'ls_category = "{category}"\n'
    team = team_file(tmp_path, topo, "{ ports = 9001 }", "{ ports = 9000 }", extra)
    start_team(topo, team)
    rx = start(topo, "ld", [*PY, "-c", MARK_CHECK], "rx")
    rx.expect("READY", 10)
    dest = f"('{topo.addr('ld')}', 9001)"
    send = (
        "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"for n in (100, 1400, 3000, 12000): s.sendto(b'x' * n, {dest})"
    )
    topo.run("a1", [*PY, "-c", send])
    # A wrong checksum update drops the unfragmented ones at the receiver; fragments are
    # re-checksummed by the fragmenter, so both kinds are needed to tell.
    got = json.loads(rx.expect_rest("RESULT ", 20))
    assert got == [[100, tos], [1400, tos], [3000, tos], [12000, tos]]  # CS6 / CS5
    # The observer's filter follows the category: the sends taught a1 an LS flow.
    wait_status(topo, team, lambda s: s["a1"]["ls_flows"] >= 1, "LS sends observed")


NFT_TABLES = (
    "import asyncio\nfrom pyroute2.nftables.main import AsyncNFTables\n"
    "async def go():\n    n = AsyncNFTables(1, 0, 2); await n.setup_endpoint()\n"
    "    names = [t.get_attr('NFTA_TABLE_NAME') for t in [x async for x in await n.get_tables()]]\n"
    "    print(sorted(names))\n"
    "asyncio.run(go())"
)
STALE_TABLE = (
    "import asyncio\nfrom pyroute2.nftables.main import AsyncNFTables\n"
    "async def go():\n    n = AsyncNFTables(1, 0, 2); await n.setup_endpoint()\n"
    "    await n.table('add', name='coorp-a1')\n"  # no owner flag: outlives this process
    "asyncio.run(go())"
)


def tables(topo: Topology, host: str) -> list[str]:
    return list(json.loads(topo.run(host, [*PY, "-c", NFT_TABLES]).replace("'", '"')))


def test_no_rule_outlives_its_agent(topo: Topology, tmp_path: Path) -> None:
    team = team_file(tmp_path, topo, "{ ports = 9001 }", "{ ports = 9000 }")
    ldr = start(topo, "ld", [*COORP, "leader", "--config", str(team)], "leader")
    ldr.expect("coorp leader: serving", 30)
    argv = [*COORP, "agent", "--config", str(team), "--robot", "a1", "--transparent",
            "--control", control(team, "a1")]  # fmt: skip
    agent = start(topo, "a1", argv, "agent-a1")
    agent.expect("coorp agent: transparent mode on", 30)
    # Its rules, and the kernel's half of its lease (KernelLease).
    assert sorted(tables(topo, "a1")) == ["coorp-a1", "coorp-lease-a1"]
    agent.popen.kill()  # kill -9: no clean-up code runs
    agent.popen.wait(timeout=10)
    assert tables(topo, "a1") == []  # the kernel removed the table with its owner
    # A table left behind where the kernel could not tie it to the agent (older
    # kernels, or a crash mid-install): the next start removes it, and so does
    # --remove-rules.
    topo.run("a1", [*PY, "-c", STALE_TABLE])
    assert tables(topo, "a1") == ["coorp-a1"]
    agent = start(topo, "a1", argv, "agent-a1-again")
    agent.expect("coorp agent: transparent mode on", 30)
    agent.popen.terminate()  # SIGTERM: the agent removes its rules itself
    agent.popen.wait(timeout=20)
    assert tables(topo, "a1") == []
    topo.run("a1", [*PY, "-c", STALE_TABLE])
    out = topo.run("a1", [*COORP, "agent", "--config", str(team), "--robot", "a1",
                          "--remove-rules"])  # fmt: skip
    assert "removed table ip coorp-a1" in out and tables(topo, "a1") == []


def test_doctor_on_a_namespace_interface(topo: Topology, tmp_path: Path) -> None:
    team = team_file(tmp_path, topo, "{ ports = 9001 }", "{ ports = 9000 }")
    out = json.loads(topo.run("a1", [*COORP, "doctor", "--config", str(team), "--json",
                                     "--ls-bytes", "3000"]))  # fmt: skip
    found = {f["check"]: f for f in out["findings"]}
    assert out["interface"] == "eth0"
    assert found["link"]["status"] == "info" and "not a WiFi" in found["link"]["detail"]
    assert found["mtu"]["status"] == "warn" and "3 IP fragments" in found["mtu"]["detail"]
    assert found["nf_tables"]["status"] == "ok" and found["packet_socket"]["status"] == "ok"
    assert tables(topo, "a1") == []  # the probe table is gone
    # Root without the two capabilities (not another user: the checkout's .venv may be
    # readable by root only, as in a clone under a 0700 mktemp directory).
    caps = "-net_admin,-net_raw"
    without = ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]
    r = subprocess.run(["ip", "netns", "exec", topo.ns("a1"), *without, *COORP, "doctor",
                        "--json"], capture_output=True, text=True, timeout=60, env=ENV)  # fmt: skip
    assert r.returncode == 1
    unprivileged = {f["check"]: f for f in json.loads(r.stdout)["findings"]}
    assert "CAP_NET_ADMIN" in unprivileged["transparent"]["detail"]


LEADER_STATS = textwrap.dedent(
    """
    import json, sys
    from coorp.runtime import load_team_config, query_leader_stats, resolve_team_key
    cfg = load_team_config(sys.argv[1])
    st = query_leader_stats(cfg.agent.leader, resolve_team_key(cfg, sys.argv[1]))
    print(json.dumps(st.counters))
    """
)


def leader_counters(topo: Topology, team: Path) -> dict[str, int]:
    out: dict[str, int] = json.loads(topo.run("ld", [*PY, "-c", LEADER_STATS, str(team)]))
    return out


def fetch(topo: Topology, host: str, port: int, nbytes: int) -> Proc:
    argv = [*PY, str(APPS / "bulk_tcp.py"), "fetch", "--to", f"{topo.addr('ld')}:{port}",
            "--bytes", str(nbytes)]  # fmt: skip
    return start(topo, host, argv, f"fetch-{host}-{port}")


def server(topo: Topology, port: int) -> Proc:
    argv = [*PY, str(APPS / "bulk_tcp.py"), "serve", "--listen", f"0.0.0.0:{port}"]
    p = start(topo, "ld", argv, f"serve-{port}", stdin=True)
    p.expect("READY", 20)
    return p


def test_downloads_take_turns_under_the_servers_permit_and_a_clean_start_logs_cleanly(
    topo: Topology, tmp_path: Path
) -> None:
    """Issue 34, items 1, 2 and 6: the leader's replies on connections the robots opened
    go through its inbound relay under its permit, intact, while a robot uploads; and
    nothing in the start-up logs says something went wrong."""
    team = team_file(tmp_path, topo, '{ preset = "dds", domain_id = 0 }',
                     "{ ports = 9000 }, { listen = 9001 }")  # fmt: skip
    ldr = start(topo, "ld", [*COORP, "leader", "--config", str(team)], "leader")
    ldr.expect("coorp leader: serving", 30)
    agents = {}
    for host in topo.hosts:
        robot = "leader" if host == "ld" else host
        argv = [*COORP, "agent", "--config", str(team), "--robot", robot, "--transparent",
                "--log-level", "info", "--control", control(team, robot)]  # fmt: skip
        agents[host] = start(topo, host, argv, f"agent-{robot}")
    for p in agents.values():
        p.expect("coorp agent: transparent mode on", 30)
    sink(topo, 9000)
    server(topo, 9001)
    procs = loop(topo, "dds", 3.0)
    downs = [fetch(topo, h, 9001, 2_000_000) for h in ("a1", "a2")]
    up = upload(topo, "a1", 9000, 2_000_000)
    got = [result(d, topo=topo) for d in downs]
    # Every byte the server sent arrived once, in order, and the end with its digest.
    assert all(g["intact"] and g["bytes"] == 2_000_000 for g in got), got
    assert result(up, topo=topo)["intact"]
    outs = [result(p, topo=topo) for p in procs]
    robots = [o for o in outs if o["role"] == "robot"]
    counts = [(r["name"], r["sent"], len(r["command_ms"])) for r in robots]
    assert all(got >= 0.8 * sent for _, sent, got in counts), counts
    status = wait_status(topo, team, lambda s: s["leader"]["relayed"] >= 2,
                         "both downloads relayed by the leader")  # fmt: skip
    assert status["a1"]["relayed"] >= 1  # the upload, on a1's own relay
    assert status["leader"]["ls_flows"] >= 1  # its commands observed: its own gate
    counters = leader_counters(topo, team)
    assert counters["max_holders"] == 1 and counters["grants"] >= 2
    for p in agents.values():
        p.popen.terminate()
        p.popen.wait(timeout=20)
    ldr.popen.terminate()
    ldr.popen.wait(timeout=20)
    logs_of = {path.stem: path.read_text(errors="replace")
               for path in topo.logs.iterdir()}  # type: ignore[attr-defined]  # fmt: skip
    # (A stall of this process is logged at INFO when the CPU really was taken from it,
    # which a loaded machine does; what must not happen is a lost leader, a rejoin or a
    # dropped frame when nothing was wrong.)
    noisy = ("WARNING", "ERROR", "lost leader", "unreachable", "rejoined", "dropped")
    for name in ["leader", *(f"agent-{r}" for r in ("leader", "a1", "a2"))]:
        bad = [ln for ln in logs_of[name].splitlines() if any(w in ln for w in noisy)]
        assert bad == [], f"{name}: {bad}"


def test_sigterm_gives_relayed_connections_two_seconds(topo: Topology, tmp_path: Path) -> None:
    """Issue 34, item 6: a relayed upload that ends within the 2 s stopping the agent
    allows arrives whole; one that does not is reset, never cut off cleanly."""
    team = team_file(tmp_path, topo, "{ ports = 9001 }", "{ ports = 9000 }")
    ldr = start(topo, "ld", [*COORP, "leader", "--config", str(team)], "leader")
    ldr.expect("coorp leader: serving", 30)
    argv = [*COORP, "agent", "--config", str(team), "--robot", "a1", "--transparent",
            "--control", control(team, "a1")]  # fmt: skip
    agent = start(topo, "a1", argv, "agent-a1")
    agent.expect("coorp agent: transparent mode on", 30)
    rx = sink(topo, 9000)
    # 100 MB at 30 Mbit/s: far more than 2 s after the status polls below; 0.5 MB: an
    # eighth of a second alone, a quarter beside the long one (3 MB, about 1.6 s beside
    # it, ended past the 2 s on a quiet machine once; 1 MB once in a fresh clone's
    # `make test` on a slow host, the suite taking 8.8 min).
    long = upload(topo, "a1", 9000, 100_000_000)
    wait_status(topo, team, lambda s: s["a1"]["relayed"] >= 1, "the long upload relayed")
    short = upload(topo, "a1", 9000, 500_000)
    wait_status(topo, team, lambda s: s["a1"]["relayed"] >= 2, "the short upload relayed")
    agent.popen.terminate()
    assert result(short, topo=topo)["intact"]
    assert not result(long, topo=topo)["intact"]
    agent.popen.wait(timeout=20)
    assert tables(topo, "a1") == []
    rx.send(json.dumps({"cmd": "quit"}))
    # The sink took the short upload whole, and never a clean end of the long one (a
    # reset ends its connection without a DONE).
    assert [d["bytes"] for d in result(rx, topo=topo)["done"]] == [500_000]


def test_an_agent_that_cannot_start_never_joins_and_names_the_running_one(
    topo: Topology, tmp_path: Path
) -> None:
    """Issue 34, item 6: a second agent for a robot is refused before it joins (the
    running one stays joined), and `coorp doctor --robot` says what it would meet."""
    team = team_file(tmp_path, topo, "{ ports = 9001 }", "{ ports = 9000 }")
    ldr = start(topo, "ld", [*COORP, "leader", "--config", str(team)], "leader")
    ldr.expect("coorp leader: serving", 30)
    argv = [*COORP, "agent", "--config", str(team), "--robot", "a1", "--control",
            control(team, "a1")]  # fmt: skip
    first = start(topo, "a1", argv, "agent-a1")
    first.expect("coorp agent: control socket", 30, anywhere=True)
    r = subprocess.run(["ip", "netns", "exec", topo.ns("a1"), *argv], capture_output=True,
                       text=True, timeout=60, env=ENV)  # fmt: skip
    assert r.returncode == 2
    assert f"already running (pid {first.popen.pid}" in r.stderr or "already running" in r.stderr
    assert leader_counters(topo, team)["joins"] == 1  # the second never joined
    out = json.loads(topo.run("a2", [*COORP, "doctor", "--config", str(team), "--robot", "a2",
                                     "--json"]))  # fmt: skip
    found = {f["check"]: f for f in out["findings"]}
    assert found["leader"]["status"] == "ok" and "robot a2's key" in found["leader"]["detail"]
    assert found["ports"]["status"] == "ok" and found["agent"]["status"] == "ok"
    assert found["cpu"]["status"] == "ok"  # root may lower its nice value
