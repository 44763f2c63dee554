"""``coorp doctor``: what this host will do to LS packets, and how to fix it.

:func:`diagnose` looks at the interface that carries traffic to the team (the route to
the leader, or the one named) and returns :class:`Finding` objects — a check, a status
(``ok``, ``warn``, ``fail``, ``info``), what was found and, where something is wrong,
the fix:

* **link**: wireless or not (``/sys/class/net/IF/wireless``), and WiFi power save,
  which delays every frame the station receives by up to a beacon interval (~100 ms);
* **qdisc**: the queueing discipline on the interface and what it does to LS packets;
* **marking**: how Linux picks the 802.11 user priority — ``skb->priority`` 256–263
  directly (what Coorp sets: 262 → UP 6, AC_VO), else from the DSCP — and what the
  access point does downstream (DSCP);
* **mtu**: an LS message above the path MTU travels as IP fragments (one lost
  fragment loses the message; ``ipfrag_time`` keeps the others 30 s);
* **transparent**: whether transparent mode can run here — CAP_NET_ADMIN and
  CAP_NET_RAW, nf_tables with NAT redirect in output and prerouting (a probe table is
  created and deleted), packet sockets, the cgroup v2 hierarchy, pyroute2 — and what
  the team file selects;
* **cpu**: whether the agent may take a larger CPU share (``agent.scheduling``: a
  lower nice value, a real-time class), so that its LS observation and pacing are not
  starved when the robot's CPUs are busy;
* **leader**: with a team file, whether the leader answers at ``agent.leader`` (a TCP
  connection and, with a key, an authenticated observer query that disturbs nothing);
  with ``robot``, the robot's own key is used (so a wrong or missing key shows here),
  and the ports its agent will listen on are checked to be free.

Every check reads the host; nothing is changed but the probe table, which is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import resource
import shutil
import socket
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from .._config import TeamConfig
from .._errors import RefusedError
from .._priority import scheduling_check
from .._selectors import Match
from ..inbox import ReceiverLimits
from ..leader import query_leader_stats
from ..robot import team_settings
from ..wire import Keyring, parse_address
from ._budget import FDS_PER_FLOW, fd_plan
from ._nfqueue import SynQueue
from ._nft import NftTable, TransparentUnavailableError, cgroup2_root
from ._ruleset import build_ruleset

__all__ = ["Finding", "diagnose", "route_interface"]

Status = Literal["ok", "warn", "fail", "info"]
_CAP_NET_ADMIN, _CAP_NET_RAW = 12, 13


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    status: Status
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def route_interface(host: str) -> tuple[str | None, str | None]:
    """The interface (and source address) the kernel would use to reach ``host``."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            src = s.getsockname()[0]
    except OSError:
        return None, None
    for _, name in socket.if_nameindex():
        if src in _addresses(name):
            return name, src
    return None, src


def _addresses(ifname: str) -> set[str]:
    try:
        from pyroute2 import IPRoute
    except ImportError:
        out = _run(["ip", "-o", "addr", "show", "dev", ifname]) or ""
        return {w.split("/")[0] for line in out.splitlines() for w in line.split()[3:4]}
    with IPRoute() as ip:
        idx = ip.link_lookup(ifname=ifname)
        if not idx:
            return set()
        return {a.get_attr("IFA_ADDRESS") for a in ip.get_addr(index=idx[0])}


