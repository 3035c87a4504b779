"""Read (and, for tests and tools, write) rosbag2 bags of ``vnd_msgs/msg/Transition`` records.

vnd_core must not import a middleware, so this reader speaks rosbag2 through ``rosbags`` alone:
the message layout comes from the bag's own embedded definitions when it has them (MCAP bags
written by ``ros2 bag`` or rosbags do) and otherwise from a typestore that registers
``vnd_msgs/msg/Transition`` parsed from ``vnd_msgs/msg/Transition.msg`` with rosbags'
``get_types_from_msg`` (standard types from the Jazzy typestore).

A bag argument may be one rosbag2 directory (with ``metadata.yaml``) or a directory of them,
like the learner's replay store (``segment_000001/``, ...): every bag found is read.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from vnd_core.learner.records import TickRecords

TRANSITION_TYPE = "vnd_msgs/msg/Transition"
REPLAY_TOPIC = "/vnd/replay"  # default topic of the policy node's replay stream
MSG_DIR_ENV = "VND_MSGS_DIR"  # override: directory holding Transition.msg
_SOURCE_MSG_DIR = Path(__file__).resolve().parents[3] / "vnd_msgs" / "msg"


class ReplayBagError(ValueError):
    """A replay bag cannot be read; the message names the path and the reason."""


class ReplayBagWarning(UserWarning):
    """Transitions were left out of a read (the message says how many and why)."""


def transition_msg_path() -> Path:
    """Path of ``Transition.msg``: $VND_MSGS_DIR, the ament share of vnd_msgs, or this
    source checkout; raises ReplayBagError when none has it."""
    candidates = []
    if os.environ.get(MSG_DIR_ENV):
        candidates.append(Path(os.environ[MSG_DIR_ENV]))
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        candidates.append(Path(prefix) / "share" / "vnd_msgs" / "msg")
    candidates.append(_SOURCE_MSG_DIR)
    for directory in candidates:
        path = directory / "Transition.msg"
        if path.is_file():
            return path
    raise ReplayBagError(
        f"Transition.msg not found (looked in {[str(c) for c in candidates]}); "
        f"set {MSG_DIR_ENV} to the vnd_msgs/msg directory"
    )


def transition_typestore() -> Typestore:
    """Jazzy typestore with ``vnd_msgs/msg/Transition`` registered from its .msg file."""
    store = get_typestore(Stores.ROS2_JAZZY)
    store.register(get_types_from_msg(transition_msg_path().read_text(), TRANSITION_TYPE))
    return store


def find_bags(path: str | Path) -> list[Path]:
    """rosbag2 directories at ``path``: itself if it holds metadata.yaml, else its sub-directories
    that do (sorted by name); raises ReplayBagError when there is none."""
    path = Path(path)
    if (path / "metadata.yaml").is_file():
        return [path]
    if not path.is_dir():
        raise ReplayBagError(f"{path}: no such bag directory")
    bags = sorted(p for p in path.iterdir() if (p / "metadata.yaml").is_file())
    if not bags:
        raise ReplayBagError(
            f"{path}: neither a rosbag2 bag (metadata.yaml) nor a directory of them"
        )
    return bags


@dataclass
class ReadReport:
    """What :func:`read_transitions` read and what it left out."""

    bags: list[str] = field(default_factory=list)  # bag folders read, in the order read
    messages: int = 0  # Transition messages read
    duplicate_stamps: int = 0  # messages left out: stamp already read from an earlier message

    def describe(self) -> str:
        """One line for the terminal."""
        text = f"{self.messages} transitions read from {len(self.bags)} bags"
        if self.duplicate_stamps:
            text += (
                f"; {self.duplicate_stamps} left out with a stamp already read (the bag listed"
                " first, then the message recorded first, is kept)"
            )
        return text


def read_transitions(
    paths: str | Path | Sequence[str | Path],
    topic: str | None = None,
    report: ReadReport | None = None,
) -> TickRecords:
    """Every Transition of the bags at ``paths`` as stamp-ordered :class:`TickRecords`.

    ``topic`` restricts the read to one topic; by default every connection of type
    ``vnd_msgs/msg/Transition`` is read. The record stamp is the message's header stamp (the
    odometry stamp of the tick). Ticks sharing a stamp keep the first read: bags in the order
    given (a directory's bags by name), messages in bag order. How many were left out goes to
    ``report``; without one, a :class:`ReplayBagWarning` says it.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    bags = [bag for p in paths for bag in find_bags(p)]
    rows: dict[str, list] = {k: [] for k in ("stamp", "state", "action", "mode", "pv", "ev")}
    store = transition_typestore()
    for bag in bags:
        _read_bag(bag, topic, store, rows)
    records, duplicates = _to_records(rows)
    if report is None and duplicates:
        warnings.warn(
            f"{[str(b) for b in bags]}: {duplicates} transitions share a stamp with one read "
            "before them and are left out (the bag listed first is kept)",
            ReplayBagWarning,
            stacklevel=2,
        )
    if report is not None:
        report.bags += [str(b) for b in bags]
        report.messages += len(rows["stamp"])
        report.duplicate_stamps += duplicates
    return records


def _read_bag(bag: Path, topic: str | None, store: Typestore, rows: dict[str, list]) -> None:
    """Append the Transitions of one bag to ``rows``."""
    try:
        with AnyReader([bag], default_typestore=store) as reader:
            connections = [
                c
                for c in reader.connections
                if c.msgtype == TRANSITION_TYPE and (topic is None or c.topic == topic)
            ]
            if not connections:
                found = sorted({f"{c.topic} ({c.msgtype})" for c in reader.connections})
                raise ReplayBagError(
                    f"{bag}: no {TRANSITION_TYPE} topic"
                    f"{'' if topic is None else f' named {topic}'}; found {found}"
                )
            for connection, _, raw in reader.messages(connections=connections):
                _append(rows, reader.deserialize(raw, connection.msgtype))
    except ReplayBagError:
        raise
    except Exception as err:  # rosbags raises several unrelated types for unreadable bags
        raise ReplayBagError(f"{bag}: cannot read bag: {err}") from err


def _append(rows: dict[str, list], msg: Any) -> None:
    """Add one deserialised Transition to the column lists."""
    stamp = msg.header.stamp
    rows["stamp"].append(int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec))
    rows["state"].append(np.asarray(msg.state, dtype=np.float64))
    rows["action"].append(np.asarray(msg.action, dtype=np.float64))
    rows["mode"].append(int(msg.mode))
    rows["pv"].append(int(msg.policy_version))
    rows["ev"].append(int(msg.encoder_version))


