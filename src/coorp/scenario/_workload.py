"""Scenario sections for the coordinated-robotic-learning workload and policy options.

Plain data: the ``[workload]`` section says what the robots do (the MPC loop and DRLC
epochs, paper §III-A and §VI); ``[policy]`` holds the tunables of the shipped policies.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from coorp.scenario._radio import AccessCategory
from coorp.scenario._timing import JitterKind, LinkChange, LsFlowConfig

__all__ = ["CoorpOptions", "DrlcConfig", "JitterKind", "LsPhase", "LsTransport", "MpcConfig",
           "OfdmaOptions", "PolicyOptions", "RtwtOptions", "SchedWifiOptions", "SyncMode",
           "WorkloadConfig"]  # fmt: skip


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SyncMode(StrEnum):
    """Parameter synchronisation of data-parallel training."""

    BSP = "bsp"
    """Bulk-synchronous: an epoch ends when every worker has the new model."""
    SSP = "ssp"
    """Stale-synchronous, staleness 1: the next epoch's data may flow while the model of
    the current epoch is still being disseminated."""
    ASP = "asp"
    """Asynchronous: every worker cycles on its own; the leader answers each update."""


class LsTransport(StrEnum):
    """What carries the MPC loop's perceptions and controls."""

    RELIABLE = "reliable"
    """ROS 2 / DDS with RELIABLE QoS, as in the paper's testbed: a fragment the MAC drops
    after its retry limit is repaired (sent again) ``repair_us`` after the drop."""
    BEST_EFFORT = "best-effort"
    """Plain UDP: a dropped fragment loses the message; its loop waits until
    ``loop_timeout_us`` and is abandoned."""


class LsPhase(StrEnum):
    """When in the period each worker samples and sends its perception."""

    ALIGNED = "aligned"
    """Every worker samples at the loop tick (one shared clock, as the paper's testbed
    with PTP-synchronised hosts and one trigger)."""
    RANDOM = "random"
    """Each worker samples at its own fixed offset in [0, period), drawn once per run:
    independent camera clocks. Workers free-run; the leader answers each loop when
    its last perception is in (see docs/scenarios.md)."""


class MpcConfig(_Model):
    """Multi-view perception-control loop: perceptions to the leader, controls back."""

    enabled: bool = True
    period_us: float = Field(33_333.3, gt=0)
    jitter_us: float = Field(500.0, ge=0, description="std. dev. of each worker's send jitter")
    perception_bytes: int = Field(12_288, gt=0)
    control_bytes: int = Field(1_024, gt=0)
    inference_us: float = Field(5_000.0, ge=0)
    deadline_us: float = Field(33_000.0, gt=0, description="reaction-time bound")
    loop_timeout_us: float = Field(
        1_000_000.0, gt=0, description="a loop not finished by then is abandoned (a miss)"
    )
    start_us: float = Field(100_000.0, ge=0)
    ls_transport: LsTransport = Field(
        LsTransport.RELIABLE, description="how perceptions and controls survive MAC drops"
    )
    repair_us: float = Field(
        10_000.0,
        ge=0,
        description="reliable transport: a dropped fragment is sent again this long after the "
        "drop (Fast DDS defaults: 5 ms heartbeat response + 5 ms NACK response)",
    )
    phase: LsPhase = Field(
        LsPhase.ALIGNED, description="when in the period each worker samples its perception"
    )
    jitter: JitterKind = Field(JitterKind.GAUSSIAN, description="send-delay distribution")
    tail_probability: float = Field(
        0.01, ge=0, le=1, description="pareto-tail: share of sends that get a tail delay"
    )
    tail_scale_us: float = Field(1_000.0, gt=0, description="pareto-tail: smallest tail delay")
    tail_shape: float = Field(1.5, gt=0, description="pareto-tail: Pareto shape (alpha)")
    tail_max_us: float = Field(20_000.0, gt=0, description="pareto-tail: largest tail delay")
    category: AccessCategory = Field(
        AccessCategory.VO,
        description="perceptions' and controls' access category (VO: the paper's; VI is "
        "aggregated, VO is not, by default: [mac.edca])",
    )

    @model_validator(mode="after")
    def _tail_bounds(self) -> MpcConfig:
        if self.tail_max_us < self.tail_scale_us:
            raise ValueError(
                f"tail_max_us = {self.tail_max_us} is below tail_scale_us = "
                f"{self.tail_scale_us}; allowed: tail_max_us >= tail_scale_us"
            )
        return self


