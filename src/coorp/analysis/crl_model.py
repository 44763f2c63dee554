"""The paper's analytical model of a CRL team under COORP (§IV-D, Eq. 1–3).

A leader and ``N`` workers; ``LIMIT = 1`` bulk (BH) sender at a time.

* **Eq. 1** — the number of BH transmissions that get in the way of one MPC loop is
  ``N_BH ~ Binomial(2N, p0)``: the loop's ``N`` perceptions and ``N`` controls are
  treated as ``2N`` independent contentions against the one BH sender, each lost with
  probability ``p0``.
* ``p0`` comes from the EDCA contention windows by the paper's counting argument
  (:func:`bh_first_probability`): both counters are drawn uniformly, LS from
  ``[0, CW_LS]`` and BH from ``[0, CW_BH]``; BH goes first when its counter is lower;
  equal counters collide once, both windows double (capped at CWmax) and the second
  draw decides, a second tie going to LS ("at most one collision"). With the standard's
  AC_VO CWmin 3 and AC_BE CWmin 15 this is the paper's
  ``(1+2+3)/(4·16) + 4/(4·16) · (1+…+7)/(8·32) ≈ 0.1``. Like the paper, the count
  ignores that AC_BE waits one AIFS slot more than AC_VO.
* **Eq. 2** — with ``k`` BH transmissions the reaction time is
  ``T_k = T_inf + (N·L_perc + N·L_act)/B + k·L_ampdu/B``.
* **Eq. 3** — the bandwidth left for BH flows is ``B_BH = B − N·F·(L_perc + L_act)``.

``B`` is one effective bandwidth for every robot. By default
(:func:`params_from_scenario`) it is Bianchi's saturation throughput of a *single*
always-backlogged AC_BE station (:func:`coorp.analysis.bianchi.saturation_throughput`,
``n = 1``: no collisions, full A-MPDUs) at the MCS of the scenario's slowest
leader↔worker link, with the scenario's PHY, MAC and packet size. ``L_ampdu`` is the
IP payload of the largest A-MPDU that MAC builds at that MCS
(:func:`coorp.analysis.bianchi.ampdu_size` × ``packet_bytes``), so ``L_ampdu/B`` is the
time one BH channel access costs. Nothing here is fitted to simulation results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from coorp._errors import UsageError
from coorp.analysis.bianchi import ampdu_size, saturation_throughput
from coorp.scenario import AccessCategory, MacConfig, Scenario, parse_scenario
from coorp.sim.links import LinkTable
from coorp.sim.timing import edca_params
from coorp.units import us

__all__ = [
    "CrlModelParams",
    "CrlModelPoint",
    "bh_bandwidth_bps",
    "bh_count_pmf",
    "bh_first_probability",
    "crl_model",
    "p0_from_mac",
    "params_from_scenario",
    "reaction_times_ns",
    "team_scenario",
]


def _doubled(cw: int, cw_max: int) -> int:
    return min(2 * cw + 1, cw_max)


def bh_first_probability(
    cw_ls: int, cw_bh: int, cw_ls_max: int | None = None, cw_bh_max: int | None = None
) -> Fraction:
    """``p0``: probability that one BH transmission goes before one LS transmission.

    Counts backoff pairs as the paper does: ``P(b_BH < b_LS)`` for counters uniform in
    ``[0, cw_ls]`` and ``[0, cw_bh]``, plus ``P(tie) · P(b'_BH < b'_LS)`` for the one
    retry after a collision, with each window doubled (``2·CW + 1``, capped at its
    CWmax; no cap when ``None``). Exact, as a fraction.
    """
    for name, v in (("cw_ls", cw_ls), ("cw_bh", cw_bh)):
        if v < 0:
            raise UsageError(f"{name}={v}: contention windows must be >= 0")

    def lower(ls: int, bh: int) -> tuple[Fraction, Fraction]:
        # Pairs with b_BH < b_LS, and ties, over (ls + 1)·(bh + 1) equally likely pairs.
        pairs = (ls + 1) * (bh + 1)
        bh_first = sum(min(v, bh + 1) for v in range(ls + 1))
        ties = min(ls, bh) + 1
        return Fraction(bh_first, pairs), Fraction(ties, pairs)

    first, tie = lower(cw_ls, cw_bh)
    ls2 = _doubled(cw_ls, cw_ls_max if cw_ls_max is not None else 2 * cw_ls + 1)
    bh2 = _doubled(cw_bh, cw_bh_max if cw_bh_max is not None else 2 * cw_bh + 1)
    second, _ = lower(ls2, bh2)
    return first + tie * second


def p0_from_mac(mac: MacConfig) -> float:
    """``p0`` for the scenario's EDCA parameters: LS in AC_VO, BH in AC_BE."""
    p = edca_params(mac)
    vo, be = p[AccessCategory.VO], p[AccessCategory.BE]
    return float(bh_first_probability(vo.cw_min, be.cw_min, vo.cw_max, be.cw_max))


