"""COORP's departures from the paper, added one at a time (docs/control.md), and
variants looked at beside them.

A policy module for ``--policy-module``: each rung is ``coorp-paper`` plus the
additions above it; the last rung is ``coorp`` itself::

    RUNGS=coorp-paper,ladder-recheck,ladder-lead,ladder-realized,ladder-hints,ladder-floor,\\
ladder-budget,ladder-team-budget,ladder-foreign,ladder-acks,ladder-serial,\\
ladder-outsiders,ladder-conformal,ladder-lead-hints,ladder-in-window,ladder-be-acks,coorp
    coorp sweep --policy-module benchmarks/coorp_ladder.py --policies $RUNGS \\
        --scenarios crl-10,one-low --seeds 1-5 --duration 20 --out results/ladder

The rungs after ``ladder-floor`` (issue 22): ``ladder-budget`` is ``coorp`` as it was
before traffic outside the team existed (its ring budget counts every packet in the
ring, one CTT percentile always); ``ladder-team-budget`` counts only the team's packets
against the budget; ``ladder-foreign`` also lowers the gates' percentile while a station
outside the team takes the air; ``ladder-acks`` also holds the TCP acks each robot sends
for the team's bulk data it receives (``gate_acks``); ``ladder-serial`` also sends each
robot's own bulk transfers one at a time (``serial_transfers``): ``coorp`` before issue 36.

Issue 36's rungs: ``ladder-outsiders`` leaves the acks a robot sends for traffic
outside the team out of its ring budget and never holds the team's acks while such
acks wait behind them; ``ladder-conformal`` takes its protection
windows from the conformal residual ranks around a Theil–Sen line
(``SendTimeModel(window="conformal")``); ``ladder-lead-hints`` takes the MPC leader's
full word on its controls (a moving bound while perceptions are missing, exact instants
once controls are due); ``ladder-in-window`` also prices a packet only against sends in
or after the window it was enqueued ahead of (``Gate(realized_in_window=True)``): the
``coorp`` of issue 36; ``coorp`` protects only each window's core and leaves its tail of
late sends to the ring budget (``SendTimeModel(protect_tail=False)``). The variant
``ladder-ack-probes`` is ``coorp`` whose acks' gate explores as the bulk gate does
(``GatedHooks(ack_probes=True)``; docs/control.md, "Probes in the acks' gate"). The last
rung, ``ladder-be-acks``, is ``coorp`` with the team's TCP acks in AC_BE, the ``coorp`` of
before ``CoorpPolicy.ack_ac`` put them in AC_VI (docs/control.md, "The acks' access
category"); the rungs and variants measured before that keep AC_BE acks. The rungs
and variants measured before issue 36 are built on ``_Before36`` so that they stay what
they were.
"""

from __future__ import annotations

from typing import ClassVar

from coorp.policies import CoorpPaperPolicy, CoorpPolicy, register_policy


class _Before36(CoorpPolicy):
    """``coorp`` without issue 36's additions (the rungs and variants measured before
    them stay what they were): Gaussian windows, the leader's first word on its
    controls, realized completion against any send, and a ring budget that counts the
    acks a robot sends for traffic outside the team."""

    name = "_before-36"
    time_model_window = "gaussian"
    protect_tail = True
    lead_hints = False
    realized_in_window = False
    ring_budget_skips_outside_acks = False
    acks_yield_to_outside = False
    ack_ac = None


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
class LadderHints(_Before36):
    name = "ladder-hints"
    summary = "… + the leader's send-time hints"
    ctt_floor = False
    ring_airtime_budget_ns = None
    foreign_ctt_percentile = None
    gate_acks = False
    serial_transfers = False


@register_policy
class LadderFloor(_Before36):
    name = "ladder-floor"
    summary = "… + the completion-time table's physical floor (coorp without the ring budget)"
    ring_airtime_budget_ns = None
    foreign_ctt_percentile = None
    gate_acks = False
    serial_transfers = False


