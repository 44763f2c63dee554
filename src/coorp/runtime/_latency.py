"""Latency-sensitive (LS) channels: one UDP datagram per message, marked for AC_VO.

:meth:`LatencySensitiveChannel.send` never blocks and never queues more than one
message: the datagram goes to the kernel at once. Only if the socket buffer is full
is it parked in a one-slot mailbox and sent when the socket turns writable, and

* a newer message on the channel supersedes the parked one (keep-last freshness);
* a parked message whose deadline passes is dropped and counted, never sent late.

Each send is reported to the robot's protection planner, so BH streams on this robot
learn when LS traffic is due and get out of its way.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ._auth import DatagramAuthenticator
from ._errors import RuntimeUsageError
from ._marking import Marking
from ._wire import MAX_LS_PAYLOAD_BYTES, WIRE_VERSION, LsHeader, pack_datagram

__all__ = ["ChannelStats", "LatencySensitiveChannel", "SendOutcome"]

SendOutcome = Literal["sent", "parked", "failed"]


@dataclass(frozen=True, slots=True)
class ChannelStats:
    sent: int
    """Datagrams handed to the kernel."""
    superseded: int
    """Parked messages replaced by a newer one before they could be sent."""
    expired: int
    """Parked messages dropped because their deadline passed."""
    failed: int
    """Sends the kernel refused (unreachable, refused, too big)."""
    last_error: str | None


class LatencySensitiveChannel:
    """A periodic, latency-sensitive message channel from this robot to ``dest``.

    Thread-safe: ``send`` may be called from any thread. ``arm_writer`` is called (at
    most once per parked message) to ask the owner's event loop to call
    :meth:`flush` when the socket is writable and at ``deadline`` at the latest.
    """

    def __init__(
        self,
        *,
        name: str,
        robot: str,
        dest: tuple[str, int],
        sock: socket.socket,
        marking: Marking,
        auth: DatagramAuthenticator,
        period_ns: int | None,
        deadline_ns: int,
        observe: Callable[[str], int],
        clock: Callable[[], int],
        arm_writer: Callable[[LatencySensitiveChannel, int], None],
    ) -> None:
        if deadline_ns <= 0:
            raise RuntimeUsageError(f"deadline_ms must be > 0 (channel {name!r})")
        self.name = name
        self.robot = robot
        self.dest = dest
        self.marking = marking
        self.period_ns = period_ns
        self.deadline_ns = deadline_ns
        self._sock = sock
        self._auth = auth
        self._observe = observe
        self._clock = clock
        self._arm_writer = arm_writer
        self._session = int.from_bytes(os.urandom(8), "big") >> 1
        self._seq = 0
        self._lock = threading.Lock()
        self._parked: tuple[bytearray, int] | None = None  # (datagram, deadline_ns)
        self._closed = False
        self._sent = self._superseded = self._expired = self._failed = 0
        self._last_error: str | None = None

    @property
    def fileno(self) -> int:
        return self._sock.fileno()

    @property
    def stats(self) -> ChannelStats:
        with self._lock:
            return ChannelStats(
                self._sent, self._superseded, self._expired, self._failed, self._last_error
            )

    def send(self, payload: bytes | bytearray | memoryview) -> SendOutcome:
        """Send one message now; see the module docstring for what happens under
        back-pressure. Returns ``"sent"``, ``"parked"`` or ``"failed"``."""
        size = len(payload)
        if size > MAX_LS_PAYLOAD_BYTES:
            raise RuntimeUsageError(
                f"LS message of {size} bytes on {self.name!r} exceeds {MAX_LS_PAYLOAD_BYTES} "
                "(one datagram); send large data on a bulk stream"
            )
        with self._lock:
            if self._closed:
                raise RuntimeUsageError(f"LS channel {self.name!r} is closed")
            now = self._clock()
            self._seq += 1
            header = LsHeader(
                WIRE_VERSION,
                self.robot,
                self.name,
                self._session,
                self._seq,
                now,
                now + self.deadline_ns,
                size,
            )
            data = pack_datagram(header, payload)
            data += self._auth.sign(data)
            if self._parked is not None:
                self._parked = None
                self._superseded += 1
            outcome = self._try_send(data, now + self.deadline_ns)
        # After the datagram left: the planner's bookkeeping must not delay it.
        self._observe(self.name)
        return outcome

    def flush(self) -> bool:
        """Send the parked message if possible; True when nothing is parked any more."""
        with self._lock:
            parked = self._parked
            if parked is None:
                return True
            data, deadline = parked
            if self._clock() > deadline:
                self._parked = None
                self._expired += 1
                return True
            self._parked = None
            return self._try_send(data, deadline) != "parked"

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._parked is not None:
                self._parked = None
                self._expired += 1
        self._sock.close()

    def _try_send(self, data: bytearray, deadline: int) -> SendOutcome:
        try:
            self._sock.send(data)
        except BlockingIOError:
            self._parked = (data, deadline)
            self._arm_writer(self, deadline)
            return "parked"
        except OSError as exc:
            # ECONNREFUSED (nobody listening yet), ENETUNREACH...: LS is best effort.
            self._failed += 1
            self._last_error = exc.strerror or str(exc)
            return "failed"
        self._sent += 1
        return "sent"
