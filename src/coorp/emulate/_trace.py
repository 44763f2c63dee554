"""Traces of an emulated run: every frame's fate, every exchange on the air, every write.

Tables (Parquet with the ``parquet`` extra, else CSV; ``coorp._tables``):

* ``frames``: one row per frame the channel took or refused: frame id (-1 for one
  refused before it had one), sending station, receiver of the hop, final destination
  (-1: a group frame going up to the AP), access category, IP bytes, enqueue instant,
  outcome (:class:`~coorp.emulate.Outcome`: 0 delivered, 1 lost after the last retry,
  2 kernel-queue drop, 3 no route, 4 malformed) and the instant of that outcome;
* ``exchanges``: the channel's access events, one row per exchange (start, end,
  collided, stations, categories, MPDUs, PSDU bytes, TXOP start);
* ``writes``: frame id and wall instant (ns since the start) of every packet written to
  a receiver's interface, with its lag behind the simulated delivery;
* ``arrivals`` (with ``record_arrivals``): instant, station and bytes of every packet
  read from an interface, what :func:`~coorp.emulate.replay` needs;

and ``frames.mcap`` for Foxglove (with the ``mcap`` package): each delivered or lost
frame on ``/emulate/frames`` at its outcome instant.
"""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any

from coorp._tables import write_table
from coorp.emulate._air import Air, Arrival, FrameSink

__all__ = ["FrameLog", "read_arrivals", "write_traces"]

_ACS = ("", "BK", "BE", "VI", "VO")


class FrameLog(FrameSink):
    """Every frame's fate, in columns (8 bytes a field)."""

    def __init__(self) -> None:
        self.cols: dict[str, array[int]] = {
            k: array("q")
            for k in ("fid", "src", "hop", "final", "ac", "bytes", "enq_ns", "outcome", "done_ns")
        }
        self._ac = {a: i for i, a in enumerate(_ACS)}

    def frame(
        self, fid: int, src: int, hop: int, final: int, ac: str, size: int, enq_ns: int,
        outcome: int, done_ns: int,
    ) -> None:  # fmt: skip
        c = self.cols
        c["fid"].append(fid)
        c["src"].append(src)
        c["hop"].append(hop)
        c["final"].append(final)
        c["ac"].append(self._ac[ac])
        c["bytes"].append(size)
        c["enq_ns"].append(enq_ns)
        c["outcome"].append(outcome)
        c["done_ns"].append(done_ns)

    def __len__(self) -> int:
        return len(self.cols["fid"])


def write_traces(
    out: Path,
    air: Air,
    log: FrameLog | None,
    writes: list[tuple[int, int, int]] | None,
    *,
    mcap: bool = True,
) -> list[Path]:
    """Write the tables above into folder ``out``; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    names = air.names
    if log is not None:
        cols: dict[str, Any] = {k: list(v) for k, v in log.cols.items()}
        cols["ac"] = [_ACS[i] for i in cols["ac"]]
        cols["src_name"] = [names[i] if i >= 0 else "" for i in cols["src"]]
        paths += write_table(out / "frames", cols, csv=False)
        if mcap:
            p = _frames_mcap(out / "frames.mcap", cols, names)
            if p is not None:
                paths.append(p)
    ex = air.exchanges()
    if ex:
        paths += write_table(out / "exchanges", {
            "start_ns": [r[0] for r in ex], "end_ns": [r[1] for r in ex],
            "collided": [bool(r[2]) for r in ex],
            "stations": [",".join(map(str, r[3])) for r in ex],  # type: ignore[call-overload]
            "acs": [",".join(map(str, r[4])) for r in ex],  # type: ignore[call-overload]
            "mpdus": [",".join(map(str, r[5])) for r in ex],  # type: ignore[call-overload]
            "psdu_bytes": [",".join(map(str, r[6])) for r in ex],  # type: ignore[call-overload]
        }, csv=False)  # fmt: skip
    if writes is not None:
        paths += write_table(out / "writes", {
            "fid": [w[0] for w in writes], "delivered_ns": [w[1] for w in writes],
            "wall_ns": [w[2] for w in writes], "lag_ns": [w[2] - w[1] for w in writes],
        }, csv=False)  # fmt: skip
    if air.arrivals is not None:
        paths += write_table(out / "arrivals", {
            "t_ns": [a[0] for a in air.arrivals], "station": [a[1] for a in air.arrivals],
            "packet_hex": [a[2].hex() for a in air.arrivals],
        })  # fmt: skip
    return paths


def read_arrivals(path: Path) -> list[Arrival]:
    """The arrivals of a run (``arrivals.csv`` written by :func:`write_traces`)."""
    from coorp._tables import read_csv_rows

    rows = read_csv_rows(path)
    return [(int(r["t_ns"]), int(r["station"]), bytes.fromhex(str(r["packet_hex"])))  # type: ignore[call-overload]
            for r in rows]  # fmt: skip


def _frames_mcap(path: Path, cols: dict[str, Any], names: list[str]) -> Path | None:
    try:
        from mcap.writer import CompressionType, Writer
    except ImportError:
        return None
    schema = {
        "title": "coorp.EmulatedFrame", "type": "object",
        "properties": {k: {"type": "integer"} for k in
                       ("fid", "bytes", "enq_ns", "done_ns", "outcome")}
        | {k: {"type": "string"} for k in ("src", "hop", "final", "ac")},
    }  # fmt: skip
    with path.open("wb") as fh:
        w = Writer(fh, compression=CompressionType.ZSTD)
        w.start(profile="", library="coorp-emulate")
        sid = w.register_schema(name="coorp.EmulatedFrame", encoding="jsonschema",
                                data=json.dumps(schema, sort_keys=True).encode())  # fmt: skip
        ch = w.register_channel(topic="/emulate/frames", message_encoding="json", schema_id=sid)
        order = sorted(range(len(cols["fid"])), key=lambda i: cols["done_ns"][i])
        for seq, i in enumerate(order):
            if cols["outcome"][i] > 1:
                continue

            def name(k: int) -> str:
                return names[k] if k >= 0 else "group"

            msg = {
                "fid": cols["fid"][i], "bytes": cols["bytes"][i], "enq_ns": cols["enq_ns"][i],
                "done_ns": cols["done_ns"][i], "outcome": cols["outcome"][i],
                "src": name(cols["src"][i]), "hop": name(cols["hop"][i]),
                "final": name(cols["final"][i]), "ac": cols["ac"][i],
            }  # fmt: skip
            t = cols["done_ns"][i]
            w.add_message(channel_id=ch, log_time=t, publish_time=t, sequence=seq,
                          data=json.dumps(msg, separators=(",", ":")).encode())  # fmt: skip
        w.finish()
    return path
