"""``coorp emulate`` for real: namespaces, TUN interfaces, the emulator process, real
sockets (root; skipped with the reason where namespaces or TUN are unavailable).

Nothing asserts a duration. Real UDP crosses the emulated channel and every packet
arrives; saturated real senders carry what the simulator's run of the same stations
carries (the tolerance is the simulator's own seed-to-seed spread, see
``test_air._window_tolerance``); a live run replayed offline from its recorded arrivals
makes the same channel decisions; every exit path leaves nothing behind, and a run
killed with SIGKILL is cleaned by the next start.
"""

from __future__ import annotations

import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_air import _window_tolerance

from coorp.emulate import (
    GRO_DEFAULT,
    Air,
    Emulation,
    FrameLog,
    emulation_unavailable,
    read_arrivals,
    remove_stale,
    replay,
)
from coorp.emulate._validate import run_load, saturation_scenario, simulated_saturation, uplinks
from coorp.scenario import parse_scenario

pytestmark = pytest.mark.netns

TAG = "cemu"
_coorp = Path(sys.executable).with_name("coorp")
COORP = (
    [str(_coorp)]
    if _coorp.exists()
    else [sys.executable, "-c", "from coorp.cli import main; main()"]
)

ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 7000))
print("up", flush=True)
while True:
    d, a = s.recvfrom(4096); s.sendto(d, a)
"""

CLIENT = """
import json, socket, sys, time
dst, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(float(sys.argv[4]) if len(sys.argv) > 4 else 2.0)
got = []
for k in range(n):
    s.sendto(k.to_bytes(4, "big") + bytes(size - 4), (dst, 7000))
    try:
        got.append(int.from_bytes(s.recvfrom(4096)[0][:4], "big"))
    except (TimeoutError, ConnectionRefusedError):
        pass
    time.sleep(0.005)
print(json.dumps(got))
"""

TCP_SINK = """
import hashlib, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7001)); s.listen(1); print("up", flush=True)
c, _ = s.accept(); c.settimeout(30); h = hashlib.sha256(); n = 0
while d := c.recv(1 << 16):
    h.update(d); n += len(d)
print(n, h.hexdigest(), flush=True)
"""

TCP_SOURCE = """
import hashlib, random, socket, sys
data = random.Random(7).randbytes(int(sys.argv[2]))
s = socket.create_connection((sys.argv[1], 7001), timeout=30); s.sendall(data); s.close()
print(len(data), hashlib.sha256(data).hexdigest())
"""


@pytest.fixture(autouse=True)
def _needs_namespaces() -> None:
    why = emulation_unavailable()
    if why is not None:
        pytest.skip(why)


def three() -> object:
    return parse_scenario({
        "name": "three", "phy": {"width_mhz": 20, "spatial_streams": 1},
        "links": {"mode": "fixed", "mcs": 5},
        "stations": [{"name": "leader"}, {"name": "r1"}, {"name": "r2"}],
    })  # fmt: skip


def _echo(em: Emulation, station: str) -> None:
    em.start(station, [sys.executable, "-c", ECHO]).expect("up", timeout=30)


def test_real_udp_crosses_the_air_and_between_robots_through_the_ap() -> None:
    with Emulation(three(), seed=2) as em:  # type: ignore[arg-type]
        _echo(em, "leader")
        _echo(em, "r2")
        to_ap = em.run("r1", [sys.executable, "-c", CLIENT, "leader", "40", "200"])
        to_r2 = em.run("r1", [sys.executable, "-c", CLIENT, "r2", "20", "1400"])
        rep = em.stop()
    assert eval(to_ap) == list(range(40)) and eval(to_r2) == list(range(20))
    st = rep.data["per_station"]
    assert st["r1"]["sent_packets"] == 60  # 40 to the AP, 20 up towards r2
    assert st["r2"]["rx_frames"] == 20 and st["r2"]["sent_packets"] == 20
    assert rep.data["relayed"] == 40  # both directions between r1 and r2
    assert rep.data["frames_out"] == 120 and rep.data["no_route"] == 0


def test_gro_writes_carry_a_tcp_upload_intact_and_udp_as_before() -> None:
    """With ``gro`` the leader's stack gets the upload's segments coalesced (GSO packets
    through the virtio-net header), every byte once and in order; UDP both ways still
    crosses (the headers read are stripped, the ones written empty)."""
    with Emulation(three(), seed=2, gro=True) as em:  # type: ignore[arg-type]
        sink = em.start("leader", [sys.executable, "-c", TCP_SINK])
        sink.expect("up", timeout=30)
        sent = em.run("r1", [sys.executable, "-c", TCP_SOURCE, em.addr("leader"), "2000000"])
        got = sink.read_line(30)
        _echo(em, "leader")
        echoed = em.run("r2", [sys.executable, "-c", CLIENT, "leader", "20", "1400"])
        tcp = _tcp_counters(em, "leader")
        rep = em.stop()
    assert got.split() == sent.split() and got.split()[0] == "2000000"
    assert eval(echoed) == list(range(20))
    # the leader's kernel verified every coalesced packet's checksum and found none wrong
    assert tcp["InCsumErrors"] == 0 and tcp["InErrs"] == 0 and tcp["InSegs"] > 0
    d = rep.data
    assert d["gro"] is True and d["malformed"] == 0 and d["write_errors"] == 0
    # most of the upload went up as super-segments of several frames each
    assert d["gro_writes"] > 0 and d["gro_frames"] >= 3 * d["gro_writes"]
    assert d["gro_frames"] > 2_000_000 / 1500 / 2
    assert d["gro_frames"] < d["frames_out"]  # the acks, the handshake, UDP: one each


def _tcp_counters(em: Emulation, station: str) -> dict[str, int]:
    """The ``Tcp:`` counters of ``station``'s namespace (/proc/net/snmp)."""
    out = subprocess.run(["ip", "netns", "exec", em.ns(station), "cat", "/proc/net/snmp"],
                         capture_output=True, text=True, check=True, timeout=10).stdout  # fmt: skip
    names, values = (line.split()[1:] for line in out.splitlines() if line.startswith("Tcp:"))
    return dict(zip(names, map(int, values), strict=True))


