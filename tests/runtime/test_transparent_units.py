"""Transparent mode's pieces without the kernel: selectors and the team file, the rules
they compile to, what a copied LS packet says, how packets group into sends, and the
relay on loopback (its original-destination lookup injected)."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from coorp.runtime import TeamFileError, load_team_config
from coorp.runtime._selectors import (
    DSCP_NAMES,
    BulkSelector,
    LsSelector,
    TransparentSection,
    dds_port_range,
    parse_ports,
)
from coorp.runtime.robot._coordination import Coordinator
from coorp.runtime.robot._link import LinkState
from coorp.runtime.robot._pacing import BulkSettings
from coorp.runtime.transparent._admission import Ticket
from coorp.runtime.transparent._budget import BufferPool
from coorp.runtime.transparent._endings import hold_reset
from coorp.runtime.transparent._identity import Identity
from coorp.runtime.transparent._observe import (
    LsPacket,
    PacketObserver,
    SendGrouper,
    parse_ls_packet,
)
from coorp.runtime.transparent._relay import Relay
from coorp.runtime.transparent._ruleset import LS_PRIORITY, build_ruleset

# -- selectors ---------------------------------------------------------------------------------


def test_dds_preset_is_the_rtps_port_range_of_its_domain() -> None:
    # DDSI-RTPS 9.6.1.1: PB 7400, DG 250; user unicast of participant i: PB+DG*d+11+2i.
    assert dds_port_range(0) == (7400, 7649)
    assert dds_port_range(3) == (8150, 8399)
    m, rtps = LsSelector(preset="dds", domain_id=3).matches()
    assert (m.proto, m.dport) == ("udp", (8150, 8399))
    assert m.dport[1] >= 7400 + 250 * 3 + 11 + 2 * 119  # every participant fits
    # Cyclone DDS's default unicast ports are ephemeral (ParticipantIndex none): RTPS
    # datagrams to any port, by the protocol id after the UDP header.
    assert (rtps.proto, rtps.dport, rtps.rtps) == ("udp", None, True)
    assert rtps.render() == "meta l4proto udp @th,64,32 0x52545053"
    (only,) = LsSelector(preset="dds", domain_id=3, any_port=False).matches()
    assert only == m


def test_the_rtps_match_compiles_to_the_protocol_id_after_the_udp_header() -> None:
    from coorp.runtime.transparent._nft import _match_exprs

    (_, rtps) = LsSelector(preset="dds").matches()
    exprs = _match_exprs(rtps, None)
    names = [e["attrs"][0][1] for e in exprs]
    assert names == ["meta", "cmp", "payload", "cmp"]
    load = dict(exprs[2]["attrs"][1][1]["attrs"])
    assert (load["NFTA_PAYLOAD_BASE"], load["NFTA_PAYLOAD_OFFSET"], load["NFTA_PAYLOAD_LEN"]) == (
        2, 8, 4,  # transport header, 8 bytes in: the UDP payload's first 4 bytes
    )  # fmt: skip
    value = dict(exprs[3]["attrs"][1][1]["attrs"])["NFTA_CMP_DATA"]["attrs"][0][1]
    assert value == b"RTPS"


def test_zenoh_preset_matches_its_tcp_port_in_both_directions() -> None:
    ms = LsSelector(preset="zenoh").matches()
    assert [(m.proto, m.dport, m.sport) for m in ms] == [
        ("tcp", (7447, 7447), None),
        ("tcp", None, (7447, 7447)),
    ]
    ms = LsSelector(preset="zenoh", ports="7500").matches()
    assert {m.dport or m.sport for m in ms} == {(7500, 7500)}


def test_selectors_render_in_nft_syntax() -> None:
    assert LsSelector(ports="9000-9010", to="10.0.0.0/8").matches()[0].render() == (
        "ip daddr 10.0.0.0/8 udp dport 9000-9010"
    )
    assert LsSelector(dscp="ef", uid=1000).matches()[0].render() == "meta skuid 1000 ip dscp ef"
    cg = LsSelector(cgroup="/system.slice//ros2.service/").matches()[0]
    assert cg.render() == 'socket cgroupv2 level 2 "system.slice/ros2.service"'
    hosts = ["192.168.50.1", "192.168.50.12"]
    assert [m.render() for m in BulkSelector(to_team=True, ports=29500).matches(hosts)] == [
        "ip daddr 192.168.50.1 tcp dport 29500",
        "ip daddr 192.168.50.12 tcp dport 29500",
    ]


def test_ports_and_dscp_parse_or_say_what_is_allowed() -> None:
    assert parse_ports(80) == (80, 80)
    assert parse_ports(" 7400 - 7410 ") == (7400, 7410)
    assert DSCP_NAMES["cs6"] == 48 and DSCP_NAMES["ef"] == 46 and DSCP_NAMES["af41"] == 34
    for bad in ("0", "70000", "9-3", "x", True):
        with pytest.raises(ValueError, match=r"1\.\.65535|port"):
            parse_ports(bad)  # type: ignore[arg-type]


TEAM = """
[team]
robots = ["leader", "r1"]
key_file = "team.key"
{hosts}
[agent]
leader = "10.0.0.1:7300"
listen = "0.0.0.0:7301"
[leader]
listen = "0.0.0.0:7300"
[transparent]
{body}
"""


def _team(tmp_path: Path, body: str, hosts: str = "") -> Path:
    path = tmp_path / "team.toml"
    path.write_text(TEAM.format(body=body, hosts=hosts))
    return path


@pytest.mark.parametrize(
    ("body", "hosts", "field", "says"),
    [
        ('ls = [{ ports = "99999" }]', "", "transparent.ls[0].ports", "1..65535"),
        ("ls = [{}]", "", "transparent.ls[0]", "at least one of"),
        ("bulk = [{ uid = 5, nope = 1 }]", "", "transparent.bulk[0].nope", "unknown key"),
        (
            'bulk = [{ ports = 9000, proto = "udp" }]',
            "",
            "transparent.bulk[0].proto",
            "TCP connections only",
        ),
        ('ls = [{ preset = "dds", ports = 7400 }]', "", "transparent.ls[0]", "preset 'dds'"),
        (
            'ls = [{ preset = "zenoh", any_port = false }]',
            "",
            "transparent.ls[0]",
            "any_port applies to preset = 'dds' only",
        ),
        ('ls = [{ dscp = "gold" }]', "", "transparent.ls[0].dscp", "unknown DSCP name"),
        ('ls = [{ to = "robot-1" }]', "", "transparent.ls[0].to", "IPv4 address or CIDR"),
        ("bulk = [{ to_team = true }]", "", "transparent", "team.hosts is empty"),
        ("", "", "transparent", "at least one selector"),
        ("bulk = [{ ports = 1 }]", 'hosts = { r9 = "10.0.0.9" }', "", "not in team.robots"),
        (
            'ls = [{ preset = "dds" }]\nrelay_port = 7412',
            "",
            "",
            "relay_port = 7412 is an RTPS port of DDS domain 0",
        ),
    ],
)
def test_bad_transparent_sections_name_field_and_value(
    tmp_path: Path, body: str, hosts: str, field: str, says: str
) -> None:
    with pytest.raises(TeamFileError) as err:
        load_team_config(_team(tmp_path, body, hosts))
    text = str(err.value)
    assert str(tmp_path / "team.toml") in text
    assert field in text and says in text


def test_a_dds_preset_refuses_coorp_ports_inside_the_domain(tmp_path: Path) -> None:
    path = _team(tmp_path, 'ls = [{ preset = "dds", domain_id = 0 }]')
    path.write_text(path.read_text().replace("7301", "7401"))
    with pytest.raises(TeamFileError, match=r"agent\.listen = 7401 is an RTPS port"):
        load_team_config(path)
    path.write_text(path.read_text().replace("7401", "7405"))  # offsets 2..9: never bound
    assert load_team_config(path).agent.listen == "0.0.0.0:7405"


def test_a_good_section_loads(tmp_path: Path) -> None:
    cfg = load_team_config(
        _team(
            tmp_path,
            'ls = [{ preset = "zenoh" }]\nbulk = [{ to_team = true }]\nrelay_port = 7310',
            'hosts = { leader = "10.0.0.1", r1 = "10.0.0.11" }',
        )
    )
    assert cfg.transparent is not None
    assert cfg.team_hosts(besides="r1") == ["10.0.0.1"]
    bulk = cfg.transparent.bulk_matches(cfg.team_hosts(besides="r1"))
    assert [m.render() for m in bulk] == ["ip daddr 10.0.0.1 meta l4proto tcp"]


# -- the rules -----------------------------------------------------------------------------------


def test_ruleset_marks_ls_and_redirects_bulk_after_every_exception() -> None:
    sec = TransparentSection(ls=[{"preset": "zenoh"}], bulk=[{"ports": 9000}])
    rs = build_ruleset(
        "r1",
        sec.ls_matches(),
        sec.bulk_matches([]),
        relay_port=7409,
        relay_mark=0xC0F,
        coorp_ports=(7300, 7301),
    )
    # The same exceptions come first in both chains: the relay's own connections, this
    # host itself (loopback, its addresses: the relay never relays to itself), Coorp's
    # ports, LS flows.
    exceptions = [
        '    meta mark 0xc0f counter return comment "relay\'s own"',
        '    fib daddr type local counter return comment "this host (never relayed)"',
        '    tcp dport 7300 counter return comment "coorp\'s own port 7300"',
        '    tcp dport 7301 counter return comment "coorp\'s own port 7301"',
        '    tcp dport 7447 counter return comment "ls 0 (never bulk)"',
        '    tcp sport 7447 counter return comment "ls 1 (never bulk)"',
    ]
    assert rs.render().splitlines() == [
        "table ip coorp-r1 {",
        "  chain ls_mark {",
        "    type filter hook output priority mangle; policy accept;",
        '    tcp dport 7447 counter meta priority set 0:106 ip dscp set cs6 comment "ls 0"',
        '    tcp sport 7447 counter meta priority set 0:106 ip dscp set cs6 comment "ls 1"',
        "  }",
        "  chain bh_gate {",
        "    type filter hook output priority -120; policy accept;",
        '    meta mark 0xc10 counter reject with tcp reset comment "refused: reset"',
        "    meta mark 0xc11 counter reject with icmp type host-unreachable comment "
        '"refused: host-unreachable"',
        "    meta mark 0xc12 counter reject with icmp type net-unreachable comment "
        '"refused: net-unreachable"',
        "    meta mark 0xc13 counter reject with icmp type admin-prohibited comment "
        '"refused: admin-prohibited"',
        *exceptions,
        "    tcp dport 9000 tcp flags & (syn | ack) == syn counter queue num 7409 bypass comment "
        '"bulk 0"',
        "  }",
        "  chain bh_redirect {",
        "    type nat hook output priority dstnat; policy accept;",
        *exceptions,
        '    tcp dport 9000 counter redirect to :7409 comment "bulk 0"',
        "  }",
        "}",
    ]
    assert LS_PRIORITY == 256 + 6  # cfg80211: priority 256+UP selects UP directly


def test_udp_ls_needs_no_nat_exception() -> None:
    sec = TransparentSection(ls=[{"preset": "dds"}], bulk=[{"ports": 9000}])
    rs = build_ruleset("r", sec.ls_matches(), sec.bulk_matches([]), relay_port=1, relay_mark=1,
                       coorp_ports=())  # fmt: skip
    assert [r.label for r in rs.bh_redirect] == ["relay's own", "this host (never relayed)",
                                                 "bulk 0"]  # fmt: skip


# -- what a copied packet says ---------------------------------------------------------------------


def _ipv4(proto: int, l4: bytes, *, frag: int = 0, total: int | None = None) -> bytes:
    total = total if total is not None else 20 + len(l4)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0xC0, total, 1, frag, 64, proto, 0,
                      socket.inet_aton("10.0.0.11"), socket.inet_aton("10.0.0.1"))  # fmt: skip
    return hdr + l4


def _rtps(writer: bytes, prefix: bytes = bytes(range(12))) -> bytes:
    head = b"RTPS" + b"\x02\x03" + b"\x01\x10" + prefix
    info_ts = bytes([0x09, 0x01]) + (8).to_bytes(2, "little") + bytes(8)
    # DATA: extraFlags, octetsToInlineQos, readerId, writerId, writerSN
    body = bytes(4) + bytes(4) + writer + bytes(8)
    data = bytes([0x15, 0x05]) + len(body).to_bytes(2, "little") + body
    return head + info_ts + data


def test_a_udp_datagram_is_one_send_of_its_whole_size() -> None:
    udp = struct.pack("!HHHH", 40000, 9001, 8 + 12_000, 0) + bytes(100)
    pkt = parse_ls_packet(_ipv4(17, udp, frag=0x2000, total=1500))  # first fragment, MF set
    assert pkt == LsPacket("udp 10.0.0.1:9001<40000", 12_000)
    later = _ipv4(17, bytes(100), frag=0x2000 | 185)  # offset 1480: not a new send
    assert parse_ls_packet(later) is None


def test_rtps_datagrams_are_flows_per_writer() -> None:
    def flow(writer: bytes) -> str:
        rtps = _rtps(writer)
        udp = struct.pack("!HHHH", 40000, 7411, 8 + len(rtps), 0) + rtps
        pkt = parse_ls_packet(_ipv4(17, udp))
        assert pkt is not None
        return pkt.flow

    a, b = flow(b"\x00\x00\x01\x03"), flow(b"\x00\x00\x02\x03")
    assert a.startswith("rtps 000102030405060708090a0b/") and a != b


def test_tcp_segments_without_payload_are_not_sends() -> None:
    tcp = struct.pack("!HHIIBBHHH", 7447, 50000, 1, 1, 5 << 4, 0x10, 1000, 0, 0)
    assert parse_ls_packet(_ipv4(6, tcp)) is None
    seg = parse_ls_packet(_ipv4(6, tcp + bytes(1200)))
    assert seg == LsPacket("tcp 10.0.0.1:50000<7447", 1200)
    assert parse_ls_packet(b"\x60" + bytes(40)) is None  # IPv6: not ours
    assert parse_ls_packet(_ipv4(1, bytes(8))) is None  # ICMP


def test_packets_close_together_are_one_send_and_small_bursts_none() -> None:
    g = SendGrouper(burst_gap_ns=1_000_000, min_bytes=200)
    big, ack = LsPacket("f", 1448), LsPacket("f", 60)
    # A message in three segments, then a lone acknowledgement, then the next message.
    assert g.packet(10_000_000, big) == 10_000_000
    assert g.packet(10_300_000, big) is None
    assert g.packet(10_600_000, big) is None
    assert g.packet(20_000_000, ack) is None
    assert g.packet(43_000_000, LsPacket("f", 150)) is None  # not yet 200 bytes...
    assert g.packet(43_500_000, LsPacket("f", 150)) == 43_000_000  # ...now: from its start
    assert (g.packets, g.sends, g.small) == (6, 2, 1)


def test_observer_feeds_the_planner_with_each_send() -> None:
    seen: list[tuple[str, int]] = []
    obs = PacketObserver(lambda f, t: seen.append((f, t)), SendGrouper(burst_gap_ns=0,
                                                                       min_bytes=0))  # fmt: skip
    udp = struct.pack("!HHHH", 1, 2, 8 + 500, 0) + bytes(500)
    obs.feed(_ipv4(17, udp), 5)
    obs.feed(b"junk", 6)
    assert seen == [("udp 10.0.0.1:2<1", 5)]
    assert obs.counters == {"packets": 2, "sends": 1, "ignored": 1, "read_errors": 0}


# -- the relay on loopback --------------------------------------------------------------------


class Sink:
    """A TCP server that hashes what it receives, answers with its digest after the
    client's half-close, then closes (or resets, if told)."""

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.digest = ""
        self.nbytes = 0
        self.reset_after: int | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        h = hashlib.sha256()
        try:
            await self._read(r, w, h)
        except ConnectionResetError:
            self.done.set()

    async def _read(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, h: Any) -> None:
        while data := await r.read(65536):
            h.update(data)
            self.nbytes += len(data)
            if self.reset_after is not None and self.nbytes >= self.reset_after:
                sock = w.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                w.transport.abort()
                self.done.set()
                return
        self.digest = h.hexdigest()
        w.write(self.digest.encode())
        await w.drain()
        w.close()
        self.done.set()


