"""Endpoints of the broadcast benchmark: Coorp and the baselines it is compared with.

Every implementation provides a *sender* and a *receiver* endpoint for a named channel,
built inside the process that uses it. A receiver returns a usable numpy array (or
``None`` on timeout); the harness in :mod:`coorp.bench._broadcast` measures from just
before ``send`` until the last receiver holds its array. ``coorp`` loans a sample and
fills it, ``coorp_copy`` publishes the array (one copy into shared memory), and
``coorp_spin`` is ``coorp`` with subscribers that busy-poll up to :data:`SPIN` before
sleeping (``Bus.subscriber(spin=...)``; Coorp's default is 0, sleep at once), and
``coorp_iox`` is ``coorp`` with subscribers that sleep on iceoryx2's event (one
notification per subscriber) instead of the default futex wake word
(``Bus(wake="iceoryx2")``). Baselines:

* ``shm_segment`` -- ``multiprocessing.shared_memory`` with a new segment per message,
  its name sent over a Unix socket (the usual ROS 2 workaround),
* ``pickle5_socket`` -- pickle protocol 5, buffers out-of-band, over Unix sockets,
* ``pyzmq`` -- ZeroMQ PUB/SUB over ``ipc://``, zero-copy frames,
* ``cyclonedds`` -- a DDS topic of ``sequence<uint8>`` through the cyclonedds Python
  binding, as rclpy carries ``uint8[]`` over Cyclone DDS,
* ``private_copy`` -- a reference, not a transport: a 16-byte trigger over a Unix socket,
  and each receiver returns its own private in-memory copy of the payload (built in
  advance from the same seed), so ``checksum`` mode measures the physical limit of
  reading the bytes.

Every sender's ``send`` returns ``(t0, t_done)``: ``t0`` is taken before any producer
work (filling a loan, serializing, copying into a segment), the same instant for every
implementation; ``t_done`` when ``send`` returns (the producer's cost is the difference).
Socket files live in the run's private directory (:func:`run_dir`), which the harness
removes on every exit path.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import tempfile
import time
from typing import Any

import numpy as np

__all__ = [
    "IMPLS",
    "REFERENCES",
    "bench_payload",
    "make_receiver",
    "make_sender",
    "run_dir",
    "unavailable",
]

IMPLS = (
    "coorp",
    "coorp_copy",
    "coorp_spin",
    "coorp_iox",
    "shm_segment",
    "pickle5_socket",
    "pyzmq",
    "cyclonedds",
)
#: The busy-poll budget of ``coorp_spin``'s subscribers (``Bus.subscriber(spin=...)``).
SPIN = 100e-6
#: References measured beside the implementations (not transports).
REFERENCES = ("private_copy",)
_LEN = struct.Struct("<QQ")


def run_dir(run: str) -> str:
    """The private directory of a benchmark run (socket files); the harness creates and
    removes it."""
    return os.path.join(tempfile.gettempdir(), f"coorp-bench-{run}")


def bench_payload(n: int) -> np.ndarray:
    """The payload of size ``n`` (the same bytes in every process)."""
    return np.random.default_rng(n).integers(0, 255, n, dtype=np.uint8)


def unavailable(impl: str) -> str | None:
    """Why ``impl`` cannot run here, or ``None`` if it can."""
    mods = {
        "coorp": "iceoryx2",
        "coorp_copy": "iceoryx2",
        "coorp_spin": "iceoryx2",
        "coorp_iox": "iceoryx2",
        "pyzmq": "zmq",
        "cyclonedds": "cyclonedds",
    }
    mod = mods.get(impl)
    if mod is None:
        return None
    try:
        __import__(mod)
    except Exception as exc:  # an import may fail with more than ImportError (ABI, libs)
        return f"python package {mod!r} not importable: {exc}"
    return None


def _sock_path(run: str, channel: str) -> str:
    return os.path.join(run_dir(run), f"{channel}.sock")


def _recv_exact(sock: socket.socket, buf: memoryview) -> bool:
    pos = 0
    while pos < len(buf):
        n = sock.recv_into(buf[pos:])
        if n == 0:
            return False
        pos += n
    return True


# -- coorp -------------------------------------------------------------------------------
def _bench_topic(run: str, channel: str, max_bytes: int) -> Any:
    """The topic a benchmark run's sender and receivers agree on."""
    from coorp.transport import Topic

    return Topic(
        name=f"bench/{run}/{channel}",
        type=np.ndarray,
        max_payload=max_bytes + 4096,
        max_depth=2,
        max_borrowed=2,
        max_subscribers=6,
    )


