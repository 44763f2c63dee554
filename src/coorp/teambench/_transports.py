"""The carriers a ``coorp bench team`` role talks over (one small class each, in
:data:`TRANSPORTS`): raw UDP (also with a MAC on every datagram and nothing else),
coorp.runtime LS channels, Cyclone DDS (best-effort / reliable), Zenoh (best-effort /
reliable). Each sends a ping to the leader, echoes one back, and says when one arrives;
:mod:`coorp.teambench._roles` runs them."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ECHO_PORT", "PERMIT_PORT", "TRANSPORTS", "Ctx", "Echo"]

ECHO_PORT = 7601  # UDP, coorp inbox, Zenoh listens on ECHO_PORT + 1
PERMIT_PORT = 7400
Echo = Callable[[bytes], None]


class Ctx:
    """What a role knows: its name and address, the leader's, every robot's."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.name: str = args.name
        self.addr: str = args.addr
        self.leader: str = args.leader
        self.robots: dict[str, str] = dict(p.split("=", 1) for p in args.robots.split(",") if p)
        self.key_hex: str = args.key_hex
        self.bound_ms: float = args.bound_ms


# -- carriers -------------------------------------------------------------------------------
class _Udp:
    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.stop = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.settimeout(0.2)

    def serve(self) -> None:
        self.sock.bind((self.ctx.addr, ECHO_PORT))
        threading.Thread(target=self._echo, daemon=True).start()

    def _echo(self) -> None:
        while not self.stop.is_set():
            try:
                data, peer = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            with contextlib.suppress(OSError):
                self.sock.sendto(data, peer)

    def connect(self, on_echo: Echo) -> None:
        self.sock.connect((self.ctx.leader, ECHO_PORT))

        def loop() -> None:
            while not self.stop.is_set():
                try:
                    on_echo(self.sock.recv(65535))
                except (TimeoutError, ConnectionRefusedError):
                    continue

        threading.Thread(target=loop, daemon=True).start()

    def send(self, payload: bytes, rate_hz: float) -> None:
        with contextlib.suppress(OSError):  # a full buffer or a refused port: a lost ping
            self.sock.send(payload)

    def close(self) -> None:
        self.stop.set()


class _UdpMac(_Udp):
    """Raw UDP plus authentication and nothing else: every datagram carries a keyed
    BLAKE2b-256 MAC (the algorithm of Coorp's LS datagrams, on the team key), made by
    its sender and checked by its receiver; one that fails is dropped. What a round trip
    costs for the MACs alone, next to everything else Coorp's LS path does.

    Its receive loops are its own on purpose: the raw carrier's stay free of any
    per-datagram hook, so the floor measures a bare socket."""

    _MAC = 32

    def __init__(self, ctx: Ctx) -> None:
        import hashlib

        super().__init__(ctx)
        self._mac = hashlib.blake2b(key=bytes.fromhex(ctx.key_hex), digest_size=self._MAC)

    def _seal(self, data: bytes) -> bytes:
        h = self._mac.copy()
        h.update(data)
        return data + h.digest()

    def _open(self, data: bytes) -> bytes | None:
        import hmac

        body, tag = data[: -self._MAC], data[-self._MAC :]
        h = self._mac.copy()
        h.update(body)
        return body if len(data) > self._MAC and hmac.compare_digest(h.digest(), tag) else None

    def _echo(self) -> None:
        while not self.stop.is_set():
            try:
                data, peer = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            body = self._open(data)
            if body is not None:
                with contextlib.suppress(OSError):
                    self.sock.sendto(self._seal(body), peer)

    def connect(self, on_echo: Echo) -> None:
        self.sock.connect((self.ctx.leader, ECHO_PORT))

        def loop() -> None:
            while not self.stop.is_set():
                try:
                    body = self._open(self.sock.recv(65535))
                except (TimeoutError, ConnectionRefusedError):
                    continue
                if body is not None:
                    on_echo(body)

        threading.Thread(target=loop, daemon=True).start()

    def send(self, payload: bytes, rate_hz: float) -> None:
        with contextlib.suppress(OSError):
            self.sock.send(self._seal(payload))


