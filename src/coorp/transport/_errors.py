"""Errors raised by :mod:`coorp.transport`.

Each one derives from the matching second-level class of :mod:`coorp._errors`, so callers
can tell *whose fault* it is without parsing text: the caller's (:class:`UsageError`), a
peer's (:class:`PeerError`) or the environment's (:class:`ConfigurationError`).
"""

from __future__ import annotations

from coorp._errors import ConfigurationError, MalformedFrameError, PeerError, UsageError

__all__ = [
    "BorrowLimitError",
    "DeliveryTimeoutError",
    "MalformedFrameError",
    "MissingDependencyError",
    "PayloadTooLargeError",
    "TopicTypeMismatchError",
    "TransportClosedError",
    "UnsupportedPayloadError",
]


class PayloadTooLargeError(UsageError):
    """A message does not fit into the topic's ``max_payload`` (or a peer sent such a frame)."""

    def __init__(self, topic: str, size: int, limit: int) -> None:
        self.topic, self.size, self.limit = topic, size, limit
        super().__init__(
            f"payload of {size} bytes on topic {topic!r} exceeds its max_payload of {limit} "
            f"bytes; raise Topic(max_payload=...) on every participant or send less"
        )


class TopicTypeMismatchError(UsageError):
    """Two participants declared the same topic name with different message types."""

    def __init__(self, topic: str, expected: str, found: str) -> None:
        self.topic, self.expected, self.found = topic, expected, found
        super().__init__(
            f"topic {topic!r} carries {expected}, but {found} was declared or published here"
        )


class UnsupportedPayloadError(UsageError):
    """The object cannot be serialized for the path it must travel (e.g. pickle to a socket)."""


class BorrowLimitError(UsageError):
    """The subscriber holds too many received messages whose views are still alive."""


class TransportClosedError(UsageError):
    """A publisher, subscriber, bus or message was used after it was closed or released."""


class DeliveryTimeoutError(PeerError):
    """A ``QueuePolicy.BLOCK`` publish waited longer than its timeout for a slow subscriber."""


class MissingDependencyError(ConfigurationError):
    """An optional package needed for the requested transport is not installed."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        self.package, self.extra = package, extra
        super().__init__(
            f"{purpose} needs the optional package {package!r}; "
            f"install it with: pip install 'coorp[{extra}]'"
        )
