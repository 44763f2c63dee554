"""``ofdma``: 802.11ax trigger-based UL OFDMA, the leader's AP scheduling the workers.

The leader is the access point (the team's own BSS); its UL MU scheduler
(:class:`coorp.sim.UlOfdma`) polls the workers' buffer status, gives them equal RUs
round robin and triggers their uplink - perceptions, parameter updates and TCP acks
alike; the leader's downlink stays SU EDCA. Nothing in the robots changes: their LS
messages are AC_VO, their bulk data AC_BE, as with ``edca``. Needs ``phy.standard =
"ax"`` (an 802.11ac channel has no OFDMA: the policy is infeasible there).
"""

from __future__ import annotations

from typing import Any, ClassVar

from coorp._errors import InfeasibleError, UsageError
from coorp.phy import PhyStandard
from coorp.policies._base import Policy
from coorp.policies._registry import register_policy
from coorp.scenario import AccessCategory, OfdmaOptions
from coorp.sim import UlOfdma, UlOfdmaConfig
from coorp.units import us

__all__ = ["OfdmaPolicy", "ofdma_config"]


def ofdma_config(opts: OfdmaOptions) -> UlOfdmaConfig:
    """The scheduler settings of a scenario's ``[policy.ofdma]``."""
    return UlOfdmaConfig(
        access_ac=AccessCategory(opts.access_ac),
        max_users=opts.max_users,
        bsrp=opts.bsrp,
        access_interval_ns=us(opts.access_interval_us),
        max_tb_ns=us(opts.max_tb_us),
        mu_edca_timer_ns=None if opts.mu_edca_timer_us is None else us(opts.mu_edca_timer_us),
        bsr_lifetime_ns=us(opts.bsr_lifetime_us),
        ul_psdu_bytes=opts.ul_psdu_bytes,
        trigger_rate_mbps=opts.trigger_rate_mbps,
    )


@register_policy
class OfdmaPolicy(Policy):
    name = "ofdma"
    summary = "802.11ax trigger-based UL OFDMA: the leader's AP polls and triggers the workers"
    standards: ClassVar[frozenset[PhyStandard]] = frozenset({PhyStandard.AX})

    def install(self) -> None:
        team = self.team
        sim = team.sim
        phy = sim.scenario.phy
        if phy.standard is not PhyStandard.AX:
            raise InfeasibleError(
                f'ofdma needs an 802.11ax channel (phy.standard = "ax"); this one is '
                f'"{phy.standard.value}" (try --set phy.standard=ax)'
            )
        if sim.scenario.links.packet_errors:
            raise InfeasibleError("ofdma does not model packet errors in TB PPDUs")
        try:
            self.scheduler = UlOfdma(
                sim, team.leader, team.workers, ofdma_config(team.options.ofdma)
            )
        except UsageError as exc:
            raise InfeasibleError(f"ofdma: {exc}") from None

    def stats(self) -> dict[str, Any]:
        sched = getattr(self, "scheduler", None)
        return {} if sched is None else {"ul_ofdma": sched.summary()}
