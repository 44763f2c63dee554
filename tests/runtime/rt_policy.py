"""A host's own egress policy for the relay tests: a table ``ip hostpolicy`` whose
rules reject (TCP reset) what a uid, gid or cgroup sends to a port, in the namespace
this runs in (``apply(None)`` deletes it). Built with the same netlink expressions as
Coorp's own rules (:mod:`coorp.runtime.transparent._nft`).

As a program (``python rt_policy.py RULES_JSON``): applies the rules, prints ``READY``,
removes them at a line on stdin (or its end)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import select
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
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


@contextlib.contextmanager
def host_policy(net: Any, rules: list[dict[str, Any]]) -> Iterator[None]:
    """The rules as ``a1``'s own egress policy while inside (``net``: a RelayNet)."""
    p = net.start("a1", [sys.executable, str(Path(__file__).resolve()), json.dumps(rules)],
                  "policy")  # fmt: skip
    p.expect("READY", 60)
    try:
        yield
    finally:
        p.send("remove")
        p.expect("REMOVED", 60)


def make_cgroup() -> tuple[str, int] | None:
    """A cgroup v2 of this run (path, id), or None where none can be made."""
    root = cgroup2_root()
    if root is None:
        return None
    path = root / f"coorpt-{os.getpid()}-relay"
    try:
        path.mkdir(exist_ok=True)
    except OSError:
        return None
    return str(path), os.stat(path).st_ino


def remove_cgroup(path: str, *, tries: int = 50) -> None:
    """Move what is left in it (the relay's connector) to the root, then remove it. A
    process that is exiting stays a member until it is reaped (rmdir: EBUSY), so on
    EBUSY wait for the kernel's next ``cgroup.events`` change (at most 0.2 s) and try
    again, ``tries`` times at most."""
    root = Path(path).parent
    for attempt in range(tries):
        for pid in Path(path, "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # it may have ended meanwhile
                (root / "cgroup.procs").write_text(f"{pid}\n")
        try:
            os.rmdir(path)
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or attempt == tries - 1:
                raise
        with open(Path(path, "cgroup.events")) as events:
            events.read()
            waiter = select.poll()
            waiter.register(events, select.POLLPRI)
            waiter.poll(200)


if __name__ == "__main__":
    asyncio.run(apply(json.loads(sys.argv[1])))
    print("READY", flush=True)
    sys.stdin.readline()
    asyncio.run(apply(None))
    print("REMOVED", flush=True)
