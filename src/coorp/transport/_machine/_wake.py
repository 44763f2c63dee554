"""Wake every subscriber of a topic with one system call: a futex word per topic.

iceoryx2's event ``notify`` wakes each listener with its own datagram, so a publisher
that broadcasts to N processes makes N system calls, and on a busy machine the first
woken subscriber preempts the publisher inside that loop (issue 12: 1-2.7 ms from the end
of a 10 MB fill until the fourth subscriber had the array). Here every process that uses
a topic maps one small shared file, ``/dev/shm/coorp-wake-<uid>-<hash of the topic>``,
whose first 32-bit word is the topic's *wake word*:

* a publisher, after iceoryx2 has made the sample visible, adds 1 to the word and wakes
  every waiter in one ``FUTEX_WAKE_OP`` (the kernel does the add atomically, then the
  wake, so two publishers never lose an increment);
* a subscriber reads the word *before* it looks for samples and, finding none, sleeps
  with ``FUTEX_WAIT_BITSET`` on the value it read: a publish in between changed the word,
  so the kernel refuses to sleep (no lost wake-up), and every sleep has a bounded
  timeout (:data:`MAX_SLEEP_S`), so even a publisher that died between send and wake
  delays a message by at most that long;
* wake-ups that concern one subscriber only (an in-process delivery, ``wake()``,
  ``close()``) add 1 to the word with a ``FUTEX_WAKE_OP`` on a second word nobody waits on
  and then wake that subscriber alone with ``FUTEX_WAKE_BITSET`` (each subscriber sleeps
  with one of 32 bits; two subscribers sharing a bit only cost a spurious wake-up).

The rest of the file is a registry of the processes using it (pid and start time, under
``flock``): the last one to leave removes the file; a file whose registered processes are
all gone (a crashed run) is re-initialised by the next user and removed by
:func:`sweep_stale` (``Bus.cleanup_dead_peers``). A process keeps one registration per
topic however many buses, publishers and subscribers it has on it.

Linux on x86_64 and aarch64 only (the futex system call numbers are per architecture);
elsewhere, or if the probe call fails, :func:`futex_supported` says why and subscribers
sleep on iceoryx2's event instead. Publishers always signal both ways, so subscribers of
either kind can share a topic.

Memory order: x86_64 keeps the subscriber's load of the word before its later loads of
the queue (TSO); on aarch64 the Python work between the two (microseconds of
interpreter) makes a reordering practically impossible, and the bounded sleep bounds the
cost if it happened.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import mmap
import multiprocessing.util
import os
import platform
import struct
import sys
import threading
import time
from typing import Any

__all__ = [
    "MAX_SLEEP_S",
    "Waiter",
    "WakeSegment",
    "acquire",
    "futex_supported",
    "release",
    "segment_path",
    "sweep_stale",
]

#: The longest single futex sleep (s): a safety net, not the wake-up mechanism.
MAX_SLEEP_S = 1.0

_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
_FUTEX_WAKE_OP = 5
_FUTEX_WAIT_BITSET = 9
_FUTEX_WAKE_BITSET = 10
_FUTEX_OP_ADD = 1
_FUTEX_OP_CMP_LT = 2
_FUTEX_OP_CMP_GE = 5
_INT_MAX = 2**31 - 1
_ALL = 0xFFFFFFFF


def _op(op: int, oparg: int, cmp: int, cmparg: int) -> int:
    return ((op & 0xF) << 28) | ((cmp & 0xF) << 24) | ((oparg & 0xFFF) << 12) | (cmparg & 0xFFF)


# "add 1, then wake nobody else": the comparison on the old value must be false, and
# which comparison is false depends on the old value's sign (it wraps after 2**31 adds).
_ADD_IF_NONNEG = _op(_FUTEX_OP_ADD, 1, _FUTEX_OP_CMP_LT, -2048)  # old < -2048: false
_ADD_IF_NEG = _op(_FUTEX_OP_ADD, 1, _FUTEX_OP_CMP_GE, 0)  # old >= 0: false

# File layout: the wake word alone in the first cache line, the add-only word in the
# second, then the header and the registry of user processes.
_SIZE = 4096
_WORD = 0
_SCRATCH = 64
_HEADER = struct.Struct("<II")  # magic, version
_HEADER_AT = 128
_MAGIC = 0xC0047A4E
_VERSION = 1
_SLOT = struct.Struct("<IIQ")  # pid, spare, start time (clock ticks since boot)
_SLOTS_AT = 192
_NSLOTS = (_SIZE - _SLOTS_AT) // _SLOT.size
_LOCK_TRIES = 2000  # x 1 ms: how long to wait for another process's registry update


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_syscall: tuple[Any, int] | None = None
_reason: str | None = None


def _probe() -> str | None:
    """Set up the system call; ``None`` if futexes work here, else why not."""
    global _syscall
    if not sys.platform.startswith("linux"):
        return f"futex wake-up needs Linux (this is {sys.platform})"
    nr = _SYS_FUTEX.get(platform.machine().lower())
    if nr is None:
        return f"futex system call number unknown for {platform.machine()!r}"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syscall
    except (OSError, AttributeError) as exc:
        return f"libc syscall() not available: {exc}"
    fn.restype = ctypes.c_long
    fn.argtypes = [
        ctypes.c_long,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_uint32,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_uint32,
    ]
    word = ctypes.c_uint32(7)
    scratch = ctypes.c_uint32(0)
    addr, saddr = ctypes.addressof(word), ctypes.addressof(scratch)
    # A wait on a value the word does not hold must fail with EAGAIN at once.
    ts = _Timespec(0, 0)
    if fn(nr, addr, _FUTEX_WAIT_BITSET, 8, ctypes.addressof(ts), None, _ALL) != -1 or (
        ctypes.get_errno() != errno.EAGAIN
    ):
        return f"futex FUTEX_WAIT_BITSET probe failed (errno {ctypes.get_errno()})"
    if fn(nr, saddr, _FUTEX_WAKE_OP, 0, None, addr, _ADD_IF_NONNEG) < 0 or word.value != 8:
        return f"futex FUTEX_WAKE_OP probe failed (errno {ctypes.get_errno()})"
    if fn(nr, addr, _FUTEX_WAKE_BITSET, _INT_MAX, None, None, 1) < 0:
        return f"futex FUTEX_WAKE_BITSET probe failed (errno {ctypes.get_errno()})"
    _syscall = (fn, nr)
    return None


_probe_lock = threading.Lock()
_probed = False


def futex_supported() -> str | None:
    """``None`` if the futex wake-up works on this machine, else the reason it does not."""
    global _probed, _reason
    with _probe_lock:
        if not _probed:
            _reason = _probe()
            _probed = True
    return _reason


def segment_path(topic_name: str) -> str:
    """The shared file of ``topic_name``'s wake word (per user)."""
    digest = hashlib.sha1(topic_name.encode()).hexdigest()[:20]
    return f"/dev/shm/coorp-wake-{os.getuid()}-{digest}"


