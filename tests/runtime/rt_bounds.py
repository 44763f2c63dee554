"""What a hostile member may cost the others (issue 33): programs and namespace
scenarios for ``benchmarks/runtime_faults.py --only members`` (the loopback tests are in
``test_runtime_member_bounds.py``).

Roles (``python rt_bounds.py ROLE``), each printing ``READY``/``RESULT {json}`` and
bounded by ``--timeout``:

* ``inbox`` — a robot's inbox, taking whatever arrives, until a line on stdin; its
  counters;
* ``hog`` — a member that opens ``--count`` bulk messages of ``--bytes`` at an inbox and
  sends nothing, until a line on stdin; which opens were accepted;
* ``sendbulk`` — a robot sending ``--count`` messages of ``--bytes`` to an inbox; how
  many were refused;
* ``launder`` — a member authenticating once from each of the source addresses
  ``--sources PREFIX.LO-HI`` (then closing): turning them into "known" hosts, if the
  service let it.

Scenarios (topology ``rt_netns.Topology``, tag ``c33``; the same team file as
``rt_attacks``): :func:`inbox_hog` and :func:`laundered_flood`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROLES = [sys.executable, str(Path(__file__).resolve())]


def _key(args: argparse.Namespace) -> Any:
    from coorp.runtime import TeamKey

    return TeamKey.from_hex(args.key_hex)


def inbox(args: argparse.Namespace) -> None:
    from coorp.runtime import join

    team = join(None, args.robot, _key(args))
    box = team.listen(args.listen)
    print("READY", flush=True)
    got = 0
    deadline = time.monotonic() + args.timeout
    import select

    while time.monotonic() < deadline:
        if select.select([sys.stdin], [], [], 0)[0]:
            break
        try:
            box.recv(timeout=0.2)
            got += 1
        except TimeoutError:
            pass
    st = box.stats()
    print("RESULT " + json.dumps({"messages": got, "stats": st}), flush=True)
    team.close()


def _raw(dest: str, robot: str, key: Any, role: str, source: str | None = None) -> Any:
    """A framed connection, authenticated as ``robot`` (its own framing, by hand)."""
    from coorp.runtime.wire._auth import (
        CLIENT_TO_SERVER,
        LEADER,
        SERVER_TO_CLIENT,
        FrameOpener,
        FrameSealer,
        new_nonce,
        open_hello,
    )
    from coorp.runtime.wire._format import Join, decode_envelope

    host, port = dest.rsplit(":", 1)
    s = socket.create_connection(
        (host, int(port)), timeout=5, source_address=(source, 0) if source else None
    )

    def frame() -> bytes:
        n = int.from_bytes(_exactly(s, 4), "big")
        return _exactly(s, n)

    hello = open_hello(decode_envelope(frame()))
    nonce = new_nonce()
    mac = key.mac(robot, LEADER if hello.service == "leader" else hello.robot)
    sealer = FrameSealer(mac, CLIENT_TO_SERVER, hello.nonce)
    opener = FrameOpener(mac, SERVER_TO_CLIENT, nonce)
    s.sendall(sealer.seal(Join(robot, nonce, role)))  # type: ignore[arg-type]
    return s, sealer, lambda: opener.open(decode_envelope(frame()))


def _exactly(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("closed")
        buf += chunk
    return buf


def hog(args: argparse.Namespace) -> None:
    from coorp.runtime.wire._format import BulkAccept, BulkOpen

    held, accepted = [], []
    for i in range(args.count):
        s, sealer, recv = _raw(args.to, args.robot, _key(args), "sender")
        s.sendall(sealer.seal(BulkOpen(f"hog{i}", 1, 1, args.bytes, 0)))
        accepted.append(isinstance(recv(), BulkAccept))
        held.append(s)
    print("READY " + json.dumps(accepted), flush=True)
    sys.stdin.readline()
    print("RESULT " + json.dumps({"accepted": accepted}), flush=True)


def sendbulk(args: argparse.Namespace) -> None:
    from coorp.runtime import TransferError, join

    team = join(None, args.robot, _key(args))
    stream = team.bulk("data", args.to)
    refused: list[str] = []
    for _ in range(args.count):
        try:
            stream.send(os.urandom(args.bytes), timeout_s=args.timeout)
        except (TransferError, TimeoutError) as exc:
            refused.append(str(exc))
    print("RESULT " + json.dumps({"sent": args.count, "refused": refused}), flush=True)
    team.close()


def launder(args: argparse.Namespace) -> None:
    prefix, span = args.sources.rsplit(".", 1)
    lo, hi = (int(x) for x in span.split("-"))
    ok = failed = 0
    for i in range(lo, hi + 1):
        try:
            s, _, _ = _raw(args.to, args.robot, _key(args), "observer", f"{prefix}.{i}")
            time.sleep(0.005)  # let the service handle the Join before we go
            s.close()
            ok += 1
        except OSError:
            failed += 1
    print("RESULT " + json.dumps({"authenticated": ok, "failed": failed}), flush=True)


# -- scenarios ------------------------------------------------------------------------------
def inbox_hog(topo: Any, tmp: Path, *, senders: int = 2, count: int = 5) -> dict[str, Any]:
    """``a4`` opens two 1 GiB messages at ``a2``'s inbox and sends nothing; ``a1`` and
    ``a3`` then send ``count`` messages of 1 MB each there: how many are refused."""
    import rt_attacks as attacks

    key = ["--key-hex", attacks.KEY_HEX]
    attacks.team_file(tmp)
    dest = f"{topo.addr('a2')}:{attacks.INBOX_PORT}"
    box = attacks._start(topo, "a2", [*ROLES, "inbox", "--robot", "a2", "--listen",
                                      f"0.0.0.0:{attacks.INBOX_PORT}", *key], "inbox",
                         tmp / "inbox.log")  # fmt: skip
    box.expect("READY", 30)
    h = attacks._start(topo, "a4", [*ROLES, "hog", "--robot", "a4", "--to", dest, "--count", "2",
                                    "--bytes", str(1 << 30), *key], "hog")  # fmt: skip
    hog_opens = json.loads(h.expect_rest("READY ", 60))
    results = []
    for host in ("a1", "a3")[:senders]:
        argv = [*ROLES, "sendbulk", "--robot", host, "--to", dest, "--count", str(count),
                "--bytes", str(1 << 20), *key]  # fmt: skip
        results.append(attacks._result(attacks._start(topo, host, argv, f"send-{host}"), 120))
    h.send("stop")
    box.send("stop")
    st = attacks._result(box, 30)["stats"]
    return {
        "hog_opens_accepted": hog_opens,
        "others_sent": sum(r["sent"] for r in results),
        "others_refused": sum(len(r["refused"]) for r in results),
        "refusals": [x for r in results for x in r["refused"]][:3],
        "inbox": {k: v for k, v in st.items() if "partial" in k},
    }


def cpu_hog(processes: int) -> list[subprocess.Popen[bytes]]:
    """Busy processes (killed by the caller): a loaded machine."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]


