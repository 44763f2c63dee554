"""MAC timing: EDCA parameters, frame sizes, and the airtime of every frame exchange.

The simulator and the Bianchi reference model (``coorp.analysis.bianchi``) both take their
durations from here, so a comparison between them tests the *contention* model alone.

Exchange model (what occupies the medium, from the first bit until idle starts):

* success, basic access: ``DATA + SIFS + ACK|BlockAck``
* success, RTS/CTS: ``RTS + SIFS + CTS + SIFS + DATA + SIFS + ACK|BlockAck``
* failure (collision or lost response): the longest colliding transmission plus
  ``SIFS + response``: every station defers as if it had waited for the missing response
  (the transmitters' response timeout; EIFS for the others, simplified to the same value
  so that all stations keep common slot boundaries).
* BlockAckReq exchange (ns-3 retry policy): ``BAR + SIFS + BlockAck``.

After the medium goes idle, an EDCAF may act at slot boundaries ``idle + AIFS + k·slot``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from coorp.phy import (
    ACK_BYTES,
    AMPDU_DELIMITER_BYTES,
    BAR_BYTES,
    BLOCK_ACK_BYTES,
    CTS_BYTES,
    HE_BLOCK_ACK_256_BYTES,
    MAC_OVERHEAD_BYTES,
    RTS_BYTES,
    SIFS_NS,
    SLOT_NS,
    HeMode,
    PhyMode,
    he_max_psdu_bytes,
    he_ppdu_duration_ns,
    legacy_duration_ns,
    ppdu_quantum_ns,
    vht_max_psdu_bytes,
    vht_ppdu_duration_ns,
)
from coorp.scenario import EDCA_DEFAULTS, AccessCategory, MacConfig, PhyConfig

__all__ = [
    "AMPDU_DELIMITER_BYTES",
    "MAC_OVERHEAD_BYTES",
    "RATE_CODE_STREAMS",
    "STANDARD_EDCA",
    "EdcaParams",
    "ExchangeTiming",
    "aifs_ns",
    "edca_params",
    "mpdu_bytes",
    "psdu_bytes",
    "rate_code",
    "rate_code_mcs",
    "rate_code_streams",
]


@dataclass(frozen=True, slots=True)
class EdcaParams:
    """One access category's EDCA parameters."""

    aifsn: int
    cw_min: int
    cw_max: int
    txop_limit_ns: int
    aggregation: bool


#: 802.11-2016 Table 9-137 defaults for OFDM PHYs (aCWmin = 15, aCWmax = 1023), from
#: ``coorp.scenario.EDCA_DEFAULTS``. Aggregation is off for VO, as in common drivers.
STANDARD_EDCA: Final = {
    ac: EdcaParams(d.aifsn, d.cw_min, d.cw_max, d.txop_limit_us * 1000, d.aggregation)
    for ac, d in EDCA_DEFAULTS.items()
}


def edca_params(mac: MacConfig) -> dict[AccessCategory, EdcaParams]:
    """The standard's EDCA parameters with the scenario's overrides applied.

    A loaded ``MacConfig`` has ``cw_max >= cw_min`` everywhere; one built without
    validation (``model_construct``, ``model_copy(update=...)``) may not: ValueError.
    """
    out = {}
    for ac, std in STANDARD_EDCA.items():
        o = mac.edca.get(ac)
        if o is None:
            out[ac] = std
            continue
        out[ac] = EdcaParams(
            aifsn=std.aifsn if o.aifsn is None else o.aifsn,
            cw_min=std.cw_min if o.cw_min is None else o.cw_min,
            cw_max=std.cw_max if o.cw_max is None else o.cw_max,
            txop_limit_ns=std.txop_limit_ns if o.txop_limit_us is None else o.txop_limit_us * 1000,
            aggregation=std.aggregation if o.aggregation is None else o.aggregation,
        )
        if out[ac].cw_max < out[ac].cw_min:
            raise ValueError(
                f"mac.edca.{ac.value}: cw_max {out[ac].cw_max} < cw_min {out[ac].cw_min}"
            )
    return out


#: A link's *rate code* (what ``LinkTable.mcs_table`` holds and ``ExchangeTiming`` takes
#: wherever it says ``mcs``): the MCS alone (0-9) when the link uses the PHY's
#: ``spatial_streams``, else ``nss · RATE_CODE_STREAMS + mcs`` for a link with its own
#: number of streams (a ``links.overrides`` entry with ``spatial_streams``). Scenarios
#: without per-link streams therefore carry plain MCS values, as before.
RATE_CODE_STREAMS: Final = 16


