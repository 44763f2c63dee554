"""The oracle: a reference bound for local preemption. Not deployable.

COORP's permits (one bulk sender at a time, Algorithm 1, unchanged) plus, on every
robot, a driver that knows what no real one can:

* the exact instant of the robot's next protected LS send (a worker's perceptions, the
  leader's controls), from the MPC loop's own schedule (``Team.ls_schedule``), with no
  prediction error;
* the exact airtime of every frame the NIC will build from its ring.

It admits a bulk packet only if the ring, with the packet, would be empty before the
next protected send in the best case (every frame back to back, AIFS before each, no
contention: :meth:`coorp.sim.mac.Channel.ring_drain`), and it gives the MAC an airtime
budget up to that send (``max_bulk_airtime_ns``), so each A-MPDU is trimmed to the gap
when the robot wins the medium, or held if not even one MPDU fits. What it cannot see
is contention: the other stations' traffic may still delay a queued frame past the
send, so its misses come from contention only. See ``docs/policies.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from coorp._errors import UsageError
from coorp.phy import SLOT_NS
from coorp.policies._coorp import CoorpPolicy
from coorp.policies._hooks import GatedHooks
from coorp.policies._registry import register_policy
from coorp.scenario import AccessCategory
from coorp.sim import DriverView
from coorp.sim.mac import Channel, RingDrain
from coorp.sim.station import Station

__all__ = ["OracleHooks", "OraclePolicy", "OracleStats"]


@dataclass(slots=True)
class OracleStats:
    """What one robot's oracle driver decided."""

    allowed: int = 0
    #: The ring with the packet would not be empty before the next protected send.
    denied_ahead: int = 0
    #: A protected send is handed to the NIC at this very instant (or is due now).
    denied_now: int = 0
    #: Channel accesses at which a bulk frame was held: no MPDU fitted the budget.
    holds: int = 0