class _CoorpSender:
    def __init__(self, run: str, channel: str, max_bytes: int, loan: bool) -> None:
        from coorp.transport import Bus, Reach

        self.bus = Bus(f"bench-{channel}", reach=Reach.PROCESS | Reach.MACHINE)
        self.topic = _bench_topic(run, channel, max_bytes)
        self.pub = self.bus.publisher(self.topic)
        self.loan = loan

    def send(self, payload: np.ndarray) -> tuple[int, int]:
        t0 = time.monotonic_ns()
        if self.loan:
            # The producer writes the payload into the loaned sample (timed, like every
            # other implementation's serialization).
            loan = self.pub.loan_array(payload.shape, payload.dtype)
            np.copyto(loan.array, payload)
            loan.send()
        else:
            self.pub.publish(payload)
        return t0, time.monotonic_ns()

    def close(self) -> None:
        self.bus.close()


class _CoorpReceiver:
    def __init__(
        self, run: str, channel: str, max_bytes: int, spin: float = 0.0, wake: str = "auto"
    ) -> None:
        from coorp.transport import Bus, Reach

        self.bus = Bus(f"bench-{channel}-r", reach=Reach.PROCESS | Reach.MACHINE, wake=wake)
        topic = _bench_topic(run, channel, max_bytes)
        self.sub = self.bus.subscriber(topic, depth=2, spin=spin)
        self.msg: Any = None

    def recv(self, timeout: float) -> np.ndarray | None:
        self.done()
        self.msg = self.sub.receive(timeout=timeout)
        return None if self.msg is None else self.msg.value

    def done(self) -> None:
        """The consumer is finished with the last message: its sample goes back now."""
        if self.msg is not None:
            self.msg.release()
            self.msg = None

    def close(self) -> None:
        self.msg = None
        self.bus.close()


# -- Unix-socket baselines -----------------------------------------------------------------
class _SocketSender:
    """Accepts ``peers`` receivers on a Unix socket and writes to each in turn."""

    def __init__(self, run: str, channel: str, peers: int, mode: str) -> None:
        self.path = _sock_path(run, channel)
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(peers)
        self.peers = peers
        self.conns: list[socket.socket] = []
        self.mode = mode
        self.segments: list[Any] = []

    def _accept(self) -> None:
        self.srv.settimeout(30)
        while len(self.conns) < self.peers:
            conn, _ = self.srv.accept()
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            self.conns.append(conn)

    def send(self, payload: np.ndarray) -> tuple[int, int]:
        if len(self.conns) < self.peers:
            self._accept()
        t0 = time.monotonic_ns()
        if self.mode == "trigger":  # private_copy: only which payload, and its marks
            meta = pickle.dumps((payload.nbytes, int(payload[0]), int(payload[-1])))
            parts: list[bytes | memoryview] = [_LEN.pack(len(meta), 0), meta]
        elif self.mode == "pickle5":
            bufs: list[pickle.PickleBuffer] = []
            meta = pickle.dumps(payload, protocol=5, buffer_callback=bufs.append)
            raw = bufs[0].raw() if bufs else memoryview(b"")
            parts = [_LEN.pack(len(meta), raw.nbytes), meta, raw]
        else:  # a new shared-memory segment per message, its name over the socket
            from multiprocessing import shared_memory

            for seg in self.segments:  # receivers acknowledged the previous message
                seg.close()
                seg.unlink()
            seg = shared_memory.SharedMemory(create=True, size=max(payload.nbytes, 1))
            np.ndarray(payload.shape, payload.dtype, buffer=seg.buf)[...] = payload
            self.segments = [seg]
            meta = pickle.dumps((seg.name, payload.shape, payload.dtype.str))
            parts = [_LEN.pack(len(meta), 0), meta]
        for conn in self.conns:
            for part in parts:
                conn.sendall(part)
        return t0, time.monotonic_ns()

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
            seg.unlink()
        for c in self.conns:
            c.close()
        self.srv.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