def _run(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def _caps() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def _link(ifname: str) -> list[Finding]:
    sysdir = Path("/sys/class/net") / ifname
    wireless = (sysdir / "wireless").exists() or (sysdir / "phy80211").exists()
    if not wireless:
        return [
            Finding(
                "link",
                "info",
                f"{ifname} is not a WiFi interface: no access categories on it; LS and "
                "bulk share its queue unless the qdisc separates them",
            )
        ]
    out = [Finding("link", "ok", f"{ifname} is a WiFi interface (802.11 access categories)")]
    ps = _run(["iw", "dev", ifname, "get", "power_save"])
    if ps is None:
        out.append(
            Finding(
                "power_save",
                "warn",
                "cannot read WiFi power save (the `iw` tool is missing)",
                f"install iw and run `iw dev {ifname} get power_save`",
            )
        )
    elif "on" in ps.lower():
        out.append(
            Finding(
                "power_save",
                "fail",
                f"power save is ON on {ifname}: frames to this robot wait for the next "
                "beacon (up to ~100 ms) — a latency killer for control loops",
                f"iw dev {ifname} set power_save off (and make it persistent in "
                "NetworkManager: wifi.powersave = 2)",
            )
        )
    else:
        out.append(Finding("power_save", "ok", f"power save is off on {ifname}"))
    return out


def _qdisc(ifname: str) -> Finding:
    kind = None
    try:
        from pyroute2 import IPRoute

        with IPRoute() as ip:
            idx = ip.link_lookup(ifname=ifname)
            if idx:
                roots = [q for q in ip.get_qdiscs(index=idx[0]) if q["parent"] == 0xFFFFFFFF]
                kind = roots[0].get_attr("TCA_KIND") if roots else "noqueue"
    except ImportError:
        out = _run(["tc", "qdisc", "show", "dev", ifname]) or ""
        kind = out.split()[1] if out.split() else None
    if kind is None:
        return Finding("qdisc", "warn", f"cannot read the qdisc of {ifname}")
    notes = {
        "noqueue": "no queue in the kernel: packets go straight to the driver (veth, "
        "virtual links)",
        "mq": "one child qdisc per hardware queue (the WiFi default: mq + fq_codel, where "
        "a sparse LS flow is served ahead of bulk)",
        "fq_codel": "fair queueing: a sparse LS flow is served ahead of bulk flows",
        "pfifo_fast": "three bands by priority: Coorp's LS priority 262 (low bits 6) goes "
        "to band 0, ahead of bulk; with ls_category = AC_VI, 261 (low bits 5) goes to band "
        "2, behind it (use fq_codel)",
        "fq": "fair queueing: a sparse LS flow is served ahead of bulk flows",
        "cake": "fair queueing with DSCP tins: CS6 is served in the voice tin",
        "tbf": "a single FIFO with a rate limit: LS waits behind every bulk byte queued",
        "htb": "classes by filter: LS waits behind bulk unless a class separates them",
    }
    status: Status = "warn" if kind in ("tbf", "htb", "pfifo", "bfifo") else "ok"
    fix = (
        f"give LS its own class or use fq_codel/cake (tc qdisc replace dev {ifname} root fq_codel)"
        if status == "warn"
        else ""
    )
    return Finding("qdisc", status, f"{ifname}: {kind} — {notes.get(kind, 'see tc-' + kind)}", fix)


def _marking() -> Finding:
    return Finding(
        "marking",
        "info",
        "Linux (cfg80211) takes the 802.11 user priority from skb->priority when it is "
        "256-263 (UP = priority - 256) and otherwise from the DSCP; Coorp sets priority "
        "262 (UP 6, AC_VO) and DSCP CS6 on LS packets (its LS channels, and in transparent "
        "mode a kernel rule for every LS packet whatever the application set), or with "
        "ls_category = AC_VI priority 261 (UP 5) and CS5. The access point picks the "
        "downlink AC from the DSCP: CS6 maps to AC_VO, CS5 to AC_VI on most APs "
        f"(RFC 8325). Kernel {platform.release()}.",
    )


def _mtu(ifname: str, ls_bytes: int) -> Finding:
    try:
        mtu = int((Path("/sys/class/net") / ifname / "mtu").read_text())
    except (OSError, ValueError):
        return Finding("mtu", "warn", f"cannot read the MTU of {ifname}")
    room = mtu - 20 - 8  # IPv4 + UDP headers
    if ls_bytes <= room:
        return Finding("mtu", "ok", f"MTU {mtu}: an LS message of {ls_bytes} B fits in one packet")
    frags = -(-(ls_bytes + 8) // (mtu - 20))
    try:
        ipfrag = Path("/proc/sys/net/ipv4/ipfrag_time").read_text().strip()
    except OSError:
        ipfrag = "?"
    return Finding(
        "mtu",
        "warn",
        f"MTU {mtu}: an LS message of {ls_bytes} B travels as {frags} IP fragments; losing "
        f"one loses the message, and the others wait ipfrag_time = {ipfrag} s",
        "keep LS messages under the MTU where you can (compress, split), or lower "
        "net.ipv4.ipfrag_time (e.g. sysctl -w net.ipv4.ipfrag_time=1)",
    )


def _transparent(config: TeamConfig | None) -> list[Finding]:
    out: list[Finding] = []
    caps = _caps()
    missing = [n for n, b in (("CAP_NET_ADMIN", _CAP_NET_ADMIN), ("CAP_NET_RAW", _CAP_NET_RAW))
               if not caps >> b & 1]  # fmt: skip
    if missing:
        out.append(
            Finding(
                "transparent",
                "fail",
                f"this process lacks {' and '.join(missing)}: transparent mode installs kernel "
                "rules and reads a packet socket",
                "run the agent as root, or: setcap cap_net_admin,cap_net_raw+ep on its python",
            )
        )
        return out
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return [
            Finding(
                "transparent",
                "fail",
                "pyroute2 is not installed (the netlink library transparent mode uses)",
                "pip install 'coorp[transparent]'",
            )
        ]
    probe = build_ruleset(
        f"doctor-{os.getpid()}",
        [Match(proto="udp", dport=(9, 9))],
        [Match(proto="tcp", dport=(9, 9))],
        relay_port=9,
        relay_mark=1,
        coorp_ports=(),
        serve=[Match(proto="tcp", dport=(9, 9))],
        inbound_port=8,
    )

    compat: list[bool] = []

    async def try_table() -> None:  # the probe, noting how SYNs are queued here
        table = NftTable(probe)
        try:
            await table.install()
            compat.append(table.compat_queue)
        finally:
            with contextlib.suppress(Exception):
                await table.remove()
            table.close()

    try:
        asyncio.run(try_table())
        how = "xtables' NFQUEUE via nft_compat" if compat and compat[0] else "nft queue"
        out.append(
            Finding(
                "nf_tables",
                "ok",
                f"nf_tables with marking, NAT redirect (output and prerouting), the SYN "
                f"queue ({how}) and rejects works here",
            )
        )
    except TransparentUnavailableError as exc:
        out.append(Finding("nf_tables", "fail", str(exc), "a kernel with nf_tables and NAT"))
    out.append(_syn_queue())
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(3)).close()
        out.append(Finding("packet_socket", "ok", "packet sockets work (LS sends observed)"))
    except OSError as exc:
        out.append(Finding("packet_socket", "fail", f"no packet socket: {exc.strerror}"))
    root = cgroup2_root()
    out.append(
        Finding("cgroup", "ok", f"cgroup v2 at {root}: cgroup selectors work")
        if root is not None
        else Finding("cgroup", "info", "no cgroup v2 hierarchy mounted: select by uid, gid or port")
    )
    if config is not None:
        out.append(_selectors(config))
    return out


def _syn_queue() -> Finding:
    """Can this process hold SYNs in the kernel (bind an ``nfnetlink_queue``)?"""
    queue = SynQueue(60000 + os.getpid() % 5000, lambda syn: None, maxlen=1)
    try:
        queue.open()
    except OSError as exc:
        return Finding(
            "syn_queue",
            "fail",
            f"cannot bind an nfnetlink_queue ({exc.strerror or exc}): the relay decides each "
            "bulk connection before its handshake there",
            "a kernel with CONFIG_NETFILTER_NETLINK_QUEUE, and CAP_NET_ADMIN",
        )
    finally:
        queue.close()
    return Finding("syn_queue", "ok", "nfnetlink_queue works (bulk SYNs held until decided)")


def _fd_limit(config: TeamConfig | None) -> Finding:
    """What the fd limit lets the relay hold, after the agent raises its soft limit to
    the hard one (as far as it needs)."""
    t = config.transparent if config is not None else None
    configured = t.relay_max_flows if t is not None else 1024
    inbox = ReceiverLimits().max_connections
    if config is not None:
        inbox = team_settings(config).receiver.max_connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    plan = fd_plan(configured=configured, inbox_connections=inbox)
    top = hard if hard != resource.RLIM_INFINITY else 1 << 30
    at_hard = max(0, min(configured, (min(top, plan.reserve + FDS_PER_FLOW * configured)
                                      - plan.reserve) // FDS_PER_FLOW))  # fmt: skip
    detail = (
        f"nofile soft {soft}, hard {hard}: {plan.reserve} fds kept for the leader link, "
        f"the inbox ({inbox} connections) and LS; the relay may hold {at_hard} connections "
        f"at once (relay_max_flows {configured}; beyond, new ones are refused at their SYN)"
    )
    if at_hard >= configured:
        return Finding("fd_limit", "ok", detail)
    return Finding(
        "fd_limit",
        "warn" if at_hard > 0 else "fail",
        detail,
        f"raise the agent's limit to {plan.reserve + FDS_PER_FLOW * configured} "
        "(systemd: LimitNOFILE=), or lower transparent.relay_max_flows",
    )


def _selectors(config: TeamConfig) -> Finding:
    t = config.transparent
    if t is None:
        return Finding("selectors", "info", "the team file has no [transparent] section")
    ls, bulk = t.ls_matches(), t.bulk_matches(config.team_hosts())
    return Finding(
        "selectors",
        "ok",
        f"[transparent]: {len(ls)} LS match(es), {len(bulk)} bulk match(es) "
        "(coorp agent --transparent --show-rules prints the kernel rules)",
    )


def _cpu() -> Finding:
    nice_ok, _rt_ok, detail = scheduling_check()
    if nice_ok:
        return Finding("cpu", "ok", f"the agent may take a larger CPU share: {detail}")
    return Finding(
        "cpu",
        "warn",
        f"the agent cannot raise its CPU share: {detail}; on a busy CPU its pacing and LS "
        "observation wait behind other processes",
        "run the agent as root or with CAP_SYS_NICE, or allow it: ulimit -e 30 (RLIMIT_NICE; "
        "systemd: LimitNICE=-10 or Nice=-10 / CPUWeight=1000 in its unit)",
    )


def _leader(config: TeamConfig, key: Keyring | None, robot: str | None) -> Finding:
    target = config.agent.leader
    if target is None:
        return Finding("leader", "info", "no agent.leader in the team file: no permits")
    host, port = parse_address(target)
    try:
        with socket.create_connection((host, port), timeout=2.0):
            pass
    except OSError as exc:
        # Not a fault of this host: its agent would run uncoordinated until the leader
        # is back (docs/runtime.md), and say so.
        return Finding(
            "leader",
            "warn",
            f"the leader at {target} (agent.leader) is not reachable: {exc.strerror or exc}",
            "start `coorp leader` there, or fix agent.leader / the route to it",
        )
    if key is None:
        return Finding("leader", "ok", f"the leader at {target} accepts connections")
    who = f"robot {robot}'s key" if robot else "the team key"
    try:
        stats = query_leader_stats(target, key, timeout_s=3.0)
    except RefusedError as exc:
        return Finding("leader", "fail", f"the leader at {target} refused {who}: {exc}",
                       "check the key file (coorp keys) and team.robots")  # fmt: skip
    except Exception as exc:  # a check must report, never crash
        return Finding("leader", "warn", f"the leader at {target} did not answer: {exc}")
    joined = stats.counters.get("agents", 0)
    return Finding(
        "leader",
        "ok",
        f"the leader at {target} answers and accepts {who} ({joined} agent(s) joined, "
        f"permit {', '.join(stats.holders) or 'free'})",
    )


def _ports(config: TeamConfig, transparent: bool) -> list[Finding]:
    """The agent's ports must be free (its own agent not running)."""
    wanted = [("agent.listen", config.agent.listen, socket.SOCK_STREAM),
              ("agent.listen", config.agent.listen, socket.SOCK_DGRAM)]  # fmt: skip
    t = config.transparent
    if transparent and t is not None:
        wanted.append(("transparent.relay_port", f"127.0.0.1:{t.relay_port}", socket.SOCK_STREAM))
        if any(b.server_side for b in t.bulk):
            wanted.append(("transparent.inbound_relay_port", f"0.0.0.0:{t.inbound_relay_port}",
                           socket.SOCK_STREAM))  # fmt: skip
    out = []
    for what, addr, kind in wanted:
        host, port = parse_address(addr)
        with socket.socket(socket.AF_INET, kind) as s:
            if kind == socket.SOCK_STREAM:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                proto = "TCP" if kind == socket.SOCK_STREAM else "UDP"
                why = f"{what} {addr} ({proto}): {exc.strerror}"
                out.append(Finding("ports", "fail", why, "stop what uses it (another agent?)"))
    if not out:
        free = ", ".join(sorted({a for _, a, _ in wanted}))
        out.append(Finding("ports", "ok", f"the agent's ports are free: {free}"))
    return out


def diagnose(
    *,
    config: TeamConfig | None = None,
    interface: str | None = None,
    ls_bytes: int = 12_000,
    robot: str | None = None,
    key: Keyring | None = None,
) -> tuple[str | None, list[Finding]]:
    """Every check for ``interface`` (default: the route to the team file's leader);
    returns the interface examined and the findings. With ``robot`` (and its ``key``),
    also the checks an agent of that robot would meet: its ports, the leader."""
    out: list[Finding] = []
    if interface is None:
        target = config.agent.leader if config is not None else None
        host = parse_address(target)[0] if target else "192.0.2.1"
        interface, src = route_interface(host)
        if interface is None:
            out.append(
                Finding(
                    "route",
                    "fail",
                    f"no route to {host}" + ("" if target else " (no agent.leader given)"),
                    "name the interface: coorp doctor --interface wlan0",
                )
            )
        else:
            what = f"the leader {host}" if target else "the default route"
            out.append(Finding("route", "info", f"{what} is reached over {interface} from {src}"))
    elif not (Path("/sys/class/net") / interface).exists():
        out.append(Finding("route", "fail", f"no interface {interface!r} on this host"))
        interface = None
    if interface is not None:
        out += _link(interface)
        out.append(_qdisc(interface))
        out.append(_mtu(interface, ls_bytes))
    out.append(_marking())
    out += _transparent(config)
    out.append(_fd_limit(config))
    out.append(_cpu())
    if config is not None:
        out.append(_leader(config, key, robot))
        if robot is not None:
            out += _ports(config, transparent=config.transparent is not None)
    return interface, out


def findings_json(interface: str | None, findings: list[Finding]) -> dict[str, Any]:
    return {"interface": interface, "findings": [f.to_json() for f in findings]}
