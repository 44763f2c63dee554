"""Sweep specs, seed ranges and overrides: what is accepted, and errors that name the
source, the field, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from coorp._errors import UsageError
from coorp.scenario import SyncMode, load_scenario
from coorp.sweep import (
    OverrideError,
    SweepSpecError,
    apply_overrides,
    canonical_key,
    load_sweep_spec,
    parse_override,
    parse_seeds,
    parse_sweep_spec,
    plan_sweep,
    resolve_scenario,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "seeds"),
    [("1-10", list(range(1, 11))), ("1,3,5", [1, 3, 5]), ("1-3,7", [1, 2, 3, 7]),
     ("5", [5]), (" 2 - 4 , 2 ", [2, 3, 4]), (0, [0]), ([3, 1, 3], [1, 3])],
)  # fmt: skip
def test_seed_ranges(text: str | int | list[int], seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize(
    ("text", "message"),
    [("10-1", "is empty"), ("a", "is not a seed"), ("1-", "is not a seed"), ("", "not a seed"),
     ("-3", "is not a seed"), ([-1], "negative"), ("1-100000", "more than")],
)  # fmt: skip
def test_bad_seed_ranges_say_what_is_allowed(text: str | list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_seeds(text)


def test_a_sweep_file_is_read_and_relative_scenarios_resolve_next_to_it(
    tmp_path: Path, tiny: Path
) -> None:
    spec_file = tmp_path / "s.toml"
    spec_file.write_text(
        'scenarios = ["tiny-2.toml", "crl-2"]\npolicies = ["edca", "coorp"]\nseeds = "1-3"\n'
        'duration_s = 0.5\n[overrides]\n"coorp.margin_us" = [1000, 2000]\n'
        '"workload.drlc.sync" = "asp"\n'
    )
    spec = load_sweep_spec(spec_file)
    assert spec.seeds == [1, 2, 3] and spec.duration_s == 0.5
    assert spec.overrides == {"coorp.margin_us": [1000, 2000], "workload.drlc.sync": ["asp"]}
    plan = plan_sweep(spec, base_dir=spec_file.parent)
    assert list(plan.scenarios) == ["tiny-2", "crl-2"]
    # 2 scenarios x 2 combos x (2 policies + BH-only) x 3 seeds
    assert len(plan.tasks) == 2 * 2 * 3 * 3
    coorp = [t for t in plan.tasks if t.policy == "coorp" and t.scenario_label == "tiny-2"]
    assert {t.scenario.policy.coorp.margin_us for t in coorp} == {1000.0, 2000.0}
    assert {t.scenario.workload.drlc.sync for t in coorp if t.scenario.workload} == {SyncMode.ASP}
    assert all(t.duration_ns == 500_000_000 for t in plan.tasks)


def test_unknown_key_in_a_sweep_file_names_file_key_and_allowed_keys(tmp_path: Path) -> None:
    spec_file = tmp_path / "bad.toml"
    spec_file.write_text('scenarios = ["crl-2"]\nseed = "1-3"\n')
    with pytest.raises(SweepSpecError) as exc:
        load_sweep_spec(spec_file)
    text = str(exc.value)
    assert str(spec_file) in text and "seed" in text and "allowed here:" in text
    assert "seeds" in text and "overrides" in text


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [({"scenarios": []}, "scenarios", "at least 1"),
     ({"scenarios": ["crl-2", "crl-2"]}, "scenarios", "listed twice"),
     ({"scenarios": ["crl-2"], "seeds": "4-2"}, "seeds", "is empty"),
     ({"scenarios": ["crl-2"], "duration_s": 0}, "duration_s", "greater than 0"),
     ({"scenarios": ["crl-2"], "overrides": {"coorp.margin_us": []}}, "overrides", "no values")],
)  # fmt: skip
def test_bad_fields_are_named(data: dict[str, object], field: str, message: str) -> None:
    with pytest.raises(SweepSpecError) as exc:
        parse_sweep_spec(data, source="<command line>")
    text = str(exc.value)
    assert "<command line>" in text and field in text and message in text


def test_bad_toml_and_missing_file_are_sweep_errors(tmp_path: Path) -> None:
    with pytest.raises(SweepSpecError, match="file not found"):
        load_sweep_spec(tmp_path / "none.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("scenarios = [\n")
    with pytest.raises(SweepSpecError, match="not valid TOML"):
        load_sweep_spec(broken)


def test_scenarios_resolve_by_path_or_built_in_name(tiny: Path) -> None:
    assert resolve_scenario(str(tiny)) == tiny
    assert resolve_scenario("crl-5").resolve() == ROOT / "scenarios" / "crl-5.toml"
    assert resolve_scenario("crl-5.toml").resolve() == ROOT / "scenarios" / "crl-5.toml"
    with pytest.raises(UsageError, match=r"no built-in scenario of that name; built-in .*crl-10"):
        resolve_scenario("crl-7")


def test_unknown_policy_and_bh_only_are_refused_before_running() -> None:
    with pytest.raises(UsageError, match="available: edca"):
        plan_sweep(parse_sweep_spec({"scenarios": ["crl-2"], "policies": ["edca", "nope"]}))
    with pytest.raises(UsageError, match="reference run"):
        plan_sweep(parse_sweep_spec({"scenarios": ["crl-2"], "policies": ["bh-only"]}))


@pytest.mark.parametrize(
    ("text", "key", "values"),
    [("coorp.margin_us=1000,2000", "coorp.margin_us", [1000, 2000]),
     ("workload.drlc.sync=bsp,asp", "workload.drlc.sync", ["bsp", "asp"]),
     ("workload.mpc.jitter_us=0.5", "workload.mpc.jitter_us", [0.5]),
     ("workload.mpc.enabled=true,false", "workload.mpc.enabled", [True, False]),
     ('x="a,b",c', "x", ["a,b", "c"]),
     ("stations.1.position_m=[1.0, 2.0],[3.0, 4.0]", "stations.1.position_m",
      [[1.0, 2.0], [3.0, 4.0]])],
)  # fmt: skip
def test_override_flags_parse_typed_values(text: str, key: str, values: list[object]) -> None:
    assert parse_override(text) == (key, values)


@pytest.mark.parametrize("text", ["coorp.margin_us", "=1", "coorp.margin_us=", "k=1,,2"])
def test_malformed_override_flags_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match="--set"):
        parse_override(text)


def test_overrides_set_the_dotted_key_and_revalidate(tiny: Path) -> None:
    sc = load_scenario(tiny)
    assert canonical_key("coorp.margin_us") == "policy.coorp.margin_us"
    assert canonical_key("schedwifi.retries") == "policy.schedwifi.retries"
    out = apply_overrides(
        sc, [("coorp.margin_us", 1500), ("workload.drlc.sync", "ssp"), ("stations.1.name", "rx")],
        source=str(tiny),
    )  # fmt: skip
    assert out.policy.coorp.margin_us == 1500.0
    assert out.workload is not None and out.workload.drlc.sync is SyncMode.SSP
    assert out.stations[1].name == "rx"
    assert sc.policy.coorp.margin_us == 2000.0  # the original is untouched
    assert apply_overrides(sc, [], source="x") is sc


@pytest.mark.parametrize(
    ("combo", "message"),
    [([("coorp.margin", 1)], "policy.coorp.margin is not a scenario key; allowed: confidence"),
     ([("workload.drlc.sync", "bspx")], "workload.drlc.sync = 'bspx': allowed: 'bsp'"),
     ([("coorp.margin_us", -5)], "greater than or equal to 0"),
     ([("stations.7.name", "x")], "is not an index of a list of 3"),
     ([("workload.leader.x", 1)], "is a value, not a section"),
     ([("seed", 3)], "cannot be overridden; seeds are swept"),
     ([("duration_s", 3)], "--duration")],
)  # fmt: skip
def test_bad_overrides_name_key_value_and_what_is_allowed(
    tiny: Path, combo: list[tuple[str, object]], message: str
) -> None:
    with pytest.raises(OverrideError) as exc:
        apply_overrides(load_scenario(tiny), combo, source=str(tiny), origin="--set")
    assert message in str(exc.value)
    assert "--set" in str(exc.value) or "override" in str(exc.value)


def test_override_into_an_absent_section_says_so() -> None:
    sc = load_scenario(ROOT / "scenarios" / "saturation-5.toml")
    with pytest.raises(OverrideError, match=r"workload is not set in .*saturation-5"):
        apply_overrides(sc, [("workload.mpc.period_us", 1)], source="saturation-5.toml")


def test_plan_checks_every_override_against_every_scenario(tiny: Path) -> None:
    spec = parse_sweep_spec(
        {"scenarios": [str(tiny)], "overrides": {"workload.drlc.sync": ["bsp", "nope"]}}
    )
    with pytest.raises(OverrideError, match=r"--set workload.drlc.sync=nope is invalid"):
        plan_sweep(spec)
