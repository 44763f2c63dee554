"""Transparent mode's kernel rules, installed: the netlink form of a
:class:`~._ruleset.Ruleset` (what ``nft --debug=netlink`` would print) and
:class:`NftTable`, which installs it as one nf_tables table of Coorp's own per robot
(the chains and what each rule does: :mod:`._ruleset`).

**Lifetime.** The table is created with ``NFT_TABLE_F_OWNER`` where the kernel has it
(5.12+): the kernel deletes it when the agent's netlink socket closes, so even
``kill -9`` leaves no rule behind. Older kernels get a plain table; the next start
deletes a table of the same name left by a crash, and ``coorp agent --remove-rules``
deletes it explicitly.

**Why pyroute2.** Its netlink sockets, message encoding and nf_tables batches are what
``nft`` would do through libnftables; it is pure Python from PyPI (``pip install
'coorp[transparent]'``), where libnftables needs a system package (Debian's
``python3-nftables``) that a robot may not have. :func:`_expr` builds each expression's
netlink form (the bytecode ``nft --debug=netlink`` prints); the ``socket`` expression's
cgroup v2 level attribute, missing from pyroute2, is added at import.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
from collections import OrderedDict
from pathlib import Path
from typing import Any

from coorp._errors import ConfigurationError

from .._selectors import RTPS_MAGIC, Match
from ._endings import REJECTS
from ._ruleset import (
    _HOOK_PRIORITY,
    ACK_PRIORITY,
    LS_MARKINGS,
    PURE_ACK_MAX_LEN,
    LsMarking,
    Rule,
    Ruleset,
    render_rule,
)

__all__ = [
    "NftTable",
    "TransparentUnavailableError",
    "cgroup2_root",
]

#: DSCP CS4 in the IPv4 TOS byte (32 << 2): the team's acks.
_TOS_CS4 = 0x80

_L4 = {"udp": socket.IPPROTO_UDP, "tcp": socket.IPPROTO_TCP}
# nf_tables constants (include/uapi/linux/netfilter/nf_tables.h).
_META_PRIORITY, _META_MARK, _META_SKUID, _META_SKGID, _META_L4PROTO = 2, 3, 10, 11, 16
_BASE_NETWORK, _BASE_TRANSPORT = 1, 2
_CMP_EQ = 0
_FIB_RESULT_ADDRTYPE, _FIB_F_DADDR, _RTN_LOCAL = 3, 1 << 1, 2
_QUEUE_BYPASS = 1
_NFT_RETURN = -5
_NFT_SOCKET_CGROUPV2 = 3
_CSUM_INET = 1
_TABLE_F_OWNER = 2
_NFPROTO_IPV4 = 2


class TransparentUnavailableError(ConfigurationError):
    """This host cannot run transparent mode; the message says what is missing."""


# -- netlink form ---------------------------------------------------------------------------
def _data(value: bytes) -> dict[str, Any]:
    return {"attrs": [("NFTA_DATA_VALUE", value)]}


def _expr(name: str, **attrs: Any) -> dict[str, Any]:
    data = [(f"NFTA_{name.upper()}_{k.upper()}", v) for k, v in attrs.items()]
    return {"attrs": [("NFTA_EXPR_NAME", name), ("NFTA_EXPR_DATA", {"attrs": data})]}


def _load_meta(key: int) -> dict[str, Any]:
    return _expr("meta", dreg=1, key=key)


def _cmp(value: bytes) -> dict[str, Any]:
    return _expr("cmp", sreg=1, op=_CMP_EQ, data=_data(value))


def _payload(base: int, offset: int, length: int) -> dict[str, Any]:
    return _expr("payload", dreg=1, base=base, offset=offset, len=length)


def _bitwise(mask: bytes, xor: bytes) -> dict[str, Any]:
    return _expr("bitwise", sreg=1, dreg=1, len=len(mask), mask=_data(mask), xor=_data(xor))


def _immediate(value: bytes) -> dict[str, Any]:
    return _expr("immediate", dreg=1, data=_data(value))


def _verdict(code: int) -> dict[str, Any]:
    verdict = {"attrs": [("NFTA_DATA_VERDICT", {"attrs": [("NFTA_VERDICT_CODE", code)]})]}
    return _expr("immediate", dreg=0, data=verdict)


def _ports(offset: int, r: tuple[int, int]) -> list[dict[str, Any]]:
    out = [_payload(_BASE_TRANSPORT, offset, 2)]
    lo, hi = struct.pack("!H", r[0]), struct.pack("!H", r[1])
    if r[0] == r[1]:
        out.append(_cmp(lo))
    else:
        out.append(_expr("range", sreg=1, op=0, from_data=_data(lo), to_data=_data(hi)))
    return out


def _match_exprs(m: Match, cgroup_root: Path | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if m.uid is not None:
        out += [_load_meta(_META_SKUID), _cmp(struct.pack("=I", m.uid))]
    if m.gid is not None:
        out += [_load_meta(_META_SKGID), _cmp(struct.pack("=I", m.gid))]
    if m.cgroup is not None:
        level, cgid = _cgroup_id(m.cgroup, cgroup_root)
        out += [
            _expr("socket", key=_NFT_SOCKET_CGROUPV2, dreg=1, level=level),
            _cmp(struct.pack("=Q", cgid)),
        ]
    if m.saddr is not None:
        out.append(_payload(_BASE_NETWORK, 12, 4))
        if m.saddr.prefixlen < 32:
            out.append(_bitwise(m.saddr.netmask.packed, bytes(4)))
        out.append(_cmp(m.saddr.network_address.packed))
    if m.daddr is not None:
        out.append(_payload(_BASE_NETWORK, 16, 4))
        if m.daddr.prefixlen < 32:
            out.append(_bitwise(m.daddr.netmask.packed, bytes(4)))
        out.append(_cmp(m.daddr.network_address.packed))
    if m.dscp is not None:
        out += [_payload(_BASE_NETWORK, 1, 1), _bitwise(b"\xfc", b"\x00")]
        out.append(_cmp(bytes([m.dscp << 2])))
    if m.proto is not None:
        out += [_load_meta(_META_L4PROTO), _cmp(bytes([_L4[m.proto]]))]
    if m.dport is not None:
        out += _ports(2, m.dport)
    if m.sport is not None:
        out += _ports(0, m.sport)
    if m.rtps:  # the 4 bytes after the UDP header (the rule above checked l4proto udp)
        out += [_payload(_BASE_TRANSPORT, 8, len(RTPS_MAGIC)), _cmp(RTPS_MAGIC)]
    return out


def _queue(num: int, compat: bool) -> dict[str, Any]:
    """``queue num N bypass``: nft's own expression, or xtables' NFQUEUE target (v3:
    queue number, queues, flags) through the compat layer where nft_queue is missing."""
    if not compat:
        return _expr("queue", num=num, total=1, flags=_QUEUE_BYPASS)
    info = struct.pack("=HHH2x", num, 1, _QUEUE_BYPASS)
    data = [("NFTA_TARGET_NAME", "NFQUEUE"), ("NFTA_TARGET_REV", 3), ("NFTA_TARGET_INFO", info)]
    return {"attrs": [("NFTA_EXPR_NAME", "target"), ("NFTA_EXPR_DATA", {"attrs": data})]}


def _rule_exprs(
    rule: Rule,
    relay_port: int,
    cgroup_root: Path | None,
    *,
    compat_queue: bool = False,
    ls_marking: LsMarking = LS_MARKINGS["AC_VO"],
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if rule.mark is not None:
        out += [_load_meta(_META_MARK), _cmp(struct.pack("=I", rule.mark))]
    elif rule.local:
        out += [
            _expr("fib", dreg=1, result=_FIB_RESULT_ADDRTYPE, flags=_FIB_F_DADDR),
            _cmp(struct.pack("=I", _RTN_LOCAL)),
        ]
    elif rule.match is not None:
        out += _match_exprs(rule.match, cgroup_root)
    if rule.syn:
        out += [
            _load_meta(_META_L4PROTO),
            _cmp(bytes([socket.IPPROTO_TCP])),
            _payload(_BASE_TRANSPORT, 13, 1),
            _bitwise(b"\x12", b"\x00"),
            _cmp(b"\x02"),
        ]
    if rule.pure_ack:
        lo, hi = struct.pack("!H", 40), struct.pack("!H", PURE_ACK_MAX_LEN)
        out += [
            _load_meta(_META_L4PROTO),
            _cmp(bytes([socket.IPPROTO_TCP])),
            _payload(_BASE_NETWORK, 2, 2),
            _expr("range", sreg=1, op=0, from_data=_data(lo), to_data=_data(hi)),
            _payload(_BASE_TRANSPORT, 13, 1),
            _bitwise(b"\x17", b"\x00"),
            _cmp(b"\x10"),
        ]
    out.append(_expr("counter"))
    if rule.action in ("mark_ls", "mark_ack"):
        priority, tos = (
            (ls_marking.priority, ls_marking.tos)
            if rule.action == "mark_ls"
            else (ACK_PRIORITY, _TOS_CS4)
        )
        out += [
            _immediate(struct.pack("=I", priority)),
            _expr("meta", key=_META_PRIORITY, sreg=1),
            # DSCP is the top of byte 1; the checksum is summed in 16-bit words, so
            # bytes 0-1 are rewritten together (as nft does): version/IHL kept, ECN
            # kept, the DSCP set; the header checksum at byte 10 updated.
            _payload(_BASE_NETWORK, 0, 2),
            _bitwise(b"\xff\x03", bytes([0, tos])),
            _expr(
                "payload",
                sreg=1,
                base=_BASE_NETWORK,
                offset=0,
                len=2,
                csum_type=_CSUM_INET,
                csum_offset=10,
            ),
        ]
    elif rule.action == "return":
        out.append(_verdict(_NFT_RETURN))
    elif rule.action == "queue":
        out.append(_queue(relay_port, compat_queue))
    elif rule.action == "reject":
        assert rule.reject is not None
        _, kind, code, _ = REJECTS[rule.reject]
        out.append(_expr("reject", type=kind, icmp_code=code))
    else:
        out += [_immediate(struct.pack("!H", relay_port)), _expr("redir", reg_proto_min=1)]
    return out


def _rule_port(rule: Rule, rs: Ruleset) -> int:
    return rs.inbound_port if rule.action == "redirect_in" else rs.relay_port


def cgroup2_root() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (None: not mounted)."""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return Path(left.split(" ")[4])
    except OSError:
        return None
    return None