def _rps(em: Emulation, station: str) -> int:
    path = f"/sys/class/net/{em.netns.ifname}/queues/rx-0/rps_cpus"
    out = subprocess.run(["ip", "netns", "exec", em.ns(station), "cat", path],
                         capture_output=True, text=True, check=True, timeout=10).stdout  # fmt: skip
    return int(out.strip().replace(",", ""), 16)


@pytest.mark.parametrize("split", [True, False])
def test_the_emulator_keeps_a_cpu_and_the_receivers_stacks_use_the_others(split: bool) -> None:
    allowed = os.sched_getaffinity(0)
    with Emulation(three(), seed=2, split_cpus=split) as em:  # type: ignore[arg-type]
        assert em.emulator is not None
        pinned = os.sched_getaffinity(em.emulator.pid)
        masks = {st: _rps(em, st) for st in em.stations}
        _echo(em, "leader")
        got = em.run("r1", [sys.executable, "-c", CLIENT, "leader", "20", "1400"])
        rep = em.stop()
    assert eval(got) == list(range(20))  # the packets steered elsewhere still arrive
    if split and len(allowed) >= 2:
        cpu = max(allowed)
        assert em.cpu_plan == (cpu, f"{sum(1 << c for c in allowed if c != cpu):x}")
        assert pinned == {cpu}
        assert set(masks.values()) == {sum(1 << c for c in allowed if c != cpu)}
        assert (rep.data["cpu"], rep.data["rps_cpus"]) == em.cpu_plan
    else:  # not asked, or one CPU: nothing pinned, nothing steered
        assert em.cpu_plan is None and pinned == allowed
        assert set(masks.values()) == {0}
        assert rep.data["cpu"] is None and rep.data["rps_cpus"] is None


def test_saturated_real_senders_carry_what_the_simulator_carries() -> None:
    n = 2
    sc = saturation_scenario(n, mcs=3)
    warm, window = 1.5, 2.0
    sims = [simulated_saturation(sc, uplinks(sc), warmup_s=warm, window_s=window, seed=s)
            for s in range(1, 9)]  # fmt: skip
    pps = 1.5 * statistics.fmean(sims) * 1e6 / 8 / sc.packet_bytes / n
    r = run_load(sc, uplinks(sc), pps=pps, warmup_s=warm, window_s=window, seed=3, tag=TAG)
    mean = statistics.fmean(sims)
    print(f"EMULATE SATURATION n={n} emulated {r.mbps:.3f} simulated {mean:.3f} Mb/s "
          f"lag p99 {r.report.lag_p99_ms:.3f} ms load {os.getloadavg()[0]:.1f}")  # fmt: skip
    assert abs(r.mbps - mean) <= _window_tolerance(sc, window, sims)
    assert r.report.data["per_station"]["ap"]["rx_frames"] > 0
    assert sum(r.blast["rx_payload_bytes"]) > 0  # the receiving socket got the data


def _frames(path: Path) -> list[tuple[int, int, int]]:
    import pyarrow.parquet as pq

    t = pq.read_table(path).to_pydict()
    return sorted(zip(t["fid"], t["outcome"], t["done_ns"], strict=True))


