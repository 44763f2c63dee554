"""``coorp agent --ls``: each report line counts echoes and pings over the same span.

A fake team whose LS channel echoes every ping at once (the generator's own pacing and
clock; no network): every line must then read ``N echoed / N sent``. Before, a line of
the last second said "30 echoes / 61 sent" (its echoes, but every ping so far), which
reads as 50% loss.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from coorp.cli._runtime._agent_tools import PONG_CHANNEL, LsGenerator


@dataclass
class _Stats:
    received: int = 0
    lost: int = 0
    reordered: int = 0


@dataclass
class _Msg:
    kind: str
    channel: str
    payload: bytes


class _EchoingChannel:
    def __init__(self) -> None:
        self.stats = _Stats()
        self.generator: LsGenerator | None = None

    def send(self, payload: bytes) -> str:
        self.stats.received += 1
        assert self.generator is not None
        self.generator.handle(_Msg("ls", f"{PONG_CHANNEL}-r1-1", payload[:24]))
        return "sent"


class _Team:
    def __init__(self) -> None:
        self.channel = _EchoingChannel()

    def latency_sensitive(self, name: str, dest: str, deadline_ms: float) -> Any:
        return self.channel


def test_every_line_counts_echoes_and_pings_of_the_same_span() -> None:
    team = _Team()
    gen = LsGenerator(team, hz=200, nbytes=100, dest="10.0.0.1:7401", reply_port=1)
    team.channel.generator = gen
    lines: list[str] = []
    asyncio.run(asyncio.wait_for(gen.run(2.2, lines.append), timeout=30))
    counts = [re.search(r": (\d+) echoed / (\d+) sent", line) for line in lines]
    assert all(counts), lines
    pairs = [(int(m.group(1)), int(m.group(2))) for m in counts if m]
    assert len(pairs) == 3  # two seconds, then the total
    assert all(echoed == sent for echoed, sent in pairs), lines
    assert sum(sent for _, sent in pairs[:-1]) < pairs[-1][1] == 440  # the rest is the total
    assert lines[-1].startswith("coorp ls: total: 440 echoed / 440 sent")
    assert "receiver so far: " in lines[0] and "receiver: 440 received" in lines[-1]