class _SocketReceiver:
    def __init__(self, run: str, channel: str, mode: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        path = _sock_path(run, channel)
        end = time.monotonic() + 30
        while True:
            try:
                self.sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > end:
                    raise
                time.sleep(0.01)  # benchmark setup only: the sender is still starting
        self.mode = mode
        self.head = bytearray(_LEN.size)
        self.seg: Any = None
        self.private: dict[int, np.ndarray] = {}

    def recv(self, timeout: float) -> np.ndarray | None:
        self.sock.settimeout(timeout)
        try:
            if not _recv_exact(self.sock, memoryview(self.head)):
                return None
        except TimeoutError:
            return None
        self.sock.settimeout(None)
        meta_len, buf_len = _LEN.unpack(self.head)
        meta = bytearray(meta_len)
        _recv_exact(self.sock, memoryview(meta))
        if self.mode == "trigger":
            n, first, last = pickle.loads(meta)
            arr = self.private.get(n)
            if arr is None:
                arr = self.private[n] = bench_payload(n)
            arr[0], arr[-1] = first, last
            return arr
        if self.mode == "pickle5":
            buf = bytearray(buf_len)
            _recv_exact(self.sock, memoryview(buf))
            return pickle.loads(meta, buffers=[buf])
        from multiprocessing import shared_memory

        if self.seg is not None:
            self.seg.close()
        name, shape, dtype = pickle.loads(meta)
        # The sender owns and unlinks the segment (spawned children share its tracker).
        self.seg = shared_memory.SharedMemory(name=name)
        return np.ndarray(shape, np.dtype(dtype), buffer=self.seg.buf)

    def close(self) -> None:
        if self.seg is not None:
            self.seg.close()
        self.sock.close()


# -- pyzmq -------------------------------------------------------------------------------
class _ZmqSender:
    def __init__(self, run: str, channel: str) -> None:
        import zmq

        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PUB)
        self.sock.bind(f"ipc://{_sock_path(run, channel)}.zmq")

    def send(self, payload: np.ndarray) -> tuple[int, int]:
        t0 = time.monotonic_ns()
        meta = pickle.dumps((payload.shape, payload.dtype.str))
        self.sock.send_multipart([meta, payload.data], copy=False)
        return t0, time.monotonic_ns()

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


class _ZmqReceiver:
    def __init__(self, run: str, channel: str) -> None:
        import zmq

        self.zmq = zmq
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(f"ipc://{_sock_path(run, channel)}.zmq")

    def recv(self, timeout: float) -> np.ndarray | None:
        if not self.sock.poll(int(timeout * 1000)):
            return None
        meta, data = self.sock.recv_multipart(copy=False)
        shape, dtype = pickle.loads(meta.bytes)
        return np.frombuffer(data.buffer, dtype=np.dtype(dtype)).reshape(shape)

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


# -- cyclonedds --------------------------------------------------------------------------
def _dds_types() -> Any:
    import types as pytypes
    from dataclasses import dataclass

    from cyclonedds.idl import IdlStruct, types

    # Built at run time with a real annotation object: this module's postponed
    # annotations would be strings that cyclonedds cannot resolve.
    def body(ns: dict[str, Any]) -> None:
        ns["__annotations__"] = {"data": types.sequence[types.uint8]}  # type: ignore[misc,unused-ignore]  # only typed when cyclonedds is installed

    cls = pytypes.new_class("Blob", (IdlStruct,), {"typename": "coorp_bench::Blob"}, body)
    return dataclass(cls)


