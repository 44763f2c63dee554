"""Real programs on the simulated WiFi channel, in real time (``coorp emulate``).

One network namespace per station of a scenario, each with a TUN interface whose
packets cross Coorp's own simulated 802.11 channel (``coorp.sim``: EDCA per access
category from the DSCP, the scenario's NIC rings, A-MPDU and block ack, retries and
losses, per-link MCS, the AP's downlink queues) and come out in the destination's
namespace at their simulated delivery time, with the simulator's clock following the
wall clock. See ``docs/emulate.md``.
"""

from coorp.emulate._air import (
    GROUP,
    Air,
    AirCounters,
    Arrival,
    Delivery,
    Outcome,
    choose_ap,
    replay,
    station_addresses,
)
from coorp.emulate._dscp import AC_OF_DSCP, UP_OF_DSCP, ac_of_up, up_of_dscp
from coorp.emulate._hosts import remove_stale, stale_namespaces
from coorp.emulate._ip import parse_header
from coorp.emulate._lag import LagMeter, LagSummary
from coorp.emulate._network import (
    EmulatedStar,
    Emulation,
    EmulationReport,
    emulation_unavailable,
)
from coorp.emulate._pump import Pump, PumpStats
from coorp.emulate._trace import FrameLog, read_arrivals, write_traces

__all__ = [
    "AC_OF_DSCP",
    "GROUP",
    "UP_OF_DSCP",
    "Air",
    "AirCounters",
    "Arrival",
    "Delivery",
    "EmulatedStar",
    "Emulation",
    "EmulationReport",
    "FrameLog",
    "LagMeter",
    "LagSummary",
    "Outcome",
    "Pump",
    "PumpStats",
    "ac_of_up",
    "choose_ap",
    "emulation_unavailable",
    "parse_header",
    "read_arrivals",
    "remove_stale",
    "replay",
    "stale_namespaces",
    "station_addresses",
    "up_of_dscp",
    "write_traces",
]