class OracleHooks:
    """One robot's oracle driver: permits, exact admission, airtime budget.

    ``permits`` decides first (COORP's ``BulkClient``: no permit, no bulk).
    ``schedule(robot, now_ns)`` is the instant of the robot's next protected LS send at
    or after ``now_ns`` (exact, or when not yet determined its earliest possible
    instant), ``None`` if none is scheduled. ``ls_flows``: the protected flows, whose
    sends ``on_ls_send`` sees.

    Per packet (``per_packet`` is not declared ``False``): the admission of each bulk
    packet depends on what the ring already holds. The driver asks a run of packets
    at a time (``per_run``, ``coorp.sim.RunHooks``): the packets of one run are alike
    (one transfer, one size), so the permit and the next protected send are asked
    once and the drain model grows by one packet per admitted packet, as it does
    packet by packet.
    """

    def __init__(
        self,
        *,
        robot: str,
        station: Station,
        channel: Channel,
        schedule: Callable[[str, int], int | None],
        permits: GatedHooks,
        ls_flows: frozenset[str],
        exactness: Callable[[str, int], tuple[int, bool] | None] | None = None,
    ) -> None:
        self.robot = robot
        self.station = station
        self.channel = channel
        self.schedule = schedule
        #: ``Team.ls_send``: whether the next send's instant is exact (None: unknown,
        #: inferred from whether the last budget's send came, see max_bulk_airtime_ns).
        self.exactness = exactness
        self.permits = permits
        self.ls_flows = ls_flows
        self.stats = OracleStats()
        #: The last instant this robot handed a protected LS message to its stack.
        self._last_send_ns = -1
        # The drain model of the ring as it is (valid at ``_model_now`` until the ring
        # changes other than by the packet just admitted) and the model with that packet.
        self._model: RingDrain | None = None
        self._model_now = -1
        self._trial: RingDrain | None = None
        #: The protected send the last airtime budget was sized for.
        self._budget_for: int | None = None

    def next_protected_ns(self, now_ns: int) -> int | None:
        """The next protected send: ``now_ns`` itself while a send at this instant is
        being handed over (the leader hands its controls one after another)."""
        if self._last_send_ns == now_ns:
            return now_ns
        return self.schedule(self.robot, now_ns)

    # -- DriverHooks ---------------------------------------------------------------------
    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        resume = self.permits.admit_bulk(station, now_ns)
        if resume is not None:
            return resume
        t = self.next_protected_ns(now_ns)
        if t is None:
            self.stats.allowed += 1
            return None
        if t <= now_ns:
            # Handed now: resume once it is in the NIC. An earliest-possible instant
            # that is already due (a late loop): ask again a slot later.
            self.stats.denied_now += 1
            return now_ns + 1 if self._last_send_ns == now_ns else now_ns + SLOT_NS
        pkt = self.station.next_bulk_packet()
        if pkt is None:  # nothing to admit (the driver asks only with data waiting)
            return None
        model = self._model
        if model is None or self._model_now != now_ns:
            model = self.channel.ring_drain(self.station, now_ns, pkt.ac)
            self._model = model
            self._model_now = now_ns
        trial = model.copy()
        trial.add(pkt)
        if trial.end_ns() <= t:
            self._trial = trial
            self.stats.allowed += 1
            return None
        self._trial = None
        self.stats.denied_ahead += 1
        # Nothing more fits before the send (contention only delays the ring): ask again
        # just after it.
        return t + 1

    def max_bulk_airtime_ns(self, station: DriverView, now_ns: int) -> int | None:
        """The budget up to the next protected send: a bulk exchange is over by then."""
        t = self.next_protected_ns(now_ns)
        if t is None:
            return None
        if self._last_send_ns == now_ns:
            return 0  # hold until the LS message is in the NIC
        st = self.station
        target, self._budget_for = self._budget_for, t
        if (
            st.shared
            and not self._exact(now_ns)
            and target is not None
            and target < now_ns
            and self._last_send_ns < target
            and any(p.message is not None for p in st.rings[AccessCategory.BE])
        ):
            # The last budget's send never came at its instant: ``t`` is a sliding
            # earliest-possible bound (a late loop), not a send. An LS message already
            # waits behind the held bulk frame in the shared ring, and holding that
            # frame again only delays it (repeated, it kept a robot's own perception
            # stuck behind its bulk frame for seconds on crl-5 seed 4).
            return None
        if t > now_ns:
            return t - now_ns
        if st.shared:
            return None  # an earliest-possible instant already due: it queues behind
        return SLOT_NS  # an earliest-possible instant already due: hold a slot

    def _exact(self, now_ns: int) -> bool:
        """The next protected instant is a send, not an earliest-possible bound (False
        when the schedule does not say: then the bound is inferred)."""
        if self._last_send_ns == now_ns:
            return True
        if self.exactness is None:
            return False
        nxt = self.exactness(self.robot, now_ns)
        return nxt is not None and nxt[1]

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        if flow in self.ls_flows:
            self._last_send_ns = now_ns
        self.permits.on_ls_send(station, flow, now_ns)

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        trial = self._trial
        self._trial = None
        if trial is not None and now_ns == self._model_now and ac is trial.ac:
            self._model = trial  # the packet admitted last: the model extends by it
        else:
            self._model = None  # another packet (an LS fragment, an ack): rebuild
        self.permits.on_hw_enqueue(station, pid, ac, depth, now_ns)

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        self._model = None
        self._trial = None
        self.permits.on_hw_complete(station, pid, ac, now_ns, delivered)

    # -- RunHooks: the same calls, a run of packets at a time ------------------------------
    per_run: ClassVar[bool] = True

    def admit_bulk_run(
        self, station: DriverView, now_ns: int, pid: int, count: int, ac: AccessCategory,
        depth: int,
    ) -> tuple[int, int]:  # fmt: skip
        # admit_bulk then on_hw_enqueue for each packet in turn, with what cannot change
        # within one run (the instant, the permit, the next send, the packets' size and
        # destination) asked once.
        admitted, resume = self.permits.admit_bulk_run(station, now_ns, pid, count, ac, depth)
        if admitted < count:
            return admitted, resume  # no permit (admitted is 0: nothing changes)
        t = self.next_protected_ns(now_ns)
        if t is None:
            self.stats.allowed += count
            self._model = self._trial = None  # (an admission with no model made)
            return count, 0
        if t <= now_ns:
            self.stats.denied_now += 1
            return 0, now_ns + 1 if self._last_send_ns == now_ns else now_ns + SLOT_NS
        pkt = self.station.next_bulk_packet()
        if pkt is None:  # (the driver asks only with data waiting)
            raise UsageError(f"{self.robot}: asked to admit {count} bulk packets, none wait")
        model = self._model
        if model is None or self._model_now != now_ns:
            model = self.channel.ring_drain(self.station, now_ns, pkt.ac)
            self._model_now = now_ns
        # Each admitted packet extends the model (as on_hw_enqueue does with the trial).
        n = model.extend_until(pkt, count, t)
        self._model = model
        self._trial = None
        self.stats.allowed += n
        if n < count:
            self.stats.denied_ahead += 1
            return n, t + 1
        return count, 0

    def on_hw_enqueue_run(
        self, station: DriverView, pid: int, count: int, ac: AccessCategory, depth: int,
        now_ns: int,
    ) -> None:  # fmt: skip
        self._model = self._trial = None  # packets not admitted here: rebuild
        self.permits.on_hw_enqueue_run(station, pid, count, ac, depth, now_ns)

    def on_hw_complete_run(
        self, station: DriverView, pid: int, count: int, ac: AccessCategory, now_ns: int,
        delivered: bool,
    ) -> None:  # fmt: skip
        self._model = self._trial = None
        self.permits.on_hw_complete_run(station, pid, count, ac, now_ns, delivered)


