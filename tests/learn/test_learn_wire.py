"""The learning roles' wire: typed sync messages round-trip with their tensor, and a frame
that is not exactly one is refused with a MalformedFrameError naming what is wrong."""

from __future__ import annotations

import struct

import msgspec
import numpy as np
import pytest

from coorp import InvariantError, MalformedFrameError, UsageError
from coorp.learn import FormationSpec, LearnSpec, PPOConfig
from coorp.learn._runtime import (
    Hello,
    Model,
    RuntimeSpec,
    Stop,
    Update,
    decode,
    encode,
    read_config,
    role_config,
)
from coorp.learn._runtime.wire import clock_datagram, clock_grid, kind_of, loop_of, set_loop
from coorp.scenario import SyncMode, load_scenario, resolve_scenario

SPEC = LearnSpec(ppo=PPOConfig(hidden=8, envs=2), task=FormationSpec(robots=2), air_params=64)


def _config(seed: int = 3001) -> msgspec.Struct:
    cfg = role_config(load_scenario(resolve_scenario("crl-2")), "coorp", SPEC, RuntimeSpec())
    cfg.seed = seed
    return cfg


def test_messages_round_trip_with_their_tensor_and_padding() -> None:
    params = np.arange(10, dtype=np.float32) / 3
    for msg, tensor in [
        (Model(4), params),
        (Update(4, ret=-1.25, samples=640), params),
        (Stop(7, reason="other settings"), None),
        (Hello(robot="w1", inbox="10.0.0.2:7410", settings=_config().shared()), None),
    ]:
        frame = encode(msg, tensor, pad_to=4096)
        assert len(frame) == 4096 and not any(frame[-100:])  # zero padding to pad_to
        got = decode(frame)
        assert got.msg == msg and kind_of(got.msg) == kind_of(msg)
        if tensor is None:
            assert got.params is None
        else:
            assert got.params is not None and np.array_equal(got.params, tensor)
    # Without padding the frame is exactly prefix + header + tensor.
    assert len(encode(Model(1), params)) < 4096


def test_a_frame_that_is_not_a_sync_message_is_refused() -> None:
    good = encode(Model(1), np.ones(4, np.float32))
    with pytest.raises(MalformedFrameError, match="shorter than its prefix"):
        decode(good[:5])
    with pytest.raises(MalformedFrameError, match="magic"):
        decode(b"XXXX" + bytes(good[4:]))
    with pytest.raises(MalformedFrameError, match="shorter than its header and tensor"):
        decode(good[:-3])
    head = msgspec.msgpack.encode({"kind": "gossip", "version": 1})
    with pytest.raises(MalformedFrameError, match="invalid sync message header"):
        decode(struct.pack("<4sII", b"CLRN", len(head), 0) + head)
    junk = b"\xc1\xc1"
    with pytest.raises(MalformedFrameError, match="undecodable"):
        decode(struct.pack("<4sII", b"CLRN", len(junk), 0) + junk)
    stop = msgspec.msgpack.encode(Stop(1))
    with pytest.raises(MalformedFrameError, match="a stop message with 2 parameters"):
        decode(struct.pack("<4sII", b"CLRN", len(stop), 2) + stop + bytes(8))
    with pytest.raises(InvariantError, match="a model message needs a tensor"):
        encode(Model(1))


def test_hello_settings_name_every_difference() -> None:
    mine = _config().shared()
    theirs = role_config(
        load_scenario(resolve_scenario("crl-2")), "tcp",
        LearnSpec(ppo=PPOConfig(hidden=16, envs=2), task=FormationSpec(robots=2), air_params=64),
        RuntimeSpec(),
    )  # fmt: skip
    theirs.seed = 3002  # another role of the same run: the same run seed
    diff = {name for name, _a, _b in mine.differences(theirs.shared())}
    assert diff == {"mode", "ppo"}
    assert mine.differences(_config(3000).shared()) == []


def test_role_config_round_trips_and_a_bad_one_names_the_field() -> None:
    cfg = _config()
    back = read_config(cfg.to_json())
    assert back == cfg and back.sync is SyncMode.BSP and back.ppo == SPEC.ppo
    with pytest.raises(UsageError, match=r"invalid coorp learn role config: .*\$\.mode"):
        read_config(cfg.to_json().replace(b'"coorp"', b'"udp"', 1))


def test_ls_datagrams_carry_the_loop_and_the_clock() -> None:
    buf = bytearray(12)
    set_loop(buf, 123456789)
    assert loop_of(buf) == 123456789
    d = clock_datagram(1000, grid_ns=987654321012, rnd=5)
    assert len(d) == 1000 and loop_of(d) == 2**64 - 1 and clock_grid(d) == 987654321012
    assert len(clock_datagram(8, 1, 0)) == 24  # room for the grid and the round
