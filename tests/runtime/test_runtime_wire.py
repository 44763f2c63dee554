"""Wire format and authentication: round trips, limits, forgery and replay."""

from __future__ import annotations

import pytest

from coorp import PeerError
from coorp.runtime import (
    AuthenticationError,
    FrameTooLargeError,
    MalformedFrameError,
    ReplayError,
    RuntimeUsageError,
    StaleError,
    TeamKey,
    UnsupportedVersionError,
)
from coorp.runtime._errors import LimitedError
from coorp.runtime.inbox._receiver import LsDecoder
from coorp.runtime.wire._auth import (
    CLIENT_TO_SERVER,
    LEADER,
    SERVER_TO_CLIENT,
    FrameOpener,
    FrameSealer,
    new_nonce,
    open_hello,
    seal_hello,
)
from coorp.runtime.wire._format import (
    LENGTH_PREFIX,
    MAX_CONTROL_FRAME_BYTES,
    MAX_LS_PAYLOAD_BYTES,
    WIRE_VERSION,
    BulkOpen,
    Granted,
    Hello,
    Join,
    LsHeader,
    Release,
    Request,
    decode_envelope,
    decode_message,
    encode_envelope,
    encode_message,
    ls_datagram_head,
    ls_header_prefix,
    pack_datagram,
    parse_frame_length,
    split_datagram,
)

KEY = TeamKey(b"0123456789abcdef0123456789abcdef")
OTHER = TeamKey(b"fedcba9876543210fedcba9876543210")


def body_of(frame: bytes) -> bytes:
    n = parse_frame_length(frame[:4], MAX_CONTROL_FRAME_BYTES)
    assert len(frame) == 4 + n
    return frame[4:]


def pair(key_a: TeamKey = KEY, key_b: TeamKey = KEY) -> tuple[FrameSealer, FrameOpener]:
    nonce = new_nonce()
    return (
        FrameSealer(key_a.mac("r1", LEADER), CLIENT_TO_SERVER, nonce),
        FrameOpener(key_b.mac("r1", LEADER), CLIENT_TO_SERVER, nonce),
    )


def test_messages_round_trip() -> None:
    for msg in [
        Request(),
        Release(7),
        Granted(3, 10, 20),
        Join("r1", new_nonce(), "agent"),
        BulkOpen("params", 5, 1, 40_000_000, 123),
    ]:
        assert decode_message(encode_message(msg)) == msg


def test_sealed_frames_open_in_order() -> None:
    sealer, opener = pair()
    for msg in [Request(), Release(1), Request()]:
        assert opener.open(decode_envelope(body_of(sealer.seal(msg)))) == msg


def test_wrong_key_is_rejected() -> None:
    sealer, opener = pair(OTHER, KEY)
    with pytest.raises(AuthenticationError):
        opener.open(decode_envelope(body_of(sealer.seal(Request()))))


def test_replay_within_connection_is_rejected() -> None:
    sealer, opener = pair()
    frame = sealer.seal(Release(1))
    opener.open(decode_envelope(body_of(frame)))
    with pytest.raises(ReplayError):
        opener.open(decode_envelope(body_of(frame)))


def test_replay_into_another_connection_is_rejected() -> None:
    sealer, _ = pair()
    frame = sealer.seal(Request())
    _, other_conn = pair()  # a fresh nonce: the MAC was made for the first one
    with pytest.raises(AuthenticationError):
        other_conn.open(decode_envelope(body_of(frame)))


def test_reflection_to_sender_is_rejected() -> None:
    nonce = new_nonce()
    sealer = FrameSealer(KEY.mac("r1", LEADER), CLIENT_TO_SERVER, nonce)
    reflected = FrameOpener(KEY.mac("r1", LEADER), SERVER_TO_CLIENT, nonce)
    with pytest.raises(AuthenticationError):
        reflected.open(decode_envelope(body_of(sealer.seal(Request()))))


def test_tampered_body_is_rejected() -> None:
    sealer, opener = pair()
    env = decode_envelope(body_of(sealer.seal(Release(1))))
    forged = encode_envelope(env.counter, encode_message(Release(2)), env.mac)
    with pytest.raises(AuthenticationError):
        opener.open(decode_envelope(body_of(forged)))


def test_unauthenticated_frame_is_rejected_after_hello() -> None:
    _, opener = pair()
    with pytest.raises(AuthenticationError):
        opener.open(decode_envelope(body_of(encode_envelope(1, encode_message(Request()), b""))))