def _to_records(rows: dict[str, list]) -> tuple[TickRecords, int]:
    """Column lists -> stamp-sorted TickRecords keeping the first row of each stamp, and how
    many rows were left out."""
    n = len(rows["stamp"])
    records = TickRecords(
        stamp_ns=np.array(rows["stamp"], dtype=np.int64),
        state=np.array(rows["state"]).reshape(n, 13),
        action=np.array(rows["action"]).reshape(n, 4),
        mode=np.array(rows["mode"], dtype=np.uint8),
        policy_version=np.array(rows["pv"], dtype=np.uint32),
        encoder_version=np.array(rows["ev"], dtype=np.uint32),
    )
    order = np.argsort(records.stamp_ns, kind="stable")
    stamps = records.stamp_ns[order]
    first = np.concatenate([[True], np.diff(stamps) != 0]) if n else np.zeros(0, bool)
    return records.take(order[first]), int(n - first.sum())


def write_transitions(
    path: str | Path,
    records: TickRecords,
    topic: str = REPLAY_TOPIC,
    latents: Iterable[np.ndarray | None] | None = None,
    custom_data: Mapping[str, str] | None = None,
) -> Path:
    """Write ``records`` as a rosbag2 MCAP bag of Transition messages at ``path`` (new
    directory); ``latents`` optionally gives each tick's z (None: empty, z_valid false);
    ``custom_data`` goes into the bag's metadata (e.g. the ``source`` of imported ticks)."""
    store = transition_typestore()
    msg_class = store.types[TRANSITION_TYPE]
    header_class = store.types["std_msgs/msg/Header"]
    time_class = store.types["builtin_interfaces/msg/Time"]
    latents = list(latents) if latents is not None else [None] * len(records)
    path = Path(path)
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        for key, value in (custom_data or {}).items():
            writer.set_custom_data(key, value)
        connection = writer.add_connection(topic, TRANSITION_TYPE, typestore=store)
        for i in range(len(records)):
            stamp_ns = int(records.stamp_ns[i])
            z = latents[i]
            msg = msg_class(
                header=header_class(
                    stamp=time_class(
                        sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000
                    ),
                    frame_id="world",
                ),
                tick=np.uint64(i),
                state=np.asarray(records.state[i], dtype=np.float64),
                action=np.asarray(records.action[i], dtype=np.float64),
                reference=np.zeros(9, dtype=np.float64),
                z=np.zeros(0, np.float32) if z is None else np.asarray(z, dtype=np.float32),
                z_valid=z is not None,
                policy_version=int(records.policy_version[i]),
                encoder_version=int(records.encoder_version[i]),
                mode=int(records.mode[i]),
            )
            writer.write(connection, stamp_ns, store.serialize_cdr(msg, TRANSITION_TYPE))
    return path