def rate_code(mcs: int, nss: int = 0) -> int:
    """The rate code of ``mcs`` at ``nss`` spatial streams (0: the PHY's)."""
    return mcs if nss == 0 else nss * RATE_CODE_STREAMS + mcs


def rate_code_mcs(code: int) -> int:
    """The MCS of a rate code."""
    return code % RATE_CODE_STREAMS


def rate_code_streams(code: int, default: int) -> int:
    """The spatial streams of a rate code (``default``, the PHY's, for a plain MCS)."""
    nss = code // RATE_CODE_STREAMS
    return nss if nss else default


def aifs_ns(aifsn: int) -> int:
    return SIFS_NS + aifsn * SLOT_NS


def mpdu_bytes(ip_bytes: int) -> int:
    return ip_bytes + MAC_OVERHEAD_BYTES


def psdu_bytes(mpdu_sizes: list[int]) -> int:
    """Length of the A-MPDU carrying these MPDUs: delimiters, and padding to 4 bytes
    for every subframe but the last."""
    total = 0
    for m in mpdu_sizes:
        total = (total + 3) & ~3
        total += AMPDU_DELIMITER_BYTES + m
    return total


class ExchangeTiming:
    """Durations of frame exchanges for one PHY configuration (all in ns).

    Every ``mcs`` argument is a link's rate code (:func:`rate_code`): a plain MCS uses
    the PHY's spatial streams. Data PPDUs are VHT or HE SU PPDUs as ``phy.standard``
    says; control frames are non-HT either way. ``ba_window``: the Block Ack window
    (``mac.max_ampdu_mpdus``); above 64 (802.11ax's 256-MPDU agreements) every BlockAck
    carries a 256-bit bitmap.
    """

    def __init__(self, phy: PhyConfig, *, ba_window: int = 64) -> None:
        rate = phy.basic_rate_mbps
        self.phy = phy
        self.rts_ns = legacy_duration_ns(RTS_BYTES, rate)
        self.cts_ns = legacy_duration_ns(CTS_BYTES, rate)
        self.ack_ns = legacy_duration_ns(ACK_BYTES, rate)
        ba_bytes = BLOCK_ACK_BYTES if ba_window <= 64 else HE_BLOCK_ACK_256_BYTES
        self.block_ack_ns = legacy_duration_ns(ba_bytes, rate)
        self.bar_ns = legacy_duration_ns(BAR_BYTES, rate)
        self._modes: dict[int, PhyMode] = {}
        self._max_psdu: dict[tuple[int, int], int] = {}
        #: Every data PPDU lasts a multiple of this (4 µs VHT, 0.4 µs HE).
        self.ppdu_quantum_ns = ppdu_quantum_ns(phy.standard)

    def mode(self, mcs: int) -> PhyMode:
        """The transmit vector of a link's rate code (a plain MCS: the PHY's streams)."""
        m = self._modes.get(mcs)
        if m is None:
            p = self.phy
            m = p.mode(rate_code_mcs(mcs), rate_code_streams(mcs, p.spatial_streams))
            self._modes[mcs] = m
        return m

    def data_ns(self, psdu: int, mcs: int) -> int:
        m = self.mode(mcs)
        if isinstance(m, HeMode):
            return he_ppdu_duration_ns(psdu, m)
        return vht_ppdu_duration_ns(psdu, m)

    def response_ns(self, block_ack: bool) -> int:
        return self.block_ack_ns if block_ack else self.ack_ns

    def success_ns(self, data_ns: int, *, block_ack: bool, rts: bool) -> int:
        d = data_ns + SIFS_NS + self.response_ns(block_ack)
        if rts:
            d += self.rts_ns + SIFS_NS + self.cts_ns + SIFS_NS
        return d

    def failure_ns(self, data_ns: int, *, block_ack: bool, rts: bool) -> int:
        """Busy time of a failed attempt, as seen by everyone (see module docstring)."""
        if rts:
            return self.rts_ns + SIFS_NS + self.cts_ns
        return data_ns + SIFS_NS + self.response_ns(block_ack)

    def max_psdu_bytes(self, mcs: int, max_data_ns: int) -> int:
        """Largest PSDU whose PPDU lasts at most ``max_data_ns`` (inverse of ``data_ns``)."""
        key = (mcs, max_data_ns)
        cached = self._max_psdu.get(key)
        if cached is not None:
            return cached
        m = self.mode(mcs)
        if isinstance(m, HeMode):
            out = he_max_psdu_bytes(max_data_ns, m)
        else:
            out = vht_max_psdu_bytes(max_data_ns, m)
        self._max_psdu[key] = out
        return out

    def bar_exchange_ns(self) -> int:
        return self.bar_ns + SIFS_NS + self.block_ack_ns
