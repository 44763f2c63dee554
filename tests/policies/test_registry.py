"""The policy registry: names in order, helpful errors, user policies usable by run_crl."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from coorp._errors import UsageError
from coorp.policies import (
    CoorpPolicy,
    EdcaPolicy,
    Policy,
    get_policy,
    policy_label,
    policy_names,
    register_policy,
)
from coorp.sim.packets import FlowState
from coorp.workload import run_crl
from crl_scenarios import crl_scenario
from policy_registry import registered

SHIPPED = ["edca", "schedwifi", "coorp", "coorp-global", "coorp-local"]


@pytest.fixture
def registry() -> Iterator[None]:
    """Registrations made by a test are undone after it."""
    with registered():
        yield


def test_shipped_policies_are_listed_in_order() -> None:
    assert policy_names()[:5] == SHIPPED
    for name in SHIPPED:
        cls = get_policy(name)
        assert issubclass(cls, Policy) and cls.name == name
        assert cls.summary.strip() and "\n" not in cls.summary


def test_reference_bounds_are_labelled_not_deployable() -> None:
    assert get_policy("oracle").deployable is False
    assert policy_label("oracle") == "oracle (not deployable)"
    for name in SHIPPED:
        assert get_policy(name).deployable is True
        assert policy_label(name) == name
    assert policy_label("not-registered") == "not-registered"


def test_unknown_name_lists_the_available_ones() -> None:
    with pytest.raises(UsageError) as info:
        get_policy("tdma")
    msg = str(info.value)
    assert "unknown policy 'tdma'" in msg
    for name in SHIPPED:
        assert name in msg


def test_unknown_name_in_run_crl() -> None:
    with pytest.raises(UsageError, match="available: edca, schedwifi, coorp"):
        run_crl(crl_scenario(1, duration_s=0.1), "nope")


def test_duplicate_name_is_rejected(registry: None) -> None:
    class MyEdca(EdcaPolicy):
        name = "edca"
        summary = "another edca"

    with pytest.raises(UsageError, match="'edca' is already registered by EdcaPolicy"):
        register_policy(MyEdca)
    assert get_policy("edca") is EdcaPolicy
    # Registering the same class again is harmless (re-imports).
    assert register_policy(EdcaPolicy) is EdcaPolicy
    assert policy_names()[:5] == SHIPPED


def test_name_and_summary_are_required(registry: None) -> None:
    class Nameless(Policy):
        summary = "no name"

    class Summaryless(Policy):
        name = "summaryless"

    with pytest.raises(UsageError, match="non-empty class attribute 'name'"):
        register_policy(Nameless)
    with pytest.raises(UsageError, match="'summary'"):
        register_policy(Summaryless)
    assert "summaryless" not in policy_names()


def test_user_policy_registered_by_decorator_runs_in_run_crl(registry: None) -> None:
    @register_policy
    class HoldBack(Policy):
        """Starts every bulk transfer 50 ms late and counts them."""

        name = "test-hold-back"
        summary = "starts each bulk transfer 50 ms late"

        def install(self) -> None:
            self.started = 0
            self.completed = 0

        def send_bulk(
            self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
        ) -> None:
            sim = self.team.sim
            self.started += 1

            def done(now: int) -> None:
                self.completed += 1
                on_complete(now)

            sim.call_at(sim.now_ns + 50_000_000, super().send_bulk, robot, flow, nbytes, done)

        def stats(self) -> dict[str, int]:
            return {"started": self.started, "completed": self.completed}

    assert policy_names()[-1] == "test-hold-back"
    sc = crl_scenario(2, duration_s=1.5)
    mine = run_crl(sc, "test-hold-back")
    plain = run_crl(sc, "edca")
    assert mine.policy == "test-hold-back"
    assert mine.policy_stats["started"] >= mine.policy_stats["completed"] >= 6
    assert len(mine.epochs) >= 1
    # Each epoch waits 50 ms three times (data, update, model): fewer, slower epochs.
    assert mine.epoch_s > max(plain.epoch_s + 0.1, 0.15)
    assert len(mine.loops) == len(plain.loops)


def test_subclassing_keeps_the_parent_registered(registry: None) -> None:
    @register_policy
    class Coorp2(CoorpPolicy):
        name = "test-coorp2"
        summary = "coorp with two senders"

    assert get_policy("coorp") is CoorpPolicy
    assert get_policy("test-coorp2") is Coorp2