def _start_time(pid: int) -> int:
    """The start time of process ``pid`` in clock ticks since boot, 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0
    # Field 22; the command name (field 2) may contain spaces, so split after its ')'.
    try:
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return 0


def _alive(pid: int, start: int) -> bool:
    return pid > 0 and _start_time(pid) == start


def _lock(fd: int) -> None:
    for _ in range(_LOCK_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.001)
    raise TimeoutError("another process held the wake segment's lock for 2 s")


def _live_users(mm: mmap.mmap) -> int:
    """Clear the slots of processes that are gone; how many remain."""
    live = 0
    for i in range(_NSLOTS):
        at = _SLOTS_AT + i * _SLOT.size
        pid, _, start = _SLOT.unpack_from(mm, at)
        if pid == 0:
            continue
        if _alive(pid, start):
            live += 1
        else:
            _SLOT.pack_into(mm, at, 0, 0, 0)
    return live


def _valid(mm: mmap.mmap) -> bool:
    return _HEADER.unpack_from(mm, _HEADER_AT) == (_MAGIC, _VERSION)


class WakeSegment:
    """This process's registration in one topic's wake file, and its mapping."""

    def __init__(self, name: str, path: str, fd: int, mm: mmap.mmap, slot: int) -> None:
        self.name = name
        self.path = path
        self.pid = os.getpid()
        self.refs = 1
        #: Whether opening found a file left by processes that are all gone.
        self.replaced_stale = False
        self._fd = fd
        self._slot = slot
        self._mm = mm
        self._word = ctypes.c_uint32.from_buffer(mm, _WORD)
        self._scratch = ctypes.c_uint32.from_buffer(mm, _SCRATCH)
        self.word_addr = ctypes.addressof(self._word)
        self.scratch_addr = ctypes.addressof(self._scratch)
        self._ino = os.fstat(fd).st_ino
        self.closed = False

    @property
    def value(self) -> int:
        """The wake word now (a plain aligned 32-bit load)."""
        return self._word.value

    def wake_all(self) -> int:
        """Advance the word and wake every waiter on it (one system call); returns how
        many were sleeping."""
        fn, nr = _syscall  # type: ignore[misc]
        op = _ADD_IF_NONNEG if self._word.value < 2**31 else _ADD_IF_NEG
        addr = self.word_addr
        return int(fn(nr, addr, _FUTEX_WAKE_OP, _INT_MAX, None, addr, op))

    def wake_bits(self, bits: int) -> int:
        """Advance the word and wake the waiters sleeping with any of ``bits``; returns
        how many were sleeping."""
        fn, nr = _syscall  # type: ignore[misc]
        op = _ADD_IF_NONNEG if self._word.value < 2**31 else _ADD_IF_NEG
        # Wakes nobody (no one sleeps on the scratch word); adds 1 to the wake word.
        fn(nr, self.scratch_addr, _FUTEX_WAKE_OP, 0, None, self.word_addr, op)
        return int(fn(nr, self.word_addr, _FUTEX_WAKE_BITSET, _INT_MAX, None, None, bits))

    def leave(self) -> None:
        """Deregister; the last live user removes the file. The mapping itself stays
        until no waiter references it (a thread may still be returning from a sleep)."""
        if self.closed:
            return
        self.closed = True
        try:
            _lock(self._fd)
            _SLOT.pack_into(self._mm, _SLOTS_AT + self._slot * _SLOT.size, 0, 0, 0)
            if _live_users(self._mm) == 0:
                with contextlib.suppress(FileNotFoundError):
                    if os.stat(self.path).st_ino == self._ino:
                        os.unlink(self.path)
        finally:
            os.close(self._fd)  # also drops the lock


class Waiter:
    """One subscriber's side: read the word, sleep on it, be woken alone."""

    __slots__ = ("_ts", "_ts_addr", "bits", "segment")

    def __init__(self, segment: WakeSegment, uid: int) -> None:
        self.segment = segment
        self.bits = 1 << (hash(uid) & 31)
        self._ts = _Timespec(0, 0)
        self._ts_addr = ctypes.addressof(self._ts)

    def value(self) -> int:
        return self.segment.value

    def wait(self, seen: int, timeout_ns: int) -> bool:
        """Sleep until the word moves from ``seen`` (or a wake-up, or ``timeout_ns``, at
        most :data:`MAX_SLEEP_S`); ``False`` on timeout."""
        fn, nr = _syscall  # type: ignore[misc]
        timeout_ns = max(0, min(timeout_ns, int(MAX_SLEEP_S * 1e9)))
        deadline = time.monotonic_ns() + timeout_ns  # absolute, CLOCK_MONOTONIC
        ts = self._ts
        ts.tv_sec, ts.tv_nsec = divmod(deadline, 1_000_000_000)
        rc = fn(
            nr, self.segment.word_addr, _FUTEX_WAIT_BITSET, seen, self._ts_addr, None, self.bits
        )
        return rc == 0 or ctypes.get_errno() != errno.ETIMEDOUT

    def wake(self) -> None:
        """Wake this subscriber (and only the waiters sharing its bit)."""
        self.segment.wake_bits(self.bits)