def test_hello_is_plain_and_only_hello() -> None:
    hello = Hello(new_nonce(), "leader", 1)
    assert open_hello(decode_envelope(body_of(seal_hello(hello)))) == hello
    with pytest.raises(MalformedFrameError):
        open_hello(decode_envelope(body_of(encode_envelope(0, encode_message(Request()), b""))))


def test_frame_length_limit_checked_before_reading() -> None:
    with pytest.raises(FrameTooLargeError):
        parse_frame_length(LENGTH_PREFIX.pack(MAX_CONTROL_FRAME_BYTES + 1), MAX_CONTROL_FRAME_BYTES)
    with pytest.raises(MalformedFrameError):
        parse_frame_length(LENGTH_PREFIX.pack(0), MAX_CONTROL_FRAME_BYTES)


def test_other_wire_version_is_named() -> None:
    import msgspec

    data = msgspec.msgpack.encode([WIRE_VERSION + 1, 1, b"", b""])
    with pytest.raises(UnsupportedVersionError):
        decode_envelope(data)


def test_out_of_range_fields_are_malformed() -> None:
    import msgspec

    with pytest.raises(MalformedFrameError):
        decode_message(msgspec.msgpack.encode(["release", -1]))
    with pytest.raises(MalformedFrameError):
        decode_message(msgspec.msgpack.encode(["join", "bad name!", b"x" * 16, "agent"]))
    with pytest.raises(MalformedFrameError):
        decode_message(msgspec.msgpack.encode(["join", "r1", b"short", "agent"]))


def datagram(
    key: TeamKey,
    seq: int,
    payload: bytes = b"hello",
    session: int = 9,
    *,
    dest: str = "sink",
    sent_ns: int = 100,
) -> bytes:
    header = LsHeader(
        WIRE_VERSION, "r1", dest, "perception", session, seq, sent_ns, 200, len(payload)
    )
    data = pack_datagram(header, payload)
    data += key.mac("r1", dest).datagram_mac(data)
    return bytes(data)


def decoder_with_session(clock: int = 150, session: int = 9) -> LsDecoder:
    decoder = LsDecoder(KEY, "sink", clock=lambda: clock)
    decoder._install_session("r1", "perception", session, 0)
    return decoder


def test_datagram_round_trip_and_metadata() -> None:
    decoder = decoder_with_session()
    msg = decoder.decode(datagram(KEY, 1, b"abc"), "10.0.0.1:5")
    assert (msg.robot, msg.channel, msg.seq, msg.payload) == ("r1", "perception", 1, b"abc")
    assert (msg.sent_ns, msg.deadline_ns, msg.latency_ns) == (100, 200, 50)


def test_datagram_forgery_and_replay_are_rejected() -> None:
    decoder = decoder_with_session()
    with pytest.raises(AuthenticationError):
        decoder.decode(datagram(OTHER, 1), "p")
    good = datagram(KEY, 5)
    decoder.decode(good, "p")
    with pytest.raises(ReplayError):
        decoder.decode(good, "p")
    # Older than the newest but never seen, inside the window: reordered, not a replay.
    assert decoder.decode(datagram(KEY, 4), "p").seq == 4
    with pytest.raises(ReplayError):  # ...once
        decoder.decode(datagram(KEY, 4), "p")
    decoder.decode(datagram(KEY, 6), "p")
    flow = decoder.flows()["r1/perception"]
    assert (flow["received"], flow["reordered"], flow["replayed"]) == (3, 1, 2)


def test_datagram_tampering_is_rejected() -> None:
    data = bytearray(datagram(KEY, 1, b"payload"))
    data[-33] ^= 1  # the last payload byte
    with pytest.raises(AuthenticationError):
        decoder_with_session().decode(bytes(data), "p")


def test_datagram_structure_errors() -> None:
    data = datagram(KEY, 1, b"payload")
    with pytest.raises(MalformedFrameError):
        split_datagram(data[:-1])
    with pytest.raises(MalformedFrameError):
        split_datagram(b"\x00")
    with pytest.raises(FrameTooLargeError):
        split_datagram(bytes(70_000))


