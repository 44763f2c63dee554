"""Errors of the real runtime, placed in Coorp's one hierarchy.

Anything a remote party can cause is a :class:`~coorp.PeerError`: servers count it,
log it with the peer's address and keep serving. The subclasses say *what* was wrong
so counters and tests can tell a forged frame from a truncated one.
"""

from __future__ import annotations

from coorp._errors import ConfigurationError, MalformedFrameError, PeerError, UsageError

__all__ = [
    "AuthenticationError",
    "FrameTooLargeError",
    "LimitedError",
    "MalformedFrameError",
    "MarkingError",
    "PeerTimeoutError",
    "RefusedError",
    "ReplayError",
    "RuntimeUsageError",
    "StaleError",
    "TransferError",
    "UnsupportedVersionError",
]


class FrameTooLargeError(PeerError):
    """A frame (or a declared length) above the limit for its channel."""

    kind = "oversized"


class UnsupportedVersionError(MalformedFrameError):
    """A frame of a wire-format version this build does not speak."""

    kind = "version"


class AuthenticationError(PeerError):
    """A frame whose HMAC does not verify under the team key (forged or wrong key)."""

    kind = "unauthenticated"


class ReplayError(PeerError):
    """An authenticated frame whose counter was already used (replayed or reordered)."""

    kind = "replayed"


class PeerTimeoutError(PeerError):
    """The peer sent nothing (or not a whole frame) within the read timeout."""

    kind = "timeout"


class LimitedError(PeerError):
    """A connection closed unserved: its host has too many handshakes under way."""

    kind = "limited"


class StaleError(PeerError):
    """An authenticated LS datagram outside its freshness window or session (a replay
    from an older session, a restarted receiver, a datagram delayed too long)."""

    kind = "stale"


class RefusedError(PeerError):
    """The peer refused us (unknown robot, wrong role); the reason is in the message."""

    kind = "refused"


class TransferError(PeerError):
    """A bulk transfer could not complete (receiver gone or refused the message)."""

    kind = "transfer"


class RuntimeUsageError(UsageError):
    """An invalid argument to the runtime API (bad address, oversized LS payload...)."""


class MarkingError(ConfigurationError):
    """A socket could not be marked at all (not even with DSCP)."""