def bh_count_pmf(n: int, p0: float) -> np.ndarray:
    """Eq. 1: ``P(N_BH = k)``, ``k = 0..2N``, for ``N_BH ~ Binomial(2N, p0)``."""
    if n < 1:
        raise UsageError(f"N={n}: the team needs at least one worker")
    if not 0.0 <= p0 <= 1.0:
        raise UsageError(f"p0={p0}: must be a probability")
    m = 2 * n
    return np.array([math.comb(m, k) * p0**k * (1 - p0) ** (m - k) for k in range(m + 1)])


@dataclass(frozen=True)
class CrlModelParams:
    """The model's inputs. Sizes in bytes, bandwidths in bit/s, times in ns."""

    bandwidth_bps: float  # B
    ampdu_bytes: int  # L_ampdu
    perception_bytes: int  # L_perc
    control_bytes: int  # L_act
    inference_ns: int  # T_inf
    frequency_hz: float  # F, MPC loops per second
    deadline_ns: int  # the reaction-time bound
    p0: float
    #: Where B came from (for reports).
    bandwidth_source: str = "given"
    mcs: int | None = None

    def __post_init__(self) -> None:
        if not self.bandwidth_bps > 0:
            raise UsageError(f"B={self.bandwidth_bps} bit/s: the bandwidth must be > 0")


def reaction_times_ns(n: int, params: CrlModelParams) -> np.ndarray:
    """Eq. 2: ``T_k`` in ns for ``k = 0..2N`` BH transmissions."""
    b = params.bandwidth_bps
    t_tr = n * (params.perception_bytes + params.control_bytes) * 8 / b * 1e9
    per_bh = params.ampdu_bytes * 8 / b * 1e9
    return params.inference_ns + t_tr + per_bh * np.arange(2 * n + 1)


def bh_bandwidth_bps(n: int, params: CrlModelParams) -> float:
    """Eq. 3: ``B_BH = B − N·F·(L_perc + L_act)`` in bit/s (negative: LS alone overloads B)."""
    ls_bits = (params.perception_bytes + params.control_bytes) * 8
    return params.bandwidth_bps - n * params.frequency_hz * ls_bits


@dataclass(frozen=True)
class CrlModelPoint:
    """The model's prediction for a team of ``n`` workers."""

    n: int
    pmf: np.ndarray  # P(N_BH = k)
    reaction_ns: np.ndarray  # T_k
    violation_rate: float  # P(T > deadline)
    bh_bps: float  # B_BH

    @property
    def cdf(self) -> np.ndarray:
        return np.cumsum(self.pmf)

    @property
    def mean_bh(self) -> float:
        return float(np.dot(np.arange(self.pmf.size), self.pmf))

    def quantile_ns(self, q: float) -> float:
        """Smallest ``T_k`` with ``P(T ≤ T_k) ≥ q``."""
        if not 0.0 <= q <= 1.0:
            raise UsageError(f"q={q}: must be in [0, 1]")
        k = int(np.searchsorted(self.cdf, q - 1e-12))
        return float(self.reaction_ns[min(k, self.reaction_ns.size - 1)])


