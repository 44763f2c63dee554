"""Transparent mode, server side (issue 34): the bytes a host sends on connections it
accepted go under its permit too. Selectors and rules here; the inbound relay on
loopback (the kernel's redirect is tested in namespaces, test_transparent_netns.py)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import time
from typing import Any

import pytest

from coorp.runtime import TransparentSection
from coorp.runtime._counters import LogLimiter
from coorp.runtime.robot import BulkSettings, Coordinator
from coorp.runtime.robot._link import LinkState
from coorp.runtime.transparent._admission import LocalServer
from coorp.runtime.transparent._agent import transparent_ruleset
from coorp.runtime.transparent._budget import BufferPool
from coorp.runtime.transparent._relay import Relay


def _section(**kw: Any) -> TransparentSection:
    return TransparentSection.model_validate(kw)


def test_server_side_selectors_render_a_prerouting_chain_to_the_inbound_relay() -> None:
    sec = _section(
        ls=[{"preset": "zenoh"}],
        bulk=[{"ports": 9000}, {"listen": 9000}, {"listen": "29500-29510", "from": "10.0.0.0/24"}],
    )
    rs = transparent_ruleset("r1", sec, team_hosts=[], coorp_ports=(7300, 7301))
    text = rs.render()
    assert "chain bh_inbound {" in text
    assert "type nat hook prerouting priority dstnat; policy accept;" in text
    assert 'tcp dport 9000 counter redirect to :7408 comment "serve 0"' in text
    assert "ip saddr 10.0.0.0/24 tcp dport 29500-29510 counter redirect to :7408" in text
    # Coorp's own ports and the TCP LS flow (Zenoh) come first and return.
    inbound = [r.label for r in rs.bh_inbound]
    assert inbound.index("coorp's own port 7301") < inbound.index("serve 0")
    assert inbound.index("ls 0 (never bulk)") < inbound.index("serve 0")
    # The client side is unchanged: the outbound chain redirects to the local relay.
    assert 'tcp dport 9000 counter redirect to :7409 comment "bulk 0"' in text
    # No server-side selector: no inbound chain.
    plain = transparent_ruleset(
        "r1", _section(bulk=[{"ports": 9000}]), team_hosts=[], coorp_ports=()
    ).render()
    assert "bh_inbound" not in plain


def test_from_team_expands_to_one_rule_per_team_host() -> None:
    sec = _section(bulk=[{"from_team": True}])
    rs = transparent_ruleset("r1", sec, team_hosts=["10.0.0.2", "10.0.0.3"], coorp_ports=())
    serve = [r.match.render() for r in rs.bh_inbound if r.action == "redirect_in" and r.match]
    assert serve == ["ip saddr 10.0.0.2 meta l4proto tcp", "ip saddr 10.0.0.3 meta l4proto tcp"]


@pytest.mark.parametrize(
    ("bulk", "expect"),
    [
        ({"listen": 9000, "uid": 1000}, "uid cannot be combined with listen/from/from_team"),
        ({"listen": 9000, "ports": 9000}, "ports cannot be combined"),
        ({"from_team": True, "to_team": True}, "to_team cannot be combined"),
        ({"listen": "0"}, "ports must lie in 1..65535"),
        ({"from": "not-an-ip"}, "expected an IPv4 address or CIDR"),
        ({"from": "10.0.0.1", "from_team": True}, "from_team and from exclude each other"),
    ],
)
def test_bad_server_side_selectors_say_what_is_allowed(bulk: dict[str, Any], expect: str) -> None:
    with pytest.raises(ValueError, match=expect):
        _section(bulk=[bulk])


def test_relay_ports_must_differ() -> None:
    with pytest.raises(ValueError, match="give each its own port"):
        _section(bulk=[{"listen": 9000}], relay_port=7500, inbound_relay_port=7500)


class Server:
    """A program that answers each connection's request line with ``reply`` bytes, then
    half-closes; records how far its own writes got (it feels backpressure)."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.written = 0
        self.done = asyncio.Event()
        self.got_eof = False

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readline()
        view = memoryview(self.reply)
        for off in range(0, len(view), 65536):
            w.write(view[off : off + 65536])
            await w.drain()
            self.written = off + len(view[off : off + 65536])
        w.write_eof()
        self.got_eof = await r.read() == b""  # the client's half-close, passed on
        w.close()
        self.done.set()


def _admission(max_flows: int = 16, open_flows: Any = lambda: 0) -> LocalServer:
    limiter = LogLimiter(logging.getLogger("t"), time.monotonic_ns)
    return LocalServer(
        prepare=lambda s: None, max_flows=lambda: max_flows, open_flows=open_flows, limiter=limiter
    )


async def _inbound(coord: Coordinator, server_port: int, **kw: Any) -> Relay:
    kw.setdefault("destination", lambda s: ("127.0.0.1", server_port))
    kw.setdefault("admission", _admission())
    relay = Relay(port=0, coordinator=coord, planner=None, settings=BulkSettings(),
                  idle_release_ns=5_000_000, inbound=True,
                  pool=BufferPool(budget_bytes=1 << 20, buffer_bytes=64 << 10), **kw)  # fmt: skip
    await relay.start()
    return relay