class _Coorp:
    """coorp.runtime: the leader's inbox echoes on an LS channel per robot; it also runs
    the permit service (for coordinated bulk) in a thread."""

    def __init__(self, ctx: Ctx) -> None:
        import coorp.runtime as rt

        self.rt, self.ctx = rt, ctx
        self.key = rt.TeamKey.from_hex(ctx.key_hex)
        self.stop = threading.Event()
        self.channels: dict[Any, Any] = {}
        self.bulk_bytes = 0
        self.team: Any = None
        self._bulk: Any = None
        self.inbox: Any = None

    def serve(self) -> None:
        rt = self.rt
        ready = threading.Event()

        def permits() -> None:
            async def main() -> None:
                service = rt.PermitService(["ld", *self.ctx.robots], self.key,
                                           rt.LeaderSettings(limit=1))  # fmt: skip
                await service.start((self.ctx.addr, PERMIT_PORT))
                ready.set()
                while not self.stop.is_set():
                    await asyncio.sleep(0.1)
                await service.close()

            asyncio.run(main())

        threading.Thread(target=permits, daemon=True).start()
        if not ready.wait(10):
            raise SystemExit("permit service did not start")
        self.team = rt.join(None, "ld", self.key)
        inbox = self.inbox = self.team.listen(f"{self.ctx.addr}:{ECHO_PORT}")

        def loop() -> None:
            while not self.stop.is_set():
                try:
                    msg = inbox.recv(timeout=0.2)
                except TimeoutError:
                    continue
                if msg.kind != "ls":
                    self.bulk_bytes += len(msg.payload)
                    continue
                ch = self.channels.get(msg.robot)
                if ch is None:
                    dest = f"{self.ctx.robots[msg.robot]}:{ECHO_PORT}"
                    ch = self.team.latency_sensitive(
                        f"echo-{msg.robot}", dest, deadline_ms=self.ctx.bound_ms
                    )
                    self.channels[msg.robot] = ch
                ch.send(msg.payload)

        threading.Thread(target=loop, daemon=True).start()

    def connect(self, on_echo: Echo) -> None:
        rt = self.rt
        settings = rt.TeamSettings(fallback_ns=900_000_000)
        self.team = rt.join(f"{self.ctx.leader}:{PERMIT_PORT}", self.ctx.name, self.key,
                            settings=settings)  # fmt: skip
        inbox = self.inbox = self.team.listen(f"{self.ctx.addr}:{ECHO_PORT}")

        def loop() -> None:
            while not self.stop.is_set():
                try:
                    msg = inbox.recv(timeout=0.2)
                except TimeoutError:
                    continue
                if msg.kind == "ls":
                    on_echo(bytes(msg.payload))

        threading.Thread(target=loop, daemon=True).start()

    def send(self, payload: bytes, rate_hz: float) -> None:
        # One channel per rate: its period is what local preemption learns.
        ch = self.channels.get(rate_hz)
        if ch is None:
            ch = self.team.latency_sensitive(
                f"ping-{rate_hz:g}", f"{self.ctx.leader}:{ECHO_PORT}",
                deadline_ms=self.ctx.bound_ms, period_ms=1000 / rate_hz,
            )  # fmt: skip
            self.channels[rate_hz] = ch
        ch.send(payload)

    def counters(self) -> dict[str, int]:
        """Where this process's LS messages could have gone missing: its channels'
        superseded (keep-last), expired and failed sends, and its inbox's drops."""
        stats = [ch.stats for ch in list(self.channels.values())]
        inbox = self.inbox.stats() if self.inbox is not None else {}
        out = {
            "ls_superseded": sum(st.superseded for st in stats),
            "ls_expired": sum(st.expired for st in stats),
            "ls_failed": sum(st.failed for st in stats),
            "inbox_dropped": int(inbox.get("dropped", 0)),
        }
        if self._bulk is not None:
            # Where the coordinated bulk stream's time went (ns) and what it did.
            for k, v in self._bulk.counters.items():
                if k != "inflight_max_bytes":
                    out[f"bulk_{k}"] = int(v)
        return out

    def bulk_progress(self) -> int:
        """Bulk payload bytes the leader's inbox has received, segment by segment."""
        return int(self.inbox.stats().get("bulk_bytes", 0)) if self.inbox is not None else 0

    def bulk_stream(self) -> Any:
        # One stream for every cell (a team refuses a second stream of the same name).
        if self._bulk is None:
            self._bulk = self.team.bulk("bulk", f"{self.ctx.leader}:{ECHO_PORT}")
        return self._bulk

    def close(self) -> None:
        self.stop.set()
        if self.team is not None:
            with contextlib.suppress(Exception):
                self.team.close()


def _dds_blob() -> Any:
    import types as pytypes
    from dataclasses import dataclass

    from cyclonedds.idl import IdlStruct, types

    # Built at run time with a real annotation object (cyclonedds resolves annotations).
    def body(ns: dict[str, Any]) -> None:
        ns["__annotations__"] = {"data": types.sequence[types.uint8]}  # type: ignore[misc,unused-ignore]

    return dataclass(
        pytypes.new_class("Blob", (IdlStruct,), {"typename": "coorp_team::Blob"}, body)
    )


