"""A connector: makes TCP sockets inside one cgroup and hands them to the agent.

Run by :class:`~._identity.IdentityFactory` as ``python -I -S _connector.py FD``
(this file imports nothing of Coorp, so it starts in milliseconds and holds little
memory in the program's cgroup). The agent moves the process into the cgroup of the
program whose connection it relays, then asks over the ``SOCK_SEQPACKET`` socket
``FD``: each request is ``(uid, gid)`` (two native ``u32``), each answer an ``i32``
errno (0: success) with, on success, the new socket's descriptor (``SCM_RIGHTS``).

A socket's owner and cgroup are fixed when it is created (``sk_uid`` from the creator's
fsuid, the file's credentials with its fsgid, ``sk_cgrp_data`` from the creator's
cgroup): what ``meta skuid``, ``meta skgid`` and ``socket cgroupv2`` match, and what
the cgroup's BPF programs (systemd's ``IPAddressDeny=``) judge. Only the fs ids are
set, around ``socket()``, so one connector serves every user of its cgroup. It exits
when the agent closes its end (the agent's exit included).
"""

import contextlib
import ctypes
import os
import socket
import struct
import sys


def main() -> None:
    chan = socket.socket(fileno=int(sys.argv[1]))
    libc = ctypes.CDLL(None, use_errno=True)
    while True:
        try:
            req = chan.recv(64)
        except InterruptedError:
            continue
        if len(req) != 8:
            return  # the agent closed its end (or spoke nonsense): done
        uid, gid = struct.unpack("=II", req)
        old_gid = libc.setfsgid(gid)
        old_uid = libc.setfsuid(uid)
        sock = None
        code = 0
        try:
            if libc.setfsuid(-1) != uid or libc.setfsgid(-1) != gid:
                code = 1  # EPERM: the ids did not take
            else:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError as exc:
            code = exc.errno or 1
        finally:
            libc.setfsuid(old_uid)
            libc.setfsgid(old_gid)
        if sock is None:
            chan.sendmsg([struct.pack("=i", code)])
            continue
        fds = struct.pack("=i", sock.fileno())
        chan.sendmsg([struct.pack("=i", 0)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        sock.close()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError, ConnectionError):
        main()
    os._exit(0)
