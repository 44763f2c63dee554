"""The ``udp-mac`` carrier: raw UDP whose datagrams only pass with a valid MAC."""

from __future__ import annotations

import argparse

from coorp.teambench._transports import Ctx, _UdpMac


def _carrier(key_hex: str) -> _UdpMac:
    args = argparse.Namespace(
        name="r1", addr="127.0.0.1", leader="127.0.0.1", robots="", key_hex=key_hex, bound_ms=33.0
    )
    carrier = _UdpMac(Ctx(args))
    carrier.sock.close()  # only the sealing is under test
    return carrier


def test_a_sealed_datagram_opens_and_a_touched_or_foreign_one_does_not() -> None:
    ours, theirs = _carrier("11" * 32), _carrier("22" * 32)
    sealed = ours._seal(b"ping 1")
    assert ours._open(sealed) == b"ping 1"
    touched = bytearray(sealed)
    touched[0] ^= 1
    assert ours._open(bytes(touched)) is None
    assert theirs._open(sealed) is None  # another key
    assert ours._open(sealed[:20]) is None  # shorter than a MAC
