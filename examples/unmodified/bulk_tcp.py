"""Bulk transfers as learning jobs make them, knowing nothing of Coorp.

``send`` pushes deterministic pseudo-random bytes to a sink over one plain TCP
connection (as a parameter server push or an rsync would), or as an HTTP POST with a
chunked body (``--http``, as an upload to a model store would); ``sink`` receives them.
Both ends hash what they saw (SHA-256), so a test can check that every byte arrived
exactly once and in order. ``--streams K`` opens K connections at once (threads).

Downloads, the other way: ``serve`` answers every connection it accepts with bytes of
its own (as a parameter server sends the model, or an HTTP server a checkpoint, on a
connection the robot opened); ``fetch`` opens the connection, asks, and receives. The
reply is framed (``u32 length`` + bytes, a zero length, then the SHA-256 of every byte
sent), so ``fetch`` checks that it got every byte once, in order, and the end.

* plain TCP: the sender writes, then half-closes (``shutdown(SHUT_WR)``); the sink
  answers with its byte count and digest and closes. The sender prints both.
* HTTP: ``POST /upload`` with ``Transfer-Encoding: chunked``; the sink replies with JSON.

The sink also counts bytes per 10 ms so a benchmark can read the throughput inside a
time window (``CLOCK_MONOTONIC``). Lines printed: ``READY``, ``DONE {json}`` per
connection (sink), ``RESULT {json}`` at the end.

    python bulk_tcp.py sink --listen 0.0.0.0:9000 [--http] --until NS
    python bulk_tcp.py send --to 10.0.0.1:9000 [--http] (--bytes N | --until NS) [--streams K]
    python bulk_tcp.py serve --listen 0.0.0.0:9001
    python bulk_tcp.py fetch --to 10.0.0.1:9001 (--bytes N | --until NS) [--streams K]
        [--window T0,T1]
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHUNK = 64 * 1024
BIN_NS = 10_000_000
_SAY = threading.Lock()


def _say(line: str) -> None:
    """Print one whole line. The sink's connection threads and its command loop print at
    once; ``print`` writes the text and its newline apart, so two lines could run into one
    (``DONE {...}COUNT {...}``) and a reader waiting for ``COUNT`` would never see it."""
    with _SAY:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _pattern(seed: int) -> bytes:
    import random

    return random.Random(seed).randbytes(1 << 20)


class Counter:
    """Bytes received per 10 ms bin (CLOCK_MONOTONIC), all connections together."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bins: dict[int, int] = {}
        self.done: list[dict[str, Any]] = []

    def add(self, n: int) -> None:
        b = time.monotonic_ns() // BIN_NS
        with self.lock:
            self.bins[b] = self.bins.get(b, 0) + n

    def between(self, t0: int, t1: int) -> int:
        with self.lock:
            return sum(v for b, v in self.bins.items() if t0 <= b * BIN_NS < t1)


def _serve_tcp(conn: socket.socket, peer: Any, counter: Counter) -> None:
    h = hashlib.sha256()
    total = 0
    buf = bytearray(CHUNK)
    with conn:
        while True:
            n = conn.recv_into(buf)
            if n == 0:
                break
            h.update(memoryview(buf)[:n])
            total += n
            counter.add(n)
        digest = h.hexdigest()
        reply = {"peer": f"{peer[0]}:{peer[1]}", "bytes": total, "sha256": digest}
        conn.sendall(json.dumps(reply).encode() + b"\n")
    with counter.lock:
        counter.done.append(reply)
    _say("DONE " + json.dumps(reply))


