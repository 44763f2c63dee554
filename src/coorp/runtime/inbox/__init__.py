"""Inboxes: where a team member receives whole LS and bulk messages.

Owns :class:`Inbox`/:class:`AsyncInbox` (one UDP socket for LS datagrams, one TCP
listener for bulk messages), the receivers behind them (:mod:`._receiver`,
:mod:`._lsdecoder`: each message checked and delivered whole, exactly once), the LS
sessions and their anti-replay windows (:mod:`._lssessions`), and what an inbox saw of
each sender's LS latency (:class:`LatencyBook`).

Built on the wire; the robot wing above holds inboxes inside a team.
"""

from ._inbox import AsyncInbox, Inbox, bind_endpoints
from ._latency_book import LatencyBook
from ._receiver import Message, ReceiverLimits

__all__ = [
    "AsyncInbox",
    "Inbox",
    "LatencyBook",
    "Message",
    "ReceiverLimits",
    "bind_endpoints",
]