_table_lock = threading.Lock()
_table: dict[tuple[int, str], WakeSegment] = {}
_exit_hook_pid = 0


def _release_all() -> None:
    """At interpreter exit (and at the end of a multiprocessing child, which skips
    ``atexit``): leave every wake file this process still holds, so a process that exits
    without closing its buses leaves no file behind."""
    with _table_lock:
        mine = [seg for (pid, _), seg in _table.items() if pid == os.getpid()]
        for seg in mine:
            del _table[(seg.pid, seg.name)]
    for seg in mine:
        with contextlib.suppress(Exception):
            seg.leave()


def _hook_exit() -> None:
    # multiprocessing runs its finalizers at the main process's exit (through atexit)
    # and at the end of every child it starts, fork included; a forked child starts
    # with an empty registry, hence once per pid.
    global _exit_hook_pid
    if _exit_hook_pid != os.getpid():
        _exit_hook_pid = os.getpid()
        multiprocessing.util.Finalize(None, _release_all, exitpriority=-100)


def acquire(topic_name: str) -> WakeSegment:
    """This process's registration in ``topic_name``'s wake file (opened or created,
    re-initialised if every registered process is gone). Raises ``OSError`` /
    ``TimeoutError`` if that is impossible (callers fall back to iceoryx2's event)."""
    reason = futex_supported()
    if reason is not None:
        raise OSError(reason)
    key = (os.getpid(), topic_name)
    with _table_lock:
        seg = _table.get(key)
        if seg is not None and not seg.closed:
            seg.refs += 1
            return seg
        seg = _open(topic_name)
        _table[key] = seg
        _hook_exit()
        return seg


