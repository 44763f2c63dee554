"""The MCAP trace read back: every channel's schema and encoding as Foxglove expects,
every message decoded and checked against the schema its channel carries.

Foxglove Studio itself cannot run here; what it needs from a file can be checked: the
MCAP container (the ``mcap`` reader, with CRC checks), channels in ``json`` message
encoding with ``jsonschema`` schemas, the well-known ``foxglove.*`` schema names with
Foxglove's own published JSON Schema files, and messages that conform to them.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest
from tiny_world import tiny

from coorp.cosim import parse_cosim, run_cosim

pytest.importorskip("mcap")

SEC = 1_000_000_000
WALL = {"name": "wall", "center_m": [1.0, 2.0], "size_m": [0.4, 6.0], "height_m": 2.5}


def conform(value: Any, schema: dict[str, Any], where: str = "$") -> None:
    """Strict JSON Schema check of the keywords Foxglove's schema files use (type,
    properties, items, oneOf of consts, minimum, maximum): an unknown key is an error
    (a misspelt field would be silently ignored by a viewer), and so is a missing one
    for objects that list their properties (Foxglove's protobuf-encoded messages always
    carry every field; the JSON ones here do too)."""
    t = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool}
    if t in types:
        assert isinstance(value, types[t]), f"{where}: {value!r} is not {t}"
    elif t == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: not integer"
    elif t == "number":
        assert isinstance(value, int | float) and not isinstance(value, bool), where
    if "oneOf" in schema:
        assert value in [o["const"] for o in schema["oneOf"]], f"{where}: {value!r}"
    if "minimum" in schema:
        assert value >= schema["minimum"], f"{where}: {value} < {schema['minimum']}"
    if "maximum" in schema:
        assert value <= schema["maximum"], f"{where}: {value} > {schema['maximum']}"
    if t == "object" and "properties" in schema:
        props = schema["properties"]
        assert set(value) == set(props), f"{where}: keys {sorted(value)} vs {sorted(props)}"
        for k, v in value.items():
            conform(v, props[k], f"{where}.{k}")
    if t == "array" and "items" in schema:
        for n, v in enumerate(value):
            conform(v, schema["items"], f"{where}[{n}]")


def test_conform_refuses_what_foxglove_would_misread() -> None:
    schema = json.loads(
        (resources.files("coorp.cosim") / "foxglove" / "PoseInFrame.json").read_bytes()
    )
    good = {
        "timestamp": {"sec": 1, "nsec": 5},
        "frame_id": "world",
        "pose": {"position": {"x": 0.0, "y": 1.0, "z": 0.1},
                 "orientation": {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0}},
    }  # fmt: skip
    conform(good, schema)
    for bad in (
        {**good, "frame": "world"},  # misspelt field
        {**good, "timestamp": {"sec": 1, "nsec": 1_000_000_000}},  # nsec out of range
        {**good, "timestamp": 1.5},  # a float time instead of {sec, nsec}
        {k: v for k, v in good.items() if k != "pose"},  # a field missing
    ):
        with pytest.raises(AssertionError):
            conform(bad, schema)


def test_every_message_of_a_trace_decodes_against_its_channels_schema(tmp_path) -> None:
    from mcap.reader import make_reader

    from coorp.cosim._trace import Tracer

    d = tiny(world={"obstacles": [WALL]})
    d["workload"]["drlc"] = {"enabled": True, "sync": "bsp", "batch_items": 2,
                             "train_us": 20_000.0, "param_bytes": 200_000}  # fmt: skip
    path = tmp_path / "t.mcap"
    tr = Tracer(path)
    r = run_cosim(parse_cosim(d), "coorp", duration_ns=SEC // 2, tracer=tr)
    tr.close()
    # Tracing observes only: the same run untraced has the same outcomes.
    untraced = run_cosim(parse_cosim(d), "coorp", duration_ns=SEC // 2)
    assert untraced.poses.tobytes() == r.poses.tobytes()
    assert untraced.reaction_ns.tobytes() == r.reaction_ns.tobytes()
    assert untraced.bh_bytes == r.bh_bytes
    official = {
        name: (resources.files("coorp.cosim") / "foxglove" / f"{name[9:]}.json").read_bytes()
        for name in ("foxglove.SceneUpdate", "foxglove.PoseInFrame")
    }
    counts: dict[str, int] = {}
    topic_schema: dict[str, str] = {}
    sent: dict[int, dict[str, Any]] = {}
    delivered: dict[int, dict[str, Any]] = {}
    with path.open("rb") as fh:
        reader = make_reader(fh, validate_crcs=True)
        header = reader.get_header()
        assert header.library == "coorp-cosim"
        summary = reader.get_summary()
        assert summary is not None and summary.statistics is not None
        n_summary = summary.statistics.message_count
        for schema, channel, message in reader.iter_messages(log_time_order=False):
            assert schema is not None
            assert schema.encoding == "jsonschema" and channel.message_encoding == "json"
            if schema.name.startswith("foxglove."):
                assert schema.data == official[schema.name]  # Foxglove's own file
            body = json.loads(message.data)
            conform(body, json.loads(schema.data), f"{channel.topic}#{message.sequence}")
            if "timestamp" in body:  # stamped like the log time
                ts = body["timestamp"]
                assert ts["sec"] * SEC + ts["nsec"] == message.log_time
            if channel.topic == "/network/sent":
                sent[body["id"]] = body
                assert body["created_ns"] == message.log_time
            elif channel.topic == "/network/messages":
                delivered[body["id"]] = body
            topic_schema[channel.topic] = schema.name
            counts[channel.topic] = counts.get(channel.topic, 0) + 1
    assert sum(counts.values()) == n_summary == tr.count
    assert topic_schema == {
        "/scene": "foxglove.SceneUpdate",
        "/robots/leader/pose": "foxglove.PoseInFrame",
        "/robots/r1/pose": "foxglove.PoseInFrame",
        "/network/sent": "coorp.MessageSent",
        "/network/messages": "coorp.NetworkMessage",
        "/network/transfers": "coorp.BulkTransfer",
        "/network/links": "coorp.Links",
    }
    # One pose and one scene per record period; one event per delivered perception and
    # command; one per completed DRLC transfer.
    samples = len(r.times_ns)
    assert counts["/scene"] == counts["/robots/r1/pose"] == counts["/network/links"] == samples
    assert counts["/network/messages"] >= 2 * int(r.reaction_ns.size) - 2
    # Every delivered message was logged when it entered the channel, under its ID, with
    # the same flow, endpoints, size and creation instant; the rest were still in flight.
    # COORP's permits are messages too.
    assert set(delivered) <= set(sent) and len(sent) - len(delivered) < 10
    for k, m in delivered.items():
        assert {f: m[f] for f in sent[k]} == sent[k]
        assert m["delivered_ns"] > m["created_ns"]
    kinds = {m["flow"].split(":")[0] for m in delivered.values()}
    assert kinds == {"perception", "control", "permit"}
    assert counts["/network/transfers"] >= 2
