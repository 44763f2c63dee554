"""The TCP senders of a scenario's bulk flows (``[tcp]``): off by default.

With ``sender = "none"`` (the default) a bulk transfer is an endless kernel queue, as the
simulator has always modelled it: the receiver's TCP acks are frames on the air and
nothing more. ``"reno"`` or ``"cubic"`` gives every bulk flow that has TCP acks a TCP
connection (``coorp.sim.tcp``): a congestion window decides what the station may put into
its kernel queue, the acks open it. The parameters default to what Linux does.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from coorp.scenario._radio import _Model

__all__ = ["RtoEstimator", "TcpConfig", "TcpSender"]


class TcpSender(StrEnum):
    """Congestion control of bulk flows' TCP senders (``none``: no TCP sender model)."""

    NONE = "none"
    RENO = "reno"
    CUBIC = "cubic"


class RtoEstimator(StrEnum):
    """How the senders' RTO follows the RTT samples."""

    RFC6298 = "rfc6298"
    LINUX = "linux"


class TcpConfig(_Model):
    """TCP senders for bulk flows with TCP acks (``coorp.sim.tcp``, docs/simulator.md)."""

    sender: TcpSender = Field(
        TcpSender.NONE,
        description="none: bulk is an endless queue (no TCP model); reno or cubic: a TCP "
        "sender with that congestion control (as Linux implements it) on every bulk flow "
        "with tcp_acks",
    )
    initial_window_segments: int = Field(
        10, ge=1, le=1000, description="initial congestion window (RFC 6928; Linux: 10)"
    )
    receive_window_bytes: int = Field(
        3_145_728,
        ge=4096,
        le=1_073_741_824,
        description="the receiver's advertised window, TCP payload bytes (fixed: no "
        "autotuning; Linux's tcp_rmem max of 6 MiB advertises about half of it)",
    )
    delayed_ack_us: float = Field(
        40_000.0,
        gt=0,
        le=500_000,
        description="delayed-ACK timeout for a lone in-order segment (Linux's minimum ATO "
        "40 ms; ns-3's default is 200 ms)",
    )
    quickacks: int = Field(
        0,
        ge=0,
        le=65535,
        description="the receiver acknowledges each of the first segments at once, up to "
        "this many, at a connection's first data and after a gap longer than min_rto_us "
        "(Linux's quickack mode: 16, TCP_MAX_QUICKACKS, capped at the receive window over "
        "2 segments; ns-3 3.44's receiver: 1); 0 (the default, the model's behaviour "
        "before this field): an ACK per two segments from the first",
    )
    gro_segments: int = Field(
        0,
        ge=0,
        le=1000,
        description="the receiver's driver coalesces the in-order segments one exchange "
        "delivers into super-segments of up to this many (Linux's GRO, which mac80211 "
        "drivers with NAPI use: 64 KiB, 45 segments of 1448 bytes) and TCP acks each "
        "super-segment once; 0 (the default, the model's behaviour before this field): "
        "an ACK per two segments (RFC 5681)",
    )
    sack: bool = Field(
        False,
        description="selective acknowledgments (RFC 2018): the receiver reports the "
        "out-of-order blocks, the sender marks lost each segment with three SACKed above "
        "it and resends them all in one recovery (Linux with tcp_sack = 1, tcp_recovery = 0: "
        "no RACK; RFC 6675, ns-3's default); false (the default, the model's behaviour "
        "before this field): NewReno, one hole per round trip",
    )
    loss_probe: bool = Field(
        False,
        description="tail loss probes (Linux's TLP, tcp_early_retrans = 3; needs sack): in "
        "the Open state a silence of 2 SRTT (+ 2 ms) sends one segment past the window, "
        "new or the last one again: a lost tail is resent without the RTO's window of one; "
        "false (the default, the model's behaviour before this field): the RTO alone",
    )
    comp_sack_nr: int = Field(
        0,
        ge=0,
        le=255,
        description="the receiver's SACK compression (Linux's tcp_comp_sack_nr: 44; needs "
        "sack): while it holds out-of-order data it acks the first three segments past "
        "each hole at once, then one ack per this many or per min(1 ms, SRTT/20); 0 (the "
        "default, the model's behaviour before this field): an ack per out-of-order segment",
    )
    rto_estimator: RtoEstimator = Field(
        RtoEstimator.RFC6298,
        description="rfc6298 (the default, the model's behaviour before this field; "
        "ns-3's): RTO = max(SRTT + max(G, 4 RTTVAR), min_rto_us); linux (tcp_rtt_estimator): "
        "RTO = SRTT + the last round trip's largest 4 x mean deviation, at least min_rto_us "
        "(about SRTT + 200 ms)",
    )
    initial_rto_us: float = Field(
        1_000_000.0, gt=0, le=60_000_000, description="RTO before any RTT sample (RFC 6298: 1 s)"
    )
    min_rto_us: float = Field(
        200_000.0, gt=0, le=60_000_000, description="lower bound of the RTO (Linux: 200 ms)"
    )
    max_rto_us: float = Field(
        120_000_000.0, gt=0, le=600_000_000, description="upper bound of the RTO (Linux: 120 s)"
    )
    clock_granularity_us: float = Field(
        1000.0, ge=0, le=1_000_000, description="G in RFC 6298's RTO = SRTT + max(G, 4 RTTVAR)"
    )
    slow_start_after_idle: bool = Field(
        True,
        description="after an idle period longer than the RTO the window restarts (Linux's "
        "tcp_slow_start_after_idle = 1, tcp_cwnd_restart)",
    )
    hystart: bool = Field(True, description="CUBIC's hybrid slow start (Linux's default)")

    @model_validator(mode="after")
    def _rto_order(self) -> TcpConfig:
        if not self.min_rto_us <= self.initial_rto_us <= self.max_rto_us:
            raise ValueError(
                f"need min_rto_us <= initial_rto_us <= max_rto_us; got "
                f"{self.min_rto_us:g} <= {self.initial_rto_us:g} <= {self.max_rto_us:g}"
            )
        if self.comp_sack_nr and not self.sack:
            raise ValueError("comp_sack_nr > 0 needs sack = true (Linux compresses only SACK acks)")
        if self.loss_probe and not self.sack:
            raise ValueError(
                "loss_probe = true needs sack = true (Linux sends tail loss probes only on "
                "SACK connections)"
            )
        return self
