"""Whose connection is it: the relay's outbound sockets carry the program's identity.

A relayed connection must meet the egress policy the program's own connection would
have met. Netfilter judges a locally sent packet by its socket: ``meta skuid`` (the
socket's ``sk_uid``: the creator's fsuid), ``meta skgid`` (the fsgid of the socket
file's credentials) and ``socket cgroupv2`` (the creator's cgroup); the cgroup's BPF
programs (systemd's ``IPAddressDeny=``), uid-based routing rules (``ip rule uidrange``)
use the same fields. All are fixed when the socket is created. So the relay creates
each outbound socket *as the program*:

* **who** — the SYN the kernel queued for us carries the socket file's uid and gid
  (:mod:`._nfqueue`); the program's socket itself, looked up by its four-tuple with
  ``sock_diag`` (:func:`socket_owner`, ``SOCK_DIAG_BY_FAMILY``), gives its ``sk_uid``
  and cgroup id (``INET_DIAG_CGROUP_ID``);
* **as whom** — :class:`IdentityFactory` sets this thread's fsuid and fsgid
  (``setfsuid``/``setfsgid``: per thread, and only the ids a new socket takes) around
  ``socket()``; when the program lives in another cgroup than the agent, a *connector*
  (:mod:`._connector`, one small process per cgroup, moved into it) creates the socket
  there and passes it back over ``SCM_RIGHTS``. Threads cannot sit in different cgroups
  (cgroup v2 puts a process's threads together), hence a process.

The agent then sets its own options (the relay's fwmark, marking, timeouts) and
connects: a ``cgroup/connect4`` program judges the socket's cgroup, not the caller's.
An identity the factory cannot reproduce is an :class:`IdentityError`; the gate then
refuses the connection rather than send it as root.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import socket
import struct
import subprocess
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Identity", "IdentityError", "IdentityFactory", "socket_owner"]

log = logging.getLogger("coorp.runtime.transparent")

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_INET_DIAG_CGROUP_ID = 21
_NOCOOKIE = 0xFFFFFFFF
#: Every TCP state but LISTEN (a program's socket in SYN_SENT, or later).
_STATES = 0xFFF & ~(1 << 10)
_MSG_BYTES = 72  # struct inet_diag_msg
_CONNECTOR = Path(__file__).with_name("_connector.py")


class IdentityError(OSError):
    """The program's identity cannot be given to the relay's socket."""


@dataclass(frozen=True, slots=True)
class Identity:
    uid: int
    gid: int
    cgroup: int | None
    """cgroup v2 id (the cgroup directory's inode number); None: unknown."""

    def describe(self) -> str:
        cg = "" if self.cgroup is None else f", cgroup {self.cgroup}"
        return f"uid {self.uid}, gid {self.gid}{cg}"


def socket_owner(src: str, sport: int, dst: str, dport: int) -> tuple[int, int | None] | None:
    """``(sk_uid, cgroup id)`` of the TCP socket ``src:sport -> dst:dport`` on this host
    (None: no such socket). One ``sock_diag`` request for exactly that socket."""
    sockid = struct.pack(
        "!HH16s16s",
        sport,
        dport,
        socket.inet_aton(src) + bytes(12),
        socket.inet_aton(dst) + bytes(12),
    ) + struct.pack("=III", 0, _NOCOOKIE, _NOCOOKIE)
    body = struct.pack("=BBBxI", socket.AF_INET, socket.IPPROTO_TCP, 0, _STATES) + sockid
    msg = struct.pack("=IHHII", 16 + len(body), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(1.0)
        nl.send(msg + body)
        data = nl.recv(8192)
    n, kind = struct.unpack_from("=IH", data)
    if kind == _NLMSG_ERROR:
        code = -struct.unpack_from("=i", data, 16)[0]
        if code == errno.ENOENT:
            return None
        raise OSError(code, f"sock_diag: {os.strerror(code)}")
    if kind != _SOCK_DIAG_BY_FAMILY or n < 16 + _MSG_BYTES:
        return None
    uid = struct.unpack_from("=I", data, 16 + 64)[0]
    cgroup = None
    i = 16 + _MSG_BYTES
    while i + 4 <= n:
        alen, akind = struct.unpack_from("=HH", data, i)
        if alen < 4:
            break
        if akind & 0x7FFF == _INET_DIAG_CGROUP_ID and alen >= 12:
            cgroup = struct.unpack_from("=Q", data, i + 4)[0]
        i += (alen + 3) & ~3
    return uid, cgroup


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


class _Connector:
    """One connector process in one cgroup."""

    def __init__(self, proc: subprocess.Popen[bytes], chan: socket.socket) -> None:
        self.proc = proc
        self.chan = chan
        self.lock = asyncio.Lock()
        self.used_ns = time.monotonic_ns()

    async def new_socket(self, uid: int, gid: int) -> socket.socket:
        loop = asyncio.get_running_loop()
        async with self.lock:
            self.used_ns = time.monotonic_ns()
            await loop.sock_sendall(self.chan, struct.pack("=II", uid, gid))
            fut: asyncio.Future[None] = loop.create_future()

            def ready() -> None:
                if not fut.done():
                    fut.set_result(None)

            loop.add_reader(self.chan.fileno(), ready)
            try:
                async with asyncio.timeout(5):
                    await fut
            finally:
                loop.remove_reader(self.chan.fileno())
            data, anc, _, _ = self.chan.recvmsg(16, socket.CMSG_SPACE(4))
        if len(data) != 4:
            raise IdentityError(errno.EIO, "the connector ended")
        code = struct.unpack("=i", data)[0]
        fds = [
            struct.unpack("=i", d[:4])[0]
            for lvl, typ, d in anc
            if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS
        ]
        if code != 0 or not fds:
            for fd in fds:
                os.close(fd)
            raise IdentityError(code or errno.EIO, f"connector: {os.strerror(code or errno.EIO)}")
        return socket.socket(fileno=fds[0])

    def close(self) -> None:
        """End it without holding up the event loop: its end of the channel sees EOF
        and exits; one that did not yet is killed (the subprocess module reaps what is
        left at its next start)."""
        with contextlib.suppress(OSError):
            self.chan.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=0.05)
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=0.05)


