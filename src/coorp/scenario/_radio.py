"""The radio of a scenario: PHY and MAC configuration (models, validated).

PHY: standard (802.11ac VHT or 802.11ax HE), width, spatial streams, guard interval, the
basic rate. MAC: access categories and their EDCA parameters (the standard's defaults,
overridable), retries, RTS/CTS, aggregation, and how the NIC's hardware queue is
organised. :mod:`._models` builds stations, links, flows and the scenario on these.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from coorp.phy import (
    HE_MAX_MCS,
    LEGACY_RATES_MBPS,
    GuardInterval,
    HeMode,
    PhyMode,
    PhyStandard,
    VhtMode,
    he_default_ltf,
    is_valid_he_gi_ltf,
)

__all__ = [
    "EDCA_DEFAULTS",
    "AccessCategory",
    "AmpduGrouping",
    "EdcaDefaults",
    "EdcaOverride",
    "HwQueueConfig",
    "HwQueueMode",
    "MacConfig",
    "PhyConfig",
    "RetryPolicy",
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


class AmpduGrouping(StrEnum):
    """Which queued packets one A-MPDU may carry, once a station has won the medium."""

    CONSECUTIVE = "consecutive"
    """The head packet's receiver and category, consecutive packets of the ring only: a
    packet to another receiver ends the A-MPDU (coorp's MAC before issue 36)."""
    PER_RECEIVER_TID = "per_receiver_tid"
    """The head packet's receiver and TID, from the whole queue, others skipped, as
    ns-3's aggregator and Linux drivers build them. Per-AC rings: the MAC takes that
    receiver's packets from anywhere in the ring (ns-3's WifiMacQueue). A shared ring is
    a FIFO the NIC cannot reorder: there the driver hands packets to it in per-receiver
    bursts (mac80211's per-station/TID queues) and the NIC aggregates consecutive ones."""


class HwQueueMode(StrEnum):
    """How the NIC's hardware queue is organised."""

    PER_AC = "per_ac"
    """One ring per access category (ideal; ns-3's model)."""
    SHARED = "shared"
    """One FIFO ring shared by all categories, as on many commodity USB/fullmac NICs:
    an LS packet waits behind BH packets already handed to the NIC."""


class PhyConfig(_Model):
    standard: PhyStandard = Field(
        PhyStandard.AC,
        description='"ac": 802.11ac (VHT PPDUs); "ax": 802.11ax (HE PPDUs, HE-MCS 0-11)',
    )
    width_mhz: Literal[20, 40, 80, 160] = 80
    spatial_streams: int = Field(2, ge=1, le=4)
    guard_interval: GuardInterval = Field(
        GuardInterval.LONG, description='VHT (standard "ac"): "long" 0.8 µs or "short" 0.4 µs'
    )
    he_guard_interval_ns: Literal[800, 1600, 3200] = Field(
        800, description='HE (standard "ax"): guard interval of data symbols, ns'
    )
    he_ltf: Literal[1, 2, 4] | None = Field(
        None,
        description='HE (standard "ax"): HE-LTF type 1x, 2x or 4x; unset: 2x with 800 and '
        "1600 ns guard intervals, 4x with 3200 ns",
    )
    he_packet_padding_us: Literal[0, 8, 16] = Field(
        0, description='HE (standard "ax"): receivers\' nominal packet padding (packet extension)'
    )
    basic_rate_mbps: int = Field(24, description=f"control-frame rate, one of {LEGACY_RATES_MBPS}")

    @model_validator(mode="after")
    def _consistent(self) -> PhyConfig:
        if self.basic_rate_mbps not in LEGACY_RATES_MBPS:
            raise ValueError(
                f"basic_rate_mbps = {self.basic_rate_mbps} is not an OFDM rate; "
                f"allowed: {list(LEGACY_RATES_MBPS)}"
            )
        problems: list[_Problem] = []
        if self.standard is PhyStandard.AC:
            # The HE keys mean nothing on a VHT channel. A key left at its default is
            # accepted (a scenario dumped and parsed again carries every key).
            for key, default in (("he_guard_interval_ns", 800), ("he_ltf", None),
                                 ("he_packet_padding_us", 0)):  # fmt: skip
                value = getattr(self, key)
                if value != default:
                    problems.append((
                        (key,), value,
                        f'applies to phy.standard = "ax" only; this channel is "ac" (VHT): '
                        f'set phy.standard = "ax", or remove phy.{key}',
                    ))  # fmt: skip
        else:
            if self.guard_interval is not GuardInterval.LONG:
                problems.append((
                    ("guard_interval",), self.guard_interval.value,
                    f'"{self.guard_interval.value}" is a VHT guard interval (0.4 µs); '
                    'with phy.standard = "ax" set phy.he_guard_interval_ns (allowed: 800, '
                    "1600, 3200)",
                ))  # fmt: skip
            if self.he_ltf is not None and not is_valid_he_gi_ltf(
                self.he_guard_interval_ns, self.he_ltf
            ):
                allowed = [f"{ltf}x" for ltf in (1, 2, 4)
                           if is_valid_he_gi_ltf(self.he_guard_interval_ns, ltf)]  # fmt: skip
                problems.append((
                    ("he_ltf",), self.he_ltf,
                    f"{self.he_ltf}x HE-LTF with a {self.he_guard_interval_ns} ns guard "
                    f"interval is not an HE SU PPDU format; allowed with "
                    f"{self.he_guard_interval_ns} ns: {', '.join(allowed)}",
                ))  # fmt: skip
        _raise_at(PhyConfig, problems)
        return self

    @property
    def max_mcs(self) -> int:
        """The highest MCS of the standard: 9 (VHT) or 11 (HE)."""
        return 9 if self.standard is PhyStandard.AC else HE_MAX_MCS

    def mode(self, mcs: int, nss: int | None = None) -> PhyMode:
        """The transmit vector of a link at ``mcs`` (``nss`` streams; default the PHY's):
        a VHT mode, or an HE SU mode with this PHY's guard interval, HE-LTF and padding."""
        streams = self.spatial_streams if nss is None else nss
        if self.standard is PhyStandard.AC:
            return VhtMode(mcs, streams, self.width_mhz, self.guard_interval)
        gi = self.he_guard_interval_ns
        return HeMode(
            mcs, streams, self.width_mhz, gi,
            he_default_ltf(gi) if self.he_ltf is None else self.he_ltf,
            packet_padding_us=self.he_packet_padding_us,
        )  # fmt: skip


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
    max_ampdu_mpdus: int = Field(
        64,
        ge=1,
        le=256,
        description="MPDUs per A-MPDU (the Block Ack window): <= 64, or <= 256 with "
        'phy.standard = "ax"',
    )
    edca: dict[AccessCategory, EdcaOverride] = Field(default_factory=dict)
    ampdu_grouping: AmpduGrouping = Field(
        AmpduGrouping.PER_RECEIVER_TID,
        description='"per_receiver_tid": an A-MPDU per receiver and TID from the queue, '
        'as drivers and ns-3 build them; "consecutive": consecutive ring packets to one '
        "receiver only",
    )

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
    kernel_queue_packets: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="packets a station's kernel queue holds per access category in front "
        "of its ring (TCP segments, LS datagrams and TCP acks together), tail drop: a "
        "dropped segment is a loss to TCP (coorp emulate's --queue-packets); none: no bound",
    )
    kernel_queue_fifo: bool = Field(
        False,
        description="LS datagrams and TCP acks wait behind the TCP segments of their "
        "category already in the station's kernel queue (one FIFO per category, as a pfifo "
        "qdisc and coorp emulate's queue); false: they go ahead of them (fq_codel's "
        "sparse-flow priority)",
    )