def _cgroup_id(path: str, root: Path | None) -> tuple[int, int]:
    if root is None:
        raise TransparentUnavailableError(
            f"selector cgroup = {path!r}: no cgroup v2 hierarchy is mounted on this host "
            "(select by uid or gid instead)"
        )
    full = root / path
    try:
        ino = os.stat(full).st_ino
    except OSError as exc:
        raise TransparentUnavailableError(
            f"selector cgroup = {path!r}: {full} does not exist ({exc.strerror}); "
            "start the service first, or select by uid or gid"
        ) from None
    return len(Path(path).parts), ino


def _patch_pyroute2() -> None:
    """pyroute2 0.9 knows the ``socket`` expression without its cgroup v2 key and
    level attribute; add them (the class compiles its map on first use). Its ``fib``
    expression encodes its result and flags as name lists that do not match the
    kernel's (a result is a number, the flags a bit mask), and its ``queue`` flags as a
    name list: both are given as plain numbers here."""
    from pyroute2.netlink.nfnetlink import nftsocket

    exprs = nftsocket.nft_contains_expr.nft_expr
    cls = exprs.nft_socket
    if not any(name == "NFTA_SOCKET_LEVEL" for name, _ in cls.nla_map):
        cls.nla_map = (*cls.nla_map, ("NFTA_SOCKET_LEVEL", "be32"))
    cls.socket_keys.ops = {**cls.socket_keys.ops, _NFT_SOCKET_CGROUPV2: "NFT_SOCKET_CGROUPV2"}
    exprs.nft_fib.nla_map = (
        ("NFTA_FIB_UNSPEC", "none"),
        ("NFTA_FIB_DREG", "regs"),
        ("NFTA_FIB_RESULT", "be32"),
        ("NFTA_FIB_FLAGS", "be32"),
    )
    exprs.nft_queue.nla_map = (
        ("NFTA_QUEUE_UNSPEC", "none"),
        ("NFTA_QUEUE_NUM", "be16"),
        ("NFTA_QUEUE_TOTAL", "be16"),
        ("NFTA_QUEUE_FLAGS", "be16"),
        ("NFTA_QUEUE_SREG_QNUM", "regs"),
    )


