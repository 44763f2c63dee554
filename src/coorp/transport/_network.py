"""The interface between a :class:`~coorp.transport.Bus` and a network transport.

A bus hands complete frames (see :mod:`~coorp.transport._frame`) to a
:class:`NetworkTransport` and receives frames back through a :class:`FrameSink`. The
transport owns connections, discovery of remote subscribers and flow control; it never
decodes payloads. :class:`~coorp.transport.TcpTransport` is the built-in implementation;
``coorp.runtime`` can plug in its LS channels and BH streams by implementing this class.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Protocol

from coorp.transport._topic import Topic

__all__ = ["FrameSink", "NetworkTransport"]


class FrameSink(Protocol):
    """What a network transport calls on its bus."""

    def deliver_frame(self, topic_name: str, frame: memoryview, owner: object) -> None:
        """A frame for ``topic_name`` arrived; ``owner`` keeps ``frame``'s memory alive."""

    def subscribed_topics(self) -> list[Topic]:
        """Topics with local subscribers (announced to every new peer)."""
        ...

    def published_topic(self, name: str) -> Topic | None:
        """The local declaration of a topic we publish, for type checks of remote SUBs."""
        ...

    def remote_error(self, topic_name: str, error: Exception) -> None:
        """A peer refused or broke a subscription (e.g. declared another type)."""


class NetworkTransport(abc.ABC):
    """Carries frames between buses on different machines."""

    @abc.abstractmethod
    def bind(self, sink: FrameSink, bus_id: int) -> None:
        """Attach to the bus that owns this transport (called once by the bus)."""

    @abc.abstractmethod
    def subscribe(self, topic: Topic) -> None:
        """Tell current and future peers that this bus wants ``topic``."""

    @abc.abstractmethod
    def unsubscribe(self, topic: Topic) -> None:
        """Withdraw interest in ``topic`` (last local subscriber closed)."""

    @abc.abstractmethod
    def has_subscribers(self, topic: Topic) -> bool:
        """Whether any peer wants ``topic`` (lets publishers skip encoding)."""

    @abc.abstractmethod
    def send(
        self, topic: Topic, parts: Sequence[bytes | memoryview], *, timeout: float | None
    ) -> None:
        """Send one frame (given as parts) to every peer subscribed to ``topic``.

        The parts may be the caller's memory: the transport must have copied or written
        them before returning. With ``QueuePolicy.BLOCK`` it may wait up to ``timeout``
        for a slow peer and then raise :class:`~coorp.transport.DeliveryTimeoutError`.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Close every connection and stop background threads."""
