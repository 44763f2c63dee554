"""Seed lists as every command and file writes them: ``"1-10"``, ``"1,3,5"``, ``"1-3,7"``.

Part of the ground floor (see README, "Layout"): any package may import it; it imports
only :mod:`coorp._errors`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from coorp._errors import UsageError

__all__ = ["MAX_SEEDS", "parse_seeds", "seeds_option"]

#: Largest number of seeds one range may expand to (a typo like ``1-100000`` is refused).
MAX_SEEDS = 10_000


def parse_seeds(value: str | int | Sequence[int | str]) -> list[int]:
    """``"1-10"``, ``"1,3,5"``, ``"1-3,7"``, ``5`` or ``[1, 2]`` -> sorted distinct seeds.

    Raises :class:`ValueError` with what is allowed (the caller adds where it came from).
    """
    parts: list[int | str]
    if isinstance(value, bool):
        raise ValueError("seeds must be integers >= 0, ranges like '1-10', or lists like '1,3,5'")
    if isinstance(value, int):
        parts = [value]
    elif isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
    else:
        parts = list(value)
    seeds: set[int] = set()
    for part in parts:
        if isinstance(part, bool):
            raise ValueError(f"seed {part!r} is not an integer")
        if isinstance(part, int):
            lo = hi = part
        else:
            m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
            if m is None:
                raise ValueError(
                    f"{part!r} is not a seed; allowed: integers >= 0, ranges like '1-10', "
                    "lists like '1,3,5'"
                )
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) is not None else lo
        if lo < 0:
            raise ValueError(f"seed {lo} is negative; seeds are integers >= 0")
        if hi < lo:
            raise ValueError(f"range {part!r} is empty (write the smaller seed first)")
        if hi - lo + 1 + len(seeds) > MAX_SEEDS:
            raise ValueError(f"more than {MAX_SEEDS} seeds")
        seeds.update(range(lo, hi + 1))
    if not seeds:
        raise ValueError("no seeds given")
    return sorted(seeds)


def seeds_option(text: str, option: str = "--seeds") -> list[int]:
    """:func:`parse_seeds` for a command-line flag: a bad value raises
    :class:`~coorp.UsageError` naming ``option``, the value and what is allowed."""
    try:
        return parse_seeds(text)
    except ValueError as exc:
        raise UsageError(f"{option} {text!r}: {exc}") from None
