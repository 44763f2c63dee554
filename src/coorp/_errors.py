"""The one exception hierarchy of Coorp.

Every exception Coorp raises on purpose derives from :class:`CoorpError`. The second
level says *whose fault* it is, so callers can decide what to do without parsing text:

* :class:`UsageError` — the caller passed something invalid (a flag, an argument).
  :class:`ScenarioError` is the special case of an invalid scenario file;
  :class:`InfeasibleError` a valid request that cannot be met on this input (a policy
  whose schedule does not fit the team).
* :class:`PeerError` — a remote party sent something invalid (a malformed, oversized,
  unauthenticated or replayed frame). Servers count and drop these and keep serving.
  :class:`MalformedFrameError` is the one class for a frame that does not decode, in
  every package that decodes frames (``coorp.runtime``, ``coorp.transport``,
  ``coorp.learn``).
* :class:`ConfigurationError` — the environment cannot do what was asked (a missing
  optional dependency, no permission for a socket option).
* :class:`InvariantError` — Coorp itself broke one of its own invariants: a bug.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "ConfigurationError",
    "CoorpError",
    "InfeasibleError",
    "InvariantError",
    "MalformedFrameError",
    "PeerError",
    "ScenarioError",
    "ScenarioProblem",
    "UsageError",
]


class CoorpError(Exception):
    """Base class of every error Coorp raises on purpose."""


class UsageError(CoorpError):
    """The caller asked for something invalid."""


class InfeasibleError(UsageError):
    """The request is valid but cannot be met on this input: e.g. a policy whose schedule
    does not fit the scenario's team. Reports show it as a result, not a crash."""


class PeerError(CoorpError):
    """A remote peer sent something invalid; the local side is fine."""


class MalformedFrameError(PeerError):
    """A peer sent a frame that does not decode as any message of the wire format it
    arrived on: truncated, oversized for its declared length, of an unknown kind, or
    not allowed there."""

    #: What servers count it as (``coorp.runtime``'s counters group peer errors by kind).
    kind = "malformed"


class ConfigurationError(CoorpError):
    """The environment lacks what the request needs (dependency, permission, kernel)."""


class InvariantError(CoorpError):
    """An internal invariant was violated: a bug in Coorp, please report it."""


@dataclass(frozen=True, slots=True)
class ScenarioProblem:
    """One problem in a scenario file: where, what was found, and what is allowed."""

    field: str
    value: object
    message: str

    #: Marks a problem that is about several fields at once (the message names them).
    NO_VALUE: ClassVar[object] = object()

    def render(self) -> str:
        where = self.field or "<top level>"
        if self.value is ScenarioProblem.NO_VALUE:
            return f"{where}: {self.message}"
        value = repr(self.value)
        if len(value) > 80:
            value = value[:77] + "..."
        return f"{where} = {value}: {self.message}"


class ScenarioError(UsageError):
    """A scenario file (or scenario data) is invalid.

    ``problems`` lists every problem found, each naming the field, the value and what
    is allowed; ``str(error)`` renders them one per line under the file name.
    """

    def __init__(self, source: str, problems: Sequence[ScenarioProblem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        lines = [f"invalid scenario {source}:"]
        lines += [f"  - {p.render()}" for p in self.problems]
        super().__init__("\n".join(lines))
