"""Learning over real sockets: ``coorp learn SCENARIO --runtime``.

Each robot of the scenario's workload is a process: the leader runs the parameter
server, every worker runs PPO (the same :class:`~coorp.learn.PPO`, seeds and merge rules
as the simulated path, :mod:`coorp.learn._sync`). Parameter syncs carry the real
``float32`` tensor (padded to ``4 × air_params`` bytes when a scale is asked for) and
travel, per mode:

* ``coorp`` — :mod:`coorp.runtime` bulk streams: a permit from the team's permit service
  (a separate process, :class:`~coorp.runtime.PermitService`) and local preemption
  (the gate) around the robot's own LS sends;
* ``tcp`` — plain TCP, one connection per worker, no permits, no pacing, no marking
  (what a team would run without Coorp).

In both modes the MPC loop runs alongside on :mod:`coorp.runtime` LS channels: every
worker sends a perception at ``grid + k·period`` (the same instants on every robot);
once the leader has all perceptions of loop ``k`` it sends each worker a control; the
loop's reaction time is the last control's arrival − the loop's start (one clock: the
processes share the host's ``CLOCK_MONOTONIC``), a miss when above the deadline or
never completed.

Syncs (BSP, ASP; SSP is simulated only): BSP — the leader broadcasts model ``v``, every
worker trains on it and sends its parameters back, the leader merges in worker order and
broadcasts ``v + 1``. ASP — the leader merges each update as it arrives and sends the
current model back to that worker. A run stops creating versions after ``duration_s``
(or ``max_versions``) and sends every worker a stop message.

Every message's SHA-256 is recorded by its sender and its receiver; a run checks they
agree (every parameter byte arrived, none changed). Model versions are scored after the
run (the same greedy, fixed-start-state score as the simulated path), so scoring never
takes CPU from the run.

The roles run as ``python -m coorp.learn._runtime permits|server|worker`` (the team key
in the environment variable ``COORP_LEARN_KEY_HEX``, never on the command line); on
loopback (``net="loopback"``) or in network namespaces (``net="netns"``, root, see
:mod:`coorp.learn._netns`).

One concept per module: :mod:`.wire` (the typed sync messages and LS datagrams),
:mod:`.config` (what a run and each role are asked to do), :mod:`.results` (what each
role writes), :mod:`.tcp` (the plain-TCP baseline's framing), :mod:`.role`,
:mod:`.server` and :mod:`.worker` (the processes), :mod:`.network` (where they run:
loopback, wired namespaces, or a network the caller passes), :mod:`.orchestrate` (a run
on one host), :mod:`.scoring` (what a run measured), ``__main__`` (a role's command line).
"""

from coorp.learn._runtime.config import (
    MEDIA,
    MODES,
    NETS,
    RoleConfig,
    RuntimeSpec,
    read_config,
    role_config,
)
from coorp.learn._runtime.network import NetworkFactory, RuntimeNetwork, wired
from coorp.learn._runtime.orchestrate import RuntimeRun, learn_on_runtime
from coorp.learn._runtime.results import ServerResult, WorkerResult
from coorp.learn._runtime.scoring import check_syncs, ls_metrics, percentiles, score_versions
from coorp.learn._runtime.wire import (
    Frame,
    Hello,
    Model,
    SharedSettings,
    Stop,
    SyncMessage,
    Update,
    decode,
    encode,
)

__all__ = [
    "MEDIA",
    "MODES",
    "NETS",
    "Frame",
    "Hello",
    "Model",
    "NetworkFactory",
    "RoleConfig",
    "RuntimeNetwork",
    "RuntimeRun",
    "RuntimeSpec",
    "ServerResult",
    "SharedSettings",
    "Stop",
    "SyncMessage",
    "Update",
    "WorkerResult",
    "check_syncs",
    "decode",
    "encode",
    "learn_on_runtime",
    "ls_metrics",
    "percentiles",
    "read_config",
    "role_config",
    "score_versions",
    "wired",
]