class IdentityFactory:
    """Creates TCP sockets with a given :class:`Identity` (see the module docstring).

    ``own_cgroup`` is the agent's cgroup id (sockets for programs there are made in
    this thread); connectors are kept per cgroup, at most ``max_connectors``, each
    ended after ``idle_s`` unused."""

    def __init__(
        self,
        *,
        cgroup_root: Path | None,
        own_cgroup: int | None,
        max_connectors: int = 16,
        idle_s: float = 60.0,
    ) -> None:
        self.cgroup_root = cgroup_root
        self.own_cgroup = own_cgroup
        self.max_connectors = max_connectors
        self.idle_s = idle_s
        self._libc = _libc()
        self._connectors: OrderedDict[int, _Connector] = OrderedDict()
        self._starting: dict[int, asyncio.Task[_Connector]] = {}
        self._paths: dict[int, Path] = {}
        self.counters = {"in_process": 0, "via_connector": 0, "connectors_started": 0}

    async def new_socket(self, ident: Identity) -> socket.socket:
        """A new, unconnected IPv4 TCP socket owned by ``ident`` (IdentityError if this
        host cannot make one)."""
        if ident.cgroup is None or ident.cgroup == self.own_cgroup:
            self.counters["in_process"] += 1
            return self._socket_here(ident.uid, ident.gid)
        conn = await self._connector(ident.cgroup)
        try:
            sock = await conn.new_socket(ident.uid, ident.gid)
        except (OSError, TimeoutError) as exc:
            self._forget(ident.cgroup)
            raise IdentityError(
                getattr(exc, "errno", None) or errno.EIO,
                f"cannot create a socket in cgroup {ident.cgroup}: {exc}",
            ) from None
        self.counters["via_connector"] += 1
        return sock

    def _socket_here(self, uid: int, gid: int) -> socket.socket:
        libc = self._libc
        old_gid = libc.setfsgid(gid)
        old_uid = libc.setfsuid(uid)
        try:
            if libc.setfsuid(-1) != uid or libc.setfsgid(-1) != gid:
                raise IdentityError(
                    errno.EPERM, f"cannot take uid {uid}/gid {gid} (CAP_SETUID, CAP_SETGID)"
                )
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            libc.setfsuid(old_uid)
            libc.setfsgid(old_gid)

    # -- connectors ------------------------------------------------------------------------
    async def _connector(self, cgroup: int) -> _Connector:
        conn = self._connectors.get(cgroup)
        if conn is not None and conn.proc.poll() is None:
            self._connectors.move_to_end(cgroup)
            return conn
        if conn is not None:
            self._forget(cgroup)
        task = self._starting.get(cgroup)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._start(cgroup))
            self._starting[cgroup] = task
            task.add_done_callback(lambda _t: self._starting.pop(cgroup, None))
        return await asyncio.shield(task)

    async def _start(self, cgroup: int) -> _Connector:
        path = await asyncio.to_thread(self._path_of, cgroup)
        self.expire()
        while len(self._connectors) >= self.max_connectors:
            _, old = self._connectors.popitem(last=False)
            old.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_CONNECTOR), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError as exc:
            ours.close()
            raise IdentityError(
                exc.errno or errno.EIO, f"cannot start a connector: {exc}"
            ) from None
        finally:
            theirs.close()
        conn = _Connector(proc, ours)
        try:
            # Into the program's cgroup before it makes any socket (it only answers).
            (path / "cgroup.procs").write_text(f"{proc.pid}\n")
        except OSError as exc:
            conn.close()
            raise IdentityError(
                exc.errno or errno.EIO,
                f"cannot move a connector into cgroup {path}: {exc.strerror}",
            ) from None
        ours.setblocking(False)
        self._connectors[cgroup] = conn
        self.counters["connectors_started"] += 1
        log.info("relay: connector for cgroup %s started (pid %d)", path, proc.pid)
        return conn

    def _path_of(self, cgroup: int) -> Path:
        """The directory of cgroup ``cgroup`` (its inode number), cached."""
        root = self.cgroup_root
        if root is None:
            raise IdentityError(
                errno.ENOENT, f"the program is in cgroup {cgroup}, but no cgroup v2 is mounted here"
            )
        path = self._paths.get(cgroup)
        if path is not None and _inode(path) == cgroup:
            return path
        for d, _, _ in os.walk(root):
            if _inode(Path(d)) == cgroup:
                self._paths[cgroup] = Path(d)
                return Path(d)
        raise IdentityError(errno.ENOENT, f"no cgroup with id {cgroup} under {root}")

    def expire(self) -> None:
        """End the connectors unused for ``idle_s`` (the gatekeeper calls this every
        second)."""
        cutoff = time.monotonic_ns() - round(self.idle_s * 1e9)
        for cg in [cg for cg, c in self._connectors.items() if c.used_ns < cutoff]:
            if not self._connectors[cg].lock.locked():
                self._forget(cg)

    def _forget(self, cgroup: int) -> None:
        conn = self._connectors.pop(cgroup, None)
        if conn is not None:
            conn.close()

    @property
    def connectors(self) -> int:
        return len(self._connectors)

    def close(self) -> None:
        for cg in list(self._connectors):
            self._forget(cg)


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def own_cgroup(root: Path | None) -> int | None:
    """This process's cgroup v2 id (None: not found)."""
    if root is None:
        return None
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return _inode(root / line[3:].strip().lstrip("/"))
    except OSError:
        return None
    return None
