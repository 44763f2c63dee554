"""Is the emulated Linux receiver's ack cadence Linux's or this loaded host's?

One plain TCP upload (``_tcp_upload.py``, r1 to the leader) on crl-5's emulated air,
traced, under two receivers: ``rt`` (the sink at SCHED_FIFO, so it reads as soon as
data is there, as on an idle host) and ``loaded`` (the sink at nice 19 beside HOGS busy
processes in the leader's namespace). The ack ratio is data frames of >= 1400 bytes up
over frames of <= 100 bytes from the leader, after the first 2 s; docs/emulate.md,
"The acknowledgements, measured". Needs root::

    sudo nice -n 10 .venv/bin/python benchmarks/_ack_ratio.py [--seconds 6] [--hogs 2]
        [--cc cubic] [--repetitions 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PY = sys.executable
HOG = f"{PY} -c 'while True: pass'"


def _route_cc(cc: str) -> str:
    """A shell prefix that makes every route of the namespace use ``cc``."""
    if not cc:
        return ""
    return f"ip route show | while read -r r; do ip route replace $r congctl {cc}; done; "


def run(kind: str, seconds: float, hogs: int, cc: str, trace: Path) -> dict[str, float]:
    up = HERE / "_tcp_upload.py"
    if kind == "rt":
        sink = f"chrt -f 5 {PY} {up} sink 9000"
        extra: list[str] = []
    else:
        sink = f"nice -n 19 {PY} {up} sink 9000"
        extra = [a for _ in range(hogs) for a in ("--run", f"leader={HOG}")]
    send = f"sleep 2; {_route_cc(cc)}{PY} {up} send leader 9000 {seconds}"
    cmd = [
        str(Path(PY).with_name("coorp")), "emulate", "crl-5", "-q", "--trace", str(trace),
        "--run", f"leader={_route_cc(cc)}{sink}", *extra,
        "--at", "r1", "--", "sh", "-c", send,
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise SystemExit(f"{kind}: coorp emulate failed ({out.returncode}): {out.stderr[-2000:]}")
    import pyarrow.parquet as pq  # the parquet extra, which make native installs

    t = pq.read_table(trace / "frames.parquet")
    name = np.asarray(t.column("src_name").to_pylist())
    size = t.column("bytes").to_numpy()
    enq = t.column("enq_ns").to_numpy()
    start = enq.min() + 2_500_000_000
    w = enq >= start
    data = int(((name == "r1") & (size >= 1400) & w).sum())
    acks = int(((name == "leader") & (size <= 100) & w).sum())
    span = (enq.max() - start) / 1e9
    return {
        "data_frames": data,
        "ack_frames": acks,
        "segments_per_ack": data / max(acks, 1),
        "mbps": data * 1500 * 8 / span / 1e6,
        "sent": float(out.stdout.split("SENT ")[-1].split()[0]) if "SENT" in out.stdout else -1,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--cc", default="", help="congestion control by route ('': default)")
    ap.add_argument("--repetitions", type=int, default=3)
    a = ap.parse_args()
    rows = []
    for rep in range(a.repetitions):
        for kind in ("rt", "loaded"):
            load = Path("/proc/loadavg").read_text().split()[0]
            with tempfile.TemporaryDirectory() as d:
                r = run(kind, a.seconds, a.hogs, a.cc, Path(d))
            r |= {"rep": rep, "receiver": kind, "load": float(load)}
            print(json.dumps(r), flush=True)
            rows.append(r)
    for kind in ("rt", "loaded"):
        v = [r["segments_per_ack"] for r in rows if r["receiver"] == kind]
        runs = ", ".join(f"{x:.1f}" for x in v)
        print(f"{kind}: segments per ack {np.mean(v):.1f} (runs: {runs})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
