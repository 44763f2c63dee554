"""Pydantic models of a scenario file: plain data, validated, units in field names.

Every model forbids unknown keys. Cross-field rules (MCS valid for the width and spatial
streams, flows naming existing stations, CWmax >= CWmin after the standard's defaults,
every link in range and able to carry a full packet in one PPDU, no flow named like a
TCP-ack flow) live in validators here so that a scenario that loads is a scenario the
simulator can run.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Final, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from coorp.phy import (
    AMPDU_DELIMITER_BYTES,
    LEGACY_RATES_MBPS,
    MAC_OVERHEAD_BYTES,
    MAX_PPDU_NS,
    GuardInterval,
    LinkBudget,
    VhtMode,
    is_valid_vht_mcs,
    valid_vht_mcs,
    vht_max_psdu_bytes,
    vht_ppdu_duration_ns,
)
from coorp.scenario._workload import PolicyOptions, WorkloadConfig

__all__ = [
    "EDCA_DEFAULTS",
    "AccessCategory",
    "BulkFlow",
    "DatagramFlow",
    "EdcaDefaults",
    "EdcaOverride",
    "Flow",
    "HwQueueConfig",
    "HwQueueMode",
    "LinkConfig",
    "LinkOverride",
    "MacConfig",
    "PathLossConfig",
    "PhyConfig",
    "RetryPolicy",
    "Scenario",
    "StationConfig",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


#: A problem found by a cross-field rule, located at one field: (location relative to
#: the model being validated, the value found there, what is wrong and what is allowed).
_Problem = tuple[tuple[str | int, ...], object, str]


def _raise_at(model: type[BaseModel], problems: list[_Problem]) -> None:
    """Report ``problems`` at their own fields (pydantic prefixes the location of the
    model being validated), instead of as one message about the whole model."""
    if problems:
        raise ValidationError.from_exception_data(
            model.__name__,
            [
                InitErrorDetails(
                    type=PydanticCustomError("value_error", "{message}", {"message": msg}),
                    loc=loc,
                    input=value,
                )
                for loc, value, msg in problems
            ],
        )


class AccessCategory(StrEnum):
    """EDCA access category (802.11-2016 Table 10-1)."""

    BK = "BK"
    """Background."""
    BE = "BE"
    """Best effort: bulk (BH) traffic."""
    VI = "VI"
    """Video."""
    VO = "VO"
    """Voice: latency-sensitive (LS) traffic."""


class RetryPolicy(StrEnum):
    """What a station does after an A-MPDU's BlockAck is missing."""

    CLASSIC = "classic"
    """Retransmit the A-MPDU after a backoff with doubled CW."""
    NS3 = "ns3"
    """As ns-3 by default: send a BlockAckReq after a doubled-CW backoff; reset CW to
    CWmin when its BlockAck arrives, then retransmit the unacknowledged MPDUs."""


class HwQueueMode(StrEnum):
    """How the NIC's hardware queue is organised."""

    PER_AC = "per_ac"
    """One ring per access category (ideal; ns-3's model)."""
    SHARED = "shared"
    """One FIFO ring shared by all categories, as on many commodity USB/fullmac NICs:
    an LS packet waits behind BH packets already handed to the NIC."""


class PhyConfig(_Model):
    width_mhz: Literal[20, 40, 80, 160] = 80
    spatial_streams: int = Field(2, ge=1, le=4)
    guard_interval: GuardInterval = GuardInterval.LONG
    basic_rate_mbps: int = Field(24, description=f"control-frame rate, one of {LEGACY_RATES_MBPS}")

    @model_validator(mode="after")
    def _basic_rate_exists(self) -> PhyConfig:
        if self.basic_rate_mbps not in LEGACY_RATES_MBPS:
            raise ValueError(
                f"basic_rate_mbps = {self.basic_rate_mbps} is not an OFDM rate; "
                f"allowed: {list(LEGACY_RATES_MBPS)}"
            )
        return self


class EdcaDefaults(NamedTuple):
    """One access category's EDCA parameters as the standard sets them."""

    aifsn: int
    cw_min: int
    cw_max: int
    txop_limit_us: int
    """0: no TXOP limit (one exchange per channel access)."""
    aggregation: bool


