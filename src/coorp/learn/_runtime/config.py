"""What a run on real sockets is asked to do: the orchestrator's :class:`RuntimeSpec`,
and the :class:`RoleConfig` every role reads (``--config``, a JSON file)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from coorp._errors import UsageError
from coorp.learn._network import LearnSpec
from coorp.learn._runtime.wire import Learning, Mode, SharedSettings
from coorp.scenario import Scenario, SyncMode

__all__ = [
    "KEY_ENV",
    "MEDIA",
    "MODES",
    "NETS",
    "Mode",
    "RoleConfig",
    "RuntimeSpec",
    "read_config",
    "role_config",
    "runtime_workload",
]

MODES = ("coorp", "tcp")
NETS = ("netns", "loopback")
#: ``split``/``shared``: a shaped wired queue (:mod:`coorp.learn._netns`); ``wifi``: a
#: network the caller builds and passes (``coorp learn --medium wifi``: the emulated
#: channel, :mod:`coorp.learn._runtime.network`).
MEDIA = ("split", "shared", "wifi")
#: The team key of a run on one host travels in this environment variable, never on a
#: command line.
KEY_ENV = "COORP_LEARN_KEY_HEX"


@dataclass(frozen=True)
class RuntimeSpec:
    net: str = "netns"
    rate_mbit: float = 50.0
    queue_ms: float = 100.0
    #: Shape the leader's downlink too (its own interface), not only the uplink to it.
    downlink: bool = True
    #: ``split`` (uplink and downlink shaped apart) or ``shared`` (one queue for both,
    #: like one WiFi channel), see :mod:`coorp.learn._netns`; or ``wifi``: the
    #: emulated channel, which the caller passes as ``learn_on_runtime(network=...)``.
    medium: str = "split"
    #: Stop creating model versions after this many (None: only the duration bounds it).
    max_versions: int | None = None
    #: One bulk stream per peer for every message (True, ``--streams reuse``), or a fresh
    #: stream per message (False, the default). Reusing once stalled on a coorp.runtime
    #: bug (a message's last chunks still pending in the drain tracker when the
    #: confirmation came, so the next message's first poll recorded the idle gap as
    #: their completion time: 1 model version in 30 s); ``DrainTracker.settle`` fixed
    #: it. Measured since (docs/learn.md): both make 8 versions in 30 s; fresh streams
    #: keep the perception p99 lower (6.5 vs 9.9 ms) and stay the default. Idle
    #: connections of old streams are closed by the receiver
    #: (``ReceiverLimits.idle_timeout_s``).
    reuse_streams: bool = False
    #: Bound on any single wait inside a run (a message, a start-up line).
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.net not in NETS:
            raise UsageError(f"--net must be one of {', '.join(NETS)}, got {self.net!r}")
        if not self.rate_mbit > 0:
            raise UsageError(f"--rate-mbit must be positive, got {self.rate_mbit!r}")
        if self.medium not in MEDIA:
            raise UsageError(f"--medium must be one of {', '.join(MEDIA)}, got {self.medium!r}")
        if self.medium == "wifi" and self.net != "netns":
            raise UsageError(
                "--medium wifi runs every robot in a namespace of the emulated channel; "
                f"it cannot run with --net {self.net}"
            )
        if self.max_versions is not None and self.max_versions < 1:
            raise UsageError(f"--max-versions must be >= 1, got {self.max_versions!r}")


class RoleConfig(Learning, kw_only=True):
    """What every role reads (``--config``): the learning, the MPC loop, the limits.

    ``permits`` and ``grid_ns`` stay None unless an orchestrator on one host sets them
    (None: the team file's permit service, and the leader's grid handshake)."""

    timeout_s: float
    reuse_streams: bool
    #: The permit service's address (``host:port``); None: the team file's.
    permits: str | None = None
    #: The MPC loop's grid on the shared clock; None: the leader hands out its own.
    grid_ns: int | None = None
    #: This role's seed (``run seed * 1000 + its index``: the simulated path's seeds).
    seed: int = 0
    #: The leader's inbox and TCP addresses, once it said them (the orchestrator's).
    server: str | None = None
    server_tcp: str | None = None

    @property
    def coordinated(self) -> bool:
        return self.mode == "coorp"

    def shared(self) -> SharedSettings:
        """The settings every role must share, and the run's seed."""
        return SharedSettings(**self.learning_fields(), seed=self.seed // 1000)

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)


def read_config(data: bytes | str) -> RoleConfig:
    """A role's ``--config`` file; a :class:`~coorp.UsageError` naming what is wrong."""
    try:
        return msgspec.json.decode(data, type=RoleConfig)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise UsageError(f"invalid coorp learn role config: {exc}") from None


def runtime_workload(scenario: Scenario, spec: LearnSpec) -> tuple[Any, SyncMode]:
    """The scenario's workload and the sync mode, checked for a run on real sockets."""
    wl = scenario.workload
    if wl is None or not wl.drlc.enabled or not wl.mpc.enabled:
        raise UsageError("the scenario needs [workload.mpc] and [workload.drlc] for --runtime")
    sync = spec.sync or wl.drlc.sync
    if sync is SyncMode.SSP:
        raise UsageError("--sync ssp is simulated only; --runtime supports bsp and asp")
    return wl, sync


def role_config(scenario: Scenario, mode: str, spec: LearnSpec, rt: RuntimeSpec) -> RoleConfig:
    """The config of every role of ``scenario``'s team learning with ``spec`` in ``mode``
    (each role's own ``seed`` is set by whoever starts it)."""
    wl, sync = runtime_workload(scenario, spec)
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
    return RoleConfig(
        mode="coorp" if mode == "coorp" else "tcp",
        sync=sync,
        workers=list(scenario.workers),
        ppo=spec.ppo,
        task=spec.task,
        init_seed=spec.init_seed,
        air_bytes=spec.air_bytes(),
        duration_s=spec.duration_s if spec.duration_s is not None else scenario.duration_s,
        max_versions=rt.max_versions,
        period_ns=round(wl.mpc.period_us * 1e3),
        deadline_ns=round(wl.mpc.deadline_us * 1e3),
        perception_bytes=wl.mpc.perception_bytes,
        control_bytes=wl.mpc.control_bytes,
        timeout_s=rt.timeout_s,
        reuse_streams=rt.reuse_streams,
    )