@pytest.mark.parametrize(
    ("seq", "sent_ns", "nbytes"),
    [(1, 100, 5), (0, 0, 0), (2**63 - 1, 2**63 - 1, MAX_LS_PAYLOAD_BYTES)],
)
def test_the_senders_precomputed_header_decodes_like_pack_datagram(
    seq: int, sent_ns: int, nbytes: int
) -> None:
    payload = bytes(nbytes)
    prefix = ls_header_prefix("r1", "sink", "perception", 2**62 + 3)
    head = ls_datagram_head(prefix, seq, sent_ns, sent_ns, nbytes)
    mac = KEY.mac("r1", "sink").datagram_mac2(head, payload)
    header, body, signed, got_mac = split_datagram(head + payload + mac)
    expected = LsHeader(
        WIRE_VERSION, "r1", "sink", "perception", 2**62 + 3, seq, sent_ns, sent_ns, nbytes
    )
    assert header == expected
    assert split_datagram(pack_datagram(expected, payload) + mac)[0] == expected
    assert bytes(body) == payload
    assert bytes(got_mac) == KEY.mac("r1", "sink").datagram_mac(signed)


def test_names_skip_their_character_check_only_when_equal_to_validated_ones() -> None:
    """The receiver parses names without the pattern check first; a datagram whose
    names are not this robot and an open session is parsed again with every check."""
    decoder = decoder_with_session()
    for robot, dest, channel in [
        ("r1\n", "sink", "perception"),
        ("r1", "si nk", "perception"),
        ("r1", "sink", "percep/tion"),
    ]:
        header = LsHeader(WIRE_VERSION, robot, dest, channel, 9, 1, 100, 200, 1)
        data = pack_datagram(header, b"x")
        data += KEY.mac("r1", "sink").datagram_mac(data)
        with pytest.raises(MalformedFrameError):
            decoder.decode(bytes(data), "p")
    assert decoder.decode(datagram(KEY, 1), "p").robot == "r1"  # the fast path


def test_team_key_rules(tmp_path: object) -> None:
    from pathlib import Path

    with pytest.raises(RuntimeUsageError):
        TeamKey(b"short")
    with pytest.raises(RuntimeUsageError):
        TeamKey.from_hex("zz")
    p = Path(str(tmp_path)) / "team.key"
    p.write_text("ab" * 32 + "\n")
    p.chmod(0o644)
    with pytest.raises(RuntimeUsageError, match="chmod 600"):  # as ssh: owner-only
        TeamKey.from_file(p)
    p.chmod(0o600)
    k = TeamKey.from_file(p)
    assert "ab" not in repr(k)
    same = TeamKey(bytes.fromhex("ab" * 32)).mac("r1", LEADER)
    assert k.mac("r1", LEADER).frame_mac(b"x", b"n", 1, b"b") == same.frame_mac(b"x", b"n", 1, b"b")
    assert issubclass(AuthenticationError, PeerError)


def test_the_fast_paths_index_follows_reopened_and_evicted_sessions() -> None:
    """A session replaced by a new one, or evicted, no longer admits datagrams by its
    prefix: the index of prefixes holds exactly the open sessions."""
    decoder = LsDecoder(KEY, "sink", clock=lambda: 10, max_sessions=2, sessions_per_member=2)

    def dgram(channel: str, session: int, seq: int) -> bytes:
        head = ls_datagram_head(ls_header_prefix("r1", "sink", channel, session), seq, 5, 6, 1)
        return head + b"x" + KEY.mac("r1", "sink").datagram_mac2(head, b"x")

    old = decoder.open_session("r1", "a", 10)
    assert decoder.decode(dgram("a", old, 1), "p").seq == 1
    new = decoder.open_session("r1", "a", 10)
    with pytest.raises(StaleError):
        decoder.decode(dgram("a", old, 2), "p")
    assert decoder.decode(dgram("a", new, 1), "p").seq == 1  # a new session counts anew
    b = decoder.open_session("r1", "b", 10)
    with pytest.raises(LimitedError):  # both sessions in use: over r1's quota of 2
        decoder.open_session("r1", "c", 10)
    decoder.detach("r1", "a", new)  # its connection ended: the first to go
    decoder.open_session("r1", "c", 10)  # evicts "a"
    with pytest.raises(StaleError):
        decoder.decode(dgram("a", new, 2), "p")
    assert decoder.decode(dgram("b", b, 1), "p").channel == "b"
    assert len(decoder._canonical) == len(decoder._sessions) == 2
