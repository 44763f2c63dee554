"""An emulated channel as a context manager: namespaces, interfaces, the emulator process.

:class:`Emulation` makes one namespace per station of a scenario (``_hosts``), starts
the emulator process on their TUN interfaces (``python -m coorp.emulate._serve``) and
starts programs inside the namespaces; :meth:`Emulation.stop` ends the emulator and
returns its report, :meth:`Emulation.destroy` (also the context manager's exit) kills
every process inside and deletes everything, on every exit path. A run killed before
its ``destroy`` leaves namespaces named after its pid; the next start removes them
(``_hosts.remove_stale``). With two CPUs or more (``split_cpus``, the default) the
emulator is pinned to one and the stations' received packets are steered to the others
(``_hosts.cpu_split``, ``Hosts.steer_receives``): the receiving hosts' network stacks
then run beside their programs, not inside the emulator's writes.

The interface of :class:`coorp._netns.StarNetwork` (``ns``, ``addr``, ``popen``,
``start``, ``run``, ``stop_procs``, ``destroy``) is kept (the emulator itself starts
with :meth:`Emulation.up`, or on entering the context), so code written for the wired
star runs on the emulated channel unchanged (:class:`EmulatedStar` names the hosts as
the star does: ``ld`` the AP, ``r1``.. the others).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from coorp._errors import ConfigurationError, UsageError
from coorp._netns import NamespacePrograms, Proc
from coorp.emulate._air import choose_ap, station_addresses
from coorp.emulate._hosts import Hosts, cpu_split, remove_stale
from coorp.scenario import Scenario

__all__ = [
    "GRO_DEFAULT", "EmulatedStar", "Emulation", "EmulationReport", "emulation_unavailable",
]  # fmt: skip

#: Whether :class:`Emulation` hands the stations' stacks GRO-coalesced TCP segments
#: (``coorp.emulate._gro``) unless told otherwise.
GRO_DEFAULT = True


_PR_SET_PDEATHSIG = 1


def emulation_unavailable() -> str | None:
    """Why ``coorp emulate`` cannot run here (not root, no ``ip``, no namespaces, no
    /dev/net/tun), or None."""
    from coorp._netns import netns_unavailable

    why = netns_unavailable("cemuprobe")
    if why is not None:
        return why
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun is missing: the kernel has no TUN/TAP driver"
    return None


def _die_with_parent() -> None:  # runs in the child, between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass(frozen=True)
class EmulationReport:
    """What the emulator process reported (``data``: the whole JSON)."""

    data: dict[str, Any]

    @property
    def realtime_held(self) -> bool:
        return bool(self.data["realtime_held"])

    @property
    def lag_p99_ms(self) -> float:
        return float(self.data["frame_lag"]["p99_ms"])

    @property
    def late_frames(self) -> int:
        return int(self.data["frame_lag"]["late"])

    @property
    def verdict(self) -> str:
        return str(self.data["verdict"])

    def rx_mbps(self, station: str, from_s: float, to_s: float) -> float:
        """IP throughput received by ``station`` (as a hop's receiver) between the
        per-second samples nearest ``from_s`` and ``to_s`` of simulated time."""
        series = self.data["series"]
        i = self.data["stations"].index(station)
        if len(series) < 2:
            raise UsageError("the run was too short for a throughput (< 2 samples)")

        def nearest(t: float) -> dict[str, Any]:
            return min(series, key=lambda s: abs(s["t_ns"] / 1e9 - t))

        a, b = nearest(from_s), nearest(to_s)
        if b["t_ns"] <= a["t_ns"]:
            raise UsageError(f"no samples between {from_s} s and {to_s} s")
        return float((b["rx_bytes"][i] - a["rx_bytes"][i]) * 8e3 / (b["t_ns"] - a["t_ns"]))


class Emulation(NamespacePrograms):
    """Namespaces over one emulated channel (see the module docstring)."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int | None = None,
        ap: str | None = None,
        subnet: str = "10.77.0",
        queue_packets: int = 1000,
        background: bool = False,
        tag: str = "cemu",
        duration_s: float | None = None,
        trace_dir: str | Path | None = None,
        record_arrivals: bool = False,
        status: bool = False,
        rt_priority: int = 10,
        sysctls: Sequence[str] = (),
        source: str = "<scenario>",
        stderr: IO[bytes] | int | None = None,
        ifname: str = "wlan0",
        split_cpus: bool = True,
        gro: bool = GRO_DEFAULT,
    ) -> None:
        self.scenario = scenario
        self.stations = [s.name for s in scenario.stations]
        self.ap = choose_ap(scenario, ap)
        self.addresses = station_addresses(self.stations, self.ap, subnet)
        self.subnet = subnet
        #: The namespaces and TUN interfaces (``coorp.emulate._hosts.Hosts``).
        self.netns = Hosts(self.stations, self.addresses, tag=tag, mtu=scenario.packet_bytes,
                           ifname=ifname, vnet_hdr=gro)  # fmt: skip
        #: The hosts by the names :meth:`ns` and :meth:`addr` take (StarNetwork's
        #: ``hosts``): the scenario's stations.
        self.hosts = list(self.stations)
        self._cfg: dict[str, Any] = {
            "scenario": scenario.model_dump(mode="json"), "source": source, "seed": seed,
            "ap": self.ap, "subnet": subnet, "queue_packets": queue_packets,
            "background": background, "duration_s": duration_s,
            "trace_dir": None if trace_dir is None else str(trace_dir),
            "record_arrivals": record_arrivals, "status": status, "rt_priority": rt_priority,
            "gro": gro,
        }  # fmt: skip
        if record_arrivals and trace_dir is None:
            raise UsageError("record_arrivals needs a trace_dir to write them to")
        #: The emulator on one CPU and the stations' receive processing on the others
        #: (``_hosts.cpu_split``); set by :meth:`up` as ``(cpu, mask)``, None when not split.
        self.split_cpus = split_cpus
        self.cpu_plan: tuple[int, str] | None = None
        self.started_at: float | None = None
        self._sysctls = list(sysctls)
        self._stderr = stderr
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.emulator: subprocess.Popen[bytes] | None = None
        self.popens: list[subprocess.Popen[bytes]] = []
        self.procs: list[Proc] = []
        self.report: EmulationReport | None = None
        self.removed_stale: list[str] = []

    # -- naming (StarNetwork's interface) ------------------------------------------------
    def ns(self, station: str) -> str:
        return self.netns.ns(station)

    def addr(self, station: str) -> str:
        if station not in self.addresses:
            raise UsageError(f"unknown station {station!r}; stations: {self.stations}")
        return self.addresses[station]

    # -- life ----------------------------------------------------------------------------
    def up(self, timeout_s: float = 60.0) -> Emulation:
        """Remove leftovers of dead runs, make the namespaces, start the emulator and
        wait until its loop runs."""
        self.removed_stale = remove_stale(self.netns.tag)
        try:
            self.netns.create(sysctls=self._sysctls)
            if self.split_cpus:
                self.cpu_plan = cpu_split(os.sched_getaffinity(0))
            if self.cpu_plan is not None:
                self.netns.steer_receives(self.cpu_plan[1])
            # Named after this process: remove_stale deletes it if it dies first.
            self._tmp = tempfile.TemporaryDirectory(prefix=f"{self.netns.tag}-{os.getpid()}-")
            tmp = Path(self._tmp.name)
            fds = [self.netns.fds[s] for s in self.stations]
            cfg = {**self._cfg, "fds": fds, "parent": os.getpid(),
                   "report": str(tmp / "report.json"),
                   "cpu": None if self.cpu_plan is None else self.cpu_plan[0],
                   "rps_cpus": None if self.cpu_plan is None else self.cpu_plan[1]}  # fmt: skip
            (tmp / "config.json").write_text(json.dumps(cfg))
            self.emulator = subprocess.Popen(
                [sys.executable, "-m", "coorp.emulate._serve", str(tmp / "config.json")],
                pass_fds=fds, stdout=subprocess.PIPE, stderr=self._stderr,
            )  # fmt: skip
            self.netns.close_fds()  # the emulator holds them now
            self._wait_ready(timeout_s)
        except BaseException:
            self.destroy()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        p = self.emulator
        assert p is not None and p.stdout is not None
        proc = Proc("emulator", p)
        line = proc.read_line(timeout_s)
        #: ``time.monotonic()`` when the emulator said it runs: its clock's zero, to
        #: within the pipe's delay (the report's per-second ``series`` counts from it).
        self.started_at = time.monotonic()
        if line != "ready":
            code = p.poll()
            raise ConfigurationError(
                f"the emulator did not start within {timeout_s:g} s (got {line!r}, exit "
                f"{code}); its stderr: {proc.stderr_tail() if code is not None else ''}"
            )

    def stop(self, timeout_s: float = 60.0) -> EmulationReport:
        """Stop the emulator (SIGTERM) and return its report."""
        p = self.emulator
        if p is None:
            if self.report is not None:
                return self.report
            raise UsageError("the emulation was not started")
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)
            raise ConfigurationError(f"the emulator did not stop within {timeout_s:g} s") from None
        self.emulator = None
        assert self._tmp is not None
        path = Path(self._tmp.name) / "report.json"
        if not path.exists():
            raise ConfigurationError(f"the emulator exited ({p.returncode}) without a report")
        self.report = EmulationReport(json.loads(path.read_text()))
        return self.report

    def wait(self, timeout_s: float) -> EmulationReport:
        """Wait for an emulator with a duration to finish; its report."""
        p = self.emulator
        if p is None:
            return self.stop()
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=timeout_s)
        return self.stop()

    # -- programs inside ------------------------------------------------------------------
    def popen(
        self,
        host: str | None,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bool = False,
        stdout: int | IO[bytes] | None = subprocess.PIPE,
        stderr: int | IO[bytes] | None = subprocess.PIPE,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``host``'s namespace (None: here); killed by
        :meth:`destroy`, and by the kernel if this process dies first."""
        pre = [] if host is None else ["ip", "netns", "exec", self.ns(host)]
        p = subprocess.Popen(
            [*pre, *argv], stdin=subprocess.PIPE if stdin else None, stdout=stdout,
            stderr=stderr, env=None if env is None else dict(env),
            preexec_fn=_die_with_parent,
        )  # fmt: skip
        self.popens.append(p)
        return p

    def destroy(self) -> None:
        """Stop everything and delete the namespaces (safe to call twice)."""
        self.stop_procs()
        p = self.emulator
        if p is not None and p.poll() is None:
            p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        self.emulator = None
        self.netns.destroy()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Emulation:
        if self.emulator is None and self.report is None:
            self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


class EmulatedStar(Emulation):
    """An :class:`Emulation` named like :class:`coorp._netns.StarNetwork`: host ``ld``
    is the scenario's AP, ``r1``, ``r2``.. its other stations in order, and each
    interface is ``eth0`` as on the star (programs configured for it run unchanged)."""

    def __init__(self, hosts: Sequence[str], scenario: Scenario, **kwargs: Any) -> None:
        kwargs.setdefault("ifname", "eth0")
        if not hosts or hosts[0] != "ld" or any(not h[1:].isdigit() for h in hosts[1:]):
            raise ValueError(f"hosts={list(hosts)}: 'ld' first, then names like 'r1', 'r2'")
        super().__init__(scenario, **kwargs)
        others = [s for s in self.stations if s != self.ap]
        if len(hosts) - 1 > len(others):
            raise UsageError(
                f"{len(hosts) - 1} robots on scenario {scenario.name!r}, which has "
                f"{len(others)} stations besides its AP {self.ap!r}"
            )
        self.hosts = list(hosts)
        self._station = {"ld": self.ap, **{h: others[int(h[1:]) - 1] for h in hosts[1:]}}

    def station_of(self, host: str) -> str:
        try:
            return self._station[host]
        except KeyError:
            return host

    def ns(self, station: str) -> str:
        return super().ns(self.station_of(station))

    def addr(self, station: str) -> str:
        return super().addr(self.station_of(station))

    def create(self, *, sysctls: Sequence[str] = ()) -> None:
        """StarNetwork's ``create``: here, :meth:`up` (``sysctls`` in every namespace)."""
        self._sysctls = list(sysctls)
        self.up()

    def __enter__(self) -> EmulatedStar:
        return self  # as StarNetwork: :meth:`create` brings it up
