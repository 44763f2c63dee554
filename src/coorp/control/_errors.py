"""Errors specific to the control layer, placed in Coorp's one hierarchy.

A robot or grant the controller does not know is a *peer* problem (it arrives over
the wire), so servers can count and drop it; a flow name nobody has observed is a
*usage* problem of the local caller.
"""

from __future__ import annotations

from coorp._errors import PeerError, UsageError

__all__ = ["ForeignGrantError", "UnknownFlowError", "UnknownRobotError"]


class UnknownRobotError(PeerError):
    """A permit message names a robot the global controller does not manage."""

    def __init__(self, robot: str) -> None:
        self.robot = robot
        super().__init__(f"unknown robot {robot!r}: add it with add_robot() before it requests")


class ForeignGrantError(PeerError):
    """A bulk client received a grant addressed to another robot."""

    def __init__(self, robot: str, addressee: str) -> None:
        self.robot = robot
        self.addressee = addressee
        super().__init__(f"bulk client {robot!r} received a grant addressed to {addressee!r}")


class UnknownFlowError(UsageError):
    """A protection planner was asked about a flow it has never observed."""

    def __init__(self, flow: str) -> None:
        self.flow = flow
        super().__init__(f"unknown flow {flow!r}: no send of it has been observed")