class DrlcConfig(_Model):
    """Distributed RL: data dissemination, training, parameter synchronisation."""

    enabled: bool = True
    sync: SyncMode = SyncMode.BSP
    batch_items: int = Field(64, gt=0, description="data items (one per MPC loop) per epoch")
    item_bytes: int | None = Field(
        None, gt=0, description="one data item; default: all perceptions + controls of a loop"
    )
    train_us: float = Field(500_000.0, ge=0, description="compute time per worker per epoch")
    param_bytes: int = Field(40_000_000, gt=0, description="parameter update / model size")


class WorkloadConfig(_Model):
    leader: str
    workers: list[str] | None = Field(None, description="default: every station but the leader")
    mpc: MpcConfig = Field(default_factory=MpcConfig)
    drlc: DrlcConfig = Field(default_factory=DrlcConfig)
    ls_flows: list[LsFlowConfig] = Field(
        default_factory=list,
        description="`[[workload.ls_flows]]`: LS flows beside the MPC loop, names unique",
    )
    link_changes: list[LinkChange] = Field(
        default_factory=list, description="`[[workload.link_changes]]`: link rates that change"
    )


class CoorpOptions(_Model):
    """COORP's tunables (paper §IV); defaults follow the paper."""

    limit: int = Field(1, ge=1, description="concurrent bulk senders (LIMIT)")
    timeslice_s: float = Field(5.0, gt=0)
    margin_us: float = Field(2_000.0, ge=0, description="protection-window extension")
    confidence: float = Field(0.95, gt=0, lt=1)
    ctt_percentile: float = Field(95.0, gt=0, le=100)
    permit_message_bytes: int = Field(64, gt=0, description="request/grant/release size")
    protect_leader: bool = Field(
        True,
        description="the leader's gate also protects its control sends (false: the paper, "
        "which left the leader's control dissemination unprotected)",
    )
    ring_budget_us: float | None = Field(
        None,
        gt=0,
        description="bulk airtime allowed in a robot's NIC ring (coorp's ring budget, "
        "RingBudget); unset: the policy's own, 1500 for coorp and coorp-local; policies "
        "without a ring budget (coorp-paper, coorp-global, the oracle) ignore it",
    )


class SchedWifiOptions(_Model):
    """SchedWiFi's tunables (paper Eq. 4)."""

    retries: int = Field(7, ge=0)
    tx_ack_us: float = Field(30.0, ge=0)
    clock_skew_us: float = Field(50.0, ge=0, description="pads every window at both ends")
    ctt_percentile: float = Field(95.0, gt=0, le=100)


class OfdmaOptions(_Model):
    """The ``ofdma`` policy's AP scheduler (trigger-based UL OFDMA, 802.11ax 26.5.2);
    defaults follow ns-3's RrMultiUserScheduler where it has one."""

    access_ac: Literal["BK", "BE", "VI", "VO"] = Field(
        "BE", description="EDCA parameters the AP contends with to send trigger frames"
    )
    max_users: int = Field(4, ge=1, le=74, description="stations per trigger (equal RUs)")
    bsrp: bool = Field(
        True, description="poll buffer status (BSRP trigger) before each Basic trigger"
    )
    access_interval_us: float = Field(
        1_000.0,
        ge=0,
        description="ask for the medium at least this often (0: only with data known)",
    )
    max_tb_us: float = Field(5_484.0, gt=0, le=5_484.0, description="longest TB PPDU solicited")
    mu_edca_timer_us: float | None = Field(
        2_088_960.0,
        gt=0,
        le=2_088_960.0,
        description="MU EDCA timer (EDCA disabled after a TB PPDU); none: stations keep EDCA",
    )
    bsr_lifetime_us: float = Field(20_000.0, gt=0, description="how long a buffer report counts")
    ul_psdu_bytes: int = Field(500, gt=0, description="assumed queue of a station not yet heard")
    trigger_rate_mbps: Literal[6, 9, 12, 18, 24, 36, 48, 54] | None = Field(
        None, description="non-HT rate of trigger frames; none: phy.basic_rate_mbps"
    )


class RtwtOptions(_Model):
    """The ``rtwt`` policies' restricted-TWT schedule (802.11be 35.8)."""

    sp_retries: int = Field(
        1,
        ge=0,
        le=7,
        description="service periods hold each LS message's airtime this many times more",
    )
    wake_duration_unit_us: Literal[256, 1024] = Field(
        256, description="SP durations are whole units of this (TWT Wake Duration Unit)"
    )
    controls: bool = Field(True, description="a service period for the leader's controls too")


class PolicyOptions(_Model):
    coorp: CoorpOptions = Field(default_factory=CoorpOptions)
    schedwifi: SchedWifiOptions = Field(default_factory=SchedWifiOptions)
    ofdma: OfdmaOptions = Field(default_factory=OfdmaOptions)
    rtwt: RtwtOptions = Field(default_factory=RtwtOptions)
