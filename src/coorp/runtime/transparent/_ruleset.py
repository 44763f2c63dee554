"""Transparent mode's kernel rules as plain data: :func:`build_ruleset` turns the
selectors' :class:`~._selectors.Match` objects into a :class:`Ruleset` (chains of rules,
each a match, an action and a label), rendered in ``nft`` syntax (``coorp agent
--show-rules``) and installed by :class:`~._nft.NftTable`.

The table (``ip coorp-<robot>``, IPv4) holds these chains:

* ``ls_mark`` (``type filter hook output priority mangle``): every LS packet gets
  ``meta priority`` 262 (cfg80211's "802.1d user priority 6", AC_VO, whatever DSCP) and
  DSCP CS6 (what an access point maps to AC_VO downstream), whatever socket options the
  application used; with ``[transparent] ls_category = "AC_VI"``, 261 (UP 5) and CS5
  (AC_VI, which drivers aggregate: :data:`LS_MARKINGS`). The packet socket of
  :mod:`._observe` sees them by that DSCP.
  With ``[transparent] ack_category = "AC_VI"`` (the default) the team's TCP acks get
  260 and CS4 (AC_VI): the relay's pure acks and those this host's programs send from
  a bulk port, as the simulator's ``coorp`` sends them.
* ``bh_gate`` (``type filter hook output priority -120``): the SYN of a new bulk TCP
  connection is queued to the agent (``queue num relay_port``, :mod:`._nfqueue`), which
  decides before the program's handshake completes (:mod:`._admission`); its first
  rules turn the SYNs the agent marks back into the kernel's own refusals (a TCP reset,
  an ICMP unreachable: :mod:`._endings`). Kernels without nft's ``queue`` expression
  get xtables' ``NFQUEUE`` target through nft's compat layer (what iptables-nft does);
* ``bh_redirect`` (``type nat hook output priority dstnat``): the first packet of a
  bulk TCP connection is redirected to the local relay (:mod:`._relay`).
* ``bh_inbound`` (``type nat hook prerouting priority dstnat``, only with server-side
  bulk selectors): the first packet of a connection another host opens to a selected
  listening port is redirected to the inbound relay, which connects to the local
  server itself and sends the server's replies under this robot's permit
  (:class:`~._admission.LocalServer` admits it: no SYN is queued, the connection is
  not a local program's). Coorp's own ports, the inbound relay's port and TCP LS flows
  return first here.

In the output chains, the relay's own connections (``relay_mark``) return first, as do
connections to this host itself (``fib daddr type local``: the relay never relays to
itself), Coorp's ports and every LS match (a TCP LS flow is marked, never intercepted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .._selectors import Match
from ..wire import LS_MARKS
from ._endings import REJECTS

__all__ = [
    "ACK_PRIORITY",
    "LS_MARKINGS",
    "LS_PRIORITY",
    "PURE_ACK_MAX_LEN",
    "LsMarking",
    "Rule",
    "Ruleset",
    "build_ruleset",
    "render_rule",
    "table_name",
]

#: skb priority of LS packets: 256 + 6 is cfg80211's "802.1d UP 6" (AC_VO), the value
#: the API path's sockets get with SO_PRIORITY.
LS_PRIORITY = 256 + LS_MARKS["AC_VO"][0]


@dataclass(frozen=True, slots=True)
class LsMarking:
    """How LS packets are marked for one access category: the skb priority (256 + the
    802.1d user priority: cfg80211 takes the UP from it directly) and the DSCP (what an
    access point maps downstream, RFC 8325; the observer's filter matches it)."""

    priority: int
    dscp: int

    @property
    def tos(self) -> int:
        """The DSCP in the IPv4 TOS byte."""
        return self.dscp << 2

    @property
    def dscp_name(self) -> str:
        """The class selector's name in nft syntax (``cs6``)."""
        return f"cs{self.dscp >> 3}"


#: ``[transparent] ls_category``: AC_VO (the paper's, the default) or AC_VI, with the
#: API sockets' values (:data:`~coorp.runtime.wire.LS_MARKS`). Drivers commonly do not
#: aggregate AC_VO (the simulator's default too): an LS message larger than one frame
#: (a 12 KB perception: 9 fragments) then takes one channel access per frame, where
#: AC_VI carries it in one A-MPDU. CS5 (UP 5), not the acks' CS4, so the observer tells
#: LS from acks by the DSCP alone.
LS_MARKINGS: dict[str, LsMarking] = {
    category: LsMarking(256 + up, dscp) for category, (up, dscp) in LS_MARKS.items()
}
#: skb priority and TOS of the team's TCP acks (``mark_ack``): UP 4 and DSCP CS4, AC_VI,
#: as the API's inboxes send them and the simulator's ``coorp`` (``CoorpPolicy.ack_ac``).
ACK_PRIORITY = 260
#: A pure ack's IPv4 total length at most: 20 bytes of IP and up to 60 of TCP header
#: (timestamps, SACK blocks), up to 40 of IP options. A data segment this short (a few
#: bytes of payload) is marked too: it is as short on the air.
PURE_ACK_MAX_LEN = 120

_HOOK_PRIORITY = {"mangle": -150, "gate": -120, "dstnat": -100}


def table_name(robot: str) -> str:
    return f"coorp-{robot}"


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: a match (None: every packet), then an action."""

    match: Match | None
    action: Literal["mark_ls", "mark_ack", "return", "redirect", "redirect_in", "queue", "reject"]
    label: str
    """What the rule is for (shown in --show-rules and counted in stats)."""
    mark: int | None = None
    """Match this fwmark instead of ``match``."""
    local: bool = False
    """Match connections to this host itself (``fib daddr type local``)."""
    syn: bool = False
    """Only a connection's SYN (``tcp flags & (syn | ack) == syn``). Not ``ct state
    new``: a program that reuses a port within conntrack's memory of an aborted
    connection (10 s in CLOSE) sends a SYN conntrack calls established, which the
    redirect still sends to the relay; the gate must see it too."""
    reject: str | None = None
    """For ``reject``: which of :data:`~._endings.REJECTS`."""
    pure_ack: bool = False
    """Only TCP packets with no payload that acknowledge (``ip length`` at most
    :data:`PURE_ACK_MAX_LEN`, ``tcp flags & (fin | syn | rst | ack) == ack``)."""


@dataclass(slots=True)
class Ruleset:
    table: str
    relay_port: int
    ls_mark: list[Rule] = field(default_factory=list)
    bh_gate: list[Rule] = field(default_factory=list)
    bh_redirect: list[Rule] = field(default_factory=list)
    bh_inbound: list[Rule] = field(default_factory=list)
    inbound_port: int = 0
    ls_marking: LsMarking = LS_MARKINGS["AC_VO"]

    @property
    def queue_num(self) -> int:
        """The SYN queue of the gate chain (the relay's port: unique on the host)."""
        return self.relay_port

    def chains(self) -> list[tuple[str, str, str, str, list[Rule]]]:
        """(name, type, hook, priority, rules) of each chain, in hook order."""
        return [
            ("ls_mark", "filter", "output", "mangle", self.ls_mark),
            ("bh_gate", "filter", "output", "gate", self.bh_gate),
            ("bh_redirect", "nat", "output", "dstnat", self.bh_redirect),
            ("bh_inbound", "nat", "prerouting", "dstnat", self.bh_inbound),
        ]

    def render(self) -> str:
        """The table in ``nft`` syntax, one rule per line with its label as a comment."""
        out = [f"table ip {self.table} {{"]
        for name, kind, hook, prio, rules in self.chains():
            if name in ("bh_gate", "bh_inbound") and not rules:
                continue
            shown = prio if prio != "gate" else str(_HOOK_PRIORITY[prio])
            out.append(f"  chain {name} {{")
            out.append(f"    type {kind} hook {hook} priority {shown}; policy accept;")
            out += [
                f"    {render_rule(r, self.relay_port, self.inbound_port, self.ls_marking)}"
                for r in rules
            ]
            out.append("  }")
        out.append("}")
        return "\n".join(out)


def render_rule(
    rule: Rule,
    relay_port: int,
    inbound_port: int = 0,
    ls_marking: LsMarking = LS_MARKINGS["AC_VO"],
) -> str:
    if rule.mark is not None:
        head = f"meta mark {rule.mark:#x}"
    elif rule.local:
        head = "fib daddr type local"
    else:
        head = rule.match.render() if rule.match is not None else ""
    if rule.syn:
        head = f"{head} tcp flags & (syn | ack) == syn".strip()
    if rule.pure_ack:
        head = (f"{head} ip length 40-{PURE_ACK_MAX_LEN} "
                "tcp flags & (fin | syn | rst | ack) == ack").strip()  # fmt: skip
    action = {
        "mark_ls": f"meta priority set 0:{ls_marking.priority:x} "
        f"ip dscp set {ls_marking.dscp_name}",
        "mark_ack": "meta priority set 0:104 ip dscp set cs4",
        "return": "return",
        "redirect": f"redirect to :{relay_port}",
        "redirect_in": f"redirect to :{inbound_port}",
        "queue": f"queue num {relay_port} bypass",
        "reject": REJECTS[rule.reject][3] if rule.reject is not None else "reject",
    }[rule.action]
    text = f"{head} counter {action}".strip()
    return f'{text} comment "{rule.label}"'


def build_ruleset(
    robot: str,
    ls: list[Match],
    bulk: list[Match],
    *,
    relay_port: int,
    relay_mark: int,
    coorp_ports: tuple[int, ...],
    serve: list[Match] | None = None,
    inbound_port: int = 0,
    acks_in_video: bool = False,
    ls_category: str = "AC_VO",
) -> Ruleset:
    """The rules for ``robot``: LS matches marked; the SYNs of bulk matches queued to
    the agent's gate and the connections redirected to the relay, except the relay's
    own connections, connections to this host, Coorp's own ports and LS flows; the
    connections other hosts open to ``serve`` matches redirected to the inbound relay
    (except Coorp's own ports, the inbound relay's and LS flows); with ``acks_in_video``,
    the team's pure TCP acks marked AC_VI. LS is marked for ``ls_category``
    (:data:`LS_MARKINGS`)."""
    if ls_category not in LS_MARKINGS:
        raise ValueError(f"ls_category {ls_category!r}: one of {', '.join(LS_MARKINGS)}")
    rs = Ruleset(
        table_name(robot),
        relay_port,
        inbound_port=inbound_port,
        ls_marking=LS_MARKINGS[ls_category],
    )
    for i, m in enumerate(ls):
        rs.ls_mark.append(Rule(m, "mark_ls", f"ls {i}"))
    if bulk and acks_in_video:
        # The team's acks in AC_VI: the relay's connections' (a download's, at a robot)
        # and this host's programs' replies from a bulk port (an upload's, at its
        # receiver), pure acks only. Not LS, not the data.
        rs.ls_mark.append(Rule(None, "mark_ack", "relay's acks", mark=relay_mark, pure_ack=True))
        for i, m in enumerate(bulk):
            if m.proto in (None, "tcp") and m.dport is not None:
                back = Match(proto="tcp", sport=m.dport)
                rs.ls_mark.append(Rule(back, "mark_ack", f"acks of bulk {i}", pure_ack=True))
    if bulk:
        exceptions = [
            Rule(None, "return", "relay's own", mark=relay_mark),
            Rule(None, "return", "this host (never relayed)", local=True),
        ]
        for port in sorted(set(coorp_ports)):
            own = Match(proto="tcp", dport=(port, port))
            exceptions.append(Rule(own, "return", f"coorp's own port {port}"))
        for i, m in enumerate(ls):
            if m.proto in (None, "tcp"):
                exceptions.append(Rule(m, "return", f"ls {i} (never bulk)"))
        for name, (offset, _, _, _) in REJECTS.items():
            rs.bh_gate.append(
                Rule(None, "reject", f"refused: {name}", mark=relay_mark + offset, reject=name)
            )
        rs.bh_gate += exceptions
        rs.bh_redirect += exceptions
        for i, m in enumerate(bulk):
            rs.bh_gate.append(Rule(m, "queue", f"bulk {i}", syn=True))
            rs.bh_redirect.append(Rule(m, "redirect", f"bulk {i}"))
    if serve:
        rs.bh_inbound.append(Rule(None, "return", "relay's own", mark=relay_mark))
        for port in sorted(set(coorp_ports) | {inbound_port}):
            own = Match(proto="tcp", dport=(port, port))
            rs.bh_inbound.append(Rule(own, "return", f"coorp's own port {port}"))
        for i, m in enumerate(ls):
            if m.proto in (None, "tcp"):
                rs.bh_inbound.append(Rule(m, "return", f"ls {i} (never bulk)"))
        for i, m in enumerate(serve):
            rs.bh_inbound.append(Rule(m, "redirect_in", f"serve {i}"))
    return rs
