"""The driver view: the narrow interface between a station's NIC driver and a policy.

A policy (EDCA, SchedWiFi, COORP, ...) sees a station only through :class:`DriverView`
and reacts through :class:`DriverHooks`. The real runtime exposes the same shape, which
is what lets ``coorp.control`` run unchanged in both.
"""

from __future__ import annotations

from typing import Protocol

from coorp.scenario import AccessCategory

__all__ = [
    "FOREVER",
    "AckGateHooks",
    "AdmitAll",
    "AirtimeBudgetHooks",
    "DriverHooks",
    "DriverView",
    "RunHooks",
]

#: A resume time meaning "until the policy calls ``resume_bulk()``".
FOREVER = 2**62


class DriverView(Protocol):
    """What a policy may read and do on one station."""

    name: str

    def hw_queue_length(self) -> int:
        """Packets in the ring the next bulk packet would join: the shared ring, or the
        ring of its category (with no bulk data waiting, of the last bulk packet's)."""
        ...

    def pause_bulk(self, until_ns: int | None) -> None:
        """Stop moving bulk packets to the NIC until ``until_ns`` (None: until resumed)."""
        ...

    def resume_bulk(self) -> None:
        """Resume moving bulk packets to the NIC now."""
        ...

    @property
    def bulk_backlog(self) -> bool:
        """Whether bulk data is waiting in the kernel queue."""
        ...


class DriverHooks(Protocol):
    """Callbacks a policy implements; the simulator calls them at exact event times.

    By default every bulk packet is admitted by its own ``admit_bulk`` call and every
    packet's ``on_hw_enqueue``/``on_hw_complete`` is called. A hooks object may declare
    the class attribute ``per_packet = False`` to promise that it needs neither: its
    ``on_hw_enqueue``/``on_hw_complete`` do nothing, and ``admit_bulk`` decides from
    ``now_ns`` and the policy's own state only (not from the queue length, not counting
    calls). The driver then asks ``admit_bulk`` once per batch of bulk packets and skips
    the per-packet calls, which makes the simulation much faster; results are identical
    when the promise holds. ``set_hooks`` reads the attribute when the hooks are set.

    A hooks object may also define the optional method ``max_bulk_airtime_ns`` (see
    :class:`AirtimeBudgetHooks`): an airtime budget for the station's bulk frames, which
    the MAC uses to trim each A-MPDU to the gap. Hooks without it are never asked and
    the simulation is exactly what it was without the feature.

    Hooks that need every packet but can take them a run at a time implement
    :class:`RunHooks` as well (``per_run = True``): same calls, same results, far fewer
    of them.
    """

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        """The driver wants to hand the next bulk packet to the NIC.

        Return ``None`` to allow it, or a time (ns) later than ``now_ns`` at which to
        ask again: the bulk queue is paused until then (``FOREVER``: until the policy
        calls ``resume_bulk()``).
        """
        ...

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        """An LS message was handed to this station's stack."""
        ...

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        """Packet ``pid`` entered the hardware ring behind ``depth`` others."""
        ...

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        """Packet ``pid`` left the hardware ring (acknowledged, or dropped after retries)."""
        ...


class AirtimeBudgetHooks(DriverHooks, Protocol):
    """Driver hooks that also size bulk aggregates to an airtime budget (optional).

    A driver with airtime control (cf. Linux AQL, or firmware that bounds an A-MPDU's
    duration) can keep a bulk exchange from running into a protected instant. The
    station reads the method when the hooks are set (``set_hooks``), and with it the
    optional ``bulk_hold_until_ns(station, now_ns) -> int | None``: asked when a bulk
    frame is held, a later end for the hold than the budget's (a quiet period, e.g. a
    restricted-TWT service period, outlasts the budget that kept the frame off the air).
    """

    def max_bulk_airtime_ns(self, station: DriverView, now_ns: int) -> int | None:
        """An EDCAF of this station won the medium at ``now_ns`` for a bulk frame.

        Asked when the frame at the head of the EDCAF's ring is not a datagram
        fragment (bulk data, or a TCP acknowledgement), both for a channel access and
        for the next exchange of a TXOP; never for an LS datagram or a BlockAckReq.
        Return ``None`` for no limit, or a budget ``b >= 0`` (ns): the exchange (PPDU,
        SIFS and Ack/BlockAck, RTS/CTS when used) must be over by ``now_ns + b``. The
        MAC then builds the largest A-MPDU that fits (never more than it would build
        without a budget). If not even one MPDU fits, the EDCAF does not transmit: it
        holds its frame, as if its queue were empty, until ``now_ns + b + 1`` (the first
        instant after the budget), when the frame arrives again under the usual
        802.11 rules (sent after AIFS on an idle medium, a new backoff if the medium
        is busy); a held access leaves the medium to the others and counts no retry.
        In a TXOP a next exchange that does not fit ends the TXOP instead.
        """
        ...

    # Optional, read only when ``max_bulk_airtime_ns`` is defined too:
    #
    # def bulk_hold_until_ns(self, station: DriverView, now_ns: int) -> int | None:
    #     """A bulk frame is held at ``now_ns`` (not even one MPDU fitted the budget):
    #     hold it until this time instead, if later than ``now_ns + b + 1`` (None: that
    #     time). For a quiet period longer than the budget (restricted TWT)."""