class _Dds:
    """Cyclone DDS, one ping and one pong topic per robot (as robots under their own
    ROS namespaces); keep-last 10 like ROS 2's default profile."""

    def __init__(self, ctx: Ctx, *, reliable: bool) -> None:
        from cyclonedds.core import Policy, Qos
        from cyclonedds.domain import DomainParticipant
        from cyclonedds.util import duration

        self.ctx = ctx
        self.blob = _dds_blob()
        self.dp = DomainParticipant(0)
        rel = (Policy.Reliability.Reliable(duration(seconds=1)) if reliable
               else Policy.Reliability.BestEffort)  # fmt: skip
        self.qos = Qos(rel, Policy.History.KeepLast(10))
        self.keep: list[Any] = []

    def _topic(self, name: str) -> Any:
        from cyclonedds.topic import Topic

        return Topic(self.dp, name, self.blob, qos=self.qos)

    def _reader(self, topic: Any, fn: Callable[[Any], None]) -> Any:
        from cyclonedds.core import Listener
        from cyclonedds.sub import DataReader

        def on_data(reader: Any) -> None:
            for s in reader.take(N=64):
                fn(s)

        r = DataReader(self.dp, topic, qos=self.qos, listener=Listener(on_data_available=on_data))
        self.keep.append(r)
        return r

    def serve(self) -> None:
        from cyclonedds.pub import DataWriter

        for robot in self.ctx.robots:
            w = DataWriter(self.dp, self._topic(f"coorp_pong_{robot}"), qos=self.qos)
            self.keep.append(w)
            self._reader(self._topic(f"coorp_ping_{robot}"), w.write)

    def connect(self, on_echo: Echo) -> None:
        from cyclonedds.pub import DataWriter

        self.writer = DataWriter(self.dp, self._topic(f"coorp_ping_{self.ctx.name}"), qos=self.qos)
        self._reader(self._topic(f"coorp_pong_{self.ctx.name}"), lambda s: on_echo(bytes(s.data)))

    def send(self, payload: bytes, rate_hz: float) -> None:
        self.writer.write(self.blob(payload))

    def close(self) -> None:
        self.keep.clear()


class _Zenoh:
    """Zenoh peers over TCP (the leader listens, robots connect), as rmw_zenoh's default,
    shared memory off (see ``_open``);
    best effort = ``Reliability.BEST_EFFORT`` + ``CongestionControl.DROP``, reliable =
    ``RELIABLE`` + ``BLOCK``."""

    def __init__(self, ctx: Ctx, *, reliable: bool) -> None:
        import zenoh

        self.z, self.ctx = zenoh, ctx
        rel, cc = zenoh.Reliability, zenoh.CongestionControl
        self.kw = {
            "reliability": rel.RELIABLE if reliable else rel.BEST_EFFORT,
            "congestion_control": cc.BLOCK if reliable else cc.DROP,
        }
        self.keep: list[Any] = []

    def _open(self, conf: dict[str, Any]) -> Any:
        # No shared memory: Zenoh would otherwise carry messages >= 3 kB through /dev/shm,
        # which every namespace of this machine shares, past the shaped link (robots of
        # a real team are separate machines).
        c = self.z.Config.from_json5(json.dumps({
            "mode": "peer", "scouting": {"multicast": {"enabled": False}},
            "transport": {"shared_memory": {"enabled": False}}, **conf,
        }))  # fmt: skip
        self.session = self.z.open(c)
        return self.session

    def serve(self) -> None:
        s = self._open({"listen": {"endpoints": [f"tcp/{self.ctx.addr}:{ECHO_PORT + 1}"]}})
        pubs = {r: s.declare_publisher(f"coorp/team/pong/{r}", **self.kw) for r in self.ctx.robots}
        self.keep.append(pubs)

        def on_ping(sample: Any) -> None:
            robot = str(sample.key_expr).rsplit("/", 1)[-1]
            pub = pubs.get(robot)
            if pub is not None:
                pub.put(sample.payload)

        self.keep.append(s.declare_subscriber("coorp/team/ping/*", on_ping))

    def connect(self, on_echo: Echo) -> None:
        s = self._open({"connect": {"endpoints": [f"tcp/{self.ctx.leader}:{ECHO_PORT + 1}"]}})
        self.pub = s.declare_publisher(f"coorp/team/ping/{self.ctx.name}", **self.kw)
        self.keep.append(s.declare_subscriber(
            f"coorp/team/pong/{self.ctx.name}", lambda sample: on_echo(sample.payload.to_bytes())
        ))  # fmt: skip

    def send(self, payload: bytes, rate_hz: float) -> None:
        self.pub.put(payload)

    def close(self) -> None:
        self.keep.clear()
        with contextlib.suppress(Exception):
            self.session.close()


TRANSPORTS: dict[str, Callable[[Ctx], Any]] = {
    "udp": _Udp,
    "udp-mac": _UdpMac,
    "coorp": _Coorp,
    "dds-be": lambda ctx: _Dds(ctx, reliable=False),
    "dds-rel": lambda ctx: _Dds(ctx, reliable=True),
    "zenoh-be": lambda ctx: _Zenoh(ctx, reliable=False),
    "zenoh-rel": lambda ctx: _Zenoh(ctx, reliable=True),
}
