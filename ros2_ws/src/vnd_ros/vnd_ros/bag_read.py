"""Reading rosbag2 (MCAP) bags: what a bag holds (:func:`bag_info`, ``vnd bag info``), the
recovery of a bag a crash left unfinished, and its messages, raw or deserialised.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rosbags.rosbag2 import Reader
from vnd_core.bagfile import (
    BagFileError,
    RecoveryReport,
    needs_recovery,
    recover_bag,
)

from vnd_ros import messages


class BagError(RuntimeError):
    """A bag cannot be written, read or played (names the bag and the reason)."""


def _absolute(topic: str) -> str:
    return topic if topic.startswith("/") else "/" + topic


# ---------------------------------------------------------------- reading and info


@dataclass(frozen=True)
class TopicSummary:
    """One topic of a bag."""

    name: str  # ROS topic name
    msgtype: str  # ROS type name
    count: int  # messages stored


@dataclass(frozen=True)
class BagInfo:
    """What ``vnd bag info`` shows."""

    path: Path  # bag folder
    storage: str  # storage plugin ("mcap" or "sqlite3")
    start_ns: int  # first message stamp (ns since epoch), 0 for an empty bag
    end_ns: int  # last message stamp (ns since epoch), 0 for an empty bag
    message_count: int  # all messages
    topics: tuple[TopicSummary, ...]  # per topic, sorted by name

    @property
    def duration_s(self) -> float:
        """Time between the first and the last message [s]."""
        return (self.end_ns - self.start_ns) / 1e9 if self.message_count else 0.0


def recover(path: str | Path) -> RecoveryReport:
    """Close the torn MCAP files of the bag folder ``path`` (a killed recorder's) and write its
    metadata.yaml from the MCAP records alone; see :func:`vnd_core.bagfile.recover_bag`."""
    try:
        return recover_bag(path, type_hash=_type_hash_or_empty)
    except (BagFileError, OSError) as err:
        raise BagError(f"cannot recover bag {path}: {err}") from err


def bag_needs_recovery(path: str | Path) -> bool:
    """True for a bag folder without metadata.yaml or with an MCAP file without footer."""
    return Path(path).is_dir() and needs_recovery(Path(path))


def _type_hash_or_empty(msgtype: str) -> str:
    try:
        return messages.type_hash(msgtype)
    except (messages.UnknownMessageTypeError, ValueError):  # a type this install does not know
        return ""


def _open_reader(path: str | Path) -> Reader:
    try:
        reader = Reader(Path(path))
        reader.open()
    except Exception as err:  # rosbags raises several error types: name the bag once
        raise BagError(f"cannot open bag {path}: {err}") from err
    return reader


def bag_info(path: str | Path) -> BagInfo:
    """Summary of the bag at ``path``."""
    reader = _open_reader(path)
    try:
        topics = tuple(
            TopicSummary(name, info.msgtype or "", info.msgcount)
            for name, info in sorted(reader.topics.items())
        )
        count = reader.message_count
        storage = _storage_identifier(Path(path))
        return BagInfo(
            Path(path),
            storage,
            reader.start_time if count else 0,
            reader.end_time if count else 0,
            count,
            topics,
        )
    finally:
        reader.close()


def _storage_identifier(path: Path) -> str:
    """Storage plugin named in a bag folder's metadata.yaml (or by a single file's suffix)."""
    if path.is_dir():
        metadata = yaml.safe_load((path / "metadata.yaml").read_text())
        return str(metadata["rosbag2_bagfile_information"]["storage_identifier"])
    return {".mcap": "mcap", ".db3": "sqlite3"}.get(path.suffix, path.suffix)


def format_info(info: BagInfo) -> str:
    """Human-readable summary, like ``ros2 bag info``."""
    lines = [
        f"Files:            {info.path}",
        f"Storage id:       {info.storage}",
        f"Duration:         {info.duration_s:.3f}s",
        f"Start:            {_stamp_text(info.start_ns)}",
        f"End:              {_stamp_text(info.end_ns)}",
        f"Messages:         {info.message_count}",
        "Topic information:",
    ]
    width = max((len(topic.name) for topic in info.topics), default=0)
    lines += [
        f"  {topic.name:<{width}}  {topic.msgtype}  count: {topic.count}" for topic in info.topics
    ]
    return "\n".join(lines)


def _stamp_text(stamp_ns: int) -> str:
    seconds, nanoseconds = divmod(stamp_ns, 1_000_000_000)
    wall = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
    return f"{wall}.{nanoseconds:09d} ({seconds}.{nanoseconds:09d})"


def read_raw(
    path: str | Path, topics: Sequence[str] | None = None
) -> Iterator[tuple[str, str, int, bytes]]:
    """``(topic, msgtype, stamp_ns, cdr_bytes)`` in time order; ``topics`` filters."""
    for connection, stamp_ns, data in _records(path, topics):
        yield connection.topic, connection.msgtype, stamp_ns, data


def read_messages(
    path: str | Path, topics: Sequence[str] | None = None
) -> Iterator[tuple[str, str, int, Any]]:
    """``(topic, msgtype, stamp_ns, message)`` in time order, as active-backend messages.

    A topic recorded with another definition of its type than this install's (the RIHS01
    hash the bag stores differs) is decoded with the definition stored in the bag, then carried
    into this install's message class field by field: fields the recorded definition lacks
    keep their defaults, fields this install lacks are dropped. So bags recorded before a
    message gained a field still replay and report.
    """
    decoders: dict[int, Callable[[bytes], Any]] = {}
    for connection, stamp_ns, data in _records(path, topics):
        decode = decoders.get(connection.id)
        if decode is None:
            decode = decoders[connection.id] = _decoder(connection)
        yield connection.topic, connection.msgtype, stamp_ns, decode(data)


def _records(path: str | Path, topics: Sequence[str] | None) -> Iterator[tuple[Any, int, bytes]]:
    """``(rosbags connection, stamp_ns, cdr_bytes)`` in time order; ``topics`` filters."""
    reader = _open_reader(path)
    try:
        wanted = None if topics is None else {_absolute(topic) for topic in topics}
        missing = set() if wanted is None else wanted - set(reader.topics)
        if missing:
            raise BagError(f"bag {path} has no topic {', '.join(sorted(missing))}")
        connections = [c for c in reader.connections if wanted is None or c.topic in wanted]
        for connection, stamp_ns, data in reader.messages(connections=connections):
            yield connection, stamp_ns, bytes(data)
    finally:
        reader.close()


def _decoder(connection: Any) -> Callable[[bytes], Any]:
    """CDR bytes of ``connection`` -> an active-backend message (see :func:`read_messages`)."""
    msgtype = connection.msgtype
    recorded = connection.digest or ""
    current = _type_hash_or_empty(msgtype)
    if not recorded.startswith("RIHS01_") or recorded == current or connection.msgdef is None:
        return lambda data: messages.deserialize(msgtype, data)
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.EMPTY)
    try:
        store.register(get_types_from_msg(connection.msgdef.data, msgtype))
    except Exception as err:  # the parser raises several types: name the topic once
        raise BagError(
            f"topic {connection.topic}: the bag's definition of {msgtype} cannot be read: {err}"
        ) from err
    return lambda data: _carried(store.deserialize_cdr(data, msgtype), msgtype)


def _carried(recorded: Any, msgtype: str) -> Any:
    """The rosbags message ``recorded`` as this install's ``msgtype`` message."""
    msg = messages.get_message(msgtype)()
    for name in (f.name for f in dataclasses.fields(recorded) if not f.name.isupper()):
        if name == "__msgtype__" or not hasattr(msg, name):
            continue
        value = getattr(recorded, name)
        if hasattr(value, "__msgtype__"):
            value = _carried(value, value.__msgtype__)
        elif isinstance(value, list) and value and hasattr(value[0], "__msgtype__"):
            value = [_carried(item, item.__msgtype__) for item in value]
        setattr(msg, name, value)
    return msg
