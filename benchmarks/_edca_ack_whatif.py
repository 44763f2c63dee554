"""What if the simulator's TCP receiver acked every K-th segment? (docs/emulate.md,
"The acknowledgements, measured".)

Runs the ``best effort`` traffic of ``benchmarks/emulate.py --sections edca`` (crl-5,
shared rings, four cubic uploads, the MPC loop's datagrams in AC_BE) for one seed with
``coorp.sim.tcp.ACK_STEP`` set to K in this process only — a what-if, not a model
change (the emulated Linux leader acked one segment in 11; the model acks every
second, RFC 5681's SHOULD). Needs the pure-Python simulator, whose module constants can
be patched::

    COORP_PURE=1 .venv/bin/python benchmarks/_edca_ack_whatif.py 11 1 10
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    if len(sys.argv) != 4:
        print("usage: _edca_ack_whatif.py K SEED WINDOW_S", file=sys.stderr)
        return 2
    k, seed, window = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    import coorp.sim.engine as engine
    import coorp.sim.tcp as tcp

    if not tcp.__file__ or not tcp.__file__.endswith(".py"):
        print("set COORP_PURE=1: the compiled simulator's constants cannot be patched")
        return 2
    tcp.ACK_STEP = k  # type: ignore[misc]
    engine.ACK_STEP = k  # type: ignore[misc]
    defaults = list(tcp.TcpConnection._send_acks.__defaults__ or ())
    defaults[-1] = k
    tcp.TcpConnection._send_acks.__defaults__ = tuple(defaults)
    import _emulate_edca as edca
    from coorp.scenario import AccessCategory

    sc = edca.scenario("shared", AccessCategory.BE, perception_bytes=12_100, command_bytes=1_100)
    t0 = time.time()
    r = edca.simulate(sc, seed, 2.0, window)
    ls, cmd, per = (edca._summary([r], kind) for kind in (None, "command", "perception"))
    print(
        f"K={k} seed={seed} window={window:g}s bulk={r['bulk_mbps']:.0f} Mb/s "
        f"misses={ls['miss_rate']:.3f} commands={cmd['miss_rate']:.3f} "
        f"perceptions={per['miss_rate']:.3f} p99={ls['p99_ms']:.1f} ms "
        f"({time.time() - t0:.0f} s wall)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
