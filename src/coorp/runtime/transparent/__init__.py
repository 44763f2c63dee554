"""Transparent mode: protect programs that know nothing of Coorp.

Owns the kernel rules (:mod:`._nft`: one nf_tables table of Coorp's own), the
observation of every LS send with a kernel timestamp (:mod:`._observe`), the relay that
re-sends intercepted bulk connections under the robot's permit (:mod:`._relay`) and what
keeps that privileged proxy safe: the SYN queue (:mod:`._nfqueue`), the gatekeeper that
decides each connection before its handshake (:mod:`._admission`), the program's
identity on the relay's sockets (:mod:`._identity`, :mod:`._connector`), fd and memory
budgets (:mod:`._budget`), endings and refusals (:mod:`._endings`); the agent that ties
them to a joined team (:class:`TransparentAgent`) and ``coorp doctor`` (:func:`diagnose`).
The ``[transparent]`` selectors are part of the team file (:mod:`coorp.runtime._selectors`),
beneath every wing.

The top wing: it drives the robot wing's coordinator and pacer.
"""

from ._agent import TransparentAgent, transparent_ruleset
from ._doctor import Finding, diagnose
from ._nft import NftTable, TransparentUnavailableError
from ._ruleset import Ruleset

__all__ = [
    "Finding",
    "NftTable",
    "Ruleset",
    "TransparentAgent",
    "TransparentUnavailableError",
    "diagnose",
    "transparent_ruleset",
]
