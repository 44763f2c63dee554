"""coorp.testing.check_policy: shipped policies conform; broken ones are caught by name."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from coorp._errors import UsageError
from coorp.policies import EdcaPolicy, Policy, get_policy
from coorp.scenario import parse_scenario
from coorp.sim import AdmitAll, DriverView
from coorp.sim.packets import FlowState
from coorp.testing import (
    ConformanceReport,
    PolicyConformanceError,
    check_policy,
    conformance_scenario,
)

SHIPPED = ["edca", "schedwifi", "coorp", "coorp-global", "coorp-local", "oracle"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_policies_conform(name: str) -> None:
    report = check_policy(get_policy(name))
    assert isinstance(report, ConformanceReport)
    assert report.ok and report.problems == ()
    # The checks actually exercised something: 2 epochs x 2 workers x 3 transfers.
    assert report.transfers == 12
    assert report.loops > 30
    assert report.admit_calls > 0
    assert name in report.render()


def test_a_larger_team_and_another_seed_conform() -> None:
    report = check_policy(get_policy("coorp"), scenario=conformance_scenario(3), seed=5)
    assert report.transfers == 2 * 3 * 3


def _raises(policy_cls: type) -> PolicyConformanceError:
    with pytest.raises(PolicyConformanceError) as info:
        check_policy(policy_cls)
    err = info.value
    assert isinstance(err, UsageError)
    assert err.problems == err.report.problems and err.problems
    return err


# -- deliberately broken policies --------------------------------------------------------
class NeverStarts(Policy):
    name = "never-starts"
    summary = "forgets to start any bulk transfer"

    def send_bulk(
        self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        return None


class _PastHooks(AdmitAll):
    """Denies every other bulk packet with a resume time in the past."""

    per_packet = True

    def __init__(self) -> None:
        self.calls = 0

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        self.calls += 1
        return now_ns - 1 if self.calls % 2 else None


class PastAdmit(Policy):
    name = "past-admit"
    summary = "admit_bulk answers with a resume time that is not in the future"

    def install(self) -> None:
        for robot in self.team.robots:
            self.team.sim.set_hooks(robot, _PastHooks())


class DirectPastAdmit(PastAdmit):
    """Assigns the hooks to the station directly instead of through set_hooks."""

    def install(self) -> None:
        for robot in self.team.robots:
            self.team.sim.station(robot).hooks = _PastHooks()


class _NegativeBudget(AdmitAll):
    """An airtime budget (AirtimeBudgetHooks) below zero."""

    def max_bulk_airtime_ns(self, station: DriverView, now_ns: int) -> int | None:
        return -5


class NegativeBudget(Policy):
    name = "negative-budget"
    summary = "max_bulk_airtime_ns answers with a negative budget"

    def install(self) -> None:
        for robot in self.team.robots:
            self.team.sim.set_hooks(robot, _NegativeBudget())


class CompletesTwice(Policy):
    name = "completes-twice"
    summary = "calls on_complete twice per transfer"

    def send_bulk(
        self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        def twice(_t: object, now: int) -> None:
            on_complete(now)
            on_complete(now)

        self.team.sim.start_transfer(flow, nbytes, twice)


class CompletesEarly(Policy):
    name = "completes-early"
    summary = "reports a transfer complete as soon as it starts"

    def send_bulk(
        self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        sim = self.team.sim
        sim.start_transfer(flow, nbytes)
        sim.call_at(sim.now_ns + 1, lambda: on_complete(sim.now_ns))


class LosesBytes(Policy):
    name = "loses-bytes"
    summary = "sends only half of every transfer"

    def send_bulk(
        self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        # on_complete after the (short) transfer: the early check and the byte count fire.
        self.team.sim.start_transfer(flow, nbytes // 2, lambda _t, now: on_complete(now))


class Nondeterministic(Policy):
    name = "nondeterministic"
    summary = "delays every transfer by a random amount drawn from the global RNG"

    def send_bulk(
        self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        sim = self.team.sim
        delay = int(random.random() * 5_000_000)
        sim.call_at(sim.now_ns + delay, super().send_bulk, robot, flow, nbytes, on_complete)


class _ShallowRing(AdmitAll):
    """Promises per_packet = False but decides from the ring length."""

    per_packet = False

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        return now_ns + 100_000 if station.hw_queue_length() >= 8 else None


class BrokenPromise(Policy):
    name = "broken-promise"
    summary = "batched hooks that read the queue length"

    def install(self) -> None:
        for robot in self.team.robots:
            self.team.sim.set_hooks(robot, _ShallowRing())


class InstallRaises(Policy):
    name = "install-raises"
    summary = "install() fails"

    def install(self) -> None:
        raise RuntimeError("no NIC found")


class NoName(EdcaPolicy):
    name = ""
    summary = "two\nlines"


class NotAPolicy:
    name = "plain"
    summary = "not derived from Policy"


def test_policy_that_never_starts_transfers() -> None:
    err = _raises(NeverStarts)
    assert any("never completed" in p for p in err.problems)
    assert "never-starts" in str(err)


@pytest.mark.parametrize("cls", [PastAdmit, DirectPastAdmit])
def test_admit_bulk_returning_a_past_time(cls: type[Policy]) -> None:
    err = _raises(cls)
    [msg] = [p for p in err.problems if "admit_bulk" in p]
    assert "later than now" in msg and "DriverHooks" in msg
    # Reported once, with a count, not once per call.
    assert "times)" in msg


def test_an_invalid_airtime_budget() -> None:
    err = _raises(NegativeBudget)
    [msg] = [p for p in err.problems if "max_bulk_airtime_ns" in p]
    assert "returned -5" in msg and ">= 0" in msg and "times)" in msg


def test_on_complete_called_twice() -> None:
    err = _raises(CompletesTwice)
    assert any("on_complete was called 2 times" in p and "exactly once" in p for p in err.problems)


def test_on_complete_before_the_bytes_arrived() -> None:
    err = _raises(CompletesEarly)
    assert any("must wait until every byte is delivered" in p for p in err.problems)


def test_lost_bytes() -> None:
    err = _raises(LosesBytes)
    assert any("bytes delivered for" in p and "lost" in p for p in err.problems)


def test_nondeterministic_policy() -> None:
    err = _raises(Nondeterministic)
    assert any("not deterministic" in p for p in err.problems)


def test_per_packet_promise_is_checked() -> None:
    err = _raises(BrokenPromise)
    [msg] = [p for p in err.problems if "per_packet = False" in p]
    assert "leader, r1, r2" in msg and "calling them for every packet changes" in msg


def test_install_that_raises() -> None:
    err = _raises(InstallRaises)
    assert any("install() raised RuntimeError: no NIC found" in p for p in err.problems)


def test_class_attributes() -> None:
    err = _raises(NoName)
    assert any("name must be a non-empty string" in p for p in err.problems)
    assert any("summary must be one line" in p for p in err.problems)
    err = _raises(NotAPolicy)
    assert "not a subclass of coorp.policies.Policy" in str(err)


def test_every_problem_is_listed_not_just_the_first() -> None:
    class Both(CompletesTwice):
        name = ""
        summary = "broken twice"

    err = _raises(Both)
    assert len(err.problems) >= 2


def test_scenario_without_drlc_is_a_usage_error() -> None:
    sc = conformance_scenario().model_dump(mode="json")
    sc["workload"]["drlc"]["enabled"] = False
    with pytest.raises(UsageError, match="DRLC are both enabled"):
        check_policy(EdcaPolicy, scenario=parse_scenario(sc))
    with pytest.raises(UsageError, match="duration_s"):
        check_policy(EdcaPolicy, duration_s=0)
