"""802.11ax trigger-based uplink OFDMA: the AP's scheduler (:mod:`._scheduler`), an
access function that contends like any EDCAF and, when it wins, runs the whole exchange
(trigger, the stations' TB PPDUs, the multi-STA BlockAck), and its settings and counters
(:mod:`._config`)."""

from coorp.sim.ofdma._config import UlOfdmaConfig, UlOfdmaStats
from coorp.sim.ofdma._scheduler import UlOfdma

__all__ = ["UlOfdma", "UlOfdmaConfig", "UlOfdmaStats"]