def test_a_live_run_replayed_from_its_arrivals_makes_the_same_decisions(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    sc = three()
    with Emulation(sc, seed=4, trace_dir=tmp_path, record_arrivals=True) as em:  # type: ignore[arg-type]
        _echo(em, "leader")
        _echo(em, "r2")
        em.run("r1", [sys.executable, "-c", CLIENT, "leader", "30", "1000"])
        # No listener on r1: ICMP port unreachable comes back, through the AP too.
        em.run("r2", [sys.executable, "-c", CLIENT, "r1", "10", "300", "0.1"])
        rep = em.stop()
    arrivals = read_arrivals(tmp_path / "arrivals.csv")
    assert len(arrivals) == rep.data["frames_in"] > 60
    air = Air(sc, seed=4)  # type: ignore[arg-type]
    log = FrameLog()
    air.log = log
    replay(air, arrivals, until_ns=round(rep.data["sim_s"] * 1e9))
    again = sorted(zip(log.cols["fid"], log.cols["outcome"], log.cols["done_ns"], strict=True))
    assert again == _frames(tmp_path / "frames.parquet")


def _ours(pid: int) -> list[str]:
    return sorted(p.name for p in Path("/run/netns").glob(f"{TAG}-{pid}-*"))


def _read_until(p: subprocess.Popen[bytes], needle: bytes, timeout: float) -> bytes:
    assert p.stderr is not None
    buf = b""
    deadline = time.monotonic() + timeout
    while needle not in buf and time.monotonic() < deadline:
        if select.select([p.stderr], [], [], 0.2)[0]:
            chunk = os.read(p.stderr.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
    assert needle in buf, buf.decode(errors="replace")[-2000:]
    return buf


def _stuck(p: subprocess.Popen[bytes]) -> str:
    """What keeps ``p`` from finishing: whether it exited, and every live process that
    is its descendant or holds one of its pipes (cmdline, state, kernel wait channel)."""
    pipes = {f"pipe:[{os.fstat(f.fileno()).st_ino}]" for f in (p.stdout, p.stderr) if f}
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    lines = [f"pid {p.pid} exit code {p.poll()}"]
    for pid, ppid in sorted(parent.items()):
        if pid == os.getpid():  # this test reads the pipes
            continue
        up, seen = ppid, 0
        while up not in (0, 1, p.pid) and seen < 64:  # bounded walk to the root
            up, seen = parent.get(up, 0), seen + 1
        d = Path(f"/proc/{pid}")
        try:
            holds = any(os.readlink(f) in pipes for f in (d / "fd").iterdir())
            if up != p.pid and pid != p.pid and not holds:
                continue
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = (d / "wchan").read_text()
        except OSError:
            continue
        lines.append(
            f"{pid} (parent {ppid}, {state}, {wchan}{', holds its pipe' if holds else ''}"
            f"): {cmd[:200]}"
        )
    return "\n".join(lines)


def _cli(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*COORP, "emulate", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip


@pytest.fixture
def reaped() -> Iterator[None]:
    yield
    remove_stale(TAG)


def test_kill_9_leaves_namespaces_that_the_next_start_removes(reaped: None) -> None:
    p = _cli("example-minimal", "--duration", "120", "-q", "--run", "robot=sleep 300")
    try:
        _read_until(p, b"(station)", 60)
        left = _ours(p.pid)
        assert left
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    # The emulator process died with its parent (its TUN interfaces with it) ...
    mine = f"{TAG}-{p.pid}-"  # in the emulator's config path

    def emulator_alive() -> bool:
        return any(mine in c for c in _cmdlines("coorp.emulate._serve"))

    deadline = time.monotonic() + 20
    while emulator_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not emulator_alive()
    # ... the namespaces stayed, with what runs inside (sleep was not the CLI's child) ...
    assert _ours(p.pid) == left
    # ... and the next start removes them.
    q = _cli("example-minimal", "--duration", "0.5", "-q")
    _, err = q.communicate(timeout=120)
    assert q.returncode == 0, err.decode()
    assert "removed what dead runs left" in err.decode()
    assert _ours(p.pid) == [] and _ours(q.pid) == []


def _cmdlines(needle: str) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                c = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if needle in c:
                out.append(c)
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_remove_everything(sig: signal.Signals, reaped: None) -> None:
    p = _cli("example-minimal", "-q")
    try:
        _read_until(p, b"(station)", 60)
        assert _ours(p.pid)
        p.send_signal(sig)
        try:
            # Longer than the CLI's own 60 s wait for the emulator: a stuck emulator shows
            # as the CLI's error, anything else as what holds the CLI's pipes.
            _, err = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"coorp emulate did not finish after {sig.name}: {_stuck(p)}")
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode in (0, 130), err.decode()
    assert b"real time" in err.lower() or b"REAL TIME" in err  # the verdict was printed
    assert _ours(p.pid) == []


@pytest.mark.parametrize("gro", [None, "--gro", "--no-gro"])
def test_a_command_runs_in_a_station_and_its_exit_code_is_returned(
    gro: str | None, tmp_path: Path
) -> None:
    p = subprocess.run(
        [*COORP, "emulate", "example-minimal", "-q", "--json", str(tmp_path / "r.json"),
         *([gro] if gro else []), "--at", "robot", "--",
         sys.executable, "-c", "import os, socket; print(socket.gethostbyname('leader'), "
         "os.environ['COORP_EMU_ADDR_robot']); raise SystemExit(3)"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 3, p.stderr
    assert p.stdout.split() == ["10.77.0.1", "10.77.0.11"]
    want = GRO_DEFAULT if gro is None else gro == "--gro"
    assert json.loads((tmp_path / "r.json").read_text())["report"]["gro"] is want
