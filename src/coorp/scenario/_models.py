"""Pydantic models of a scenario file: plain data, validated, units in field names.

Every model forbids unknown keys. Cross-field rules (MCS valid for the width and spatial
streams, flows naming existing stations) live in validators here so that a scenario
that loads is a scenario the simulator can run.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from coorp.phy import LEGACY_RATES_MBPS, GuardInterval, is_valid_vht_mcs, valid_vht_mcs
from coorp.scenario._workload import PolicyOptions, WorkloadConfig

__all__ = [
    "AccessCategory",
    "BulkFlow",
    "DatagramFlow",
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
        _raise_at(Scenario, self._ack_name_clashes())
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

    @property
    def workers(self) -> list[str]:
        """The workload's workers (default: every station but the leader)."""
        if self.workload is None:
            return []
        if self.workload.workers is not None:
            return list(self.workload.workers)
        return [s.name for s in self.stations if s.name != self.workload.leader]
