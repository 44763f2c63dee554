"""Bianchi's DCF saturation model: the independent reference the simulator is validated against.

This module owns the analytical saturation throughput of ``n`` always-backlogged EDCA
functions of one access category on one channel (G. Bianchi, "Performance analysis of
the IEEE 802.11 distributed coordination function", IEEE JSAC 18(3), 2000), with a
finite retry limit (H. Wu et al., INFOCOM 2002; P. Chatzimisios et al., 2003), in the
variants the simulator implements: basic access or RTS/CTS, single MPDUs with Ack or
A-MPDUs with BlockAck, and the ``classic`` or ``ns3`` retry policy. Airtime comes from
:class:`coorp.sim.timing.ExchangeTiming`, so a simulator-vs-model comparison tests the
contention model alone. Nothing here has state; nothing depends on scipy.

Model
-----
Time is Bianchi's *virtual slot*: an idle slot lasts ``σ`` (9 µs); a slot in which
someone starts transmitting lasts the whole exchange plus the ``AIFS`` after it. The
simulator implements exactly this: a station with counter ``c`` transmits at the
``c``-th slot boundary after the medium has been idle for AIFS, and every counter
decrements at every boundary (also at one where another station starts), so after a
busy period a counter drawn as ``c`` costs ``c`` idle slots.

Backoff stage ``i = 0..R`` (``R`` = ``mac.retry_limit``) draws its counter uniformly in
``[0, W_i − 1]`` with ``W_i = min(2^i·(CWmin+1), CWmax+1)``. An attempt fails with
probability ``p`` independently of everything else (Bianchi's decoupling assumption);
failure moves stage ``i < R`` to ``i+1``, failure at ``R`` drops the frame and, like a
success, returns to stage 0. The chain's stationary distribution gives
``b_i = p^i·b_0`` for the probability of being about to attempt at stage ``i``, hence the
per-slot attempt probability::

    τ(p) = Σ_{i=0..R} p^i  /  Σ_{i=0..R} p^i·(W_i + 1)/2

(with ``R = ∞`` and stage ``m`` absorbing this is Bianchi's eq. 7). With ``n`` stations
``p = 1 − (1 − τ)^(n−1)``; ``p − (1 − (1 − τ(p))^(n−1))`` is increasing in ``p``,
negative at 0 and positive at 1, so the fixed point is unique and bisection finds it.
Per slot: ``P_tr = 1 − (1−τ)^n`` (busy), ``P_s = nτ(1−τ)^(n−1)/P_tr`` (a busy slot is
a success) and::

    E[slot] = (1 − P_tr)·σ + P_tr·P_s·T_s + P_tr·(1 − P_s)·T_c
    S       = P_tr·P_s·K·L / E[slot]

where ``T_s`` / ``T_c`` are the success / failure exchanges of ``timing.py`` plus AIFS,
``K`` is the number of MPDUs per PPDU and ``L`` the IP payload of each (the simulator
counts delivered IP bytes the same way).

The ``ns3`` retry policy
------------------------
After a missed BlockAck the station backs off with a doubled CW and then sends a
BlockAckReq (exchange ``BAR + SIFS + BlockAck``) instead of the A-MPDU. A BAR that
fails moves to the next stage like any attempt; one that succeeds resets CW to CWmin,
and the next attempt carries data again (the unacknowledged MPDUs, topped up to ``K``).
A failed A-MPDU is not counted against its MPDUs; the BAR is retried until it has failed
``R + 1`` times, then the station gives up (counting one retry on each pending MPDU) and
returns to stage 0 with data. The ns3 chain therefore has stages ``0..R+1``: one data
attempt and up to ``R + 1`` BARs.

With RTS/CTS no BlockAck is ever missed in a collision-only channel: a collision hits
the RTS, the CTS does not come, the A-MPDU never went out and is simply protected and
sent again (this is what ns-3 does). So with RTS/CTS the ns3 policy *is* the classic
model; everything below is for basic access. (ns-3 3.44 agrees: 5 and 20 saturated
stations, A-MPDU, RTS/CTS give 475.7 and 471.2 Mb/s, against 474.8 and 469.3 for this
model and 457.1 and 423.6 if a BAR followed every failed RTS.)

1. The backoff chain is unchanged: every attempt, data or BAR, fails with prob. ``p``,
   failure advances the stage and success resets it. So ``τ`` and ``p`` are those of
   the classic model.
2. What an attempt carries follows from its stage: stage 0 attempts are data (a fresh
   A-MPDU, the retransmission after a successful BAR, or the first after a drop), every
   attempt at stage ``i ≥ 1`` follows a failure and is a BAR. With ``M = R + 1`` the
   last stage, the fraction of BAR attempts is ``β = 1 − b_0/τ = p·(1 − p^M)/(1 − p^(M+1))``
   (≈ ``p``: "a BAR iff the previous attempt failed", minus the give-ups at stage ``M``).
3. Under the decoupling assumption each station transmitting in a slot sends a BAR
   with prob. ``β`` independently of the others, so with ``a = τ(1−β)`` (data) and
   ``b = τβ`` (BAR)::

       P(success, data) = n·a·(1−τ)^(n−1)            lasts T_s
       P(success, BAR)  = n·b·(1−τ)^(n−1)            lasts T_bar = BAR + SIFS + BA + AIFS
       P(collision, all data) = (1−b)^n − (1−τ)^n − n·a·(1−τ)^(n−1)
       P(collision, all BAR)  = (1−a)^n − (1−τ)^n − n·b·(1−τ)^(n−1)
       P(collision, mixed)    = P_tr − the four above

   A collision lasts as long as its longest failure (``timing.py``: longest
   transmission plus SIFS plus the awaited response): ``T_c`` if all are data,
   ``T_c,bar = BAR + SIFS + BA + AIFS`` if all are BARs, ``max(T_c, T_c,bar)`` mixed.
   (:func:`slot_throughput` accepts any ``T_c``, ``T_c,bar``; the ``max`` rule also
   covers RTS collisions, in case a BAR ever follows a failed RTS.)
4. Only data successes deliver payload: ``S = P(success, data)·K·L / E[slot]``.

Consequence (tested): for the same chain and basic access,
``(1 − p)·S_classic ≤ S_ns3 < S_classic``. Upper bound: with ``E_c``, ``E_3`` the mean
slots, ``S_ns3 < S_classic ⇔ (1 − β)·E_c < E_3``; the difference ``E_3 − (1 − β)·E_c``
is ``β·(idle part) + β·P(success)·T_bar + (collision part of E_3 − (1 − β)·that of E_c)``,
and the last term is ≥ 0 because a collision of ``k`` attempts involves data (lasting
``T_c``) with prob. ``1 − β^k ≥ 1 − β``. Lower bound: every ns3 slot is at most as long
as the classic one (``T_bar ≤ T_s``, ``T_c,bar ≤ T_c``), so ``E_3 ≤ E_c`` and
``S_ns3 ≥ (1 − β)·S_classic ≥ (1 − p)·S_classic``. The extra stage of the ns3 chain
lowers ``τ`` slightly (2% at ``n = 40`` with AC_BE defaults). Without aggregation, with RTS/CTS,
or at ``n = 1`` (``p = 0``) the two policies coincide.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from coorp.phy import MAX_PPDU_NS, SLOT_NS
from coorp.scenario import AccessCategory, MacConfig, PhyConfig, RetryPolicy
from coorp.sim.timing import ExchangeTiming, aifs_ns, edca_params, mpdu_bytes, psdu_bytes

__all__ = [
    "BianchiResult",
    "ampdu_size",
    "attempt_probability",
    "bar_fraction",
    "bianchi_table",
    "dcf_fixed_point",
    "saturation_throughput",
    "slot_throughput",
]

_BISECTION_STEPS = 200
_TOLERANCE = 1e-13


@dataclass(frozen=True, slots=True)
class BianchiResult:
    """The model's saturation operating point for ``n`` stations.

    ``p_busy`` is Bianchi's ``P_tr`` (a slot holds at least one transmission) and
    ``p_success`` his ``P_s`` (a busy slot holds exactly one, i.e. is a success);
    ``mean_slot_ns`` is ``E[slot]``. ``mpdus_per_ppdu`` is the ``K`` used.
    """

    n: int
    tau: float
    p: float
    throughput_mbps: float
    p_success: float
    p_busy: float
    mean_slot_ns: float
    mpdus_per_ppdu: int = 1


def _window(stage: int, cw_min: int, cw_max: int) -> int:
    """``W_i``: the number of values the stage-``i`` counter is drawn from."""
    return min((cw_min + 1) << stage, cw_max + 1)


def attempt_probability(p: float, *, cw_min: int, cw_max: int, retry_limit: int | None) -> float:
    """``τ(p)``: per-slot attempt probability of one station whose attempts fail w.p. ``p``.

    ``retry_limit`` ``R``: stages ``0..R``, drop after the ``R``-th retransmission;
    ``None``: no limit, the last doubling stage repeats forever (Bianchi 2000, eq. 7).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    if retry_limit is not None:
        num = den = 0.0
        pi = 1.0
        for i in range(retry_limit + 1):
            num += pi
            den += pi * (_window(i, cw_min, cw_max) + 1) / 2
            pi *= p
        return num / den
    # Infinite retries: stages reach the cap m, which then absorbs. Numerator and
    # denominator are multiplied by (1 - p) so that p = 1 needs no special case.
    m = 0
    while _window(m, cw_min, cw_max) < cw_max + 1:
        m += 1
    den = 0.0
    pi = 1.0
    for i in range(m):
        den += (1 - p) * pi * (_window(i, cw_min, cw_max) + 1) / 2
        pi *= p
    den += pi * (_window(m, cw_min, cw_max) + 1) / 2
    return 1.0 / den