#: 802.11-2016 Table 9-137 for OFDM PHYs (aCWmin = 15, aCWmax = 1023): what each key of
#: ``[mac.edca.<AC>]`` left unset means. Aggregation is off for VO, as in common drivers.
EDCA_DEFAULTS: Final = {
    AccessCategory.BK: EdcaDefaults(7, 15, 1023, 0, True),
    AccessCategory.BE: EdcaDefaults(3, 15, 1023, 0, True),
    AccessCategory.VI: EdcaDefaults(2, 7, 15, 3008, True),
    AccessCategory.VO: EdcaDefaults(2, 3, 7, 1504, False),
}


class EdcaOverride(_Model):
    """Overrides of one access category's EDCA parameters; unset fields keep the standard's."""

    aifsn: int | None = Field(None, ge=1, le=15)
    cw_min: int | None = Field(None, ge=0, le=32767)
    cw_max: int | None = Field(None, ge=0, le=32767)
    txop_limit_us: int | None = Field(None, ge=0, le=8160)
    aggregation: bool | None = None


class MacConfig(_Model):
    retry_limit: int = Field(7, ge=0, le=255)
    retry_policy: RetryPolicy = RetryPolicy.CLASSIC
    rts_threshold_bytes: int = Field(
        1_048_576, ge=0, description="PSDUs longer than this use RTS/CTS; 1048576 means never"
    )
    max_ampdu_bytes: int = Field(1_048_575, ge=1, le=1_048_575)
    max_ampdu_mpdus: int = Field(64, ge=1, le=64)
    edca: dict[AccessCategory, EdcaOverride] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _cw_order(self) -> MacConfig:
        """CWmax >= CWmin for every category, once the overrides meet the defaults."""
        problems: list[_Problem] = []
        for ac, o in self.edca.items():
            std = EDCA_DEFAULTS[ac]
            lo = std.cw_min if o.cw_min is None else o.cw_min
            hi = std.cw_max if o.cw_max is None else o.cw_max
            if hi >= lo:
                continue
            std_note = f" (the standard's {ac.value} value)"
            hi_txt = f"{hi}{'' if o.cw_max is not None else std_note}"
            lo_txt = f"{lo}{'' if o.cw_min is not None else std_note}"
            value: int | None
            if o.cw_max is not None:  # report at the key that was set (cw_max if both)
                where, value = "cw_max", o.cw_max
                allowed = f"cw_max >= {lo}" + ("" if o.cw_min is not None else ", or set cw_min")
            else:
                where, value = "cw_min", o.cw_min
                allowed = f"cw_min <= {hi}, or set cw_max"
            problems.append((
                ("edca", ac.value, where), value,
                f"cw_max {hi_txt} < cw_min {lo_txt}; allowed: {allowed}",
            ))  # fmt: skip
        _raise_at(MacConfig, problems)
        return self


class HwQueueConfig(_Model):
    mode: HwQueueMode = HwQueueMode.PER_AC
    capacity_packets: int = Field(128, ge=1, le=65536, description="packets per ring")


class StationConfig(_Model):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    position_m: tuple[float, float] = (0.0, 0.0)


class LinkOverride(_Model):
    src: str
    dst: str
    mcs: int = Field(ge=0, le=9)


class PathLossConfig(_Model):
    tx_power_dbm: float = Field(20.0, ge=-10, le=30)
    reference_loss_db: float = Field(46.7, ge=0)
    exponent: float = Field(3.0, ge=1.5, le=6.0)
    margin_db: float = Field(0.0, ge=0)


class LinkConfig(_Model):
    mode: Literal["fixed", "distance"] = "fixed"
    mcs: int = Field(7, ge=0, le=9, description="MCS of every link in fixed mode")
    overrides: list[LinkOverride] = Field(default_factory=list)
    pathloss: PathLossConfig = Field(default_factory=PathLossConfig)
    packet_errors: bool = False


class DatagramFlow(_Model):
    """Periodic (or explicitly timed) messages, fragmented into MPDUs; bypass the kernel queue."""

    kind: Literal["datagram"] = "datagram"
    name: str = Field(min_length=1)
    src: str
    dst: str
    size_bytes: int = Field(gt=0, le=64 * 1024 * 1024)
    period_us: float | None = Field(None, gt=0)
    times_us: list[float] | None = None
    start_us: float = Field(0.0, ge=0)
    jitter_us: float = Field(0.0, ge=0, description="std. dev. of Gaussian send jitter")
    category: AccessCategory = AccessCategory.VO

    @model_validator(mode="after")
    def _one_schedule(self) -> DatagramFlow:
        if (self.period_us is None) == (self.times_us is None):
            raise ValueError("give exactly one of period_us or times_us")
        if self.times_us is not None and any(t < 0 for t in self.times_us):
            raise ValueError("times_us must all be >= 0")
        return self


