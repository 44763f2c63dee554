"""Real programs on the simulated WiFi channel, in real time (``coorp emulate``).

One network namespace per station of a scenario, each with a TUN interface whose
packets cross Coorp's own simulated 802.11 channel (``coorp.sim``: EDCA per access
category from the DSCP, the scenario's NIC rings, A-MPDU and block ack, retries and
losses, per-link MCS, the AP's downlink queues) and come out in the destination's
namespace at their simulated delivery time, with the simulator's clock following the
wall clock. See ``docs/emulate.md``.

The real-time loop and the channel's per-packet code (``_ip``, ``_lag``, ``_air``,
``_gro``, ``_pump``) are compiled with mypyc alongside the simulator when the build is fresh
(``coorp._accel``): the same source, 10-12 % less CPU per frame (docs/emulate.md).
"""

from coorp._accel import load as _load

_load("coorp.emulate")

from coorp.emulate._air import (  # noqa: E402
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
from coorp.emulate._dscp import AC_OF_DSCP, UP_OF_DSCP, ac_of_up, up_of_dscp  # noqa: E402
from coorp.emulate._hosts import remove_stale, stale_namespaces  # noqa: E402
from coorp.emulate._ip import parse_header  # noqa: E402
from coorp.emulate._lag import LagMeter, LagSummary  # noqa: E402
from coorp.emulate._network import (  # noqa: E402
    GRO_DEFAULT,
    EmulatedStar,
    Emulation,
    EmulationReport,
    emulation_unavailable,
)
from coorp.emulate._pump import Pump, PumpStats  # noqa: E402
from coorp.emulate._trace import FrameLog, read_arrivals, write_traces  # noqa: E402

__all__ = [
    "AC_OF_DSCP",
    "GROUP",
    "GRO_DEFAULT",
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