def release(seg: WakeSegment) -> None:
    """Drop one reference; the last one in this process deregisters it."""
    with _table_lock:
        seg.refs -= 1
        if seg.refs > 0:
            return
        key = (seg.pid, seg.name)
        if _table.get(key) is seg:
            del _table[key]
    if seg.pid == os.getpid():  # a forked child never owned its parent's slot
        seg.leave()


def _open(topic_name: str) -> WakeSegment:
    path = segment_path(topic_name)
    me = os.getpid()
    for _ in range(16):  # retries only when a last user removed the file under us
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            _lock(fd)
            st = os.fstat(fd)
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = -1
            if current != st.st_ino:
                os.close(fd)
                continue
            if st.st_size != _SIZE:
                os.ftruncate(fd, _SIZE)
            mm = mmap.mmap(fd, _SIZE)
            stale = False
            if not _valid(mm) or _live_users(mm) == 0:
                stale = _valid(mm)  # a valid file nobody alive uses: a crashed run's
                mm[:] = bytes(_SIZE)
                _HEADER.pack_into(mm, _HEADER_AT, _MAGIC, _VERSION)
            slot = _free_slot(mm)
            if slot is None:
                mm.close()
                raise OSError(f"{path}: all {_NSLOTS} user slots taken by live processes")
            _SLOT.pack_into(mm, _SLOTS_AT + slot * _SLOT.size, me, 0, _start_time(me))
            seg = WakeSegment(topic_name, path, fd, mm, slot)
            seg.replaced_stale = stale
            fcntl.flock(fd, fcntl.LOCK_UN)
            return seg
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
    raise OSError(f"{path}: removed by other processes 16 times while opening")


def _free_slot(mm: mmap.mmap) -> int | None:
    for i in range(_NSLOTS):
        if _SLOT.unpack_from(mm, _SLOTS_AT + i * _SLOT.size)[0] == 0:
            return i
    return None


def sweep_stale() -> int:
    """Remove this user's wake files whose registered processes are all gone (and clear
    dead processes' slots in the others); returns how many files were removed."""
    prefix = f"coorp-wake-{os.getuid()}-"
    removed = 0
    try:
        names = [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]
    except OSError:
        return 0
    for name in names[:4096]:
        path = os.path.join("/dev/shm", name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # someone is opening or leaving it right now
            if os.fstat(fd).st_size != _SIZE:
                continue  # being created (sized under the lock): not ours to judge
            with mmap.mmap(fd, _SIZE) as mm:
                if _valid(mm) and _live_users(mm) > 0:
                    continue
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    os.unlink(path)
                    removed += 1
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed
