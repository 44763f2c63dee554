"""Trigger-based uplink OFDMA's settings and counters (:mod:`coorp.sim.ofdma._scheduler` runs it).

:class:`UlOfdmaConfig` holds the AP scheduler's settings (defaults as ns-3's round-robin
multi-user scheduler); :class:`UlOfdmaStats` counts what it did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coorp._errors import UsageError
from coorp.phy import MAX_PPDU_NS
from coorp.scenario import AccessCategory

__all__ = ["UlOfdmaConfig", "UlOfdmaStats"]


@dataclass(frozen=True)
class UlOfdmaConfig:
    """The scheduler's settings; the defaults are ns-3 3.44's ``RrMultiUserScheduler``'s
    where it has one (4 users, BSRP on, BE access, 2 ms default TB length aside: a TB
    PPDU lasts what the reports need, at most aPPDUMaxTime, as ns-3 computes it)."""

    access_ac: AccessCategory = AccessCategory.BE
    max_users: int = 4
    bsrp: bool = True
    #: Ask for the medium at least this often even with no data known (ns-3's
    #: AccessReqInterval, measured from the last cascade); 0: only when data is known.
    access_interval_ns: int = 1_000_000
    #: Longest TB PPDU the AP solicits.
    max_tb_ns: int = MAX_PPDU_NS
    #: MU EDCA timer (None: no MU EDCA; stations keep their EDCA).
    mu_edca_timer_ns: int | None = 2_088_960_000
    #: How long a buffer status report counts (ns-3's BsrLifetime).
    bsr_lifetime_ns: int = 20_000_000
    #: What a station with an unknown queue is assumed to hold (ns-3's UlPsduSize).
    ul_psdu_bytes: int = 500
    #: Non-HT rate of trigger frames (None: ``phy.basic_rate_mbps``).
    trigger_rate_mbps: int | None = None

    def __post_init__(self) -> None:
        if self.max_users < 1:
            raise UsageError(f"max_users must be >= 1, got {self.max_users}")
        if self.access_interval_ns < 0:
            raise UsageError(f"access_interval_ns must be >= 0, got {self.access_interval_ns}")
        if not 0 < self.max_tb_ns <= MAX_PPDU_NS:
            raise UsageError(
                f"max_tb_ns must be in (0, {MAX_PPDU_NS}] (aPPDUMaxTime), got {self.max_tb_ns}"
            )
        if self.mu_edca_timer_ns is not None and self.mu_edca_timer_ns <= 0:
            raise UsageError(f"mu_edca_timer_ns must be > 0 or None, got {self.mu_edca_timer_ns}")


@dataclass
class UlOfdmaStats:
    """What the scheduler did (``Policy.stats``)."""

    cascades: int = 0
    bsrp_triggers: int = 0
    basic_triggers: int = 0
    failed_triggers: int = 0
    internal_losses: int = 0
    tb_ppdus: int = 0
    qos_null_answers: int = 0
    mpdus: int = 0
    tb_airtime_ns: int = 0
    #: Per station: TB PPDUs that carried data.
    served: dict[str, int] = field(default_factory=dict)
