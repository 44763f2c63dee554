"""Counting and logging what peers do wrong, without letting a flood flood the log.

Every dropped frame is counted by kind (malformed, oversized, unauthenticated,
replayed, stale, timeout, refused, limited) and the counters are always exact. Log
lines are aggregated **per source address** (the host, not host:port: an attacker
opens a new port per connection): at most one line per host per interval
(``min_interval_ns``, 1 s), and the next line for that host says how many drops of
which kinds were folded into it. Across all hosts at most ``max_lines_per_interval``
lines are written per interval; what is held back beyond that is summed up in one
summary line ("N more drops from M addresses") at the next interval.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from coorp._errors import PeerError

__all__ = ["DropLog", "host_of"]


def host_of(peer: str) -> str:
    """``"10.0.0.3:5512"`` -> ``"10.0.0.3"``; ``"[::1]:80"`` -> ``"::1"``."""
    host, sep, port = peer.rpartition(":")
    if not sep or not port.isdigit():
        return peer
    return host.strip("[]")


class DropLog:
    """Counters of dropped frames plus per-address aggregated log lines."""

    def __init__(
        self,
        logger: logging.Logger,
        clock: Callable[[], int],
        *,
        min_interval_ns: int = 1_000_000_000,
        max_tracked_peers: int = 1024,
        max_lines_per_interval: int = 10,
    ) -> None:
        self._logger = logger
        self._clock = clock
        self._min_interval_ns = min_interval_ns
        self._max_tracked = max_tracked_peers
        self._max_lines = max_lines_per_interval
        self._last_logged: dict[str, int] = {}
        self._suppressed: dict[str, Counter[str]] = {}
        self._window_start = clock()
        self._window_lines = 0
        self._held_back = 0
        self._held_back_hosts: set[str] = set()
        self.counts: Counter[str] = Counter()
        self.lines = 0

    def drop(self, peer: str, error: PeerError, what: str = "frame") -> None:
        kind = str(getattr(error, "kind", "invalid"))
        self.counts[kind] += 1
        host = host_of(peer)
        now = self._clock()
        self._roll_window(now)
        last = self._last_logged.get(host)
        if (last is not None and now - last < self._min_interval_ns) or (
            self._window_lines >= self._max_lines
        ):
            if len(self._suppressed) >= self._max_tracked and host not in self._suppressed:
                self._held_back += 1  # too many hosts to remember: summary only
                self._held_back_hosts.add("(untracked)")
                return
            self._suppressed.setdefault(host, Counter())[kind] += 1
            if last is None or now - last >= self._min_interval_ns:
                self._held_back += 1
                self._held_back_hosts.add(host)
            return
        if len(self._last_logged) >= self._max_tracked:
            # Forget everyone rather than grow without bound under a scan.
            self._last_logged.clear()
        self._last_logged[host] = now
        more = self._suppressed.pop(host, None)
        suffix = ""
        if more:
            kinds = ", ".join(f"{k} {n}" for k, n in more.most_common())
            suffix = f" (+{sum(more.values())} more from {host} since its last line: {kinds})"
        self._write(logging.WARNING, "dropped %s %s from %s: %s%s", kind, what, peer, error, suffix)

    def _roll_window(self, now: int) -> None:
        if now - self._window_start < self._min_interval_ns:
            return
        self._window_start = now
        self._window_lines = 0
        if self._held_back:
            n, hosts = self._held_back, len(self._held_back_hosts)
            self._held_back = 0
            self._held_back_hosts.clear()
            self._write(
                logging.WARNING,
                "log flood: %d more drop lines from %d address(es) held back in the last "
                "interval (counted in dropped_*)",
                n,
                hosts,
            )

    def _write(self, level: int, fmt: str, *args: object) -> None:
        self._window_lines += 1
        self.lines += 1
        self._logger.log(level, fmt, *args)

    def summary(self) -> str:
        """One line: drops by kind (for shutdown and status output)."""
        if not self.counts:
            return "no frames dropped"
        kinds = ", ".join(f"{k} {n}" for k, n in self.counts.most_common())
        return f"{self.total()} frames dropped ({kinds}); {self.lines} log lines"

    def total(self) -> int:
        return sum(self.counts.values())