@register_policy
class OraclePolicy(CoorpPolicy):
    name = "oracle"
    summary = (
        "reference bound, not deployable: COORP permits + exact future LS sends and "
        "airtimes, aggregates sized to the gap"
    )
    deployable: ClassVar[bool] = False
    use_gate: ClassVar[bool] = False
    ring_airtime_budget_ns: ClassVar[int | None] = None
    #: Its robots' acks in AC_BE, as the simulator sends them (its bound is measured so).
    ack_ac: ClassVar[AccessCategory | None] = None

    def install(self) -> None:
        super().install()  # COORP's permits (no gate): controller, clients, hooks
        team = self.team
        self.oracles: dict[str, OracleHooks] = {}
        if team.mpc is None or not team.mpc.enabled:
            return  # nothing to protect: COORP's permits only
        schedule = team.ls_schedule
        if schedule is None:
            raise UsageError(
                "policy 'oracle' needs the MPC loop's send schedule (Team.ls_schedule, "
                "filled by coorp.workload.run_crl); a Team built without it cannot run it"
            )
        sim = team.sim
        for robot in team.robots:
            if robot == team.leader and not team.options.coorp.protect_leader:
                continue  # the paper's setting: the leader's controls are unprotected
            hooks = OracleHooks(
                robot=robot, station=sim.station(robot), channel=sim.channel,
                schedule=schedule, permits=GatedHooks(client=self.clients.get(robot)),
                ls_flows=team.ls_flows, exactness=team.ls_send,
            )  # fmt: skip
            self.oracles[robot] = hooks
            sim.set_hooks(robot, hooks)

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        oracles = getattr(self, "oracles", {})
        if oracles:
            for hooks in oracles.values():
                hooks.stats.holds = hooks.station.bulk_holds
            out["oracle"] = {r: asdict(h.stats) for r, h in oracles.items()}
        return out