def _http_handler(counter: Counter) -> type[BaseHTTPRequestHandler]:
    class Upload(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            h = hashlib.sha256()
            total = 0
            while True:  # chunked body
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                left = size
                while left:
                    data = self.rfile.read(min(left, CHUNK))
                    if not data:
                        raise ConnectionError("truncated chunk")
                    h.update(data)
                    counter.add(len(data))
                    left -= len(data)
                total += size
                self.rfile.readline()
            reply = {"peer": self.client_address[0], "bytes": total, "sha256": h.hexdigest()}
            body = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with counter.lock:
                counter.done.append(reply)
            _say("DONE " + json.dumps(reply))

    return Upload


def sink(args: argparse.Namespace) -> dict[str, Any]:
    host, port = args.listen.rsplit(":", 1)
    counter = Counter()
    if args.http:
        server = ThreadingHTTPServer((host, int(port)), _http_handler(counter))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    else:
        lsock = socket.create_server((host, int(port)), backlog=64)

        def accept() -> None:
            while True:
                conn, peer = lsock.accept()
                threading.Thread(target=_serve_tcp, args=(conn, peer, counter), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
    _say("READY")
    for line in sys.stdin if args.until is None else ():
        cmd = json.loads(line)
        if cmd.get("cmd") == "count":
            _say("COUNT " + json.dumps({"bytes": counter.between(cmd["t0"], cmd["t1"])}))
        elif cmd.get("cmd") == "quit":
            break
    if args.until is not None:
        while time.monotonic_ns() < args.until:
            time.sleep(0.05)
    with counter.lock:
        return {"role": "sink", "done": list(counter.done)}


def _chunks(args: argparse.Namespace) -> Any:
    pattern = _pattern(args.seed)
    sent = 0
    i = 0
    while True:
        if args.bytes is not None and sent >= args.bytes:
            return
        if args.until is not None and time.monotonic_ns() >= args.until:
            return
        off = (i * CHUNK) % len(pattern)
        piece = pattern[off : off + CHUNK] + struct.pack("!Q", i)
        if args.bytes is not None:
            piece = piece[: args.bytes - sent]
        yield piece
        sent += len(piece)
        i += 1


def send(args: argparse.Namespace) -> dict[str, Any]:
    if args.streams > 1:
        return _parallel(args, _send_one)
    return _send_one(args)


def _parallel(args: argparse.Namespace, one: Any) -> dict[str, Any]:
    """``args.streams`` connections at once, each its own seed; one summary."""
    import copy

    outs: list[dict[str, Any]] = [{} for _ in range(args.streams)]

    def run(i: int) -> None:
        a = copy.copy(args)
        a.seed = args.seed * 100 + i
        a.streams = 1
        try:
            outs[i] = one(a)
        except OSError as exc:
            outs[i] = {"bytes": 0, "intact": False, "error": str(exc)}

    threads = [threading.Thread(target=run, args=(i,)) for i in range(args.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "role": outs[0].get("role", "?"),
        "bytes": sum(o.get("bytes", 0) for o in outs),
        "window_bytes": sum(o.get("window_bytes", 0) for o in outs),
        "intact": all(o.get("intact") for o in outs),
        "streams": outs,
    }


def _send_one(args: argparse.Namespace) -> dict[str, Any]:
    host, port = args.to.rsplit(":", 1)
    h = hashlib.sha256()
    total = 0
    error: str | None = None
    t0 = time.monotonic_ns()
    if args.http:
        conn = http.client.HTTPConnection(host, int(port), timeout=60)

        def body() -> Any:
            nonlocal total
            for piece in _chunks(args):
                h.update(piece)
                total += len(piece)
                yield piece

        conn.request("POST", "/upload", body=body(), encode_chunked=True,
                     headers={"Content-Type": "application/octet-stream"})  # fmt: skip
        resp = conn.getresponse()
        reply = json.loads(resp.read())
        conn.close()
    else:
        sock = socket.create_connection((host, int(port)), timeout=60)
        data = b""
        try:
            for piece in _chunks(args):
                sock.sendall(piece)
                h.update(piece)
                total += len(piece)
            sock.shutdown(socket.SHUT_WR)  # half-close: the sink answers, then closes
            while not data.endswith(b"\n"):
                more = sock.recv(4096)
                if not more:
                    break
                data += more
        except OSError as exc:  # a reset: reported, the transfer did not complete
            error = f"{type(exc).__name__}: {exc}"
        sock.close()
        reply = json.loads(data) if data else {}
    elapsed = (time.monotonic_ns() - t0) / 1e9
    out = {} if error is None else {"error": error}
    return out | {
        "role": "send",
        "bytes": total,
        "sha256": h.hexdigest(),
        "seconds": elapsed,
        "sink": reply,
        "intact": reply.get("sha256") == h.hexdigest() and reply.get("bytes") == total,
    }


FRAME = struct.Struct("!I")


def _serve_download(conn: socket.socket, peer: Any) -> None:
    """One download: read the request line, send framed bytes, then the end and the
    digest of every byte sent, then half-close."""
    h = hashlib.sha256()
    total = 0
    with conn:
        f = conn.makefile("rb")
        req = json.loads(f.readline() or b"{}")
        a = argparse.Namespace(bytes=req.get("bytes"), until=req.get("until"),
                               seed=int(req.get("seed", 1)))  # fmt: skip
        try:
            for piece in _chunks(a):
                conn.sendall(FRAME.pack(len(piece)) + piece)
                h.update(piece)
                total += len(piece)
            conn.sendall(FRAME.pack(0) + h.digest())
            conn.shutdown(socket.SHUT_WR)
            f.read()  # until the client closes: nothing is cut off
        except OSError as exc:
            print(f"serve: {peer}: {exc}", file=sys.stderr, flush=True)
            return
    _say("SERVED " + json.dumps({"peer": f"{peer[0]}:{peer[1]}", "bytes": total}))


def serve(args: argparse.Namespace) -> dict[str, Any]:
    host, port = args.listen.rsplit(":", 1)
    lsock = socket.create_server((host, int(port)), backlog=64)

    def accept() -> None:
        while True:
            conn, peer = lsock.accept()
            threading.Thread(target=_serve_download, args=(conn, peer), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    _say("READY")
    for line in sys.stdin:
        if json.loads(line).get("cmd") == "quit":
            break
    return {"role": "serve"}


def fetch(args: argparse.Namespace) -> dict[str, Any]:
    if args.streams > 1:
        return _parallel(args, _fetch_one)
    return _fetch_one(args)


def _recv_exactly(sock: socket.socket, n: int, buf: bytearray) -> memoryview:
    view = memoryview(buf)[:n]
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("the server closed before the end of the download")
        got += k
    return view


def _fetch_one(args: argparse.Namespace) -> dict[str, Any]:
    host, port = args.to.rsplit(":", 1)
    t0, t1 = args.window or (0, 0)
    h = hashlib.sha256()
    total = window = 0
    intact = False
    buf = bytearray(CHUNK + 64)
    start = time.monotonic_ns()
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        req = {"bytes": args.bytes, "until": args.until, "seed": args.seed}
        sock.sendall(json.dumps(req).encode() + b"\n")
        while True:
            (n,) = FRAME.unpack(_recv_exactly(sock, FRAME.size, buf))
            if n == 0:
                intact = bytes(_recv_exactly(sock, 32, buf)) == h.digest()
                intact = intact and sock.recv(1) == b""  # and nothing after the end
                break
            piece = _recv_exactly(sock, n, buf)
            h.update(piece)
            total += n
            now = time.monotonic_ns()
            if t0 <= now < t1:
                window += n
    return {
        "role": "fetch", "bytes": total, "window_bytes": window, "intact": intact,
        "seconds": (time.monotonic_ns() - start) / 1e9, "sha256": h.hexdigest(),
    }  # fmt: skip


def _window(text: str) -> tuple[int, int]:
    t0, t1 = (int(x) for x in text.split(","))
    return t0, t1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=["send", "sink", "serve", "fetch"])
    ap.add_argument("--to", help="send, fetch: host:port")
    ap.add_argument("--listen", default="0.0.0.0:9000", help="sink, serve: host:port")
    ap.add_argument("--http", action="store_true")
    ap.add_argument("--bytes", type=int, default=None)
    ap.add_argument("--until", type=int, default=None, help="CLOCK_MONOTONIC ns")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--streams", type=int, default=1, help="send, fetch: connections at once")
    ap.add_argument(
        "--window", type=_window, default=None, help="fetch: count bytes in [T0, T1) (ns)"
    )
    args = ap.parse_args(argv)
    if args.role in ("send", "fetch") and (
        args.to is None or (args.bytes is None) == (args.until is None)
    ):
        ap.error(f"{args.role} needs --to and one of --bytes or --until")
    if args.streams < 1:
        ap.error(f"--streams must be >= 1, got {args.streams}")
    roles = {"sink": sink, "send": send, "serve": serve, "fetch": fetch}
    out = roles[args.role](args)
    _say("RESULT " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
