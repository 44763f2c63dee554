"""Fuzzing every decoder: arbitrary bytes give a message or a PeerError, nothing else.

Servers count and drop PeerErrors and keep serving; any other exception escaping a
decoder would take a connection handler (or the LS inbox) down instead.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coorp import PeerError
from coorp.runtime import TeamKey
from coorp.runtime.inbox._receiver import LsDecoder
from coorp.runtime.wire._auth import (
    CLIENT_TO_SERVER,
    LEADER,
    FrameOpener,
    FrameSealer,
    open_hello,
)
from coorp.runtime.wire._format import (
    MAX_CONTROL_FRAME_BYTES,
    WIRE_VERSION,
    BulkData,
    Join,
    LsHeader,
    Release,
    decode_envelope,
    decode_message,
    pack_datagram,
    parse_frame_length,
    split_datagram,
)

KEY = TeamKey(b"k" * 32)
NONCE = b"n" * 16
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# msgpack-shaped garbage reaches deeper into the decoders than random bytes.
_atoms = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.text(max_size=20)
    | st.binary(max_size=40)
    | st.floats(allow_nan=True)
)
_trees = st.recursive(
    _atoms,
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_tags = st.sampled_from(
    [
        "hello",
        "join",
        "welcome",
        "request",
        "release",
        "granted",
        "revoked",
        "ping",
        "pong",
        "stats?",
        "stats",
        "refused",
        "bopen",
        "bdata",
        "baccept",
        "bdone",
        "breject",
        "lsopen",
        "lsaccept",
        "nope",
    ]
)
shaped = st.builds(
    lambda tag, rest: msgspec.msgpack.encode([tag, *rest]), _tags, st.lists(_trees, max_size=5)
)
blobs = st.binary(max_size=300) | _trees.map(msgspec.msgpack.encode) | shaped


def only_peer_errors(fn, *args):  # type: ignore[no-untyped-def]
    try:
        return fn(*args)
    except PeerError:
        return None


@FUZZ
@given(blobs)
def test_decode_message(data: bytes) -> None:
    only_peer_errors(decode_message, data)


@FUZZ
@given(blobs)
def test_decode_envelope_and_open(data: bytes) -> None:
    env = only_peer_errors(decode_envelope, data)
    if env is not None:
        only_peer_errors(FrameOpener(KEY.mac("r1", LEADER), CLIENT_TO_SERVER, NONCE).open, env)
        only_peer_errors(open_hello, env)


@FUZZ
@given(st.binary(max_size=8), st.integers(0, 2**20))
def test_parse_frame_length(prefix: bytes, limit: int) -> None:
    n = only_peer_errors(parse_frame_length, prefix, limit)
    assert n is None or 0 < n <= limit


@FUZZ
@given(st.binary(max_size=600) | shaped)
def test_split_datagram_and_ls_decoder(data: bytes) -> None:
    only_peer_errors(split_datagram, data)
    only_peer_errors(LsDecoder(KEY, "sink").decode, data, "fuzz")


@FUZZ
@given(st.data())
def test_mutated_valid_frames(data: st.DataObject) -> None:
    """Bit flips, truncation and extension of genuine frames never forge a message:
    whatever still authenticates carries exactly the original counter and body (the
    mutations may happen to rebuild the original bytes)."""
    sealer = FrameSealer(KEY.mac("r1", LEADER), CLIENT_TO_SERVER, NONCE)
    msg = data.draw(st.sampled_from([Release(3), Join("r1", NONCE, "agent"), BulkData(1, 0, 100)]))
    frame = bytearray(sealer.seal(msg))
    original = decode_envelope(bytes(frame[4:]))
    body = frame[4:]
    pos = data.draw(st.integers(0, len(body) - 1))
    body[pos] ^= data.draw(st.integers(1, 255))
    body = body[: data.draw(st.integers(0, len(body)))] + data.draw(st.binary(max_size=4))
    opener = FrameOpener(KEY.mac("r1", LEADER), CLIENT_TO_SERVER, NONCE)
    env = only_peer_errors(decode_envelope, bytes(body))
    if env is not None and only_peer_errors(opener.open, env) is not None:
        assert (env.counter, env.body) == (original.counter, original.body)
    assert parse_frame_length(bytes(frame[:4]), MAX_CONTROL_FRAME_BYTES) == len(frame) - 4


@FUZZ
@given(st.data())
def test_mutated_valid_datagrams(data: st.DataObject) -> None:
    payload = data.draw(st.binary(max_size=64))
    header = LsHeader(WIRE_VERSION, "r1", "sink", "ch", 1, 1, 5, 6, len(payload))
    dgram = pack_datagram(header, payload)
    dgram += KEY.mac("r1", "sink").datagram_mac(dgram)
    pos = data.draw(st.integers(0, len(dgram) - 1))
    dgram[pos] ^= data.draw(st.integers(1, 255))
    decoder = LsDecoder(KEY, "sink", clock=lambda: 5)
    decoder._install_session("r1", "ch", 1, 0)
    assert only_peer_errors(decoder.decode, bytes(dgram), "fuzz") is None


# Team files: TOML-shaped text built from the schema's own keys reaches the validators.
_keys = st.sampled_from(
    ["name", "robots", "key_file", "key_dir", "listen", "limit", "timeslice_ms",
     "heartbeat_ms", "leader", "fallback_ms", "local_preemption", "chunk_bytes", "bogus"]
)  # fmt: skip
_values = st.sampled_from(
    ['"x"', '"0.0.0.0:7400"', '"host:99999"', "1", "-1", "0", "1e309", "true",
     '["a", "b"]', '["a", "a"]', "[]", '"../k"', '"\\u0000"', "{}", "nan"]
)  # fmt: skip
_tables = st.sampled_from(["[team]", "[leader]", "[agent]", "[other]", ""])
team_texts = st.lists(
    st.tuples(_tables, _keys, _values).map(lambda t: f"{t[0]}\n{t[1]} = {t[2]}\n"), max_size=8
).map("".join) | st.text(max_size=200)


@FUZZ
@given(team_texts)
def test_team_files_load_or_name_the_problem(text: str) -> None:
    """Any team file loads or raises a ScenarioError (exit 2 in the CLI), never
    anything else."""
    import tempfile
    from pathlib import Path

    from coorp import ScenarioError
    from coorp.runtime import load_team_config

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "team.toml"
        p.write_text(text)
        try:
            load_team_config(p)
        except ScenarioError as exc:
            assert str(exc).startswith(f"invalid team file {p}")


@FUZZ
@given(st.text(max_size=300) | st.lists(
    st.sampled_from(["robot r1", "link " + "ab" * 32, "peer r2 " + "cd" * 32, "link zz",
                     "peer", "# c", "robot", "x y z"]), max_size=6).map("\n".join))  # fmt: skip
def test_robot_key_files_parse_or_raise_a_usage_error(text: str) -> None:
    from coorp.runtime import RobotKey, RuntimeUsageError

    try:
        key = RobotKey.from_text(text, "fuzz.key")
    except RuntimeUsageError:
        return
    assert key.identity


@FUZZ
@given(blobs, st.sampled_from(["agent", "sender", "ls", "observer"]))
def test_server_handshake_join_decoding(body: bytes, role: str) -> None:
    """What a server parses before it knows the key (the claimed Join): garbage gives
    a PeerError; a well-formed Join for an unknown robot is an AuthenticationError."""
    from coorp.runtime import RobotKey

    msg = only_peer_errors(decode_message, body)
    if isinstance(msg, Join):
        keys = RobotKey("sink", b"l" * 32, {"r1": b"p" * 32})
        only_peer_errors(keys.mac, "sink", msg.robot)
    only_peer_errors(decode_message, msgspec.msgpack.encode(["join", "r1", NONCE, role]))


def _outcome(decode: object, data: bytes | bytearray) -> object:
    """A decode's result, or its error's type and text, for comparing two decoders."""
    try:
        msg = decode(data, "p")  # type: ignore[operator]
    except PeerError as exc:
        return (type(exc), str(exc))
    return msgspec.structs.asdict(msg)


@FUZZ
@given(
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=48),
    st.sampled_from(["r1", "r2"]),
    st.lists(st.tuples(st.integers(0, 200), st.integers(1, 255)), max_size=2),
    st.integers(-3, 3),
)
def test_canonical_fast_path_decides_like_the_full_parse(
    seq: int,
    sent_ns: int,
    payload: bytes,
    robot: str,
    flips: list[tuple[int, int]],
    resize: int,
) -> None:
    """The receiver's fast path (bytes in our senders' layout, prefix of an open
    session) accepts and rejects exactly what the full parse does (a bytearray always
    takes the full parse), with the same message or the same error."""
    from coorp.runtime.wire._format import _LS_TAIL, ls_header_prefix

    decoders = []
    for _ in range(2):
        d = LsDecoder(KEY, "sink", clock=lambda: 2**62, max_age_ns=2**62)
        d._install_session("r1", "ch", 7, 0)
        d._install_session("r1", "other", 8, 5)
        decoders.append(d)
    head = ls_header_prefix(robot, "sink", "ch", 7) + _LS_TAIL.pack(
        0xCF, seq, 0xCF, sent_ns, 0xCF, 2**62, 0xCE, len(payload)
    )
    data = bytearray(head + payload + KEY.mac(robot, "sink").datagram_mac2(head, payload))
    for pos, bits in flips:
        data[pos % len(data)] ^= bits
    if resize > 0:
        data += bytes(resize)
    elif resize < 0:
        del data[resize:]
    fast, full = decoders
    for _ in range(2):  # the second time: a replay
        assert _outcome(fast.decode, bytes(data)) == _outcome(full.decode, bytearray(data))


def test_canonical_fast_path_is_taken_for_our_senders_datagrams(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from coorp.runtime.inbox import _lsdecoder as _receiver
    from coorp.runtime.wire._format import ls_datagram_head, ls_header_prefix

    decoder = LsDecoder(KEY, "sink", clock=lambda: 10)
    decoder._install_session("r1", "ch", 7, 0)
    head = ls_datagram_head(ls_header_prefix("r1", "sink", "ch", 7), 1, 5, 6, 3)
    data = head + b"abc" + KEY.mac("r1", "sink").datagram_mac2(head, b"abc")

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the full parse ran")

    monkeypatch.setattr(_receiver, "split_datagram", no_parse)
    msg = decoder.decode(data, "p")
    assert (msg.robot, msg.channel, msg.seq, msg.payload, msg.deadline_ns) == (
        "r1",
        "ch",
        1,
        b"abc",
        6,
    )
    with pytest.raises(AssertionError, match="full parse"):  # any other layout parses
        decoder.decode(bytearray(data), "p")
