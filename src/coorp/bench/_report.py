"""Rendering of benchmark results: a rich table, the JSON document and a log-scale plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coorp.bench._broadcast import PUBLISHED, BenchResult

__all__ = ["format_size", "plot", "render_tables", "write_json"]


def format_size(n: int) -> str:
    for unit, k in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= k and n % (k // 1000 or 1) == 0:
            return f"{n / k:g} {unit}"
    return f"{n} B"


_TITLES = {
    "view": "publish -> last subscriber holds a usable array",
    "checksum": "publish -> last subscriber has read and checksummed every byte (verified)",
}


def render_tables(result: BenchResult, console: Any) -> None:
    from rich.table import Table

    summary = result.summary()
    for mode, impls in summary["broadcast"].items():
        sizes = sorted({int(n) for by in impls.values() for n in by})
        table = Table(
            title=f"Broadcast, consume={mode}: {_TITLES.get(mode, mode)}; ms, median / p99 "
            "[producer median: from the common start until send returns]"
        )
        table.add_column("impl")
        for n in sizes:
            table.add_column(format_size(n), justify="right")
        for impl, by in impls.items():
            cells = []
            for n in sizes:
                cell = by.get(str(n))
                if cell is None:
                    cells.append("-")
                    continue
                text = f"{cell['median_ms']:.3f} / {cell['p99_ms']:.3f}"
                if "producer_median_ms" in cell:
                    text += f" [{cell['producer_median_ms']:.3f}]"
                cells.append(text)
            table.add_row(impl, *cells)
        if mode == "view":
            for label, pts in PUBLISHED.items():
                table.add_row(label, *(f"{pts[n]:g} (mean)" if n in pts else "-" for n in sizes))
        console.print(table)
    rtt_sizes = sorted({int(n) for by in summary["rtt"].values() for n in by})
    if rtt_sizes:
        rt = Table(title="Round trip (us, median / p99)")
        rt.add_column("impl")
        for n in rtt_sizes:
            rt.add_column(format_size(n), justify="right")
        for impl, by in summary["rtt"].items():
            rt.add_row(
                impl,
                *(
                    f"{by[str(n)]['median_us']:.1f} / {by[str(n)]['p99_us']:.1f}"
                    if str(n) in by
                    else "-"
                    for n in rtt_sizes
                ),
            )
        console.print(rt)
    for impl, reason in result.skipped.items():
        console.print(f"[yellow]not measured[/yellow] {impl}: {reason}")


def write_json(result: BenchResult, path: Path) -> None:
    doc = result.summary()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def plot(result: BenchResult, path: Path, subscribers: int) -> None:
    """Median latency vs. size on a log scale, like the thesis's Figure 2.4."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = result.summary()["broadcast"]
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    for mode, impls in summary.items():
        for impl, by in impls.items():
            if impl.startswith("memcpy") and mode != next(iter(summary)):
                continue  # the references are the same in every mode
            xs = sorted(int(n) for n in by)
            ax.plot(
                [x / 1e6 for x in xs],
                [by[str(x)]["median_ms"] for x in xs],
                marker="o" if mode == "view" else "s",
                label=impl if impl.startswith("memcpy") else f"{impl} ({mode})",
                linestyle=":" if impl.startswith("memcpy") else "-" if mode == "view" else "--",
            )
    for label, pts in PUBLISHED.items():
        xs = sorted(pts)
        ax.plot(
            [x / 1e6 for x in xs],
            [pts[x] for x in xs],
            marker="x",
            linestyle="--",
            color="grey" if "HPRM" in label else "black",
            label=label + ", mean",
        )
    ax.set_yscale("log")
    ax.set_xlabel("object size (MB)")
    ax.set_ylabel("latency (ms, median; log scale)")
    ax.set_title(f"Broadcast to {subscribers} subscriber processes")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
