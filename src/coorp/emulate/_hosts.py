"""The stations' network namespaces and their TUN interfaces; leftovers of dead runs.

Each station gets namespace ``<tag>-<pid>-<n>-<station>`` (the pid of the process that
made it: concurrent runs never collide, and a later run knows whose it was) holding one
TUN interface ``wlan0`` (IP packets, no link layer: the emulator needs no ARP) with
the station's address in one /24, an MTU of the scenario's ``packet_bytes``, IPv6 off
(its router solicitations and MLD reports would be traffic nobody asked for), and an
``/etc/netns/<ns>/hosts`` naming every station, which ``ip netns exec`` shows the
programs inside as ``/etc/hosts`` (``ping leader`` works).

The TUN device is created from a thread that has joined the namespace (``setns``), so
no interface ever appears in the root namespace; the file descriptors stay with the
emulator. They are not persistent devices: they vanish with the last descriptor, when
the emulator exits however it exits. The namespaces outlive a killed emulator:
:func:`remove_stale` (run at every start) kills what is left inside the namespaces of
dead runs and deletes them.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import itertools
import os
import re
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from coorp._errors import ConfigurationError, UsageError
from coorp._netns import run_checked

__all__ = [
    "NETNS_DIR", "Hosts", "cpu_split", "open_tun", "remove_stale", "stale_namespaces",
]  # fmt: skip

NETNS_DIR = Path("/run/netns")
_ETC_NETNS = Path("/etc/netns")
_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
_IFF_VNET_HDR = 0x4000
_CLONE_NEWNET = 0x40000000
_counter = itertools.count()


def cpu_split(allowed: Collection[int]) -> tuple[int, str] | None:
    """The emulator's CPU and the others' mask (``rps_cpus``'s hex format) among the CPUs
    ``allowed``: the emulator takes the highest, the stations' receive processing the
    rest; None with fewer than two (nothing to split)."""
    cpus = sorted(set(allowed))
    if len(cpus) < 2:
        return None
    mask = sum(1 << c for c in cpus[:-1])
    return cpus[-1], f"{mask:x}"


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def open_tun(
    namespace: str,
    ifname: str = "wlan0",
    *,
    sysctls: Mapping[str, str] = {},
    vnet_hdr: bool = False,
) -> int:
    """Create TUN interface ``ifname`` inside ``namespace``; its file descriptor
    (non-blocking). ``sysctls``: /proc/sys paths (relative, ``net/ipv6/...``) written
    from inside the namespace. ``vnet_hdr``: every packet read or written carries a
    ``virtio_net_hdr`` first (``IFF_VNET_HDR``), so a write can be a GSO packet; no
    offload is turned on (``TUNSETOFFLOAD``), so the packets read are never one."""
    flags = _IFF_TUN | _IFF_NO_PI | (_IFF_VNET_HDR if vnet_hdr else 0)
    box: dict[str, object] = {}

    def work() -> None:
        try:
            _setns(str(NETNS_DIR / namespace))
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", ifname.encode(), flags))
                for key, value in sysctls.items():
                    Path("/proc/sys", key).write_text(value)
            except BaseException:
                os.close(fd)
                raise
            box["fd"] = fd
        except BaseException as exc:  # reported in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=work, name=f"tun-{namespace}")
    t.start()
    t.join()
    if "error" in box:
        err = box["error"]
        raise ConfigurationError(f"cannot create TUN {ifname!r} in namespace {namespace!r}: {err}")
    fd = box["fd"]
    assert isinstance(fd, int)
    return fd


_NAME = re.compile(r"^(?P<tag>[a-z0-9]+)-(?P<pid>\d+)-\d+-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_namespaces(tag: str) -> list[str]:
    """Namespaces a run tagged ``tag`` made whose process is gone."""
    if not NETNS_DIR.is_dir():
        return []
    out = []
    for p in sorted(NETNS_DIR.iterdir()):
        m = _NAME.match(p.name)
        if m and m["tag"] == tag and not _alive(int(m["pid"])):
            out.append(p.name)
    return out


def _kill_inside(namespace: str) -> None:
    """SIGKILL every process in ``namespace`` (``ip netns pids``)."""
    r = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True,
                       timeout=10)  # fmt: skip
    for word in r.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
            os.kill(int(word), signal.SIGKILL)


def _delete(namespace: str) -> None:
    _kill_inside(namespace)
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)
    shutil.rmtree(_ETC_NETNS / namespace, ignore_errors=True)


def remove_stale(tag: str) -> list[str]:
    """Kill the processes left in, and delete, the namespaces of dead runs tagged
    ``tag`` (and their temporary folders, ``<tmp>/<tag>-<pid>-*``); the names removed."""
    gone = stale_namespaces(tag)
    for name in gone:
        _delete(name)
    tmp = Path(tempfile.gettempdir())
    for p in tmp.glob(f"{tag}-*-*"):
        m = re.match(rf"^{re.escape(tag)}-(\d+)-", p.name)
        try:
            st = p.lstat()
        except OSError:
            continue
        # Only our own folders: not a link, owned by this user (another user's file in
        # the shared /tmp is left alone).
        if m and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not _alive(int(m[1])):
            shutil.rmtree(p, ignore_errors=True)
    return gone


class Hosts:
    """The namespaces and TUN interfaces of one emulated channel's stations."""

    def __init__(
        self,
        stations: Sequence[str],
        addresses: Mapping[str, str],
        *,
        tag: str = "cemu",
        mtu: int = 1500,
        ifname: str = "wlan0",
        vnet_hdr: bool = False,
    ) -> None:
        if not re.fullmatch(r"[a-z0-9]{1,12}", tag):
            raise UsageError(f"namespace tag {tag!r}: 1-12 lowercase letters or digits")
        self.stations = list(stations)
        self.addresses = dict(addresses)
        self.tag = tag
        self.prefix = f"{tag}-{os.getpid()}-{next(_counter)}-"
        self.mtu = mtu
        self.ifname = ifname
        self.vnet_hdr = vnet_hdr
        self.fds: dict[str, int] = {}
        self.created: list[str] = []

    def ns(self, station: str) -> str:
        if station not in self.addresses:
            raise UsageError(f"unknown station {station!r}; stations: {self.stations}")
        return self.prefix + station

    def create(self, *, sysctls: Sequence[str] = ()) -> None:
        """Namespaces, TUN interfaces, addresses, hosts files (``sysctls``: extra
        ``key=value`` settings for every namespace, as ``sysctl -w`` takes them)."""
        hosts = "127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for n, a in self.addresses.items())
        for st in self.stations:
            ns = self.ns(st)
            run_checked(["ip", "netns", "add", ns])
            self.created.append(ns)
            etc = _ETC_NETNS / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts)
            settings = {f"net/ipv6/conf/{self.ifname}/disable_ipv6": "1"}
            for kv in sysctls:
                key, _, value = kv.partition("=")
                settings[key.strip().replace(".", "/")] = value.strip()
            self.fds[st] = open_tun(ns, self.ifname, sysctls=settings,
                                     vnet_hdr=self.vnet_hdr)  # fmt: skip
            run_checked(["ip", "-n", ns, "link", "set", "lo", "up"])
            run_checked(["ip", "-n", ns, "link", "set", self.ifname, "mtu", str(self.mtu),
                         "txqueuelen", "1000", "up"])  # fmt: skip
            run_checked(["ip", "-n", ns, "addr", "add", f"{self.addresses[st]}/24", "dev",
                         self.ifname])  # fmt: skip

    def steer_receives(self, mask: str) -> None:
        """Every station's received packets are processed on the CPUs of ``mask`` (Receive
        Packet Steering on its interface, ``queues/rx-0/rps_cpus``): a packet the
        emulator writes is handed to one of them, so the receiving host's network stack
        (TCP, its acks, the sends they release) does not run inside the emulator's
        ``write`` on the emulator's CPU. sysfs shows a namespace's interfaces only to a
        process that mounted it there, hence ``ip netns exec``."""
        if not re.fullmatch(r"[0-9a-f]{1,64}", mask):
            raise UsageError(f"rps mask {mask!r}: hex digits expected")
        path = f"/sys/class/net/{self.ifname}/queues/rx-0/rps_cpus"
        for st in self.stations:
            ns = self.ns(st)
            r = subprocess.run(["ip", "netns", "exec", ns, "tee", path], input=mask + "\n",
                               capture_output=True, text=True, timeout=10)  # fmt: skip
            if r.returncode != 0:
                raise ConfigurationError(
                    f"cannot steer {ns}'s receives to CPUs {mask} ({path}): {r.stderr.strip()}"
                )

    def close_fds(self) -> None:
        """Close this process's descriptors (the emulator holds its own copies)."""
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def destroy(self) -> None:
        """Kill every process inside, delete the namespaces, close the descriptors."""
        self.close_fds()
        for ns in reversed(self.created):
            _delete(ns)
        self.created.clear()
