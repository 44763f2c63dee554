"""Coorp: coordinated preemption for robot teams sharing one WiFi channel.

The top-level package re-exports the error hierarchy and the version; everything else
lives in the sub-packages (``coorp.sim``, ``coorp.scenario``, ``coorp.control``, ...).
"""

from coorp._errors import (
    ConfigurationError,
    CoorpError,
    InfeasibleError,
    InvariantError,
    MalformedFrameError,
    PeerError,
    ScenarioError,
    ScenarioProblem,
    UsageError,
)

__version__ = "0.1.0"

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
    "__version__",
]