@register_policy
class LadderBudget(_Before36):
    name = "ladder-budget"
    summary = "… + the ring budget, counting every packet in the ring (coorp before issue 22)"
    ring_budget_counts_other = True
    foreign_ctt_percentile = None
    gate_acks = False
    serial_transfers = False


@register_policy
class LadderTeamBudget(_Before36):
    name = "ladder-team-budget"
    summary = "… + the ring budget counts only the team's packets"
    foreign_ctt_percentile = None
    gate_acks = False
    serial_transfers = False


@register_policy
class LadderForeign(_Before36):
    name = "ladder-foreign"
    summary = "… + the median percentile while a station outside the team takes the air"
    gate_acks = False
    serial_transfers = False


@register_policy
class LadderAcks(_Before36):
    name = "ladder-acks"
    summary = "… + the gate holds the team's TCP acks (coorp before serial transfers)"
    serial_transfers = False


@register_policy
class LadderSerial(_Before36):
    name = "ladder-serial"
    summary = "… + each robot's transfers one at a time (coorp before issue 36)"


@register_policy
class LadderOutsiders(CoorpPolicy):
    name = "ladder-outsiders"
    summary = (
        "… + the acks a robot sends for traffic outside the team: not in its ring budget, "
        "never held"
    )
    time_model_window = "gaussian"
    lead_hints = False
    realized_in_window = False
    protect_tail = True
    ack_ac = None


@register_policy
class LadderConformal(CoorpPolicy):
    name = "ladder-conformal"
    summary = "… + conformal windows (Theil–Sen line, residual ranks, sends in their slots)"
    lead_hints = False
    realized_in_window = False
    protect_tail = True
    ack_ac = None


@register_policy
class LadderLeadHints(CoorpPolicy):
    name = "ladder-lead-hints"
    summary = "… + the MPC leader's full word on its controls (a moving bound, exact instants)"
    realized_in_window = False
    protect_tail = True
    ack_ac = None


@register_policy
class LadderInWindow(CoorpPolicy):
    name = "ladder-in-window"
    summary = "… + a packet priced only against sends in or after its window (coorp of issue 36)"
    protect_tail = True
    ack_ac = None


@register_policy
class LadderAckProbes(CoorpPolicy):
    name = "ladder-ack-probes"
    summary = "coorp whose acks' gate explores as the bulk gate does (a variant)"
    ack_probes = True
    ack_ac = None


@register_policy
class LadderBeAcks(CoorpPolicy):
    name = "ladder-be-acks"
    summary = "coorp with the team's TCP acks in AC_BE: coorp before its acks went in AC_VI"
    ack_ac = None


@register_policy
class CoorpOneTable(_Before36):
    name = "coorp-one-table"
    summary = "coorp with the acks in the bulk gate's completion-time table (a variant)"
    ack_table = False
    serial_transfers = False


@register_policy
class CoorpEmpirical(_Before36):
    name = "coorp-empirical"
    summary = "coorp with windows from the recent residuals' quantiles (a variant)"
    time_model_window = "empirical"


@register_policy
class CoorpRobust(_Before36):
    name = "coorp-robust"
    summary = "coorp with the time model's robust fit (medians, MAD) (a variant)"
    time_model_fit = "robust"


@register_policy
class CoorpAirtimeCap(CoorpPolicy):
    name = "coorp-cap1ms"
    summary = "coorp + every bulk exchange capped at 1 ms of airtime (a variant, not a rung)"
    bulk_airtime_cap_ns = 1_000_000
    ack_ac = None


def _ring_variant(ms: int) -> None:
    register_policy(
        type(
            f"CoorpRing{ms}ms",
            (CoorpPolicy,),
            {
                "name": f"coorp-ring{ms}ms",
                "summary": f"coorp with {ms} ms of bulk airtime in the ring (a variant)",
                "ring_airtime_budget_ns": ms * 1_000_000,
                "ack_ac": None,
            },
        )
    )


for _ms in (1, 2, 3):
    _ring_variant(_ms)
