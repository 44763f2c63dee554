"""Figure style every package shares: one colour and line style per policy, the figure
formats, and :func:`save_figure` (reproducible bytes).

Part of the ground floor (see README, "Layout"): any package may import it; it imports
only :mod:`coorp._errors` (matplotlib is imported when a figure is saved).

The shipped policies (and the BH-only reference) have fixed styles; any other name (a
user's policy) gets a deterministic one: the same name always draws the same way, and
:func:`policy_styles` keeps the unknown names of one figure apart from each other and
from the shipped styles. :func:`register_policy_style` sets a name's style explicitly.
Colours are the Okabe–Ito colour-blind-safe palette; line styles tell policies apart
in grey print too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coorp._errors import UsageError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "FIGURE_FORMATS",
    "LineStyle",
    "PolicyStyle",
    "parse_formats",
    "policy_style",
    "policy_styles",
    "register_policy_style",
    "save_figure",
]

LineStyle = str | tuple[float, tuple[float, ...]]


@dataclass(frozen=True)
class PolicyStyle:
    """How one policy is drawn: line colour and dash pattern, marker, bar hatch."""

    color: str
    linestyle: LineStyle
    marker: str
    hatch: str = ""

    def line(self) -> dict[str, Any]:
        """Keyword arguments for ``Axes.plot``/``step``."""
        return {"color": self.color, "linestyle": self.linestyle}


_BUILTIN: dict[str, PolicyStyle] = {
    "edca": PolicyStyle("#D55E00", "-", "o", ""),  # vermillion
    "schedwifi": PolicyStyle("#0072B2", "--", "s", "//"),  # blue
    "coorp": PolicyStyle("#009E73", "-", "D", ".."),  # bluish green
    "coorp-global": PolicyStyle("#E69F00", "-.", "^", "\\\\"),  # orange
    "coorp-local": PolicyStyle("#CC79A7", ":", "v", "xx"),  # reddish purple
    # COORP as published: a lighter tint of coorp's green, dotted.
    "coorp-paper": PolicyStyle("#66C5AB", (0, (1, 2)), "d", "||"),
    # The reference bound (not deployable): black, long dashes.
    "oracle": PolicyStyle("#000000", (0, (7, 3)), "*", "++"),
    "bh-only": PolicyStyle("#999999", (0, (1, 1)), "x", "oo"),  # grey
    # 802.11ax baselines: the palette's two colours left, and coorp's hue, darker;
    # markers none of the fallback styles uses.
    "ofdma": PolicyStyle("#56B4E9", (0, (5, 1)), "P", "--"),  # sky blue
    "rtwt": PolicyStyle("#F0E442", (0, (3, 1, 1, 1)), "+", "/"),  # yellow
    "coorp-rtwt": PolicyStyle("#00604A", (0, (4, 1, 1, 1, 1, 1)), "4", "\\\\"),
}
_USER: dict[str, PolicyStyle] = {}

#: Colours and dash patterns for names without a style: none close to a shipped colour,
#: never a solid line (the shipped edca and coorp are solid).
_FALLBACK_COLORS = (
    "#8C564B", "#9467BD", "#BCBD22", "#8B0000", "#1A237E", "#005F5F", "#4D4D4D", "#FF6F91",
)  # fmt: skip
_FALLBACK_DASHES: tuple[LineStyle, ...] = (
    (0, (6, 2)), (0, (2, 2)), (0, (6, 2, 2, 2)), (0, (8, 2, 2, 2, 2, 2)),
)  # fmt: skip
_FALLBACK_MARKERS = ("h", "p", "<", ">", "d", "8", "H", "X")
_FALLBACK_HATCHES = ("//", "\\\\", "xx", "..", "++", "oo", "--", "||")


def register_policy_style(
    name: str, *, color: str, linestyle: LineStyle = "-", marker: str = "o", hatch: str = ""
) -> PolicyStyle:
    """Draw policy ``name`` this way in every figure (e.g. a user's own policy)."""
    style = PolicyStyle(color, linestyle, marker, hatch)
    _USER[name] = style
    return style


def _fixed(name: str) -> PolicyStyle | None:
    return _USER.get(name) or _BUILTIN.get(name)


def _fallback(k: int) -> PolicyStyle:
    nc, nd = len(_FALLBACK_COLORS), len(_FALLBACK_DASHES)
    return PolicyStyle(
        _FALLBACK_COLORS[k % nc],
        _FALLBACK_DASHES[(k // nc) % nd],
        _FALLBACK_MARKERS[k % len(_FALLBACK_MARKERS)],
        _FALLBACK_HATCHES[k % len(_FALLBACK_HATCHES)],
    )


def _slot(name: str) -> int:
    """A stable number for ``name`` (not Python's salted ``hash``)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")


def policy_style(name: str) -> PolicyStyle:
    """The style of ``name``: fixed for the shipped policies, else derived from the name."""
    fixed = _fixed(name)
    if fixed is not None:
        return fixed
    n = len(_FALLBACK_COLORS) * len(_FALLBACK_DASHES)
    return _fallback(_slot(name) % n)


def policy_styles(names: Iterable[str]) -> dict[str, PolicyStyle]:
    """Styles for the policies of one figure: fixed ones as :func:`policy_style`; the
    others each get a distinct fallback style, starting from their name's own slot, in
    sorted-name order (so the result does not depend on the order ``names`` come in)."""
    names = list(dict.fromkeys(names))
    out = {n: s for n in names if (s := _fixed(n)) is not None}
    used: set[int] = set()
    total = len(_FALLBACK_COLORS) * len(_FALLBACK_DASHES)
    for name in sorted(n for n in names if n not in out):
        k = _slot(name) % total
        while k in used and len(used) < total:
            k = (k + 1) % total
        used.add(k)
        out[name] = _fallback(k)
    return {n: out[n] for n in names}


# -- formats and saving -------------------------------------------------------------------

#: Formats figures can be written in (matplotlib backends, no extra dependency).
FIGURE_FORMATS = ("png", "pdf", "svg")
_DPI = 130
_NO_DATE: dict[str, dict[str, None]] = {
    "png": {"Software": None}, "pdf": {"CreationDate": None}, "svg": {"Date": None},
}  # fmt: skip


def parse_formats(value: str | Iterable[str], option: str = "--format") -> tuple[str, ...]:
    """``"png,pdf"`` (or a list) -> ``("png", "pdf")``; raises :class:`UsageError` naming
    ``option``, the bad value and the allowed ones."""
    items = value.split(",") if isinstance(value, str) else list(value)
    formats = tuple(dict.fromkeys(f.strip().lower().lstrip(".") for f in items if f.strip()))
    bad = [f for f in formats if f not in FIGURE_FORMATS]
    if bad or not formats:
        given = value if isinstance(value, str) else ",".join(items)
        raise UsageError(
            f"{option} {given!r}: unknown figure format {', '.join(map(repr, bad)) or '(none)'}"
            f"; allowed: {', '.join(FIGURE_FORMATS)} (comma-separated, e.g. png,pdf)"
        )
    return formats


def save_figure(fig: Figure, out: Path, stem: str, formats: Sequence[str] = ("png",)) -> list[Path]:
    """Save ``fig`` as ``out/<stem>.<fmt>`` for each format, close it, return the paths."""
    import matplotlib
    import matplotlib.pyplot as plt

    formats = parse_formats(formats)
    out.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:  # a figure laid out its own way keeps it
        fig.tight_layout()
    paths = []
    for fmt in formats:
        path = out / f"{stem}.{fmt}"
        # No creation date, fixed SVG ids: the same figure gives the same bytes.
        with matplotlib.rc_context({"svg.hashsalt": "coorp"}):
            fig.savefig(path, dpi=_DPI, format=fmt, metadata=_NO_DATE[fmt])
        paths.append(path)
    plt.close(fig)
    return paths
