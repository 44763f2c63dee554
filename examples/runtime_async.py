"""The asyncio API: a leader robot that receives perceptions and answers with controls.

python examples/runtime_async.py            # self-contained, on loopback
"""

from __future__ import annotations

import asyncio
import os

import coorp.runtime as rt

KEY = rt.TeamKey(os.urandom(32))


async def leader_robot(
    team: rt.AsyncTeam, inbox: rt.AsyncInbox, robots: dict[str, str], loops: int
) -> None:
    controls = {
        r: team.latency_sensitive(f"control-{r}", dest, deadline_ms=33)
        for r, dest in robots.items()
    }
    for _ in range(loops * len(robots)):
        msg = await inbox.recv(timeout_s=5)
        controls[msg.robot].send(b"velocity:" + bytes(msg.payload[:4]))


async def worker(name: str, leader_inbox: str, loops: int) -> None:
    team = await rt.ajoin(None, name, KEY)  # pass the leader's address to use permits
    inbox = await team.listen("127.0.0.1:0")
    WORKERS[name] = f"127.0.0.1:{inbox.address[1]}"
    READY.set()
    perception = team.latency_sensitive("perception", leader_inbox, period_ms=33.3, deadline_ms=33)
    rtts = []
    for k in range(loops):
        await START.wait()
        t0 = asyncio.get_running_loop().time()
        perception.send(k.to_bytes(4, "big") + bytes(8000))
        reply = await inbox.recv(timeout_s=5)
        rtts.append((asyncio.get_running_loop().time() - t0) * 1e3)
        assert reply.payload.startswith(b"velocity:")
        await asyncio.sleep(1 / 30)
    print(f"{name}: perception->control round trip median {sorted(rtts)[len(rtts) // 2]:.2f} ms")
    await team.close()


WORKERS: dict[str, str] = {}
READY = asyncio.Event()
START = asyncio.Event()


async def main(loops: int = 30) -> None:
    lead = await rt.ajoin(None, "leader", KEY)
    inbox = await lead.listen("127.0.0.1:0")
    dest = f"127.0.0.1:{inbox.address[1]}"
    tasks = [asyncio.create_task(worker(n, dest, loops)) for n in ("w1", "w2")]
    while len(WORKERS) < 2:
        READY.clear()
        await asyncio.wait_for(READY.wait(), 5)
    START.set()
    await leader_robot(lead, inbox, dict(WORKERS), loops)
    await asyncio.gather(*tasks)
    await lead.close()


if __name__ == "__main__":
    asyncio.run(main())