class LoopbackAdmission:
    """The gatekeeper's part on loopback (no kernel queue): every connection the relay
    accepts with a destination is approved, its upstream connected to the sink then."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connected = 0
        self.released = 0
        self.upstreams: list[socket.socket] = []

    def claim(self, peer: tuple[str, int], dest: tuple[str, int] | None) -> Ticket | None:
        if dest is None:
            return None
        up = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        hold_reset(up)
        self.connected += 1
        self.upstreams.append(up)
        return Ticket((peer[0], peer[1], dest[0], dest[1]), up, Identity(0, 0, None), 0)

    def release(self, ticket: Ticket) -> None:
        self.released += 1


async def _relay(coord: Coordinator, sink_port: int, **kw: Any) -> Relay:
    kw.setdefault("destination", lambda s: ("127.0.0.1", sink_port))
    relay = Relay(port=0, coordinator=coord, planner=None, settings=BulkSettings(),
                  idle_release_ns=5_000_000, admission=LoopbackAdmission(sink_port),
                  pool=BufferPool(budget_bytes=1 << 20, buffer_bytes=64 << 10), **kw)  # fmt: skip
    await relay.start()
    return relay


def test_relay_delivers_every_byte_once_and_passes_half_close_on() -> None:
    async def go() -> None:
        sink = Sink()
        coord = Coordinator("r1", lambda: 0)  # no leader: always permitted
        relay = await _relay(coord, await sink.start())
        data = bytes(range(256)) * 12_000  # 3 MB
        r, w = await asyncio.open_connection("127.0.0.1", relay.port)
        w.write(data)
        await w.drain()
        w.write_eof()  # half-close: the sink answers only after it
        reply = await asyncio.wait_for(r.read(), 20)
        assert reply.decode() == hashlib.sha256(data).hexdigest()
        assert sink.nbytes == len(data)
        w.close()
        await asyncio.wait_for(_until(lambda: not relay.flows), 10)
        assert relay.counters["accepted"] == relay.counters["completed"] == 1
        assert relay.counters["bytes_up"] == len(data) and relay.counters["bytes_down"] == 64
        assert coord._active == 0  # the flow no longer counts towards the permit
        await relay.close()

    asyncio.run(go())


def test_a_reset_at_the_destination_resets_the_application() -> None:
    async def go() -> None:
        sink = Sink()
        sink.reset_after = 100_000
        relay = await _relay(Coordinator("r1", lambda: 0), await sink.start())
        _, w = await asyncio.open_connection("127.0.0.1", relay.port)
        with pytest.raises(ConnectionError):
            for _ in range(2000):  # bounded: the reset comes after 100 kB
                w.write(bytes(65536))
                await w.drain()
        assert sink.done.is_set() and relay.counters["resets"] == 1
        await relay.close()

    asyncio.run(go())


def test_without_a_permit_nothing_is_read_and_the_application_feels_it() -> None:
    async def go() -> None:
        sink = Sink()
        coord = Coordinator("r1", lambda: 0)
        coord.state = LinkState.PENDING  # joined nothing yet: no BH may go out
        relay = await _relay(coord, await sink.start())
        sock = socket.create_connection(("127.0.0.1", relay.port))
        sock.setblocking(False)
        written = 0
        with pytest.raises(BlockingIOError):
            for _ in range(100_000):  # bounded: the buffers fill well before
                written += sock.send(bytes(65536))
        await asyncio.wait_for(_until(lambda: coord._active == 1), 10)
        assert relay.counters["bytes_up"] == 0 and sink.nbytes == 0
        assert written < 16 << 20  # kernel buffers, not an unbounded queue in the relay
        coord.state = None  # the permit comes (here: no leader any more)
        coord._notify()
        sock.setblocking(True)
        sock.shutdown(socket.SHUT_WR)
        await asyncio.wait_for(sink.done.wait(), 20)
        assert sink.nbytes == written
        sock.close()
        await relay.close()

    asyncio.run(go())


def test_closing_the_relay_resets_open_connections_never_ends_them_cleanly() -> None:
    async def go() -> None:
        sink = Sink()
        relay = await _relay(Coordinator("r1", lambda: 0), await sink.start())
        r, w = await asyncio.open_connection("127.0.0.1", relay.port)
        w.write(bytes(100_000))
        await w.drain()
        await asyncio.wait_for(_until(lambda: sink.nbytes == 100_000), 10)
        await relay.close()  # the transfer is not finished: both ends must see a reset
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(r.read(), 10)
        await asyncio.wait_for(sink.done.wait(), 10)
        assert sink.digest == ""  # the sink never took it for a whole upload (no EOF)
        assert relay.counters["resets"] == 1

    asyncio.run(go())


def test_a_connection_nobody_redirected_is_reset_and_never_relayed() -> None:
    async def go() -> None:
        sink = Sink()
        relay = await _relay(Coordinator("r1", lambda: 0), await sink.start(),
                             destination=lambda s: None)  # fmt: skip
        with pytest.raises(ConnectionResetError):  # at connect, or at the first read
            r, _ = await asyncio.open_connection("127.0.0.1", relay.port)
            await asyncio.wait_for(r.read(), 10)
        assert relay.counters["not_redirected"] == 1 and relay.counters["accepted"] == 0
        assert relay.admission.connected == 0 and sink.nbytes == 0  # type: ignore[attr-defined]
        await relay.close()

    asyncio.run(go())


async def _until(pred: Any) -> None:
    while not pred():
        await asyncio.sleep(0.01)


def test_kernel_refusals_say_what_is_missing() -> None:
    import errno

    from pyroute2.netlink.exceptions import NetlinkError

    from coorp.runtime.transparent._nft import TransparentUnavailableError, _explain

    perm = _explain(NetlinkError(errno.EPERM), "add table coorp-r1")
    assert isinstance(perm, TransparentUnavailableError)
    assert "CAP_NET_ADMIN" in str(perm) and "add table coorp-r1" in str(perm)
    missing = _explain(NetlinkError(errno.ENOENT), "add rule 'tcp dport 9000 redirect'")
    assert "nft_redir" in str(missing) and "redirect" in str(missing)


def test_the_team_acks_are_marked_ac_vi_pure_acks_only() -> None:
    """With ``ack_category = "AC_VI"`` the mark chain puts the relay's pure acks and the
    pure acks this host's programs send from a bulk port (an upload's receiver) in AC_VI;
    with AC_BE there are no such rules. The netlink form matches TCP, an IP length of
    40-120 and the flags (fin, syn, rst, ack) == ack, and writes priority 260 and CS4."""
    from coorp.runtime.transparent._nft import _rule_exprs
    from coorp.runtime.transparent._ruleset import ACK_PRIORITY

    sec = TransparentSection(ls=[{"preset": "zenoh"}], bulk=[{"ports": 9000}])
    assert sec.ack_category == "AC_VI"

    def ruleset(acks: bool) -> Any:
        return build_ruleset("r1", sec.ls_matches(), sec.bulk_matches([]), relay_port=7409,
                             relay_mark=0xC0F, coorp_ports=(7300,), acks_in_video=acks)  # fmt: skip

    lines = ruleset(True).render().splitlines()
    ack = "ip length 40-120 tcp flags & (fin | syn | rst | ack) == ack counter"
    mark = "meta priority set 0:104 ip dscp set cs4"
    assert lines[5:7] == [
        f'    meta mark 0xc0f {ack} {mark} comment "relay\'s acks"',
        f'    tcp sport 9000 {ack} {mark} comment "acks of bulk 0"',
    ]
    assert "cs4" not in ruleset(False).render()
    rule = ruleset(True).ls_mark[2]
    exprs = _rule_exprs(rule, 7409, None)
    names = [dict(e["attrs"])["NFTA_EXPR_NAME"] for e in exprs]
    assert names == [
        "meta", "cmp",  # the relay's fwmark
        "meta", "cmp", "payload", "range", "payload", "bitwise", "cmp",  # a pure TCP ack
        "counter", "immediate", "meta", "payload", "bitwise", "payload",  # priority, DSCP
    ]  # fmt: skip
    values = set(_bytes_in(exprs))
    assert ACK_PRIORITY == 256 + 4  # cfg80211: UP 4, AC_VI
    assert struct.pack("=I", ACK_PRIORITY) in values
    assert bytes([0, 0x80]) in values  # the TOS byte's xor: CS4
    assert {b"\x17", b"\x10", struct.pack("!H", 40), struct.pack("!H", 120)} <= values


def _bytes_in(x: Any) -> Iterator[bytes]:
    """Every bytes value in a nested netlink expression."""
    if isinstance(x, bytes):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _bytes_in(v)
    elif isinstance(x, list | tuple):
        for v in x:
            yield from _bytes_in(v)


@pytest.mark.parametrize(
    ("category", "priority", "tos", "text"),
    [("AC_VO", 262, 0xC0, "0:106 ip dscp set cs6"), ("AC_VI", 261, 0xA0, "0:105 ip dscp set cs5")],
)
def test_ls_category_sets_the_mark_and_the_observers_filter(
    category: str, priority: int, tos: int, text: str
) -> None:
    """``ls_category`` decides LS packets' priority (256 + UP: cfg80211 takes the UP from
    it) and DSCP, in the rendered rules, in the netlink rules and in the observer's BPF
    filter alike; the acks keep CS4, apart from LS's CS5."""
    from coorp.runtime.transparent._nft import _rule_exprs
    from coorp.runtime.transparent._observe import ls_filter

    sec = TransparentSection(ls=[{"ports": 9001}], bulk=[{"ports": 9000}], ls_category=category)
    rs = build_ruleset("r1", sec.ls_matches(), sec.bulk_matches([]), relay_port=7409,
                       relay_mark=0xC0F, coorp_ports=(7300,), acks_in_video=True,
                       ls_category=sec.ls_category)  # fmt: skip
    assert rs.ls_marking.priority == priority and rs.ls_marking.tos == tos
    assert f'udp dport 9001 counter meta priority set {text} comment "ls 0"' in rs.render()
    assert "ip dscp set cs4" in rs.render()  # the acks' rules are unchanged
    values = set(_bytes_in(_rule_exprs(rs.ls_mark[0], 7409, None, ls_marking=rs.ls_marking)))
    assert struct.pack("=I", priority) in values and bytes([0, tos]) in values
    # The filter compares the TOS byte's top six bits with the LS DSCP and nothing else.
    prog = ls_filter(dscp=rs.ls_marking.dscp)
    ins = [struct.unpack("HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    masked = [i for i, (code, _, _, k) in enumerate(ins) if code == 0x54 and k == 0xFC]
    assert len(masked) == 1
    code, _, _, k = ins[masked[0] + 1]
    assert (code, k) == (0x15, tos)  # jump if equal: the LS DSCP in the TOS byte


def test_ls_category_names_what_is_allowed() -> None:
    with pytest.raises(ValidationError, match="AC_VO") as info:
        TransparentSection(ls=[{"ports": 9001}], ls_category="AC_BE")
    assert "ls_category" in str(info.value)
    with pytest.raises(ValueError, match="one of AC_VO, AC_VI"):
        build_ruleset("r1", [], [], relay_port=1, relay_mark=1, coorp_ports=(), ls_category="VO")
    from coorp.runtime.transparent._observe import ls_filter

    with pytest.raises(ValueError, match=r"0\.\.63"):
        ls_filter(dscp=64)