class AckGateHooks(DriverHooks, Protocol):
    """Driver hooks that also decide when the TCP acknowledgements a station sends for
    the team's bulk data join its NIC ring (optional).

    Acks skip the kernel queue as LS messages do, so in a shared ring they sit ahead of
    the station's next LS message like bulk data: a robot downloading the team's model
    fills its ring with acks just before its own perception. Hooks whose instance
    attribute ``gates_acks`` is true when they are set are asked before each run of
    such acks joins the ring; acks of transfers outside the team (``gated = False``)
    and every other packet in the priority queues are never asked about. Held acks
    wait at the head of their priority queue (later packets of that category wait
    behind them; other categories do not) and are asked again at every refill of the
    station (its completions, its sends) and at the time the hooks name. Hooks without
    the attribute are never asked: the simulation is exactly what it was without the
    feature. (The simulator has no TCP sender model, docs/simulator.md: holding acks
    does not slow the sender here, as it would once its window is in flight.)
    """

    gates_acks: bool

    def admit_acks(
        self, station: DriverView, now_ns: int, count: int, depth: int
    ) -> tuple[int, int]:
        """``count`` acks (the head of their priority queue) would join the ring behind
        ``depth`` packets, one behind the other: how many of them may join now (a
        prefix, ``0 <= n <= count``) and, when fewer than ``count``, the time
        (``> now_ns``) to ask again at the latest (``FOREVER``: at the next refill)."""
        ...

    def on_acks_enqueued(
        self, station: DriverView, pid: int, count: int, depth: int, now_ns: int
    ) -> None:
        """Acks ``pid .. pid + count - 1`` entered the ring behind ``depth``,
        ``depth + 1``, … others: announced here instead of ``on_hw_enqueue(_run)``, so
        the hooks can tell them from bulk data (their completions and drops come through
        ``on_hw_complete(_run)`` as every packet's do)."""
        ...


class RunHooks(DriverHooks, Protocol):
    """Per-packet driver hooks that take consecutive packets a run at a time (optional).

    A hooks object that declares the class attribute ``per_run = True`` (and does not
    declare ``per_packet = False``) promises that each method below does exactly what
    the per-packet calls it stands for would do, in the same order; the driver then
    calls it once per run of packets instead of once per packet. Results are identical
    (``tests/policies/test_golden_policies.py``); only the number of calls across the
    hook boundary changes. The per-packet methods are still called where a run would
    not save anything (a packet dropped after its retries: ``on_hw_complete``, one by
    one). ``set_hooks`` reads the attribute from the hooks' class when the hooks are
    set (a wrapper forwarding unknown attributes to wrapped run hooks gets the per-packet
    calls).
    """

    per_run: bool

    def admit_bulk_run(
        self, station: DriverView, now_ns: int, pid: int, count: int, ac: AccessCategory,
        depth: int,
    ) -> tuple[int, int]:  # fmt: skip
        """The driver would hand bulk packets ``pid .. pid + count - 1`` (one transfer's,
        category ``ac``) to the NIC now, the first behind ``depth`` others.

        The same as, for ``i = 0, 1, …`` in turn: ``admit_bulk(station, now_ns)`` with
        ``hw_queue_length() == depth + i``, and if it admits the packet,
        ``on_hw_enqueue(station, pid + i, ac, depth + i, now_ns)`` — until one is denied.
        Returns ``(n, resume)``: the first ``n`` packets are admitted (and the hooks
        have seen them enqueued; the driver does not announce them again); if
        ``n < count``, packet ``n`` was denied and ``resume`` is what ``admit_bulk``
        returned for it (the driver pauses the bulk queue until then).
        """
        ...

    def on_hw_enqueue_run(
        self, station: DriverView, pid: int, count: int, ac: AccessCategory, depth: int,
        now_ns: int,
    ) -> None:  # fmt: skip
        """Packets ``pid .. pid + count - 1`` entered the ring, the first behind
        ``depth`` others: ``on_hw_enqueue`` for each in turn (``depth + i``)."""
        ...

    def on_hw_complete_run(
        self, station: DriverView, pid: int, count: int, ac: AccessCategory, now_ns: int,
        delivered: bool,
    ) -> None:  # fmt: skip
        """Packets ``pid .. pid + count - 1`` left the ring at ``now_ns``:
        ``on_hw_complete`` for each in turn."""
        ...


class AdmitAll:
    """Plain EDCA: every bulk packet is admitted, nothing is observed."""

    per_packet = False

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        return None

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        return None

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        return None

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        return None
