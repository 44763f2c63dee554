"""The real runtime: coordinated preemption on Linux sockets.

A robot joins its team (:func:`join` for threads, :func:`ajoin` for asyncio) and gets

* latency-sensitive (LS) channels — one marked (AC_VO) UDP datagram per message,
  keep-last freshness, deadlines (:class:`LatencySensitiveChannel`);
* bandwidth-hungry (BH) bulk streams — permit from the leader, chunks paced by local
  preemption, resume without loss after preemption or reconnects
  (:class:`BulkStream`, :class:`AsyncBulkStream`);
* inboxes that deliver whole messages with metadata (:class:`Inbox`,
  :class:`AsyncInbox`, :class:`Message`).

The leader runs :class:`PermitService` (``coorp leader``). Decisions come from
:mod:`coorp.control`, the same code the simulator runs. See ``docs/runtime.md``.

The package is a few wings by role, each a sub-package whose ``__init__`` says what it
owns and exports; a wing imports only the wings below it, through their ``__init__``
(``tests/test_layering.py`` checks it):

* ``transparent/`` — kernel rules, LS observation, the relay, ``coorp doctor``;
* ``robot/`` — the agent: team, leader link, permits, pacing, bulk, LS channels;
* ``leader/`` and ``inbox/`` (peers) — the permit service; receiving whole messages;
* the team file (``_config``, ``_selectors``), beneath every wing;
* ``wire/`` — message format, authentication, framing, sockets, accept loops;
* errors and counters (``_errors``, ``_counters``), the ground of the runtime.
"""

from coorp.runtime._config import (
    AgentSection,
    LeaderSection,
    TeamConfig,
    TeamFileError,
    TeamSection,
    load_team_config,
    resolve_team_key,
    write_team_keys,
)
from coorp.runtime._errors import (
    AuthenticationError,
    FrameTooLargeError,
    MalformedFrameError,
    MarkingError,
    PeerTimeoutError,
    RefusedError,
    ReplayError,
    RuntimeUsageError,
    StaleError,
    TransferError,
    UnsupportedVersionError,
)
from coorp.runtime._fleet import CellSection, FleetSection
from coorp.runtime._priority import Scheduling, apply_scheduling, parse_scheduling
from coorp.runtime._selectors import BulkSelector, LsSelector, TransparentSection
from coorp.runtime.inbox import AsyncInbox, Inbox, Message, ReceiverLimits
from coorp.runtime.leader import (
    CellService,
    LeaderSettings,
    PermitService,
    TeamStatus,
    aquery_team,
    leader_settings,
    query_leader_stats,
)
from coorp.runtime.robot import (
    AsyncBulkStream,
    AsyncTeam,
    BulkReceipt,
    BulkSettings,
    BulkStream,
    ChannelStats,
    LatencySensitiveChannel,
    Roaming,
    RoamingCell,
    Team,
    TeamSettings,
    ajoin,
    bssid_reader,
    default_gateway,
    join,
    join_config,
    route_changes,
    team_settings,
)
from coorp.runtime.transparent import (
    Finding,
    NftTable,
    Ruleset,
    TransparentAgent,
    TransparentUnavailableError,
    diagnose,
    transparent_ruleset,
)
from coorp.runtime.wire import (
    Keyring,
    Marking,
    RobotKey,
    TeamKey,
    format_address,
    mark_socket,
    parse_address,
    probe_marking,
)

__all__ = [
    "AgentSection",
    "AsyncBulkStream",
    "AsyncInbox",
    "AsyncTeam",
    "AuthenticationError",
    "BulkReceipt",
    "BulkSelector",
    "BulkSettings",
    "BulkStream",
    "CellSection",
    "CellService",
    "ChannelStats",
    "Finding",
    "FleetSection",
    "FrameTooLargeError",
    "Inbox",
    "Keyring",
    "LatencySensitiveChannel",
    "LeaderSection",
    "LeaderSettings",
    "LsSelector",
    "MalformedFrameError",
    "Marking",
    "MarkingError",
    "Message",
    "NftTable",
    "PeerTimeoutError",
    "PermitService",
    "ReceiverLimits",
    "RefusedError",
    "ReplayError",
    "Roaming",
    "RoamingCell",
    "RobotKey",
    "Ruleset",
    "RuntimeUsageError",
    "Scheduling",
    "StaleError",
    "Team",
    "TeamConfig",
    "TeamFileError",
    "TeamKey",
    "TeamSection",
    "TeamSettings",
    "TeamStatus",
    "TransferError",
    "TransparentAgent",
    "TransparentSection",
    "TransparentUnavailableError",
    "UnsupportedVersionError",
    "ajoin",
    "apply_scheduling",
    "aquery_team",
    "bssid_reader",
    "default_gateway",
    "diagnose",
    "format_address",
    "join",
    "join_config",
    "leader_settings",
    "load_team_config",
    "mark_socket",
    "parse_address",
    "parse_scheduling",
    "probe_marking",
    "query_leader_stats",
    "resolve_team_key",
    "route_changes",
    "team_settings",
    "transparent_ruleset",
    "write_team_keys",
]