class _Dds:
    def __init__(self, run: str, channel: str) -> None:
        from cyclonedds.core import Policy, Qos
        from cyclonedds.domain import DomainParticipant
        from cyclonedds.topic import Topic
        from cyclonedds.util import duration

        self.blob = _dds_types()
        self.dp = DomainParticipant(0)
        self.qos = Qos(
            Policy.Reliability.Reliable(duration(seconds=10)), Policy.History.KeepLast(2)
        )
        self.topic = Topic(self.dp, f"coorp_bench_{run}_{channel}", self.blob, qos=self.qos)


class _DdsSender(_Dds):
    def __init__(self, run: str, channel: str) -> None:
        super().__init__(run, channel)
        from cyclonedds.pub import DataWriter

        self.writer = DataWriter(self.dp, self.topic, qos=self.qos)

    def send(self, payload: np.ndarray) -> tuple[int, int]:
        t0 = time.monotonic_ns()
        self.writer.write(self.blob(payload.tobytes()))
        return t0, time.monotonic_ns()

    def close(self) -> None:
        del self.writer


class _DdsReceiver(_Dds):
    def __init__(self, run: str, channel: str) -> None:
        super().__init__(run, channel)
        from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState, WaitSet
        from cyclonedds.sub import DataReader

        self.reader = DataReader(self.dp, self.topic, qos=self.qos)
        self.cond = ReadCondition(self.reader, SampleState.Any | ViewState.Any | InstanceState.Any)
        self.ws = WaitSet(self.dp)
        self.ws.attach(self.cond)

    def recv(self, timeout: float) -> np.ndarray | None:
        from cyclonedds.util import duration

        samples = self.reader.take()
        if not samples:
            self.ws.wait(duration(seconds=timeout))
            samples = self.reader.take()
        if not samples:
            return None
        return np.asarray(samples[-1].data, dtype=np.uint8)

    def close(self) -> None:
        del self.reader


def make_sender(impl: str, run: str, channel: str, peers: int, max_bytes: int) -> Any:
    """The sending endpoint of ``impl`` for ``channel`` (built in the calling process)."""
    if impl in ("coorp", "coorp_copy", "coorp_spin", "coorp_iox"):
        return _CoorpSender(run, channel, max_bytes, loan=impl != "coorp_copy")
    if impl == "shm_segment":
        return _SocketSender(run, channel, peers, "segment")
    if impl == "pickle5_socket":
        return _SocketSender(run, channel, peers, "pickle5")
    if impl == "private_copy":
        return _SocketSender(run, channel, peers, "trigger")
    if impl == "pyzmq":
        return _ZmqSender(run, channel)
    if impl == "cyclonedds":
        return _DdsSender(run, channel)
    raise ValueError(impl)


def make_receiver(impl: str, run: str, channel: str, max_bytes: int) -> Any:
    """The receiving endpoint of ``impl`` for ``channel``."""
    if impl in ("coorp", "coorp_copy"):
        return _CoorpReceiver(run, channel, max_bytes)
    if impl == "coorp_spin":
        return _CoorpReceiver(run, channel, max_bytes, spin=SPIN)
    if impl == "coorp_iox":
        return _CoorpReceiver(run, channel, max_bytes, wake="iceoryx2")
    if impl == "shm_segment":
        return _SocketReceiver(run, channel, "segment")
    if impl == "pickle5_socket":
        return _SocketReceiver(run, channel, "pickle5")
    if impl == "private_copy":
        return _SocketReceiver(run, channel, "trigger")
    if impl == "pyzmq":
        return _ZmqReceiver(run, channel)
    if impl == "cyclonedds":
        return _DdsReceiver(run, channel)
    raise ValueError(impl)
