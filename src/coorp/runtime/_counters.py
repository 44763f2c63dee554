"""Counting and logging what peers do wrong, without letting a flood flood the log.

Every dropped frame is counted by kind (malformed, oversized, unauthenticated,
replayed, timeout, refused) and logged with the peer's address. A sender of garbage
must not be able to fill the disk, so log lines per (peer, kind) are rate-limited;
the counters are always exact.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from coorp._errors import PeerError

__all__ = ["DropLog"]


class DropLog:
    """Counters of dropped frames plus rate-limited log lines naming the peer."""

    def __init__(
        self,
        logger: logging.Logger,
        clock: Callable[[], int],
        *,
        min_interval_ns: int = 1_000_000_000,
        max_tracked_peers: int = 1024,
    ) -> None:
        self._logger = logger
        self._clock = clock
        self._min_interval_ns = min_interval_ns
        self._max_tracked = max_tracked_peers
        self._last_logged: dict[tuple[str, str], int] = {}
        self._suppressed: Counter[tuple[str, str]] = Counter()
        self.counts: Counter[str] = Counter()

    def drop(self, peer: str, error: PeerError) -> None:
        kind = str(getattr(error, "kind", "invalid"))
        self.counts[kind] += 1
        key = (peer, kind)
        now = self._clock()
        last = self._last_logged.get(key)
        if last is not None and now - last < self._min_interval_ns:
            self._suppressed[key] += 1
            return
        if len(self._last_logged) >= self._max_tracked:
            # Forget everyone rather than grow without bound under a scan.
            self._last_logged.clear()
        self._last_logged[key] = now
        more = self._suppressed.pop(key, 0)
        suffix = f" (+{more} similar suppressed)" if more else ""
        self._logger.warning("dropped %s frame from %s: %s%s", kind, peer, error, suffix)

    def total(self) -> int:
        return sum(self.counts.values())