def dcf_fixed_point(
    n: int, *, cw_min: int, cw_max: int, retry_limit: int | None
) -> tuple[float, float]:
    """Solve ``τ = τ(p)``, ``p = 1 − (1 − τ)^(n−1)`` by bisection on ``p``; returns ``(τ, p)``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")

    def tau_of(p: float) -> float:
        return attempt_probability(p, cw_min=cw_min, cw_max=cw_max, retry_limit=retry_limit)

    if n == 1:
        return tau_of(0.0), 0.0
    lo, hi = 0.0, 1.0
    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2
        if mid - (1 - (1 - tau_of(mid)) ** (n - 1)) > 0:
            hi = mid
        else:
            lo = mid
        if hi - lo < _TOLERANCE:
            break
    p = (lo + hi) / 2
    tau = tau_of(p)
    residual = abs(p - (1 - (1 - tau) ** (n - 1)))
    if residual > 1e-9:  # the map is monotone, so this means a bug, not slow convergence
        raise ArithmeticError(f"Bianchi fixed point did not converge (n={n}, residual {residual})")
    return tau, p


def bar_fraction(p: float, retry_limit: int | None) -> float:
    """``β``: fraction of attempts that are BlockAckReqs under the ns3 policy (stage ≥ 1)."""
    if retry_limit is None:
        return p
    if p >= 1.0:
        return retry_limit / (retry_limit + 1)
    return p * (1 - p**retry_limit) / (1 - p ** (retry_limit + 1))


def slot_throughput(
    n: int,
    *,
    slot_ns: float,
    t_success_ns: float,
    t_collision_ns: float,
    cw_min: int,
    cw_max: int,
    retry_limit: int | None,
    payload_bits: float,
    bar_success_ns: float | None = None,
    bar_collision_ns: float | None = None,
) -> BianchiResult:
    """Bianchi's model from raw numbers: σ, T_s, T_c (each including the trailing DIFS/AIFS),
    ``W = cw_min + 1``, ``m`` via ``cw_max = 2^m·W − 1``, bits delivered per success.

    Giving ``bar_success_ns`` and ``bar_collision_ns`` (BAR exchange plus AIFS, and its
    failure) turns on the ns3 retry policy: a fraction ``β`` of attempts are BARs.
    Durations are in ns (any consistent unit works for ``tau``/``p``/``p_*``).
    """
    tau, p = dcf_fixed_point(n, cw_min=cw_min, cw_max=cw_max, retry_limit=retry_limit)
    idle = (1 - tau) ** n
    p_tr = 1 - idle
    one = n * tau * (1 - tau) ** (n - 1)  # exactly one transmitter
    if bar_success_ns is None or bar_collision_ns is None:
        data_succ = one
        busy_time = one * t_success_ns + (p_tr - one) * t_collision_ns
    else:
        beta = bar_fraction(p, retry_limit)
        a, b = tau * (1 - beta), tau * beta
        data_succ = one * (1 - beta)
        bar_succ = one * beta
        coll_data = (1 - b) ** n - idle - n * a * (1 - tau) ** (n - 1)
        coll_bar = (1 - a) ** n - idle - n * b * (1 - tau) ** (n - 1)
        coll_mixed = p_tr - one - coll_data - coll_bar
        busy_time = (
            data_succ * t_success_ns
            + bar_succ * bar_success_ns
            + coll_data * t_collision_ns
            + coll_bar * bar_collision_ns
            + coll_mixed * max(t_collision_ns, bar_collision_ns)
        )
    mean_slot = idle * slot_ns + busy_time
    return BianchiResult(
        n=n,
        tau=tau,
        p=p,
        throughput_mbps=data_succ * payload_bits / mean_slot * 1e3,
        p_success=one / p_tr if p_tr > 0 else 0.0,
        p_busy=p_tr,
        mean_slot_ns=mean_slot,
    )


def _uses_rts(psdu: int, mac: MacConfig) -> bool:
    return psdu > mac.rts_threshold_bytes


def ampdu_size(
    payload_bytes: int,
    mcs: int,
    phy: PhyConfig,
    mac: MacConfig,
    ac: AccessCategory = AccessCategory.BE,
    *,
    rts: bool | None = None,
) -> int:
    """MPDUs per PPDU of a saturated station: the largest ``K`` with ``K ≤ max_ampdu_mpdus``,
    PSDU ≤ ``max_ampdu_bytes``, PPDU ≤ 5.484 ms and, if the AC has a TXOP limit, the whole
    exchange (RTS/CTS included when used) within it. 1 when the AC does not aggregate,
    and at least 1 (a single MPDU is always sent)."""
    params = edca_params(mac)[ac]
    if not params.aggregation:
        return 1
    timing = ExchangeTiming(phy, ba_window=mac.max_ampdu_mpdus)
    mpdu = mpdu_bytes(payload_bytes)
    k = 0
    while k < mac.max_ampdu_mpdus:
        psdu = psdu_bytes([mpdu] * (k + 1))
        if psdu > mac.max_ampdu_bytes:
            break
        data = timing.data_ns(psdu, mcs)
        if data > MAX_PPDU_NS:
            break
        use_rts = _uses_rts(psdu, mac) if rts is None else rts
        if params.txop_limit_ns > 0 and (
            timing.success_ns(data, block_ack=True, rts=use_rts) > params.txop_limit_ns
        ):
            break
        k += 1
    return max(k, 1)


def saturation_throughput(
    n: int,
    *,
    payload_bytes: int,
    mcs: int,
    phy: PhyConfig,
    mac: MacConfig,
    ac: AccessCategory = AccessCategory.BE,
    mpdus_per_ampdu: int | None = None,
    rts: bool | None = None,
) -> BianchiResult:
    """Saturation throughput of ``n`` stations sending ``payload_bytes`` IP packets at ``mcs``.

    Everything else comes from the configuration, as in the simulator: EDCA parameters
    and aggregation from ``mac.edca[ac]`` (standard defaults otherwise), retry limit and
    retry policy from ``mac``, RTS/CTS when the PSDU exceeds ``mac.rts_threshold_bytes``
    (``rts`` overrides), ``K`` from :func:`ampdu_size` (``mpdus_per_ampdu`` overrides).
    """
    params = edca_params(mac)[ac]
    timing = ExchangeTiming(phy, ba_window=mac.max_ampdu_mpdus)
    if params.aggregation:
        k = (
            mpdus_per_ampdu
            if mpdus_per_ampdu is not None
            else ampdu_size(payload_bytes, mcs, phy, mac, ac, rts=rts)
        )
    else:
        if mpdus_per_ampdu not in (None, 1):
            raise ValueError(f"AC {ac.value} does not aggregate; mpdus_per_ampdu must be 1")
        k = 1
    if k < 1:
        raise ValueError(f"mpdus_per_ampdu must be >= 1, got {k}")
    psdu = psdu_bytes([mpdu_bytes(payload_bytes)] * k)
    use_rts = _uses_rts(psdu, mac) if rts is None else rts
    # A lone MPDU is acknowledged by a normal Ack even when the AC aggregates.
    block_ack = params.aggregation and k > 1
    data = timing.data_ns(psdu, mcs)
    aifs = aifs_ns(params.aifsn)
    # BARs follow a *missing BlockAck*: with RTS/CTS a collision loses the RTS instead.
    ns3 = block_ack and mac.retry_policy is RetryPolicy.NS3 and not use_rts
    # A failed BAR exchange occupies the medium exactly as long as a successful one:
    # BAR, then SIFS + the (missing) BlockAck.
    bar = timing.bar_exchange_ns() + aifs
    r = slot_throughput(
        n,
        slot_ns=SLOT_NS,
        t_success_ns=timing.success_ns(data, block_ack=block_ack, rts=use_rts) + aifs,
        t_collision_ns=timing.failure_ns(data, block_ack=block_ack, rts=use_rts) + aifs,
        cw_min=params.cw_min,
        cw_max=params.cw_max,
        # ns3: the A-MPDU's failure is not counted against its MPDUs; the BAR is then
        # retried until it has failed retry_limit + 1 times, so the chain has one more stage.
        retry_limit=mac.retry_limit + 1 if ns3 else mac.retry_limit,
        payload_bits=8 * payload_bytes * k,
        bar_success_ns=bar if ns3 else None,
        bar_collision_ns=bar if ns3 else None,
    )
    return BianchiResult(
        n=r.n,
        tau=r.tau,
        p=r.p,
        throughput_mbps=r.throughput_mbps,
        p_success=r.p_success,
        p_busy=r.p_busy,
        mean_slot_ns=r.mean_slot_ns,
        mpdus_per_ppdu=k,
    )


def bianchi_table(ns: Iterable[int], **kw: Any) -> list[BianchiResult]:
    """:func:`saturation_throughput` for each ``n`` in ``ns`` (same keyword arguments)."""
    return [saturation_throughput(n, **kw) for n in ns]
