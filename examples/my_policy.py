"""A complete user-defined network policy in one module: define, register, check, run.

Run it from the repository root::

    .venv/bin/python examples/my_policy.py

``guard-band`` is a deliberately simple clock-based policy: every robot stops handing
bulk packets to its NIC from ``LEAD_MS`` before each nominal MPC period starts (so the
NIC ring drains) until ``QUIET_MS`` after it (perceptions, inference and controls go
out). Like SchedWiFi it assumes a shared clock and a loop that keeps its nominal
period; unlike COORP it learns nothing. See docs/policies.md.
"""

from __future__ import annotations

from coorp.policies import Policy, register_policy
from coorp.sim import AdmitAll, DriverView
from coorp.testing import check_policy, conformance_scenario
from coorp.units import ms, s, us
from coorp.workload import run_crl

LEAD_MS = 5.0
QUIET_MS = 12.0


class GuardHooks(AdmitAll):
    """Driver hooks: deny bulk packets inside [t_k − lead, t_k + quiet) around every
    nominal loop start t_k = start + k·period.

    ``admit_bulk`` returns ``None`` (admit) or a time strictly later than ``now_ns``
    at which the driver asks again; the other three hooks keep AdmitAll's no-ops.
    """

    def __init__(self, start_ns: int, period_ns: int, lead_ns: int, quiet_ns: int) -> None:
        self.start_ns = start_ns
        self.period_ns = period_ns
        self.lead_ns = lead_ns
        self.band_ns = lead_ns + quiet_ns

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        if now_ns + self.lead_ns < self.start_ns:
            return None  # before the first loop
        phase = (now_ns + self.lead_ns - self.start_ns) % self.period_ns
        if phase < self.band_ns:
            return now_ns - phase + self.band_ns  # the end of the band: > now_ns
        return None


@register_policy
class GuardBandPolicy(Policy):
    name = "guard-band"
    summary = "every robot holds bulk packets for the first few ms of each MPC period"

    def install(self) -> None:
        mpc = self.team.mpc
        if mpc is None:  # a BH-only run: nothing to protect, behave as EDCA
            return
        hooks = GuardHooks(us(mpc.start_us), us(mpc.period_us), ms(LEAD_MS), ms(QUIET_MS))
        for robot in self.team.robots:
            self.team.sim.set_hooks(robot, hooks)

    # send_bulk() is inherited: start the transfer at once, report its completion.


def main() -> None:
    # 1. The conformance checker: raises PolicyConformanceError listing every problem.
    print(check_policy(GuardBandPolicy).render())

    # 2. The registered name works wherever a policy name does.
    scenario = conformance_scenario(workers=3)
    print(f"\n{'policy':<12} {'miss':>6} {'p99 ms':>7} {'BH Mb/s':>8} {'epochs':>6}")
    for name in ("edca", "guard-band", "coorp"):
        m = run_crl(scenario, name, duration_ns=s(3.0)).metrics()
        print(f"{name:<12} {m['violation_rate']:>6.1%} {m['reaction_ms']['p99']:>7.1f} "
              f"{m['bh_mbps']:>8.1f} {m['epochs']:>6}")  # fmt: skip


if __name__ == "__main__":
    main()
