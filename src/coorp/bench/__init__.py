"""Benchmark harnesses behind ``coorp bench`` that measure Coorp against other software.

``broadcast``: large payloads from one publisher to N subscriber processes and
small-message round trips, :mod:`coorp.transport` side by side with shared-memory
segments, pickle over sockets, pyzmq and Cyclone DDS (``docs/transport.md``). The
harness sits in the top layer, beside the CLI, so the packages it measures carry no
benchmark code and no adapters for other middleware.
"""

from coorp.bench._broadcast import (
    CONSUME,
    PUBLISHED,
    BenchConfig,
    BenchResult,
    checksum,
    parse_sizes,
)
from coorp.bench._broadcast import run as run_broadcast
from coorp.bench._impls import IMPLS, REFERENCES
from coorp.bench._report import format_size
from coorp.bench._report import plot as plot_broadcast
from coorp.bench._report import render_tables as render_broadcast_tables
from coorp.bench._report import write_json as write_broadcast_json

__all__ = [
    "CONSUME",
    "IMPLS",
    "PUBLISHED",
    "REFERENCES",
    "BenchConfig",
    "BenchResult",
    "checksum",
    "format_size",
    "parse_sizes",
    "plot_broadcast",
    "render_broadcast_tables",
    "run_broadcast",
    "write_broadcast_json",
]
