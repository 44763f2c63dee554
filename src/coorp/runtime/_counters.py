"""Counting and logging what peers do wrong, without letting a flood flood the log.

Every dropped frame is counted by kind (malformed, oversized, unauthenticated,
replayed, stale, timeout, refused, limited) and the counters are always exact. Log
lines are aggregated **per source address** (the host, not host:port: an attacker
opens a new port per connection): at most one line per host per interval
(``min_interval_ns``, 1 s), and the next line for that host says how many drops of
which kinds were folded into it.

Every warning a daemon writes goes through one :class:`LogLimiter` per daemon, by
**kind** (``drop:limited``, ``accept``, ``quota``, ``join``...): at most
``max_lines`` lines of one kind in any interval (4 per second by default), the last
of them kept for the summary — what was held back is summed up in one line per kind
("held back N more ... lines"). Each limited line ends with its kind in brackets, so
a log can be counted per kind (``benchmarks/runtime_faults.py`` does).
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from coorp._errors import PeerError

__all__ = ["DropLog", "LogLimiter", "host_of"]


def host_of(peer: str) -> str:
    """``"10.0.0.3:5512"`` -> ``"10.0.0.3"``; ``"[::1]:80"`` -> ``"::1"``."""
    host, sep, port = peer.rpartition(":")
    if not sep or not port.isdigit():
        return peer
    return host.strip("[]")


@dataclass(slots=True)
class _Kind:
    written: deque[int] = field(default_factory=deque)
    """When the last lines of this kind were written (at most ``max_lines``)."""
    held: int = 0
    held_since: int = 0
    level: int = logging.WARNING


class LogLimiter:
    """At most ``max_lines`` lines per kind in any ``interval_ns`` (a sliding window);
    the excess is counted and summed up in one line per kind once the interval that
    held it back has passed. Kinds are bounded (``max_kinds``): beyond, lines share
    one ``other`` kind."""

    def __init__(
        self,
        logger: logging.Logger,
        clock: Callable[[], int],
        *,
        interval_ns: int = 1_000_000_000,
        max_lines: int = 4,
        max_kinds: int = 64,
    ) -> None:
        if max_lines < 2:
            raise ValueError("max_lines must leave room for a summary line (>= 2)")
        self._logger = logger
        self._clock = clock
        self.interval_ns = interval_ns
        self.max_lines = max_lines
        self._max_kinds = max_kinds
        self._kinds: dict[str, _Kind] = {}
        self.lines: Counter[str] = Counter()
        """Lines written, by kind (summaries included)."""
        self.held_back: Counter[str] = Counter()
        """Lines not written, by kind (exact)."""

    def _room(self, k: _Kind, now: int, slots: int) -> bool:
        w = k.written
        while w and now - w[0] >= self.interval_ns:
            w.popleft()
        return len(w) < slots

    def _emit(
        self, kind: str, k: _Kind, now: int, level: int, fmt: str, args: tuple[object, ...]
    ) -> None:
        k.written.append(now)
        self.lines[kind] += 1
        self._logger.log(level, fmt + " [%s]", *args, kind)

    def log(self, kind: str, level: int, fmt: str, *args: object) -> bool:
        """Write one line of ``kind`` unless its budget is spent; True if written."""
        now = self._clock()
        k = self._kinds.get(kind)
        if k is None:
            if len(self._kinds) >= self._max_kinds:
                kind = "other"
                k = self._kinds.setdefault(kind, _Kind())
            else:
                k = self._kinds[kind] = _Kind()
        self.flush(now)
        # Regular lines leave the last slot of the window for the summary.
        if self._logger.isEnabledFor(level) and self._room(k, now, self.max_lines - 1):
            self._emit(kind, k, now, level, fmt, args)
            return True
        if k.held == 0:
            k.held_since = now
        k.held += 1
        k.level = max(k.level, level)
        self.held_back[kind] += 1
        return False

    def warning(self, kind: str, fmt: str, *args: object) -> bool:
        return self.log(kind, logging.WARNING, fmt, *args)

    def flush(self, now: int | None = None) -> None:
        """Write the summary of every kind whose held-back interval has passed (called
        on every line; call it from a timer to be sure the last summary is written)."""
        now = self._clock() if now is None else now
        for kind, k in self._kinds.items():
            if (
                k.held
                and now - k.held_since >= self.interval_ns
                and self._room(k, now, self.max_lines)
            ):
                n, k.held = k.held, 0
                if self._logger.isEnabledFor(k.level):
                    self._emit(
                        kind,
                        k,
                        now,
                        k.level,
                        "held back %d more %s line(s) in the last %.1f s (counters stay exact)",
                        (n, kind, (now - k.held_since) / 1e9),
                    )


class DropLog:
    """Counters of dropped frames plus per-address aggregated, rate-limited log lines."""

    def __init__(
        self,
        logger: logging.Logger,
        clock: Callable[[], int],
        *,
        min_interval_ns: int = 1_000_000_000,
        max_tracked_peers: int = 1024,
        limiter: LogLimiter | None = None,
    ) -> None:
        self._clock = clock
        self._min_interval_ns = min_interval_ns
        self._max_tracked = max_tracked_peers
        self.limiter = limiter if limiter is not None else LogLimiter(logger, clock)
        self._last_logged: dict[str, int] = {}
        self._suppressed: dict[str, Counter[str]] = {}
        self.counts: Counter[str] = Counter()

    @property
    def lines(self) -> int:
        """Drop lines written (summaries included)."""
        return sum(n for k, n in self.limiter.lines.items() if k.startswith("drop:"))

    def drop(self, peer: str, error: PeerError, what: str = "frame") -> None:
        kind = str(getattr(error, "kind", "invalid"))
        self.counts[kind] += 1
        host = host_of(peer)
        now = self._clock()
        last = self._last_logged.get(host)
        if last is not None and now - last < self._min_interval_ns:
            if len(self._suppressed) < self._max_tracked or host in self._suppressed:
                self._suppressed.setdefault(host, Counter())[kind] += 1
            return
        more = self._suppressed.pop(host, None)
        suffix = ""
        if more:
            kinds = ", ".join(f"{k} {n}" for k, n in more.most_common())
            suffix = f" (+{sum(more.values())} more from {host} since its last line: {kinds})"
        if self.limiter.warning(
            f"drop:{kind}", "dropped %s %s from %s: %s%s", kind, what, peer, error, suffix
        ):
            if len(self._last_logged) >= self._max_tracked:
                # Forget everyone rather than grow without bound under a scan.
                self._last_logged.clear()
            self._last_logged[host] = now

    def summary(self) -> str:
        """One line: drops by kind (for shutdown and status output)."""
        if not self.counts:
            return "no frames dropped"
        kinds = ", ".join(f"{k} {n}" for k, n in self.counts.most_common())
        return f"{self.total()} frames dropped ({kinds}); {self.lines} log lines"

    def total(self) -> int:
        return sum(self.counts.values())
