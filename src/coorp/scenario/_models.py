"""Pydantic models of a scenario file: plain data, validated, units in field names.

Every model forbids unknown keys. Cross-field rules (MCS valid for the width and spatial
streams, flows naming existing stations, CWmax >= CWmin after the standard's defaults,
every link in range and able to carry a full packet in one PPDU, no flow named like a
TCP-ack flow) live in validators here so that a scenario that loads is a scenario the
simulator can run.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Annotated, Final, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from coorp.phy import (
    AMPDU_DELIMITER_BYTES,
    HE_MAX_MCS,
    MAC_OVERHEAD_BYTES,
    MAX_PPDU_NS,
    LinkBudget,
    PhyMode,
    PhyStandard,
    VhtMode,
    is_valid_mcs,
    max_psdu_bytes,
    ppdu_duration_ns,
    valid_mcs,
)
from coorp.scenario._radio import (
    EDCA_DEFAULTS,
    AccessCategory,
    AmpduGrouping,
    EdcaDefaults,
    EdcaOverride,
    HwQueueConfig,
    HwQueueMode,
    MacConfig,
    PhyConfig,
    RetryPolicy,
    _Model,
    _Problem,
    _raise_at,
)
from coorp.scenario._tcp import TcpConfig
from coorp.scenario._timing import timing_problems
from coorp.scenario._workload import PolicyOptions, WorkloadConfig

__all__ = [
    "EDCA_DEFAULTS",
    "LINK_TABLE_BYTES_PER_PAIR",
    "MAX_STATIONS",
    "AccessCategory",
    "AmpduGrouping",
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


class StationConfig(_Model):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    position_m: tuple[float, float] = (0.0, 0.0)


class LinkOverride(_Model):
    src: str
    dst: str
    mcs: int = Field(ge=0, le=HE_MAX_MCS, description="0-9 (VHT) or 0-11 (HE)")
    spatial_streams: int | None = Field(
        None, ge=1, le=4, description="spatial streams of this link (default: phy.spatial_streams)"
    )


class PathLossConfig(_Model):
    tx_power_dbm: float = Field(20.0, ge=-10, le=30)
    reference_loss_db: float = Field(46.7, ge=0)
    exponent: float = Field(3.0, ge=1.5, le=6.0)
    margin_db: float = Field(0.0, ge=0)


class LinkConfig(_Model):
    mode: Literal["fixed", "distance"] = "fixed"
    mcs: int = Field(
        7, ge=0, le=HE_MAX_MCS, description="MCS of every link in fixed mode: 0-9 (VHT), 0-11 (HE)"
    )
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
    coordinated: bool = Field(
        False,
        description="team bulk data: started through the policy, under its permits and "
        "gate (src must be a team robot); false: traffic outside the team, never gated",
    )


Flow = Annotated[DatagramFlow | BulkFlow, Field(discriminator="kind")]


#: What the simulator's per-link tables cost per ordered pair of stations at most: the
#: MCS (a pointer to a shared small int) and the received power (a float), measured with
#: tracemalloc at 28 bytes in the plain Python simulator (one float shared by both
#: directions) and 40.4 in the compiled one (mypyc stores each direction's float)
#: (``coorp.sim.links.LinkTable``; tests/scenario/test_scenario_scale.py checks it).
LINK_TABLE_BYTES_PER_PAIR: Final = 41
#: IPv4 (20) + TCP (20) + the timestamps option (12): the headers of a TCP segment.
TCP_IP_HEADER_BYTES: Final = 52
#: The most stations a scenario may have: n² ordered pairs at 41 bytes each stay within
#: 512 MiB (3584 stations: 527 MB of link tables). Larger teams are refused when loading.
MAX_STATIONS: Final = 3584


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
    tcp: TcpConfig = Field(default_factory=TcpConfig)

    @field_validator("stations", mode="before")
    @classmethod
    def _not_too_many(cls, value: object) -> object:
        # Checked before each station is validated: a huge list is refused at once.
        if isinstance(value, list | tuple) and len(value) > MAX_STATIONS:
            table_gb = len(value) ** 2 * LINK_TABLE_BYTES_PER_PAIR / 1e9
            raise ValueError(
                f"{len(value)} stations is more than the simulator can hold: at most "
                f"{MAX_STATIONS} (its per-link tables cost {LINK_TABLE_BYTES_PER_PAIR} bytes "
                f"per ordered pair of stations, {table_gb:.1f} GB for {len(value)}; "
                f"{MAX_STATIONS} stations take "
                f"{MAX_STATIONS**2 * LINK_TABLE_BYTES_PER_PAIR / 1e6:.0f} MB)"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        names = [s.name for s in self.stations]
        dupes = sorted(n for n, c in Counter(names).items() if c > 1)
        if dupes:
            raise ValueError(f"station names must be unique; repeated: {dupes}")
        nss, width = self.phy.spatial_streams, self.phy.width_mhz
        std = self.phy.standard
        allowed = valid_mcs(std, nss, width)
        # VHT messages stay as they were; an HE channel says which standard it checked.
        in_std = "" if std is PhyStandard.AC else " in 802.11ax (HE)"
        if self.links.mode == "fixed" and not is_valid_mcs(std, self.links.mcs, nss, width):
            raise ValueError(
                f"links.mcs = {self.links.mcs} does not exist for {nss} spatial stream(s) at "
                f"{width} MHz{in_std}; allowed: {allowed}"
            )
        known = set(names)
        for i, o in enumerate(self.links.overrides):
            for end in (o.src, o.dst):
                if end not in known:
                    raise ValueError(f"links.overrides[{i}] names unknown station {end!r}")
            if o.spatial_streams is not None:
                if not is_valid_mcs(std, o.mcs, o.spatial_streams, width):
                    raise ValueError(
                        f"links.overrides[{i}].spatial_streams = {o.spatial_streams}: MCS "
                        f"{o.mcs} does not exist for {o.spatial_streams} spatial stream(s) "
                        f"at {width} MHz{in_std}; allowed MCS at "
                        f"{o.spatial_streams} stream(s): {valid_mcs(std, o.spatial_streams, width)}"
                    )
            elif not is_valid_mcs(std, o.mcs, nss, width):
                raise ValueError(
                    f"links.overrides[{i}].mcs = {o.mcs} does not exist for {nss} spatial "
                    f"stream(s) at {width} MHz{in_std}; allowed: {allowed}"
                )
        flow_names = [f.name for f in self.flows]
        dupes = sorted(n for n, c in Counter(flow_names).items() if c > 1)
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
        _raise_at(
            Scenario,
            self._standard_problems()
            + self._ack_name_clashes()
            + self._tcp_problems()
            + self._link_problems(),
        )
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
        _raise_at(Scenario, timing_problems(self, self._problems_with_overrides))
        return self

    def _problems_with_overrides(self, extra: list[dict[str, object]]) -> list[str]:
        """What would be wrong with the links if ``extra`` ``[[links.overrides]]`` entries
        were added (a link change must give a rate the file could have set)."""
        std, nss, width = self.phy.standard, self.phy.spatial_streams, self.phy.width_mhz
        out = []
        added = []
        for o in extra:
            ov = LinkOverride.model_validate(o)
            streams = nss if ov.spatial_streams is None else ov.spatial_streams
            if not is_valid_mcs(std, ov.mcs, streams, width):
                out.append(
                    f"MCS {ov.mcs} does not exist for {streams} spatial stream(s) at {width} "
                    f"MHz; allowed: {valid_mcs(std, streams, width)}"
                )
            added.append(ov)
        if out:
            return out
        links = self.links.model_copy(update={"overrides": [*self.links.overrides, *added]})
        trial = self.model_copy(update={"links": links})
        return [msg for loc, _, msg in trial._link_problems() if loc == ("packet_bytes",)]

    def _standard_problems(self) -> list[_Problem]:
        """What only 802.11ax allows: Block Ack windows of more than 64 MPDUs."""
        k = self.mac.max_ampdu_mpdus
        if k > 64 and self.phy.standard is not PhyStandard.AX:
            return [(
                ("mac", "max_ampdu_mpdus"), k,
                "more than 64 MPDUs per A-MPDU needs 802.11ax's 256-MPDU Block Ack "
                '(phy.standard = "ax"); allowed on 802.11ac: <= 64',
            )]  # fmt: skip
        return []

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

    def _tcp_problems(self) -> list[_Problem]:
        """A TCP receive window holds at least one full segment (a packet of
        ``packet_bytes`` carries ``packet_bytes - 52`` bytes of TCP payload)."""
        mss = self.packet_bytes - TCP_IP_HEADER_BYTES
        if self.tcp.receive_window_bytes < mss:
            return [(
                ("tcp", "receive_window_bytes"), self.tcp.receive_window_bytes,
                f"is less than one segment ({mss} bytes of TCP payload in a packet of "
                f"packet_bytes = {self.packet_bytes}); allowed: >= {mss}",
            )]  # fmt: skip
        return []

    def _link_problems(self) -> list[_Problem]:
        """Every link can carry every packet: in distance mode each pair of stations is
        within range of MCS 0, and on every link (its MCS from links.mcs, the distance
        or an override; its spatial streams from phy or the override) a full packet fits
        one PPDU (aPPDUMaxTime). Workloads may send between any two stations, so every
        pair counts, not only the flows'."""
        phy, links = self.phy, self.links
        nss, width = phy.spatial_streams, phy.width_mhz
        pl = links.pathloss
        budget = LinkBudget(pl.tx_power_dbm, pl.reference_loss_db, pl.exponent, pl.margin_db)
        override = {(o.src, o.dst): i for i, o in enumerate(links.overrides)}  # last wins
        problems: list[_Problem] = []
        stations = self.stations
        n = len(stations)
        # The first link (position of the ordered pair in row-major order) of each rate:
        # ``plain[mcs]`` for links at phy.spatial_streams without an override (where it
        # comes from is rebuilt from the position), ``overridden[(mcs, streams)]`` for
        # overrides. The slowest is chosen among these at the end.
        plain: dict[int, int] = {}
        overridden: dict[tuple[int, int], tuple[int, str]] = {}
        out_of_range: list[tuple[int, str]] = []  # (position, text)

        def note_override(k: int, pos: int, where: str) -> None:
            o = links.overrides[k]
            key = (o.mcs, nss if o.spatial_streams is None else o.spatial_streams)
            first = overridden.get(key)
            if first is None or pos < first[0]:
                overridden[key] = (pos, where)

        if links.mode == "distance":
            # Path loss is symmetric: each pair is computed once, n (n - 1) / 2 in all.
            for i, a in enumerate(stations):
                for j in range(i + 1, n):
                    b = stations[j]
                    d = math.dist(a.position_m, b.position_m)
                    rx = budget.rx_power_dbm(d)
                    best = budget.best_mcs_at(rx, nss, width, phy.standard)
                    if best is None:
                        lo, hi = (a, b) if a.name < b.name else (b, a)  # report a pair once
                        pos = i * n + j if lo is a else j * n + i
                        out_of_range.append((pos, (
                            f"{lo.name} -> {hi.name}: out of range: {d:.1f} m gives "
                            f"{rx:.1f} dBm, below the MCS 0 sensitivity"
                        )))  # fmt: skip
                        continue
                    for src, dst, pos in ((a, b, i * n + j), (b, a, j * n + i)):
                        k = override.get((src.name, dst.name)) if override else None
                        if k is not None:
                            note_override(k, pos, f"links.overrides[{k}], {src.name} -> {dst.name}")
                        elif pos < plain.get(best, pos + 1):
                            plain[best] = pos
        else:
            # Fixed mode: every link has links.mcs unless overridden; no need to visit
            # every pair (a team of n stations has n (n - 1) of them).
            index = {st.name: i for i, st in enumerate(stations)}
            overridden_pairs = {pair for pair in override if pair[0] != pair[1]}
            for (src_name, dst_name), k in override.items():
                if src_name != dst_name:
                    pos = index[src_name] * n + index[dst_name]
                    note_override(k, pos, f"links.overrides[{k}], {src_name} -> {dst_name}")
            if len(overridden_pairs) < n * (n - 1):
                plain[links.mcs] = next(
                    i * n + j
                    for i in range(n)
                    for j in range(n)
                    if i != j and (stations[i].name, stations[j].name) not in overridden_pairs
                )
        out_of_range.sort()
        out_of_range_texts = [text for _, text in out_of_range]
        for text in out_of_range_texts[:5]:
            pair, msg = text.split(": ", 1)
            problems.append((
                ("stations",), pair,
                f"{msg}; move the stations closer or lower links.pathloss.exponent",
            ))  # fmt: skip
        if len(out_of_range_texts) > 5:
            more = [t.split(": ", 1)[0] for t in out_of_range_texts[5:]]
            problems.append((
                ("stations",), more,  # a list: rendered without a value
                f"{len(more)} more pairs out of range: {', '.join(more[:10])}"
                + (", ..." if len(more) > 10 else ""),
            ))  # fmt: skip
        mpdu = self.packet_bytes + MAC_OVERHEAD_BYTES
        # The slowest link: the longest PPDU for a full packet, then the lowest MCS, then
        # the first in station order (with one number of streams everywhere this is the
        # first link with the lowest MCS).
        slowest: tuple[int, int, int, int, PhyMode] | None = None
        for mcs, link_nss, pos in [
            *((m, nss, p) for m, p in plain.items()),
            *((m, s, p) for (m, s), (p, _) in overridden.items()),
        ]:
            mode = phy.mode(mcs, link_nss)
            ppdu_ns = ppdu_duration_ns(mpdu + AMPDU_DELIMITER_BYTES, mode)
            cand = (-ppdu_ns, mcs, pos, link_nss, mode)
            if slowest is None or cand[:3] < slowest[:3]:
                slowest = cand
        if slowest is not None and -slowest[0] > MAX_PPDU_NS:
            neg_ppdu, mcs, pos, link_nss, mode = slowest
            where = next((w for p, w in overridden.values() if p == pos), None)
            if where is None and links.mode == "distance":
                a, b = stations[pos // n], stations[pos % n]
                d = math.dist(a.position_m, b.position_m)
                where = f"link {a.name} -> {b.name}, {d:.1f} m apart"
            elif where is None:
                where = "links.mcs"
            fits = max_psdu_bytes(MAX_PPDU_NS, mode) - AMPDU_DELIMITER_BYTES
            gi = (
                f"{phy.guard_interval.value} GI"
                if isinstance(mode, VhtMode)
                else f"{phy.he_guard_interval_ns} ns GI, HE"
            )
            problems.append((
                ("packet_bytes",), self.packet_bytes,
                f"a full packet (a {mpdu}-byte MPDU) lasts {-neg_ppdu / 1e6:.3f} ms at MCS "
                f"{mcs} ({where}; {link_nss} spatial stream(s), {width} MHz, "
                f"{gi}), longer than aPPDUMaxTime "
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