class BulkFlow(_Model):
    """A bulk (BH) transfer that keeps its station's kernel queue backlogged."""

    kind: Literal["bulk"] = "bulk"
    name: str = Field(min_length=1)
    src: str
    dst: str
    total_bytes: int | None = Field(None, gt=0, description="None: unlimited (saturating)")
    start_us: float = Field(0.0, ge=0)
    category: AccessCategory = AccessCategory.BE
    tcp_acks: bool = True


Flow = Annotated[DatagramFlow | BulkFlow, Field(discriminator="kind")]


class Scenario(_Model):
    """A whole simulated channel: PHY, MAC, stations, links and traffic."""

    name: str = "scenario"
    description: str = ""
    duration_s: float = Field(10.0, gt=0, le=86_400)
    seed: int = Field(1, ge=0, lt=2**63)
    packet_bytes: int = Field(1500, ge=64, le=7935, description="IP MTU: largest MPDU payload")
    phy: PhyConfig = Field(default_factory=PhyConfig)
    mac: MacConfig = Field(default_factory=MacConfig)
    hw_queue: HwQueueConfig = Field(default_factory=HwQueueConfig)
    stations: list[StationConfig] = Field(min_length=2)
    links: LinkConfig = Field(default_factory=LinkConfig)
    flows: list[Flow] = Field(default_factory=list)
    workload: WorkloadConfig | None = None
    policy: PolicyOptions = Field(default_factory=PolicyOptions)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        names = [s.name for s in self.stations]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"station names must be unique; repeated: {dupes}")
        nss, width = self.phy.spatial_streams, self.phy.width_mhz
        allowed = valid_vht_mcs(nss, width)
        if self.links.mode == "fixed" and not is_valid_vht_mcs(self.links.mcs, nss, width):
            raise ValueError(
                f"links.mcs = {self.links.mcs} does not exist for {nss} spatial stream(s) at "
                f"{width} MHz; allowed: {allowed}"
            )
        known = set(names)
        for i, o in enumerate(self.links.overrides):
            for end in (o.src, o.dst):
                if end not in known:
                    raise ValueError(f"links.overrides[{i}] names unknown station {end!r}")
            if not is_valid_vht_mcs(o.mcs, nss, width):
                raise ValueError(
                    f"links.overrides[{i}].mcs = {o.mcs} does not exist for {nss} spatial "
                    f"stream(s) at {width} MHz; allowed: {allowed}"
                )
        flow_names = [f.name for f in self.flows]
        dupes = sorted({n for n in flow_names if flow_names.count(n) > 1})
        if dupes:
            raise ValueError(f"flow names must be unique; repeated: {dupes}")
        for i, f in enumerate(self.flows):
            for end in (f.src, f.dst):
                if end not in known:
                    raise ValueError(
                        f"flows[{i}] ({f.name}) names unknown station {end!r}; "
                        f"stations: {sorted(known)}"
                    )
            if f.src == f.dst:
                raise ValueError(f"flows[{i}] ({f.name}) has src == dst = {f.src!r}")
        _raise_at(Scenario, self._ack_name_clashes() + self._link_problems())
        if self.workload is not None:
            w = self.workload
            if w.leader not in known:
                raise ValueError(
                    f"workload.leader = {w.leader!r} is not a station; stations: {sorted(known)}"
                )
            for name in w.workers or []:
                if name not in known or name == w.leader:
                    raise ValueError(
                        f"workload.workers contains {name!r}: must be a station other than "
                        f"the leader; stations: {sorted(known)}"
                    )
            if w.workers is not None and not w.workers:
                raise ValueError("workload.workers must not be empty")
        return self

    def _ack_name_clashes(self) -> list[_Problem]:
        """A bulk flow with TCP acks adds a flow named ``<name>:ack``: no flow may use it."""
        acks = {
            f"{f.name}:ack": (i, f.name)
            for i, f in enumerate(self.flows)
            if isinstance(f, BulkFlow) and f.tcp_acks
        }
        problems: list[_Problem] = []
        for i, f in enumerate(self.flows):
            if f.name in acks:
                j, bulk = acks[f.name]
                problems.append((
                    ("flows", i, "name"), f.name,
                    f"is the name of the TCP-ack flow of bulk flow {bulk!r} (flows[{j}]); "
                    f"rename this flow, or set tcp_acks = false on {bulk!r}",
                ))  # fmt: skip
        return problems

    def _link_problems(self) -> list[_Problem]:
        """Every link can carry every packet: in distance mode each pair of stations is
        within range of MCS 0, and on every link (its MCS from links.mcs, the distance
        or an override) a full packet fits one PPDU (aPPDUMaxTime). Workloads may send
        between any two stations, so every pair counts, not only the flows'."""
        phy, links = self.phy, self.links
        nss, width = phy.spatial_streams, phy.width_mhz
        pl = links.pathloss
        budget = LinkBudget(pl.tx_power_dbm, pl.reference_loss_db, pl.exponent, pl.margin_db)
        override = {(o.src, o.dst): i for i, o in enumerate(links.overrides)}  # last wins
        problems: list[_Problem] = []
        out_of_range: list[str] = []
        slowest: tuple[int, str] | None = None  # (MCS, where it comes from)
        best: dict[tuple[str, str], int | None] = {}  # distance mode; path loss is symmetric
        for a in self.stations:
            for b in self.stations:
                if a is b:
                    continue
                if links.mode == "distance":
                    d = math.dist(a.position_m, b.position_m)
                    mcs = best.get((b.name, a.name), -1)
                    if mcs == -1:
                        mcs = best[a.name, b.name] = budget.best_mcs(d, nss, width)
                    if mcs is None:
                        if a.name < b.name:  # report a pair once
                            out_of_range.append(
                                f"{a.name} -> {b.name}: out of range: {d:.1f} m gives "
                                f"{budget.rx_power_dbm(d):.1f} dBm, below the MCS 0 "
                                "sensitivity"
                            )
                        continue
                    where = f"link {a.name} -> {b.name}, {d:.1f} m apart"
                else:
                    mcs, where = links.mcs, "links.mcs"
                i = override.get((a.name, b.name))
                if i is not None:
                    mcs = links.overrides[i].mcs
                    where = f"links.overrides[{i}], {a.name} -> {b.name}"
                if slowest is None or mcs < slowest[0]:
                    slowest = (mcs, where)
        for text in out_of_range[:5]:
            pair, msg = text.split(": ", 1)
            problems.append((
                ("stations",), pair,
                f"{msg}; move the stations closer or lower links.pathloss.exponent",
            ))  # fmt: skip
        if len(out_of_range) > 5:
            more = [t.split(": ", 1)[0] for t in out_of_range[5:]]
            problems.append((
                ("stations",), more,  # a list: rendered without a value
                f"{len(more)} more pairs out of range: {', '.join(more[:10])}"
                + (", ..." if len(more) > 10 else ""),
            ))  # fmt: skip
        if slowest is not None:
            mcs, where = slowest
            mode = VhtMode(mcs, nss, width, phy.guard_interval)
            mpdu = self.packet_bytes + MAC_OVERHEAD_BYTES
            ppdu_ns = vht_ppdu_duration_ns(mpdu + AMPDU_DELIMITER_BYTES, mode)
            if ppdu_ns > MAX_PPDU_NS:
                fits = vht_max_psdu_bytes(MAX_PPDU_NS, mode) - AMPDU_DELIMITER_BYTES
                problems.append((
                    ("packet_bytes",), self.packet_bytes,
                    f"a full packet (a {mpdu}-byte MPDU) lasts {ppdu_ns / 1e6:.3f} ms at MCS "
                    f"{mcs} ({where}; {nss} spatial stream(s), {width} MHz, "
                    f"{phy.guard_interval.value} GI), longer than aPPDUMaxTime "
                    f"({MAX_PPDU_NS / 1e6:.3f} ms); allowed at this rate: packet_bytes <= "
                    f"{fits - MAC_OVERHEAD_BYTES}, or a faster MCS",
                ))  # fmt: skip
        return problems

    @property
    def workers(self) -> list[str]:
        """The workload's workers (default: every station but the leader)."""
        if self.workload is None:
            return []
        if self.workload.workers is not None:
            return list(self.workload.workers)
        return [s.name for s in self.stations if s.name != self.workload.leader]
