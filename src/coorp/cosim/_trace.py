"""MCAP traces of a co-simulation, viewable in Foxglove.

Channels (JSON messages, JSON-schema schemas; the ``foxglove.*`` ones are Foxglove's
well-known schemas, which its 3D panel draws — the trace carries Foxglove's own JSON
Schema files for them, ``coorp/cosim/foxglove/``, and every message fills every field):

* ``/scene`` (``foxglove.SceneUpdate``): obstacles as boxes, robots as cylinders, each
  worker's reference point as a small sphere, every ``record_period_ms``;
* ``/robots/<name>/pose`` (``foxglove.PoseInFrame``): each robot's pose, same instants;
* ``/network/sent`` (``coorp.MessageSent``): every datagram message (the MPC loop's
  perceptions and commands, a policy's own such as COORP's permits) as it enters the
  channel, with its ID, flow, endpoints and size;
* ``/network/messages`` (``coorp.NetworkMessage``): every delivered one at its delivery
  instant, with the same ID, its creation instant and latency (a sent ID that never
  shows up here was lost or still in flight at the end);
* ``/network/transfers`` (``coorp.BulkTransfer``): every completed bulk transfer (DRLC
  data, updates, models) at its completion instant, with its start and size;
* ``/network/links`` (``coorp.Links``): MCS, walls, distance and received power of each
  leader-worker link, at the pose instants.

Log times are the simulation's integer nanoseconds; the same scenario and seed write the
same bytes.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from coorp._errors import ConfigurationError

__all__ = ["Tracer"]

#: Foxglove's well-known schemas, their published JSON Schema files byte for byte.
_FOXGLOVE = ("foxglove.SceneUpdate", "foxglove.PoseInFrame")


def _foxglove_schema(name: str) -> bytes:
    return (resources.files("coorp.cosim") / "foxglove" / f"{name[9:]}.json").read_bytes()


_INT = {"type": "integer"}
_NUM = {"type": "number"}
_STR = {"type": "string"}


def _object(title: str, **props: Any) -> dict[str, Any]:
    return {"title": title, "type": "object", "properties": props}


#: Coorp's own channels (the whole message described, every field present).
_SCHEMAS: dict[str, dict[str, Any]] = {
    "coorp.MessageSent": _object(
        "coorp.MessageSent", id=_INT, flow=_STR, src=_STR, dst=_STR, size_bytes=_INT,
        created_ns=_INT,
    ),
    "coorp.NetworkMessage": _object(
        "coorp.NetworkMessage", id=_INT, flow=_STR, src=_STR, dst=_STR, size_bytes=_INT,
        created_ns=_INT, delivered_ns=_INT, latency_ms=_NUM,
    ),
    "coorp.BulkTransfer": _object(
        "coorp.BulkTransfer", flow=_STR, src=_STR, dst=_STR, size_bytes=_INT,
        started_ns=_INT, completed_ns=_INT, duration_ms=_NUM,
    ),
    "coorp.Links": _object("coorp.Links", links={
        "type": "array",
        "items": _object("coorp.Link", worker=_STR, mcs=_INT, walls=_INT, distance_m=_NUM,
                         rx_dbm=_NUM),
    }),
}  # fmt: skip


def _time(ns: int) -> dict[str, int]:
    return {"sec": ns // 1_000_000_000, "nsec": ns % 1_000_000_000}


def _quat_yaw(yaw: float) -> dict[str, float]:
    return {"x": 0.0, "y": 0.0, "z": math.sin(yaw / 2.0), "w": math.cos(yaw / 2.0)}


def _pose(x: float, y: float, z: float, yaw: float = 0.0) -> dict[str, Any]:
    return {"position": {"x": x, "y": y, "z": z}, "orientation": _quat_yaw(yaw)}


_ROBOT_COLOR = {"r": 0.12, "g": 0.47, "b": 0.71, "a": 1.0}
_LEADER_COLOR = {"r": 0.84, "g": 0.15, "b": 0.16, "a": 1.0}
_OBSTACLE_COLOR = {"r": 0.6, "g": 0.6, "b": 0.6, "a": 0.8}
_REF_COLOR = {"r": 0.17, "g": 0.63, "b": 0.17, "a": 0.8}


class Tracer:
    """Writes one MCAP file; call :meth:`close` when the run is over."""

    def __init__(self, path: str | Path) -> None:
        try:
            from mcap.writer import CompressionType, Writer
        except ImportError as exc:
            raise ConfigurationError(
                f"--trace needs the mcap package: pip install 'coorp[cosim]': {exc}"
            ) from None
        self.path = Path(path)
        self._fh = self.path.open("wb")
        self._w = Writer(self._fh, compression=CompressionType.ZSTD)
        self._w.start(profile="", library="coorp-cosim")
        self._schema: dict[str, int] = {}
        self._chan: dict[str, int] = {}
        self._seq: dict[int, int] = {}
        self._obstacles: list[dict[str, Any]] = []
        self._leader = ""
        self.count = 0

    def _channel(self, topic: str, schema: str) -> int:
        c = self._chan.get(topic)
        if c is None:
            sid = self._schema.get(schema)
            if sid is None:
                if schema in _FOXGLOVE:
                    data = _foxglove_schema(schema)
                else:
                    data = json.dumps(_SCHEMAS[schema], sort_keys=True).encode()
                sid = self._w.register_schema(name=schema, encoding="jsonschema", data=data)
                self._schema[schema] = sid
            c = self._w.register_channel(topic=topic, message_encoding="json", schema_id=sid)
            self._chan[topic] = c
        return c

    def _write(self, topic: str, schema: str, t_ns: int, msg: dict[str, Any]) -> None:
        c = self._channel(topic, schema)
        seq = self._seq.get(c, 0)
        self._seq[c] = seq + 1
        data = json.dumps(msg, sort_keys=True, separators=(",", ":")).encode()
        self._w.add_message(channel_id=c, log_time=t_ns, data=data, publish_time=t_ns,
                            sequence=seq)  # fmt: skip
        self.count += 1

    # -- called by the co-simulation ----------------------------------------------------
    def scene(self, t_ns: int, cfg: Any) -> None:
        self._obstacles = [
            {
                "pose": _pose(o.center_m[0], o.center_m[1], o.height_m / 2.0),
                "size": {"x": o.size_m[0], "y": o.size_m[1], "z": o.height_m},
                "color": _OBSTACLE_COLOR,
            }
            for o in cfg.world.obstacles
        ]

    def set_leader(self, name: str) -> None:
        self._leader = name

    def poses(self, t_ns: int, world: Any, poses: np.ndarray, refs: np.ndarray,
              workers: list[int], links: dict[int, Any]) -> None:  # fmt: skip
        stamp = _time(t_ns)
        robots = []
        for r in world.robots:
            x, y, yaw = (float(v) for v in poses[r.index])
            robots.append({
                "pose": _pose(x, y, r.altitude_m, yaw),
                "size": {"x": 2 * r.radius_m, "y": 2 * r.radius_m, "z": 0.2},
                "bottom_scale": 1.0, "top_scale": 1.0,
                "color": _LEADER_COLOR if r.name == self._leader else _ROBOT_COLOR,
            })  # fmt: skip
            self._write(f"/robots/{r.name}/pose", "foxglove.PoseInFrame", t_ns, {
                "timestamp": stamp, "frame_id": "world", "pose": _pose(x, y, r.altitude_m, yaw),
            })  # fmt: skip
        spheres = [
            {
                "pose": _pose(float(x), float(y), 0.05),
                "size": {"x": 0.15, "y": 0.15, "z": 0.15},
                "color": _REF_COLOR,
            }
            for x, y in refs
        ]
        # Every field of foxglove.SceneEntity, the unused primitive lists empty.
        entity: dict[str, Any] = {
            "timestamp": stamp, "frame_id": "world", "lifetime": _time(0),
            "frame_locked": False, "metadata": [], "arrows": [], "cubes": [], "spheres": [],
            "cylinders": [], "lines": [], "triangles": [], "texts": [], "models": [],
        }  # fmt: skip
        self._write("/scene", "foxglove.SceneUpdate", t_ns, {
            "deletions": [],
            "entities": [
                {**entity, "id": "obstacles", "cubes": self._obstacles},
                {**entity, "id": "robots", "cylinders": robots},
                {**entity, "id": "references", "spheres": spheres},
            ],
        })  # fmt: skip
        self._write("/network/links", "coorp.Links", t_ns, {
            "links": [
                {"worker": world.robots[i].name, "mcs": links[i].mcs, "walls": links[i].walls,
                 "distance_m": round(links[i].distance_m, 4), "rx_dbm": round(links[i].rx_dbm, 3)}
                for i in workers if i in links
            ],
        })  # fmt: skip

    def sent(self, t_ns: int, msg_id: int, flow: str, src: str, dst: str, size: int) -> None:
        self._write("/network/sent", "coorp.MessageSent", t_ns, {
            "id": msg_id, "flow": flow, "src": src, "dst": dst, "size_bytes": size,
            "created_ns": t_ns,
        })  # fmt: skip

    def message(self, t_ns: int, msg_id: int, flow: str, src: str, dst: str, size: int,
                created: int) -> None:  # fmt: skip
        self._write("/network/messages", "coorp.NetworkMessage", t_ns, {
            "id": msg_id, "flow": flow, "src": src, "dst": dst, "size_bytes": size,
            "created_ns": created, "delivered_ns": t_ns, "latency_ms": (t_ns - created) / 1e6,
        })  # fmt: skip

    def transfer(self, t_ns: int, flow: str, src: str, dst: str, size: int,
                 started: int) -> None:  # fmt: skip
        self._write("/network/transfers", "coorp.BulkTransfer", t_ns, {
            "flow": flow, "src": src, "dst": dst, "size_bytes": size, "started_ns": started,
            "completed_ns": t_ns, "duration_ms": (t_ns - started) / 1e6,
        })  # fmt: skip

    def close(self) -> None:
        self._w.finish()
        self._fh.close()
