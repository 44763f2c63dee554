"""Namespace carriers: one leader process and one process per robot, driven cell by cell.

The processes (``_roles``) start once per carrier and stay up for every cell: a cell
tells the first N robots to ping at f Hz with S bytes from a common start instant
(``CLOCK_MONOTONIC`` is one clock for every namespace of the machine) and reads back
each robot's round trips and CPU time, and the leader's CPU time and bulk bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from typing import Any

import numpy as np

from coorp.teambench._carriers import CellMeasurement
from coorp.teambench._config import TeamBenchConfig
from coorp.teambench._netns import Network, Proc

__all__ = ["NetnsSession"]

#: Lead time from the command to the first ping (every robot has read its command).
START_LEAD_S = 0.3
HELLO_TIMEOUT_S = 20.0
#: How long a robot waits for its bulk sender to finish the message under way.
BULK_STOP_S = 10.0


def _cyclone_uri() -> str:
    # Only the namespace's veth: DDS discovery and data on the bridge, never on lo.
    return ("<CycloneDDS><Domain><General><Interfaces><NetworkInterface name=\"eth0\"/>"
            "</Interfaces></General></Domain></CycloneDDS>")  # fmt: skip


class NetnsSession:
    def __init__(self, cfg: TeamBenchConfig, network: Network, transport: str) -> None:
        self.cfg, self.net, self.transport = cfg, network, transport
        self.key_hex = os.urandom(32).hex()
        robots = network.hosts[1:]
        roster = ",".join(f"{r}={network.addr(r)}" for r in robots)
        life = str(round(self.lifetime_s(cfg)))
        common = ["--carrier", transport, "--leader", network.addr("ld"), "--robots", roster,
                  "--key-hex", self.key_hex, "--bound-ms", str(cfg.bound_ms),
                  "--seed", str(cfg.seed), "--timeout", life]  # fmt: skip
        env = {"CYCLONEDDS_URI": _cyclone_uri()}
        try:
            self.leader = network.start(
                "ld", [*network.python(), "leader", "--name", "ld", "--addr",
                       network.addr("ld"), *common], env=env, name=f"{transport}:leader",
            )  # fmt: skip
            # Robots start while the leader does (each waits for it: hello below).
            self.robots: list[Proc] = [
                network.start(r, [*network.python(), "robot", "--name", r, "--addr",
                                  network.addr(r), *common], env=env, name=f"{transport}:{r}")
                for r in robots
            ]  # fmt: skip
            self.leader.expect("READY", 60)
            for p in self.robots:
                p.send(json.dumps({"cmd": "hello", "timeout_s": HELLO_TIMEOUT_S}))
            for p in self.robots:
                if not json.loads(p.expect_rest("RESULT ", HELLO_TIMEOUT_S + 30))["ok"]:
                    raise RuntimeError(f"{p.name}: no echo within {HELLO_TIMEOUT_S:g} s")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def lifetime_s(cfg: TeamBenchConfig) -> float:
        """How long the processes may live (their watchdog): every cell of this carrier at
        its longest (sending, draining, stopping bulk, settling) plus start-up."""
        cells = cfg.cells_per_repetition() * cfg.repetitions * len(cfg.bulk)
        return 600 + cells * (START_LEAD_S + cfg.duration_s + cfg.drain_s + 2 * BULK_STOP_S + 5)

    def _leader_stats(self) -> dict[str, Any]:
        self.leader.send(json.dumps({"cmd": "stats"}))
        out: dict[str, Any] = json.loads(self.leader.expect_rest("RESULT ", 30))
        return out

    def _settle(self) -> None:
        """Wait (bounded) until no more bulk bytes reach the leader: a cell must not
        start with the previous one's bytes still queued."""
        last = self._leader_stats()["bulk_bytes"]
        for _ in range(30):
            time.sleep(0.1)
            now = self._leader_stats()["bulk_bytes"]
            if now == last:
                return
            last = now

    def cell(self, robots: int, rate_hz: float, size: int, bulk: str, rep: int) -> CellMeasurement:
        cfg = self.cfg
        t0 = time.monotonic()
        before = self._leader_stats()
        start_ns = time.monotonic_ns() + round(START_LEAD_S * 1e9)
        cmd = {"cmd": "run", "rate_hz": rate_hz, "size": size, "duration_s": cfg.duration_s,
               "drain_s": cfg.drain_s, "bulk": bulk, "bulk_message_bytes": cfg.bulk_message_bytes,
               "bulk_timeout_s": BULK_STOP_S,
               "start_ns": start_ns}  # fmt: skip
        active = self.robots[:robots]
        window_ns = round(cfg.duration_s * 1e9)
        self.leader.send(json.dumps({"cmd": "window", "t0_ns": start_ns,
                                     "t1_ns": start_ns + window_ns}))  # fmt: skip
        for p in active:
            p.send(json.dumps(cmd))
        budget = START_LEAD_S + cfg.duration_s + cfg.drain_s + 2 * BULK_STOP_S + 30
        results = [json.loads(p.expect_rest("RESULT ", budget)) for p in active]
        wall = time.monotonic() - t0
        after = self._leader_stats()
        if bulk != "none":
            self._settle()
        rtt = np.array([x for r in results for x in r["rtt_ns"]], dtype=np.int64)
        cpu = {"leader": after["cpu_s"] - before["cpu_s"]}
        counters = {k: v - before["counters"].get(k, 0) for k, v in after["counters"].items()}
        for r in results:
            for k, v in r["counters"].items():
                counters[k] = counters.get(k, 0) + v
        cpu.update({p.name.split(":")[1]: r["cpu_s"] for p, r in zip(active, results, strict=True)})
        return CellMeasurement(
            rtt_ns=rtt, sent=sum(r["sent"] for r in results), echoed=int(rtt.size), cpu_s=cpu,
            wall_s=wall, bulk_bytes=int(after["window_bytes"] or 0),
            notes=sorted({e for r in results for e in r["errors"]}
                         | ({f"bulk window: {after['window_error']}"}
                            if after.get("window_error") else set())),
            bulk_window_s=cfg.duration_s,
            counters=counters,
        )  # fmt: skip

    def close(self) -> None:
        procs = [*getattr(self, "robots", []), getattr(self, "leader", None)]
        for p in procs:
            if p is not None and p.popen.poll() is None:
                with contextlib.suppress(RuntimeError):
                    p.send(json.dumps({"cmd": "quit"}))
        deadline = time.monotonic() + 3
        for p in procs:
            if p is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.popen.wait(timeout=max(deadline - time.monotonic(), 0.01))
        self.net.stop_procs()
