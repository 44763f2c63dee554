"""Latency-sensitive (LS) channels: one UDP datagram per message, marked for AC_VO.

:meth:`LatencySensitiveChannel.send` never blocks and never queues more than one
message: the datagram goes to the kernel at once. Only if the socket buffer is full
is it parked in a one-slot mailbox and sent when the socket turns writable, and

* a newer message on the channel supersedes the parked one (keep-last freshness);
* a parked message whose deadline passes is dropped and counted, never sent late.

Each send is reported to the robot's protection planner, so BH streams on this robot
learn when LS traffic is due and get out of its way.

Datagrams are bound to a **session** the receiver hands out over an authenticated
connection (the team keeps it open, re-opens it when it breaks, see
:mod:`._team`). Until the first session is open a message is parked like under
back-pressure (keep-last, deadline), and goes out when the session arrives.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .._errors import RuntimeUsageError
from ..wire import MAX_LS_PAYLOAD_BYTES, MacKey, Marking, ls_datagram_head, ls_header_prefix

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
    sessions: int = 0
    """Sessions the receiver opened for this channel (1 + re-opens after it restarted
    or the session connection broke)."""
    received: int = 0
    """Datagrams the receiver accepted, as it reported at the last keep-alive (summed
    over sessions; the ones sent since are not in it yet)."""
    lost: int = 0
    """Datagrams sent but never accepted by the receiver, as it counted them at the
    last keep-alive (a datagram still in flight then counts until it arrives)."""
    reordered: int = 0
    """Datagrams the receiver accepted after a newer one (delivered, not replays)."""
    replayed: int = 0
    """Datagrams the receiver rejected because it had accepted their number before."""


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
        self._observe = observe
        self._clock = clock
        self._arm_writer = arm_writer
        # (session id, receiving robot, its MAC key, the datagrams' constant header
        # prefix); None until the receiver answered.
        self._session: tuple[int, str, MacKey, bytes] | None = None
        self._sessions = 0
        self.ready = threading.Event()
        self._seq = 0
        self._lock = threading.Lock()
        # (seq, sent_ns, deadline_ns, payload) of the message waiting for the socket
        # or for a session.
        self._parked: tuple[int, int, int, bytes] | None = None
        self._closed = False
        self._sent = self._superseded = self._expired = self._failed = 0
        self._last_error: str | None = None
        # Sent in the current session (and the last sequence number among them), for
        # the keep-alive; the receiver's counts of it, and of the sessions before.
        self._session_sent = 0
        self._session_last_seq = 0
        self._report = (0, 0, 0, 0)
        self._reports_before = (0, 0, 0, 0)

    @property
    def has_session(self) -> bool:
        return self._session is not None

    @property
    def fileno(self) -> int:
        return self._sock.fileno()

    @property
    def stats(self) -> ChannelStats:
        with self._lock:
            received, lost, reordered, replayed = (
                a + b for a, b in zip(self._reports_before, self._report, strict=True)
            )
            return ChannelStats(
                self._sent,
                self._superseded,
                self._expired,
                self._failed,
                self._last_error,
                self._sessions,
                received,
                lost,
                reordered,
                replayed,
            )

    def keepalive_counts(self) -> tuple[int, int]:
        """(datagrams sent in the current session, the last one's sequence number)."""
        with self._lock:
            return self._session_sent, self._session_last_seq

    def on_status(self, received: int, lost: int, reordered: int, replayed: int) -> None:
        """The receiver's counts of the current session (its keep-alive answer)."""
        with self._lock:
            self._report = (received, lost, reordered, replayed)

    def set_session(self, session: int, dest_robot: str, key: MacKey) -> None:
        """The receiver opened ``session`` for this channel (called by the team)."""
        with self._lock:
            prefix = ls_header_prefix(self.robot, dest_robot, self.name, session)
            self._session = (session, dest_robot, key, prefix)
            self._sessions += 1
            self._reports_before = tuple(  # type: ignore[assignment]
                a + b for a, b in zip(self._reports_before, self._report, strict=True)
            )
            self._report = (0, 0, 0, 0)
            self._session_sent = 0
            parked = self._parked is not None
        self.ready.set()
        if parked:
            self._arm_writer(self, 0)

    def _datagram(
        self, seq: int, sent_ns: int, deadline: int, payload: bytes | bytearray | memoryview
    ) -> tuple[bytes, bytes | bytearray | memoryview, bytes]:
        """The datagram as (head, payload, MAC), handed to ``sendmsg`` as they are: the
        header's constant part was encoded once per session, the payload is not
        copied (cheaper on the LS path than encoding a header and joining)."""
        assert self._session is not None
        key, prefix = self._session[2], self._session[3]
        head = ls_datagram_head(prefix, seq, sent_ns, deadline, len(payload))
        return head, payload, key.datagram_mac2(head, payload)

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
            deadline = now + self.deadline_ns
            if self._parked is not None:
                self._parked = None
                self._superseded += 1
            if self._session is None:
                self._parked = (self._seq, now, deadline, bytes(payload))
                self._arm_writer(self, deadline)
                outcome: SendOutcome = "parked"
            else:
                data = self._datagram(self._seq, now, deadline, payload)
                outcome = self._try_send(data, self._seq, now, deadline, payload)
        # After the datagram left: the planner's bookkeeping must not delay it.
        self._observe(self.name)
        return outcome

    def flush(self) -> bool:
        """Send the parked message if possible; True when nothing is parked any more."""
        with self._lock:
            parked = self._parked
            if parked is None:
                return True
            seq, sent_ns, deadline, payload = parked
            if self._clock() > deadline:
                self._parked = None
                self._expired += 1
                return True
            if self._session is None:
                return False  # still waiting for the receiver: the deadline timer decides
            self._parked = None
            data = self._datagram(seq, sent_ns, deadline, payload)
            return self._try_send(data, seq, sent_ns, deadline, payload) != "parked"

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._parked is not None:
                self._parked = None
                self._expired += 1
        self._sock.close()

    def _try_send(
        self,
        data: tuple[bytes, bytes | bytearray | memoryview, bytes],
        seq: int,
        sent_ns: int,
        deadline: int,
        payload: bytes | bytearray | memoryview,
    ) -> SendOutcome:
        try:
            self._sock.sendmsg(data)
        except BlockingIOError:
            self._parked = (seq, sent_ns, deadline, bytes(payload))
            self._arm_writer(self, deadline)
            return "parked"
        except OSError as exc:
            # ECONNREFUSED (nobody listening yet), ENETUNREACH...: LS is best effort.
            self._failed += 1
            self._last_error = exc.strerror or str(exc)
            return "failed"
        self._sent += 1
        self._session_sent += 1
        self._session_last_seq = seq
        return "sent"
