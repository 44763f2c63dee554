"""A host's own egress policy for the relay tests: a table ``ip hostpolicy`` whose
rules reject (TCP reset) what a uid, gid or cgroup sends to a port, in the namespace
this runs in (``apply(None)`` deletes it). Built with the same netlink expressions as
Coorp's own rules (:mod:`coorp.runtime.transparent._nft`).

As a program (``python rt_policy.py RULES_JSON``): applies the rules, prints ``READY``,
removes them at a line on stdin (or its end)."""

from __future__ import annotations

import asyncio
import json
import struct
import sys
from typing import Any

from coorp.runtime._selectors import Match
from coorp.runtime.transparent._nft import (
    _BASE_TRANSPORT,
    _cmp,
    _expr,
    _match_exprs,
    _patch_pyroute2,
    _payload,
    cgroup2_root,
)

TABLE = "hostpolicy"


async def apply(rules: list[dict[str, Any]] | None) -> None:
    """Each rule: ``{"uid"|"gid"|"cgroup": value, "dport": port}``."""
    from pyroute2.nftables.main import AsyncNFTables

    _patch_pyroute2()
    nft = AsyncNFTables(1, 0, 2)
    await nft.setup_endpoint()
    try:
        names = [t.get_attr("NFTA_TABLE_NAME") async for t in await nft.get_tables()]
        if TABLE in names:
            await nft.table("del", name=TABLE)
        if rules is None:
            return
        await nft.table("add", name=TABLE)
        await nft.chain("add", table=TABLE, name="out", hook="output", type="filter",
                        priority=0, policy=1)  # fmt: skip
        for r in rules:
            m = Match(uid=r.get("uid"), gid=r.get("gid"), cgroup=r.get("cgroup"))
            exprs = [
                *_match_exprs(m, cgroup2_root()),
                _payload(_BASE_TRANSPORT, 2, 2),
                _cmp(struct.pack("!H", r["dport"])),
                _expr("reject", type=1, icmp_code=0),
            ]
            await nft.rule("add", table=TABLE, chain="out", expressions=[[e] for e in exprs])
    finally:
        nft.close()


if __name__ == "__main__":
    asyncio.run(apply(json.loads(sys.argv[1])))
    print("READY", flush=True)
    sys.stdin.readline()
    asyncio.run(apply(None))
    print("REMOVED", flush=True)
