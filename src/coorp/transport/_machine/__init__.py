"""The same-machine path: iceoryx2 shared memory (:mod:`._shm`: loaned samples,
zero-copy views), futex wake-ups (:mod:`._wake`: every subscriber of a topic woken with
one system call) and cross-process back-pressure (:mod:`._credit`). The bus, its
publishers and subscribers use it through these names."""

from coorp.transport._machine._credit import CreditGate, CreditReporter
from coorp.transport._machine._shm import (
    ShmInlet,
    ShmNode,
    ShmOutlet,
    iceoryx2_available,
    pid_alive,
)
from coorp.transport._machine._wake import Waiter

__all__ = [
    "CreditGate",
    "CreditReporter",
    "ShmInlet",
    "ShmNode",
    "ShmOutlet",
    "Waiter",
    "iceoryx2_available",
    "pid_alive",
]