def crl_model(n: int, params: CrlModelParams) -> CrlModelPoint:
    """Eq. 1–3 for ``n`` workers (``n + 1`` robots with the leader)."""
    pmf = bh_count_pmf(n, params.p0)
    t = reaction_times_ns(n, params)
    return CrlModelPoint(
        n=n,
        pmf=pmf,
        reaction_ns=t,
        violation_rate=float(pmf[t > params.deadline_ns].sum()),
        bh_bps=bh_bandwidth_bps(n, params),
    )


def params_from_scenario(
    scenario: Scenario, *, bandwidth_mbps: float | None = None, source: str = "<scenario>"
) -> CrlModelParams:
    """The model's inputs from a scenario with a ``[workload]`` section.

    ``B`` is ``bandwidth_mbps`` if given, else the single-station AC_BE saturation
    throughput at the slowest leader↔worker MCS (see the module docstring).
    """
    wl = scenario.workload
    if wl is None:
        raise UsageError(f"{source} has no [workload] section; the model needs the MPC loop")
    links = LinkTable(scenario, source)
    index = {st.name: i for i, st in enumerate(scenario.stations)}
    leader = index[wl.leader]
    mcs = min(
        min(links.mcs(leader, index[w]), links.mcs(index[w], leader)) for w in scenario.workers
    )
    phy, mac = scenario.phy, scenario.mac
    if bandwidth_mbps is None:
        sat = saturation_throughput(1, payload_bytes=scenario.packet_bytes, mcs=mcs, phy=phy,
                                    mac=mac)  # fmt: skip
        b_bps = sat.throughput_mbps * 1e6
        origin = f"single-station AC_BE saturation throughput at MCS {mcs} (Bianchi, n = 1)"
    else:
        if not bandwidth_mbps > 0:
            raise UsageError(f"--bandwidth must be > 0 Mb/s, got {bandwidth_mbps}")
        b_bps = bandwidth_mbps * 1e6
        origin = "given"
    k = ampdu_size(scenario.packet_bytes, mcs, phy, mac, AccessCategory.BE)
    return CrlModelParams(
        bandwidth_bps=b_bps,
        ampdu_bytes=k * scenario.packet_bytes,
        perception_bytes=wl.mpc.perception_bytes,
        control_bytes=wl.mpc.control_bytes,
        inference_ns=us(wl.mpc.inference_us),
        frequency_hz=1e6 / wl.mpc.period_us,
        deadline_ns=us(wl.mpc.deadline_us),
        p0=p0_from_mac(mac),
        bandwidth_source=origin,
        mcs=mcs,
    )


def team_scenario(
    base: Scenario, n: int, *, seed: int = 0, radius_m: float = 10.0, duration_s: float = 5.0
) -> Scenario:
    """``base`` with its stations replaced by a leader at the origin and ``n`` workers
    placed uniformly at random in a ``radius_m`` disc (paper §VI-C).

    PHY, MAC, NIC queue, link mode and workload come from ``base``. DRLC starts after
    the first MPC loop (``batch_items = 1``) and trains in zero time, so bulk data is
    queued for the whole run, as the model assumes.
    """
    wl = base.workload
    if wl is None:
        raise UsageError("the base scenario needs a [workload] section")
    if n < 1:
        raise UsageError(f"N={n}: the team needs at least one worker")
    rng = np.random.default_rng([seed, n])
    r = radius_m * np.sqrt(rng.random(n))
    a = 2 * np.pi * rng.random(n)
    stations = [{"name": wl.leader, "position_m": [0.0, 0.0]}]
    stations += [
        {
            "name": f"w{i + 1}",
            "position_m": [float(r[i] * np.cos(a[i])), float(r[i] * np.sin(a[i]))],
        }
        for i in range(n)
    ]
    data = base.model_dump(mode="json")
    data.update(
        name=f"{base.name}-team{n}",
        duration_s=duration_s,
        stations=stations,
        flows=[],
    )
    data["links"]["overrides"] = []
    data["workload"]["workers"] = None
    data["workload"]["drlc"].update(enabled=True, batch_items=1, train_us=0.0)
    return parse_scenario(data, source=f"<{base.name} with {n} workers>")
