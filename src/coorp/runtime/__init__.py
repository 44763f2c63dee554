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
"""

from coorp.runtime._auth import Keyring, RobotKey, TeamKey
from coorp.runtime._bulk import AsyncBulkStream, BulkReceipt, BulkSettings
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
from coorp.runtime._doctor import Finding, diagnose
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
from coorp.runtime._inbox import AsyncInbox, Inbox
from coorp.runtime._latency import ChannelStats, LatencySensitiveChannel
from coorp.runtime._leader import LeaderSettings, PermitService, leader_settings
from coorp.runtime._marking import Marking, mark_socket, probe_marking
from coorp.runtime._nft import NftTable, Ruleset, TransparentUnavailableError
from coorp.runtime._observer import TeamStatus, aquery_team, query_leader_stats
from coorp.runtime._receiver import Message, ReceiverLimits
from coorp.runtime._selectors import BulkSelector, LsSelector, TransparentSection
from coorp.runtime._settings import TeamSettings, team_settings
from coorp.runtime._sockets import format_address, parse_address
from coorp.runtime._team import AsyncTeam, ajoin
from coorp.runtime._threaded import BulkStream, Team, join, join_config
from coorp.runtime._transparent import TransparentAgent, transparent_ruleset

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
    "ChannelStats",
    "Finding",
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
    "RobotKey",
    "Ruleset",
    "RuntimeUsageError",
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
    "aquery_team",
    "diagnose",
    "format_address",
    "join",
    "join_config",
    "leader_settings",
    "load_team_config",
    "mark_socket",
    "parse_address",
    "probe_marking",
    "query_leader_stats",
    "resolve_team_key",
    "team_settings",
    "transparent_ruleset",
    "write_team_keys",
]