def laundered_flood(
    topo: Any, tmp: Path, *, nofile: int, count: int = 2000, probes: int = 6
) -> dict[str, Any]:
    """``a4`` authenticates once as itself from each of its 150 addresses, then floods the
    leader from all of them (``rt_attacks.distributed_flood``'s flood) while ``a1``..``a3``
    stay joined; robots join from their hosts, and ``coorp leader --status`` asks."""
    import rt_attacks as attacks

    topo.add_addresses("a4", attacks.FLOOD_SOURCES)
    attacks.start_leader(topo, tmp, nofile=nofile)
    attacks.leader_stats(topo)
    members = [attacks.member(topo, h) for h in ("a1", "a2", "a3")]
    leader = f"{topo.addr('ld')}:{attacks.LEADER_PORT}"
    src = f"{topo.subnet}.{attacks.FLOOD_SOURCES.start}-{attacks.FLOOD_SOURCES.stop - 1}"
    laundered = json.loads(
        topo.run("a4", [*ROLES, "launder", "--robot", "a4", "--to", leader, "--sources", src,
                        "--key-hex", attacks.KEY_HEX], timeout=120).split("RESULT ", 1)[1]
    )  # fmt: skip
    known = attacks.leader_stats(topo)["known_hosts"]
    flood = attacks._start(topo, "a4", [*attacks.ROLES, "dflood", "--to", leader, "--sources",
                                        src, "--count", str(count), "--timeout", "300"],
                           "dflood")  # fmt: skip
    flood.expect("FLOODED", 60)
    attacks.wait_leader(topo, "the flood is over the pre-auth budget",
                        lambda s: s["dropped_early"] > 0)  # fmt: skip
    joins = [
        attacks.join_probe(topo, ("a1", "a2", "a3")[i % 3], attacks.PROBES[i])
        for i in range(probes)
    ]
    t0 = time.monotonic()
    status = subprocess.run(
        ["ip", "netns", "exec", topo.ns("ld"), *attacks.COORP, "leader", "--status", "--config",
         str(tmp / "team.toml"), "--listen", leader],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    status_s = time.monotonic() - t0
    counters = attacks.leader_stats(topo)
    attacks._stop(flood)
    links = [attacks._stop(m)["link"] for m in members]
    return {
        "nofile": nofile,
        "laundered": laundered,
        "known_hosts_after_laundering": known,
        "joins": joins,
        "member_fallbacks": sum(x.get("fallbacks", 0) for x in links),
        "status_answered": status.returncode == 0 and "health:" in status.stdout,
        "status_s": status_s,
        "leader": {k: counters[k] for k in ("open_connections", "max_connections",
                                            "dropped_early", "dropped_full", "known_hosts",
                                            "known_hosts_forgotten", "accept_healthy")},
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["inbox", "hog", "sendbulk", "launder"])
    p.add_argument("--robot", required=True)
    p.add_argument("--key-hex", required=True)
    p.add_argument("--listen", default="0.0.0.0:7500")
    p.add_argument("--to", default="")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--bytes", type=int, default=1 << 20)
    p.add_argument("--sources", default="")
    p.add_argument("--timeout", type=float, default=120)
    args = p.parse_args()
    {"inbox": inbox, "hog": hog, "sendbulk": sendbulk, "launder": launder}[args.role](args)


if __name__ == "__main__":
    main()
