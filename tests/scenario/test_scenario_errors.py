"""Invalid scenario files: every problem is a ScenarioError naming file, field and value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coorp import CoorpError, ScenarioError, UsageError
from coorp.phy import MAX_PPDU_NS, GuardInterval, VhtMode, vht_max_psdu_bytes, vht_ppdu_duration_ns
from coorp.scenario import (
    AccessCategory,
    EdcaOverride,
    LinkConfig,
    MacConfig,
    PhyConfig,
    StationConfig,
    load_scenario,
    parse_scenario,
)
from coorp.sim import Simulation, simulate

GOOD = """\
name = "t"
duration_s = 1.0

[[stations]]
name = "a"
[[stations]]
name = "b"
"""

BULK = """
[[flows]]
kind = "bulk"
name = "f"
src = "a"
dst = "b"
"""


def _load(tmp_path: Path, text: str) -> ScenarioError:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    err = info.value
    text_out = str(err)
    assert text_out.startswith(f"invalid scenario {path}:")
    # Messages are for people: no pydantic boilerplate, no documentation URLs.
    assert "Value error" not in text_out
    assert "errors.pydantic.dev" not in text_out
    assert err.source == str(path)
    return err


def _one_line(err: ScenarioError) -> str:
    assert len(err.problems) == 1, str(err)
    return str(err).splitlines()[1]


def test_good_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "good.toml"
    path.write_text(GOOD + BULK)
    sc = load_scenario(path)
    assert [s.name for s in sc.stations] == ["a", "b"]


def test_scenario_error_is_a_usage_error() -> None:
    assert issubclass(ScenarioError, UsageError)
    assert issubclass(ScenarioError, CoorpError)


# -- unknown keys ---------------------------------------------------------------------------


def test_unknown_top_level_key(tmp_path: Path) -> None:
    err = _load(tmp_path, "durration_s = 3\n" + GOOD)
    line = _one_line(err)
    assert "durration_s = 3" in line
    assert "unknown key" in line
    allowed = line.split("allowed here:")[1]
    for key in ("duration_s", "seed", "phy", "mac", "hw_queue", "stations", "links", "flows"):
        assert key in allowed
    assert err.problems[0].field == "durration_s"
    assert err.problems[0].value == 3


def test_unknown_key_in_a_section(tmp_path: Path) -> None:
    err = _load(tmp_path, GOOD + "\n[phy]\nwidht_mhz = 20\n")
    line = _one_line(err)
    assert "phy.widht_mhz = 20" in line
    assert (
        "allowed here: basic_rate_mbps, guard_interval, he_guard_interval_ns, he_ltf, "
        "he_packet_padding_us, spatial_streams, standard, width_mhz"
    ) in line


def test_unknown_key_in_a_flow_lists_that_flow_kinds_keys(tmp_path: Path) -> None:
    err = _load(tmp_path, GOOD + BULK + "size_bytes = 100\n")
    line = _one_line(err)
    assert "flows[0].size_bytes = 100" in line
    allowed = line.split("allowed here:")[1]
    assert "total_bytes" in allowed and "tcp_acks" in allowed
    assert "period_us" not in allowed  # a datagram key, not a bulk one


# -- bad values -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "field", "value"),
    [
        (BULK + "total_bytes = -100\n", "flows[0].total_bytes", "-100"),
        ("\n[[flows]]\nkind = 'datagram'\nname = 'd'\nsrc = 'a'\ndst = 'b'\n"
         "size_bytes = -5\nperiod_us = 1000\n", "flows[0].size_bytes", "-5"),
        ("\n[[flows]]\nkind = 'datagram'\nname = 'd'\nsrc = 'a'\ndst = 'b'\n"
         "size_bytes = 100\nperiod_us = 0\n", "flows[0].period_us", "0"),
        ("\n[[flows]]\nkind = 'datagram'\nname = 'd'\nsrc = 'a'\ndst = 'b'\n"
         "size_bytes = 100\nperiod_us = 10\njitter_us = -1\n", "flows[0].jitter_us", "-1"),
        ("\n[hw_queue]\ncapacity_packets = 0\n", "hw_queue.capacity_packets", "0"),
        ("\n[mac]\nretry_limit = -1\n", "mac.retry_limit", "-1"),
        ("\n[mac]\nmax_ampdu_mpdus = 65\n", "mac.max_ampdu_mpdus", "65"),
        ("\n[phy]\nspatial_streams = 5\n", "phy.spatial_streams", "5"),
    ],
)  # fmt: skip
def test_out_of_range_values_name_field_and_value(
    tmp_path: Path, extra: str, field: str, value: str
) -> None:
    line = _one_line(_load(tmp_path, GOOD + extra))
    assert f"{field} = {value}:" in line


def test_negative_duration(tmp_path: Path) -> None:
    line = _one_line(_load(tmp_path, GOOD.replace("duration_s = 1.0", "duration_s = -1.0")))
    assert "duration_s = -1.0: Input should be greater than 0" in line


def test_negative_basic_rate_lists_the_ofdm_rates(tmp_path: Path) -> None:
    line = _one_line(_load(tmp_path, GOOD + "\n[phy]\nbasic_rate_mbps = -6\n"))
    assert "basic_rate_mbps = -6" in line
    assert "allowed: [6, 9, 12, 18, 24, 36, 48, 54]" in line


@pytest.mark.parametrize(
    ("phy", "mcs", "allowed"),
    [
        ("width_mhz = 20\nspatial_streams = 1", 9, [0, 1, 2, 3, 4, 5, 6, 7, 8]),
        ("width_mhz = 80\nspatial_streams = 3", 6, [0, 1, 2, 3, 4, 5, 7, 8, 9]),
        ("width_mhz = 160\nspatial_streams = 3", 9, [0, 1, 2, 3, 4, 5, 6, 7, 8]),
    ],
)
def test_mcs_not_defined_for_width_and_streams(
    tmp_path: Path, phy: str, mcs: int, allowed: list[int]
) -> None:
    err = _load(tmp_path, GOOD + f"\n[phy]\n{phy}\n\n[links]\nmcs = {mcs}\n")
    line = _one_line(err)
    assert f"links.mcs = {mcs} does not exist" in line
    assert f"allowed: {allowed}" in line


def test_mcs_override_not_defined(tmp_path: Path) -> None:
    text = GOOD + (
        "\n[phy]\nwidth_mhz = 20\nspatial_streams = 2\n"
        "\n[[links.overrides]]\nsrc = 'a'\ndst = 'b'\nmcs = 9\n"
    )
    line = _one_line(_load(tmp_path, text))
    assert "links.overrides[0].mcs = 9 does not exist" in line
    assert "allowed: [0, 1, 2, 3, 4, 5, 6, 7, 8]" in line


@pytest.mark.parametrize(
    ("section", "value", "allowed"),
    [
        ("[phy]\nwidth_mhz = 30", "30", "20, 40, 80 or 160"),
        ("[phy]\nguard_interval = 'tiny'", "'tiny'", "'long' or 'short'"),
        ("[hw_queue]\nmode = 'fifo'", "'fifo'", "'per_ac' or 'shared'"),
        ("[mac]\nretry_policy = 'linux'", "'linux'", "'classic' or 'ns3'"),
        (
            "[mac]\nampdu_grouping = 'per_receiver'",
            "'per_receiver'",
            "'consecutive' or 'per_receiver_tid'",
        ),
        ("[links]\nmode = 'ray'", "'ray'", "'fixed' or 'distance'"),
    ],
)
def test_enumerations_list_the_allowed_values(
    tmp_path: Path, section: str, value: str, allowed: str
) -> None:
    line = _one_line(_load(tmp_path, GOOD + "\n" + section + "\n"))
    assert f"= {value}: allowed: {allowed}" in line


def test_wrong_type(tmp_path: Path) -> None:
    line = _one_line(_load(tmp_path, GOOD.replace("duration_s = 1.0", 'duration_s = "long"')))
    assert "duration_s = 'long'" in line
    assert "valid number" in line


# -- cross-field rules ----------------------------------------------------------------------


def test_unknown_station_in_a_flow(tmp_path: Path) -> None:
    line = _one_line(_load(tmp_path, GOOD + BULK.replace('dst = "b"', 'dst = "zz"')))
    assert "flows[0] (f) names unknown station 'zz'" in line
    assert "stations: ['a', 'b']" in line


def test_flow_to_itself(tmp_path: Path) -> None:
    line = _one_line(_load(tmp_path, GOOD + BULK.replace('dst = "b"', 'dst = "a"')))
    assert "flows[0] (f) has src == dst = 'a'" in line


def test_duplicate_station_names(tmp_path: Path) -> None:
    line = _one_line(_load(tmp_path, GOOD + '\n[[stations]]\nname = "a"\n'))
    assert "station names must be unique; repeated: ['a']" in line


def test_duplicate_flow_names(tmp_path: Path) -> None:
    line = _one_line(_load(tmp_path, GOOD + BULK + BULK))
    assert "flow names must be unique; repeated: ['f']" in line


def test_flow_named_like_the_tcp_ack_flow_of_a_bulk_flow(tmp_path: Path) -> None:
    dgram = "\n[[flows]]\nkind = 'datagram'\nname = 'f:ack'\nsrc = 'a'\ndst = 'b'\n"
    dgram += "size_bytes = 10\ntimes_us = [1.0]\n"
    err = _load(tmp_path, GOOD + BULK + dgram)
    line = _one_line(err)
    assert line == (
        "  - flows[1].name = 'f:ack': is the name of the TCP-ack flow of bulk flow 'f' "
        "(flows[0]); rename this flow, or set tcp_acks = false on 'f'"
    )
    assert (err.problems[0].field, err.problems[0].value) == ("flows[1].name", "f:ack")
    # Without TCP acks there is no ack flow, and the name is free.
    path = tmp_path / "ok.toml"
    path.write_text(GOOD + BULK + "tcp_acks = false\n" + dgram)
    assert [f.name for f in load_scenario(path).flows] == ["f", "f:ack"]


def test_too_few_stations(tmp_path: Path) -> None:
    line = _one_line(_load(tmp_path, 'name = "x"\n[[stations]]\nname = "a"\n'))
    assert line.strip().startswith("- stations")
    assert "at least 2" in line


def test_datagram_needs_exactly_one_schedule(tmp_path: Path) -> None:
    flow = "\n[[flows]]\nkind = 'datagram'\nname = 'd'\nsrc = 'a'\ndst = 'b'\nsize_bytes = 10\n"
    for extra in ("", "period_us = 10\ntimes_us = [1.0]\n"):
        line = _one_line(_load(tmp_path, GOOD + flow + extra))
        assert "flows[0]: give exactly one of period_us or times_us" in line


def test_unknown_flow_kind(tmp_path: Path) -> None:
    line = _one_line(_load(tmp_path, GOOD + BULK.replace('"bulk"', '"stream"')))
    assert "flows[0]" in line and "'stream'" in line and "'datagram', 'bulk'" in line


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = GOOD.replace("duration_s = 1.0", "duration_s = -1.0\nseed = -3\nbogus = 1")
    err = _load(tmp_path, text)
    fields = sorted(p.field for p in err.problems)
    assert fields == ["bogus", "duration_s", "seed"]
    assert len(str(err).splitlines()) == 4


# -- files ----------------------------------------------------------------------------------


def test_bad_toml_syntax(tmp_path: Path) -> None:
    err = _load(tmp_path, GOOD + "\n[phy\nwidth_mhz = 20\n")
    line = _one_line(err)
    assert "not valid TOML" in line
    assert "line 9" in line  # where the unclosed table header is


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "missing.toml"
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    text = str(info.value)
    assert text.startswith(f"invalid scenario {path}:")
    assert "file not found" in text
    assert str(path) in text.splitlines()[1]


def test_parse_scenario_names_its_source() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"stations": [{"name": "a"}, {"name": "a"}]}, source="<robot team>")
    assert str(info.value).startswith("invalid scenario <robot team>:")


# -- rules about the links and the EDCA parameters, checked when loading -------------------------


def test_distance_link_out_of_range_is_refused_when_loading(tmp_path: Path) -> None:
    text = GOOD.replace('name = "b"', 'name = "b"\nposition_m = [500.0, 0.0]')
    err = _load(tmp_path, text + '\n[links]\nmode = "distance"\n')
    assert _one_line(err) == (
        "  - stations = 'a -> b': out of range: 500.0 m gives -107.7 dBm, below the MCS 0 "
        "sensitivity; move the stations closer or lower links.pathloss.exponent"
    )


def test_many_pairs_out_of_range_are_summarised() -> None:
    stations = [{"name": f"s{i}", "position_m": [100.0 * i, 0.0]} for i in range(6)]
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"links": {"mode": "distance"}, "stations": stations})
    lines = str(info.value).splitlines()[1:]
    assert len(lines) == 6  # five pairs in full (each once), then the other ten
    assert lines[0].startswith("  - stations = 's0 -> s1': out of range: 100.0 m")
    assert lines[-1] == (
        "  - stations: 10 more pairs out of range: s1 -> s2, s1 -> s3, s1 -> s4, s1 -> s5, "
        "s2 -> s3, s2 -> s4, s2 -> s5, s3 -> s4, s3 -> s5, s4 -> s5"
    )


def _cw_inverted() -> dict[str, Any]:
    return {
        "mac": {"edca": {"VO": {"cw_min": 7, "cw_max": 3}}},
        "stations": [{"name": "a"}, {"name": "b"}],
    }


def test_inverted_contention_window_is_rejected_when_loading() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_cw_inverted(), source="cw.toml")
    assert "mac.edca.VO" in str(info.value) and "= None" not in str(info.value)
    assert str(info.value).splitlines()[1:] == [
        "  - mac.edca.VO.cw_max = 3: cw_max 3 < cw_min 7; allowed: cw_max >= 7"
    ]


@pytest.mark.parametrize(
    ("edca", "line"),
    [
        # Only one bound set: the other is the standard's (VO 3..7, VI 7..15).
        ("[mac.edca.VO]\ncw_max = 2", "mac.edca.VO.cw_max = 2: cw_max 2 < cw_min 3 (the "
         "standard's VO value); allowed: cw_max >= 3, or set cw_min"),
        ("[mac.edca.VI]\ncw_min = 31", "mac.edca.VI.cw_min = 31: cw_max 15 (the standard's VI "
         "value) < cw_min 31; allowed: cw_min <= 15, or set cw_max"),
    ],
)  # fmt: skip
def test_contention_window_against_the_standard_bound(tmp_path: Path, edca: str, line: str) -> None:
    assert _one_line(_load(tmp_path, GOOD + "\n" + edca + "\n")) == f"  - {line}"


def test_every_inverted_contention_window_is_reported(tmp_path: Path) -> None:
    text = GOOD + "\n[mac.edca.BE]\ncw_min = 63\ncw_max = 31\n[mac.edca.BK]\ncw_max = 7\n"
    err = _load(tmp_path, text)
    assert [(p.field, p.value) for p in err.problems] == [
        ("mac.edca.BE.cw_max", 31), ("mac.edca.BK.cw_max", 7),
    ]  # fmt: skip


def test_contention_window_equal_bounds_and_standard_defaults_load() -> None:
    edca = {"VO": {"cw_min": 0, "cw_max": 0}, "VI": {"cw_max": 7}, "BE": {"cw_min": 1023}}
    sc = parse_scenario({"mac": {"edca": edca}, "stations": [{"name": "a"}, {"name": "b"}]})
    assert set(sc.mac.edca) == {"VO", "VI", "BE"}


# A full packet of 7935 bytes is a 7973-byte MPDU, a 7977-byte PSDU. At MCS 0, 1 stream,
# 20 MHz, long GI (N_DBPS = 26): ceil((8·7977 + 22) / 26) = 2456 symbols, 40 + 9824 µs =
# 9.864 ms > aPPDUMaxTime = 5.484 ms = 40 µs + 1361 symbols: at most (1361·26 - 22) // 8 =
# 4420 PSDU bytes, i.e. packet_bytes <= 4420 - 4 - 38 = 4378.
_SLOW = {"width_mhz": 20, "spatial_streams": 1}


def _ppdu_data(packet_bytes: int, links: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {
        "duration_s": 0.05, "packet_bytes": packet_bytes, "phy": _SLOW, "links": links,
        "stations": [{"name": "a"}, {"name": "b"}],
        "flows": [{"kind": "bulk", "name": "f", "src": "a", "dst": "b",
                   "total_bytes": packet_bytes, "tcp_acks": False}],
    } | kw  # fmt: skip


def test_a_single_mpdu_longer_than_the_ppdu_limit_is_refused() -> None:
    assert vht_ppdu_duration_ns(7977, VhtMode(0, 1, 20)) == 9_864_000
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_ppdu_data(7935, {"mcs": 0}), source="big.toml")
    assert str(info.value).splitlines() == [
        "invalid scenario big.toml:",
        "  - packet_bytes = 7935: a full packet (a 7973-byte MPDU) lasts 9.864 ms at MCS 0 "
        "(links.mcs; 1 spatial stream(s), 20 MHz, long GI), longer than aPPDUMaxTime "
        "(5.484 ms); allowed at this rate: packet_bytes <= 4378, or a faster MCS",
    ]


def test_the_largest_packet_that_fits_loads_and_runs_within_the_ppdu_limit() -> None:
    mode = VhtMode(0, 1, 20)
    assert vht_ppdu_duration_ns(4378 + 42, mode) == MAX_PPDU_NS
    assert vht_ppdu_duration_ns(4379 + 42, mode) > MAX_PPDU_NS
    with pytest.raises(ScenarioError, match="packet_bytes = 4379:"):
        parse_scenario(_ppdu_data(4379, {"mcs": 0}))
    r = simulate(parse_scenario(_ppdu_data(4378, {"mcs": 0})), trace=True)
    assert r.trace and [e[6] for e in r.trace] == [(4420,)]
    # A datagram is cut into fragments of at most packet_bytes: they fit as well.
    data = _ppdu_data(4378, {"mcs": 0})
    data["flows"] = [{"kind": "datagram", "name": "d", "src": "a", "dst": "b",
                      "size_bytes": 20_000, "times_us": [0.0]}]  # fmt: skip
    r = simulate(parse_scenario(data), trace=True)
    assert r.trace and max(p for e in r.trace for p in e[6]) == 4420
    assert all(vht_ppdu_duration_ns(p, mode) <= MAX_PPDU_NS for e in r.trace for p in e[6])


def test_the_ppdu_limit_is_checked_on_the_slowest_link() -> None:
    # Fixed MCS 3 carries 7935-byte packets (26 Mb/s); an override to MCS 0 does not.
    assert parse_scenario(_ppdu_data(7935, {"mcs": 3})).packet_bytes == 7935
    overrides = [{"src": "b", "dst": "a", "mcs": 1}, {"src": "a", "dst": "b", "mcs": 0}]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_ppdu_data(7935, {"mcs": 3, "overrides": overrides}))
    assert "at MCS 0 (links.overrides[1], a -> b; 1 spatial stream(s)" in str(info.value)


def test_the_ppdu_limit_is_checked_at_the_rate_distance_mode_gives() -> None:
    # 60 m: -80.0 dBm, between the MCS 0 (-82) and MCS 1 (-79) sensitivities at 20 MHz.
    stations = [{"name": "a"}, {"name": "b", "position_m": [60.0, 0.0]}]
    data = _ppdu_data(7935, {"mode": "distance"}, stations=stations)
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert "at MCS 0 (link a -> b, 60.0 m apart; 1 spatial stream(s), 20 MHz" in str(info.value)
    # At 40 m (MCS 2 and up) the same packets fit.
    stations[1]["position_m"] = [40.0, 0.0]
    assert parse_scenario(_ppdu_data(7935, {"mode": "distance"}, stations=stations))


def test_a_short_guard_interval_is_taken_into_account() -> None:
    # Short GI: 3.6 µs symbols, so more bytes fit in 5.484 ms at MCS 0.
    phy = _SLOW | {"guard_interval": "short"}
    with pytest.raises(ScenarioError, match="short GI"):
        parse_scenario(_ppdu_data(7935, {"mcs": 0}, phy=phy))
    fits = vht_max_psdu_bytes(MAX_PPDU_NS, VhtMode(0, 1, 20, GuardInterval.SHORT)) - 42
    assert fits > 4378
    assert parse_scenario(_ppdu_data(fits, {"mcs": 0}, phy=phy))
    with pytest.raises(ScenarioError, match=f"packet_bytes <= {fits},"):
        parse_scenario(_ppdu_data(fits + 1, {"mcs": 0}, phy=phy))


# -- the same rules when a scenario skipped validation (model_copy(update=...)) --------------


@pytest.mark.parametrize(
    ("update", "problem"),
    [
        ({"mac": MacConfig.model_construct(edca={AccessCategory.VO: EdcaOverride(cw_min=7,
                                                                                 cw_max=3)})},
         "mac.edca.VO.cw_max = 3: cw_max 3 < cw_min 7"),
        ({"packet_bytes": 7935, "phy": PhyConfig(width_mhz=20, spatial_streams=1),
          "links": LinkConfig(mcs=0)},
         "packet_bytes = 7935: a full packet (a 7973-byte MPDU) lasts 9.864 ms at MCS 0"),
        ({"links": LinkConfig(mode="distance"),
          "stations": [StationConfig(name="a"), StationConfig(name="b", position_m=(500, 0))]},
         "stations = 'a -> b': out of range: 500.0 m"),
    ],
    ids=["cw", "ppdu", "range"],
)  # fmt: skip
def test_the_simulation_refuses_what_loading_would(update: dict[str, Any], problem: str) -> None:
    good = parse_scenario({"stations": [{"name": "a"}, {"name": "b"}]})
    bad = good.model_copy(update=update)  # no validation
    with pytest.raises(ScenarioError) as info:
        Simulation(bad, source="copy.toml")
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid scenario copy.toml:"
    assert len(lines) == 2 and lines[1].startswith(f"  - {problem}")