async def _until(pred: Any) -> None:
    while not pred():
        await asyncio.sleep(0.01)


def test_an_accepted_connections_replies_go_out_under_the_permit_intact() -> None:
    async def go() -> None:
        reply = bytes(range(256)) * 12_000  # 3 MB back to the peer
        server = Server(reply)
        coord = Coordinator("ld", lambda: 0)  # no leader: always permitted
        relay = await _inbound(coord, await server.start())
        r, w = await asyncio.open_connection("127.0.0.1", relay.port)
        w.write(b"GET model\n")
        await w.drain()
        got = await asyncio.wait_for(r.read(), 30)  # up to the server's half-close
        assert hashlib.sha256(got).digest() == hashlib.sha256(reply).digest()
        w.write_eof()
        await asyncio.wait_for(server.done.wait(), 10)
        assert server.got_eof  # the peer's half-close reached the server
        w.close()
        await asyncio.wait_for(_until(lambda: not relay.flows), 10)
        # The paced direction is what this host sent: the server's reply.
        assert relay.counters["bytes_up"] == len(reply)
        assert relay.counters["bytes_down"] == len(b"GET model\n")
        assert relay.counters["completed"] == 1 and coord._active == 0
        await relay.close()

    asyncio.run(go())


def test_without_a_permit_the_servers_replies_wait_and_the_server_feels_it() -> None:
    async def go() -> None:
        reply = bytes(64) * 200_000  # 12.8 MB: more than every buffer on the way
        server = Server(reply)
        coord = Coordinator("ld", lambda: 0)
        coord.state = LinkState.PENDING  # no permit
        relay = await _inbound(coord, await server.start())
        sock = socket.create_connection(("127.0.0.1", relay.port))
        sock.sendall(b"GET model\n")
        sock.setblocking(False)
        await asyncio.wait_for(_until(lambda: coord._active == 1), 10)
        await asyncio.sleep(0.2)
        with pytest.raises(BlockingIOError):
            sock.recv(1)  # nothing came through
        assert relay.counters["bytes_up"] == 0
        stuck = server.written
        assert 0 < stuck < 8 << 20  # kernel buffers, not a queue in the relay
        coord.state = None  # the permit comes (no leader any more)
        coord._notify()
        sock.setblocking(True)
        total = 0
        h = hashlib.sha256()
        while data := await asyncio.to_thread(sock.recv, 1 << 20):
            h.update(data)
            total += len(data)
        assert total == len(reply) and h.digest() == hashlib.sha256(reply).digest()
        sock.close()
        await relay.close()

    asyncio.run(go())


def _reset_seen(host: str, port: int) -> bool:
    """Whether a connection to ``host:port`` ends in a reset (True) or a clean EOF."""
    try:  # the reset may come before connect() returns
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.recv(1)
    except ConnectionResetError:
        return True
    return False


def test_a_connection_made_to_the_inbound_port_directly_is_reset() -> None:
    async def go() -> None:
        coord = Coordinator("ld", lambda: 0)
        holder: list[int] = []
        relay = await _inbound(coord, 0, destination=lambda s: ("127.0.0.1", holder[0]))
        holder.append(relay.port)  # conntrack's "original" destination: this listener
        assert await asyncio.to_thread(_reset_seen, "127.0.0.1", relay.port)
        assert relay.counters["not_redirected"] == 1 and relay.counters["accepted"] == 0
        await relay.close()

    asyncio.run(go())


def test_the_inbound_relay_connects_only_to_this_host_and_within_the_flow_cap() -> None:
    async def go() -> None:
        server = Server(b"x" * 1000)
        port = await server.start()
        coord = Coordinator("ld", lambda: 0)
        # A forwarded connection (its original destination another host): reset, and
        # nothing is connected for it.
        away = await _inbound(coord, port, destination=lambda s: ("192.0.2.1", port))
        assert await asyncio.to_thread(_reset_seen, "127.0.0.1", away.port)
        adm = away.admission
        assert isinstance(adm, LocalServer) and adm.counters["refused_destination"] == 1
        assert away.counters["accepted"] == 0
        await away.close()
        # The cap both relays share is full: reset at accept, counted.
        full = await _inbound(coord, port, admission=_admission(max_flows=4, open_flows=lambda: 4))
        assert await asyncio.to_thread(_reset_seen, "127.0.0.1", full.port)
        adm = full.admission
        assert isinstance(adm, LocalServer) and adm.counters["over_limit"] == 1
        await full.close()

    asyncio.run(go())


def test_a_server_that_refuses_resets_the_peer() -> None:
    async def go() -> None:
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            closed = probe.getsockname()[1]
        coord = Coordinator("ld", lambda: 0)
        relay = await _inbound(coord, closed)
        assert await asyncio.to_thread(_reset_seen, "127.0.0.1", relay.port)
        await asyncio.wait_for(_until(lambda: relay.counters["refused"] == 1), 10)
        assert not relay.flows and relay.pool.in_use == 0
        await relay.close()

    asyncio.run(go())