class NftTable:
    """Coorp's table in the kernel: install, read counters, remove (asyncio)."""

    def __init__(self, ruleset: Ruleset) -> None:
        self.ruleset = ruleset
        self._nft: Any = None
        self.owned = False
        """True when the kernel removes the table with our netlink socket."""
        self.stale_removed = False
        self.compat_queue = False
        """True when the SYN queue rules use xtables' NFQUEUE (no nft_queue here)."""

    async def _socket(self) -> Any:
        if self._nft is None:
            try:
                from pyroute2.nftables.main import AsyncNFTables
            except ImportError:
                raise TransparentUnavailableError(
                    "transparent mode needs pyroute2: pip install 'coorp[transparent]'"
                ) from None
            _patch_pyroute2()
            nft = AsyncNFTables(1, 0, _NFPROTO_IPV4)
            try:
                await nft.setup_endpoint()
            except OSError as exc:
                raise TransparentUnavailableError(
                    f"cannot open an nf_tables netlink socket ({exc}): "
                    "the kernel needs CONFIG_NF_TABLES"
                ) from None
            self._nft = nft
        return self._nft

    async def exists(self) -> bool:
        nft = await self._socket()
        try:
            tables = [t async for t in await nft.get_tables()]
        except Exception as exc:
            raise _explain(exc, "list nf_tables tables") from None
        return any(t.get_attr("NFTA_TABLE_NAME") == self.ruleset.table for t in tables)

    async def remove(self) -> bool:
        """Delete the table if it exists; True if it did."""
        nft = await self._socket()
        if not await self.exists():
            return False
        try:
            await nft.table("del", name=self.ruleset.table)
        except Exception as exc:
            raise _explain(exc, f"delete table {self.ruleset.table}") from None
        return True

    async def install(self) -> None:
        """Remove a table left by a crash, then create ours with every rule."""
        nft = await self._socket()
        rs = self.ruleset
        self.stale_removed = await self.remove()
        cgroup_root = cgroup2_root()
        try:
            try:
                await nft.table("add", kwarg=OrderedDict(name=rs.table, flags=_TABLE_F_OWNER))
                self.owned = True
            except Exception as exc:
                if getattr(exc, "code", None) not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                await nft.table("add", name=rs.table)  # kernel < 5.12: no owner flag
            for chain, kind, hook, prio, rules in rs.chains():
                if not rules:
                    continue
                try:
                    await nft.chain(
                        "add",
                        table=rs.table,
                        name=chain,
                        hook=hook,
                        type=kind,
                        priority=_HOOK_PRIORITY[prio],
                        policy=1,
                    )
                except Exception as exc:
                    raise _explain(exc, f"add chain {chain} (type {kind} hook {hook})") from None
                for r in rules:
                    await self._add_rule(nft, chain, r, cgroup_root)
        except BaseException:
            if self._nft is not None:
                with contextlib.suppress(Exception):  # the original error says more
                    await self.remove()
            raise

    async def _add_rule(self, nft: Any, chain: str, r: Rule, cgroup_root: Path | None) -> None:
        rs = self.ruleset
        for _ in range(2):
            port = _rule_port(r, rs)
            exprs = _rule_exprs(
                r, port, cgroup_root, compat_queue=self.compat_queue, ls_marking=rs.ls_marking
            )
            try:
                await nft.rule("add", table=rs.table, chain=chain, expressions=[[e] for e in exprs])
                return
            except Exception as exc:
                code = getattr(exc, "code", None)
                if r.action == "queue" and not self.compat_queue and code == errno.ENOENT:
                    self.compat_queue = True  # no nft_queue: xtables' NFQUEUE instead
                    continue
                text = render_rule(r, rs.relay_port, rs.inbound_port, rs.ls_marking)
                raise _explain(exc, f"add rule {text!r}") from None

    async def counters(self) -> dict[str, tuple[int, int]]:
        """Packets and bytes matched per rule label (summed over a label's rules)."""
        nft = await self._socket()
        out: dict[str, tuple[int, int]] = {}
        labels = {name: [r.label for r in rules] for name, _, _, _, rules in self.ruleset.chains()}
        seen = dict.fromkeys(labels, 0)
        try:
            rules = [r async for r in await nft.get_rules()]
        except Exception as exc:
            raise _explain(exc, "list rules") from None
        for r in rules:
            if r.get_attr("NFTA_RULE_TABLE") != self.ruleset.table:
                continue
            chain = r.get_attr("NFTA_RULE_CHAIN")
            if chain not in labels or seen[chain] >= len(labels[chain]):
                continue
            label = labels[chain][seen[chain]]
            seen[chain] += 1
            if chain == "bh_gate":
                label = f"gate: {label}"  # the same selectors also label the redirects
            for e in r.get_attr("NFTA_RULE_EXPRESSIONS") or ():
                if e.get_attr("NFTA_EXPR_NAME") == "counter":
                    data = e.get_attr("NFTA_EXPR_DATA")
                    pk, by = out.get(label, (0, 0))
                    out[label] = (
                        pk + (data.get_attr("NFTA_COUNTER_PACKETS") or 0),
                        by + (data.get_attr("NFTA_COUNTER_BYTES") or 0),
                    )
        return out

    def close(self) -> None:
        """Close the netlink socket (an owned table disappears with it)."""
        if self._nft is not None:
            self._nft.close()
            self._nft = None


def _explain(exc: BaseException, what: str) -> BaseException:
    code = getattr(exc, "code", None)
    if isinstance(exc, TransparentUnavailableError):
        return exc
    if code == errno.EPERM:
        return TransparentUnavailableError(
            f"{what}: permission denied: transparent mode needs CAP_NET_ADMIN "
            "(run the agent as root or grant it the capability)"
        )
    if code in (errno.ENOENT, errno.EOPNOTSUPP, errno.EAFNOSUPPORT):
        return TransparentUnavailableError(
            f"{what}: the kernel lacks a needed nf_tables feature ({os.strerror(code)}); "
            "transparent mode needs nf_tables with NAT (nft_redir), meta, payload, range, "
            "fib, reject, queue (nft_queue, or xt_NFQUEUE through nft_compat) and, for "
            "cgroup selectors, nft_socket"
        )
    return TransparentUnavailableError(f"{what}: {exc}")
