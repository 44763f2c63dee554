"""COORP's departures from the paper, added one at a time (docs/control.md), and
variants looked at beside them.

A policy module for ``--policy-module``: each rung is ``coorp-paper`` plus the
additions above it; the last rung is ``coorp`` itself::

    RUNGS=coorp-paper,ladder-recheck,ladder-lead,ladder-realized,ladder-hints,ladder-floor,\\
ladder-budget,ladder-team-budget,ladder-foreign,ladder-acks,coorp
    coorp sweep --policy-module benchmarks/coorp_ladder.py --policies $RUNGS \\
        --scenarios crl-10,one-low --seeds 1-5 --duration 20 --out results/ladder

The rungs after ``ladder-floor`` (issue 22): ``ladder-budget`` is ``coorp`` as it was
before traffic outside the team existed (its ring budget counts every packet in the
ring, one CTT percentile always); ``ladder-team-budget`` counts only the team's packets
against the budget; ``ladder-foreign`` also lowers the gates' percentile while a station
outside the team takes the air; ``ladder-acks`` also holds the TCP acks each robot sends
for the team's bulk data it receives (``gate_acks``); ``coorp`` also sends each robot's
own bulk transfers one at a time (``serial_transfers``).
"""

from __future__ import annotations

from typing import ClassVar

from coorp.policies import CoorpPaperPolicy, CoorpPolicy, register_policy


@register_policy
class LadderRecheck(CoorpPaperPolicy):
    name = "ladder-recheck"
    summary = "coorp-paper + re-asking a paused gate on a drain, an own LS send"
    drain_recheck = True


@register_policy
class LadderLead(LadderRecheck):
    name = "ladder-lead"
    summary = "… + completion times by lead to the window (and re-asking per lead bucket)"
    ctt_lead_edges_ns: ClassVar[tuple[int, ...]] = CoorpPolicy.ctt_lead_edges_ns


@register_policy
class LadderRealized(LadderLead):
    name = "ladder-realized"
    summary = "… + completion measured against the LS send it had to clear"
    realized_ctt = True
    ctt_floor = False


@register_policy
class LadderHints(CoorpPolicy):
    name = "ladder-hints"
    summary = "… + the leader's send-time hints"
    ctt_floor = False
    ring_airtime_budget_ns = None
    foreign_ctt_percentile = None
    gate_acks = False
    serial_transfers = False


@register_policy
class LadderFloor(CoorpPolicy):
    name = "ladder-floor"
    summary = "… + the completion-time table's physical floor (coorp without the ring budget)"
    ring_airtime_budget_ns = None
    foreign_ctt_percentile = None
    gate_acks = False
    serial_transfers = False


@register_policy
class LadderBudget(CoorpPolicy):
    name = "ladder-budget"
    summary = "… + the ring budget, counting every packet in the ring (coorp before issue 22)"
    ring_budget_counts_other = True
    foreign_ctt_percentile = None
    gate_acks = False
    serial_transfers = False


@register_policy
class LadderTeamBudget(CoorpPolicy):
    name = "ladder-team-budget"
    summary = "… + the ring budget counts only the team's packets"
    foreign_ctt_percentile = None
    gate_acks = False
    serial_transfers = False


@register_policy
class LadderForeign(CoorpPolicy):
    name = "ladder-foreign"
    summary = "… + the median percentile while a station outside the team takes the air"
    gate_acks = False
    serial_transfers = False


@register_policy
class LadderAcks(CoorpPolicy):
    name = "ladder-acks"
    summary = "… + the gate holds the team's TCP acks (coorp before serial transfers)"
    serial_transfers = False


@register_policy
class CoorpOneTable(CoorpPolicy):
    name = "coorp-one-table"
    summary = "coorp with the acks in the bulk gate's completion-time table (a variant)"
    ack_table = False
    serial_transfers = False


@register_policy
class CoorpEmpirical(CoorpPolicy):
    name = "coorp-empirical"
    summary = "coorp with windows from the recent residuals' quantiles (a variant)"
    time_model_window = "empirical"


@register_policy
class CoorpRobust(CoorpPolicy):
    name = "coorp-robust"
    summary = "coorp with the time model's robust fit (medians, MAD) (a variant)"
    time_model_fit = "robust"


@register_policy
class CoorpAirtimeCap(CoorpPolicy):
    name = "coorp-cap1ms"
    summary = "coorp + every bulk exchange capped at 1 ms of airtime (a variant, not a rung)"
    bulk_airtime_cap_ns = 1_000_000


def _ring_variant(ms: int) -> None:
    register_policy(
        type(
            f"CoorpRing{ms}ms",
            (CoorpPolicy,),
            {
                "name": f"coorp-ring{ms}ms",
                "summary": f"coorp with {ms} ms of bulk airtime in the ring (a variant)",
                "ring_airtime_budget_ns": ms * 1_000_000,
            },
        )
    )


for _ms in (1, 2, 3):
    _ring_variant(_ms)
