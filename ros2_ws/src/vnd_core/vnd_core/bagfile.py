"""Crash-safe rosbag2 MCAP bags: a writer whose chunks reach the disk at a bounded interval, and
the recovery of a bag that a killed process left without its summary, footer or metadata.yaml.

Writing. rosbags' MCAP writer collects messages in an in-memory chunk that it writes out only
once it holds 1 MiB, and writes the summary, footer and ``metadata.yaml`` only on close: a
SIGKILL loses everything since the last full chunk (all of a short recording). A
:class:`DurableBagWriter` closes the pending chunk and ``fsync``s the file whenever its oldest
message is :attr:`FlushPolicy.period_s` old or it holds :attr:`FlushPolicy.max_messages`
messages, so after a SIGKILL the file holds every message up to the last flushed chunk. Each
chunk carries the schema and channel records of the connections added since the previous one,
so the chunks alone describe the bag. While the writer is open it holds an advisory lock on
``LOCK_NAME`` in the bag folder: recovery refuses a bag that a live process still writes (the
kernel drops the lock of a killed process).

Recovering. :func:`recover_bag` scans an MCAP file record by record (the MCAP format: magic,
then ``opcode u8 | length u64 | body`` records; Data End and Footer close the file). When the
footer is missing it cuts the file after its last complete record, keeps the cut-off bytes in
a ``.torn`` file beside it, and appends Data End and a Footer without a summary (readers then
scan the chunks), which rosbags, the ``mcap`` library and ``ros2 bag`` read. It then writes
``metadata.yaml`` from the records alone: per-topic message counts, types, offered QoS and
time range.

The middleware stays out of this module: type description hashes come from the caller.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import yaml
from rosbags.interfaces import Connection, Qos
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.metadata import dump_qos_v9, parse_qos

# rosbag2 metadata version written (Jazzy reads 9, Humble reads <= 9)
BAG_FORMAT_VERSION: Literal[9] = 9
LOCK_NAME = ".vnd_writing.lock"  # held (flock) by the process writing the bag
MAGIC = b"\x89MCAP0\r\n"
_OP_HEADER, _OP_FOOTER, _OP_SCHEMA, _OP_CHANNEL, _OP_MESSAGE = 0x01, 0x02, 0x03, 0x04, 0x05
_OP_CHUNK, _OP_DATA_END = 0x06, 0x0F
_RECORD_PREFIX = struct.Struct("<BQ")  # opcode, body length
_FOOTER_BODY = struct.Struct("<QQI")  # summary start, summary offset start, summary crc
_FOOTER_SIZE = _RECORD_PREFIX.size + _FOOTER_BODY.size + len(MAGIC)


class BagFileError(RuntimeError):
    """A bag cannot be written or recovered (names the file and the reason)."""


# ---------------------------------------------------------------- writing


@dataclass(frozen=True)
class FlushPolicy:
    """When a :class:`DurableBagWriter` puts its pending messages on disk."""

    period_s: float = 1.0  # flush once the oldest unflushed message is this old [s]
    max_messages: int = 10_000  # flush once this many messages are unflushed (bursts)


class DurableBagWriter:
    """A rosbag2 MCAP bag writer that loses at most one flush interval on SIGKILL.

    Args:
        path: bag folder to create (must not exist).
        policy: when pending messages are flushed (see :class:`FlushPolicy`).
        clock: monotonic time source [s] (tests pass a fake).

    Use ``add_connection`` and ``write`` as with rosbags' ``Writer``; call
    :meth:`flush_if_due` when idle (a write checks the policy itself), :meth:`close` at the
    end (summary, footer, metadata.yaml). Not thread-safe: one thread writes.
    """

    def __init__(
        self,
        path: str | Path,
        policy: FlushPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.policy = policy or FlushPolicy()
        if self.policy.period_s <= 0 or self.policy.max_messages < 1:
            raise ValueError("FlushPolicy needs period_s > 0 and max_messages >= 1")
        self._clock = clock
        self._writer = Writer(
            self.path, version=BAG_FORMAT_VERSION, storage_plugin=StoragePlugin.MCAP
        )
        self._lock: BinaryIO | None = None
        self._pending = 0  # messages written since the last flush
        self._oldest_pending_s = 0.0  # clock time of the first of them
        self.flushes = 0  # flushes done (chunks put on disk)

    def open(self) -> DurableBagWriter:
        """Create the bag folder and the .mcap file; its header is on disk when this returns."""
        try:
            self._writer.open()
        except Exception as err:  # rosbags raises WriterError / OSError / FileExistsError
            raise BagFileError(f"cannot create bag {self.path}: {err}") from err
        # rosbags' MCAP writer internals (chunk, close_chunk, bio) are not in its StorageWriter type
        storage: Any = self._writer.storage
        if not (hasattr(storage, "close_chunk") and hasattr(storage, "bio")):
            # the chunk hooks below are rosbags' MCAP writer internals: fail loudly if they move
            raise BagFileError(f"rosbags' MCAP writer has no chunk hooks: cannot flush {self.path}")
        self._lock = (self.path / LOCK_NAME).open("wb")
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._sync(storage.bio)
        return self

    def add_connection(
        self,
        topic: str,
        msgtype: str,
        *,
        msgdef: str | None = None,
        rihs01: str | None = None,
        offered_qos_profiles: Sequence[Qos] = (),
    ) -> Connection:
        """rosbags ``Writer.add_connection``: ``msgdef`` and ``rihs01`` describe the type (looked
        up in rosbags' default store when None), ``offered_qos_profiles`` the writers' QoS."""
        return self._writer.add_connection(
            topic,
            msgtype,
            msgdef=msgdef,
            rihs01=rihs01,
            offered_qos_profiles=offered_qos_profiles,
        )

    def write(self, connection: Connection, stamp_ns: int, data: bytes | memoryview) -> None:
        """Append one message; flushes when the policy says so."""
        now_s = self._clock()
        if self._pending == 0:
            self._oldest_pending_s = now_s
        self._writer.write(connection, stamp_ns, data)
        self._pending += 1
        if self._pending >= self.policy.max_messages or self._due(now_s):
            self.flush()

    def flush_if_due(self) -> bool:
        """Flush when the oldest pending message is older than the period; True if flushed."""
        if self._pending and self._due(self._clock()):
            self.flush()
            return True
        return False

    def flush(self) -> None:
        """Close the pending chunk and put it on disk (write + fsync)."""
        storage: Any = self._writer.storage  # the MCAP writer's internals, as in open()
        if storage is None:
            return
        if storage.chunk.msgs:  # rosbags also closes a chunk once it holds 1 MiB
            storage.close_chunk()
        self._sync(storage.bio)
        self._pending = 0
        self.flushes += 1

    @property
    def pending(self) -> int:
        """Messages written but not yet on disk."""
        return self._pending

    def close(self) -> None:
        """Write the summary, footer and metadata.yaml; release the lock."""
        try:
            if self._writer.storage is not None:
                self._writer.close()
        finally:
            self._release()

    def _due(self, now_s: float) -> bool:
        return now_s - self._oldest_pending_s >= self.policy.period_s

    @staticmethod
    def _sync(stream: BinaryIO) -> None:
        stream.flush()
        os.fsync(stream.fileno())

    def _release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()
            with contextlib.suppress(FileNotFoundError):
                (self.path / LOCK_NAME).unlink()


def being_written(bag_dir: Path) -> bool:
    """True while a live process holds the writer lock of ``bag_dir``."""
    lock_path = bag_dir / LOCK_NAME
    if not lock_path.exists():
        return False
    with lock_path.open("rb") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
    return False


# ---------------------------------------------------------------- recovery


@dataclass
class FileScan:
    """What a record scan of one .mcap file found."""

    path: Path  # the .mcap file
    size: int  # its length [bytes]
    complete: bool  # it ends with Data End, Footer and the closing magic
    end_of_records: int  # offset after the last complete record (before a torn one)
    records: int = 0  # complete records in the data section


@dataclass
class TopicCount:
    """One topic of a recovered bag."""

    name: str  # ROS topic name
    msgtype: str  # ROS type name
    serialization_format: str  # e.g. "cdr"
    offered_qos_profiles: list[Qos]  # from the channel's metadata
    count: int = 0  # messages


@dataclass
class RecoveryReport:
    """What :func:`recover_bag` did to a bag folder."""

    bag: Path  # the bag folder
    files: list[str] = field(default_factory=list)  # .mcap files, relative to the bag
    repaired: dict[str, int] = field(default_factory=dict)  # file -> torn bytes cut off
    torn_files: list[str] = field(default_factory=list)  # where the cut-off bytes were kept
    message_count: int = 0  # messages in the bag after recovery
    topics: dict[str, TopicCount] = field(default_factory=dict)  # topic -> counts

    def describe(self) -> str:
        """One line per fact, for the terminal."""
        lines = [f"{self.bag}: {self.message_count} messages in {len(self.topics)} topics"]
        for name, torn in self.repaired.items():
            lines.append(
                f"  {name}: no footer (writer killed); closed after its last complete record"
                + (f", {torn} torn bytes kept in {name}.torn" if torn else "")
            )
        lines += [f"  {t.name}: {t.count} messages ({t.msgtype})" for t in self.topics.values()]
        return "\n".join(lines)


def needs_recovery(bag_dir: Path) -> bool:
    """True when ``bag_dir`` holds .mcap files but no metadata.yaml, or an .mcap file without
    its footer (a writer was killed)."""
    files = sorted(bag_dir.glob("*.mcap"))
    if not files:
        return False
    if not (bag_dir / "metadata.yaml").is_file():
        return True
    return not all(_has_footer(path) for path in files)


def recover_bag(
    bag_dir: str | Path, type_hash: Callable[[str], str] | None = None
) -> RecoveryReport:
    """Close every torn .mcap file of ``bag_dir`` and write its metadata.yaml from the records.

    ``type_hash(msgtype)`` gives the RIHS01 hash of a type ("" when unknown); hashes in an
    existing metadata.yaml are kept. Raises BagFileError when a live process writes the bag,
    the folder has no .mcap file, or a file is not MCAP.
    """
    bag = Path(bag_dir)
    if not bag.is_dir():
        raise BagFileError(f"{bag} is not a bag folder")
    if being_written(bag):
        raise BagFileError(f"{bag} is being written by a live process; stop it first")
    files = sorted(bag.glob("*.mcap"))
    if not files:
        raise BagFileError(f"{bag} holds no .mcap file to recover from")
    report = RecoveryReport(bag=bag, files=[path.name for path in files])
    known_hashes = _hashes_from_metadata(bag / "metadata.yaml")
    start_ns, end_ns = None, None
    per_file: list[tuple[str, int, int, int]] = []  # name, start, end, count
    for path in files:
        scan = scan_file(path)
        if not scan.complete:
            torn = scan.size - scan.end_of_records
            close_torn_file(scan)
            report.repaired[path.name] = torn
            if torn:
                report.torn_files.append(path.name + ".torn")
        first, last, count = _count_messages(path, report.topics)
        per_file.append((path.name, first, last, count))
        if count:
            start_ns = first if start_ns is None else min(start_ns, first)
            end_ns = last if end_ns is None else max(end_ns, last)
    report.message_count = sum(entry[3] for entry in per_file)
    hash_of = type_hash or (lambda _msgtype: "")
    metadata = _metadata(report, per_file, start_ns or 0, end_ns or 0, known_hashes, hash_of)
    tmp = bag / "metadata.yaml.tmp"
    tmp.write_text(yaml.safe_dump(metadata, sort_keys=False))
    tmp.replace(bag / "metadata.yaml")
    with contextlib.suppress(FileNotFoundError):  # the killed writer's lock, held by nobody
        (bag / LOCK_NAME).unlink()
    return report


def scan_file(path: Path) -> FileScan:
    """Walk the records of one .mcap file without trusting its (possibly missing) summary."""
    size = path.stat().st_size
    with path.open("rb") as stream:
        if stream.read(len(MAGIC)) != MAGIC:
            raise BagFileError(f"{path} is not an MCAP file (bad magic)")
        offset, records = len(MAGIC), 0
        while True:
            prefix = stream.read(_RECORD_PREFIX.size)
            if len(prefix) < _RECORD_PREFIX.size:
                break
            opcode, length = _RECORD_PREFIX.unpack(prefix)
            if offset + _RECORD_PREFIX.size + length > size:
                break  # a record the writer did not finish
            if opcode == _OP_FOOTER:
                complete = size - offset == _FOOTER_SIZE and _tail_is_magic(stream, length)
                return FileScan(path, size, complete, offset, records)
            stream.seek(length, os.SEEK_CUR)
            offset += _RECORD_PREFIX.size + length
            records += 1
    return FileScan(path, size, False, offset, records)


def close_torn_file(scan: FileScan) -> None:
    """Cut ``scan.path`` after its last complete record (the cut-off bytes go to a .torn file
    beside it) and append Data End and a Footer without summary."""
    path = scan.path
    with path.open("r+b") as stream:
        stream.seek(scan.end_of_records)
        torn = stream.read()
        if torn:
            torn_path = path.with_name(path.name + ".torn")
            torn_path.write_bytes(torn)
        stream.seek(scan.end_of_records)
        stream.truncate()
        data_end = struct.pack("<I", 0)  # data section crc 0: not computed
        stream.write(_RECORD_PREFIX.pack(_OP_DATA_END, len(data_end)) + data_end)
        stream.write(
            _RECORD_PREFIX.pack(_OP_FOOTER, _FOOTER_BODY.size) + _FOOTER_BODY.pack(0, 0, 0)
        )
        stream.write(MAGIC)
        stream.flush()
        os.fsync(stream.fileno())


def _tail_is_magic(stream: BinaryIO, footer_length: int) -> bool:
    stream.seek(footer_length, os.SEEK_CUR)
    return stream.read(len(MAGIC)) == MAGIC


def _has_footer(path: Path) -> bool:
    try:
        size = path.stat().st_size
        if size < len(MAGIC) + _FOOTER_SIZE:
            return False
        with path.open("rb") as stream:
            stream.seek(size - _FOOTER_SIZE)
            tail = stream.read()
    except OSError:
        return False
    return tail[0] == _OP_FOOTER and tail.endswith(MAGIC)


def _count_messages(path: Path, topics: dict[str, TopicCount]) -> tuple[int, int, int]:
    """(first stamp, last stamp, count) of ``path``; adds its channels and counts to topics."""
    from mcap.exceptions import McapError
    from mcap.records import Channel, Message, Schema
    from mcap.stream_reader import StreamReader

    schemas: dict[int, str] = {}  # schema id -> ROS type name
    channels: dict[int, TopicCount] = {}
    first, last, count = 0, 0, 0
    try:
        with path.open("rb") as stream:
            for record in StreamReader(stream).records:
                if isinstance(record, Schema):
                    schemas[record.id] = record.name
                elif isinstance(record, Channel):
                    entry = topics.get(record.topic)
                    if entry is None:
                        qos = parse_qos(record.metadata.get("offered_qos_profiles", ""))
                        encoding = record.message_encoding or "cdr"
                        entry = TopicCount(record.topic, "", encoding, qos)
                        topics[record.topic] = entry
                    entry.msgtype = entry.msgtype or schemas.get(record.schema_id, "")
                    channels[record.id] = entry
                elif isinstance(record, Message):
                    channels[record.channel_id].count += 1
                    first = record.log_time if count == 0 else min(first, record.log_time)
                    last = max(last, record.log_time)
                    count += 1
    except (McapError, struct.error, EOFError, ValueError, KeyError) as err:
        raise BagFileError(f"cannot read {path} after closing it: {err}") from err
    return first, last, count


def _hashes_from_metadata(path: Path) -> dict[str, str]:
    try:
        info = yaml.safe_load(path.read_text())["rosbag2_bagfile_information"]
        return {
            entry["topic_metadata"]["name"]: entry["topic_metadata"].get(
                "type_description_hash", ""
            )
            for entry in info.get("topics_with_message_count", [])
        }
    except (OSError, TypeError, KeyError, yaml.YAMLError):
        return {}


def _metadata(
    report: RecoveryReport,
    per_file: Sequence[tuple[str, int, int, int]],
    start_ns: int,
    end_ns: int,
    known_hashes: dict[str, str],
    type_hash: Callable[[str], str],
) -> dict:
    """rosbag2 metadata (version 9), laid out as rosbags' writer lays it out."""
    topics = []
    for topic in report.topics.values():
        digest = known_hashes.get(topic.name) or type_hash(topic.msgtype)
        topics.append(
            {
                "topic_metadata": {
                    "name": topic.name,
                    "type": topic.msgtype,
                    "serialization_format": topic.serialization_format,
                    "offered_qos_profiles": dump_qos_v9(topic.offered_qos_profiles),
                    "type_description_hash": digest,
                },
                "message_count": topic.count,
            }
        )
    return {
        "rosbag2_bagfile_information": {
            "version": BAG_FORMAT_VERSION,
            "storage_identifier": "mcap",
            "relative_file_paths": [entry[0] for entry in per_file],
            "duration": {"nanoseconds": max(end_ns - start_ns, 0)},
            "starting_time": {"nanoseconds_since_epoch": start_ns},
            "message_count": report.message_count,
            "topics_with_message_count": topics,
            "compression_format": "",
            "compression_mode": "",
            "files": [
                {
                    "path": name,
                    "starting_time": {"nanoseconds_since_epoch": first},
                    "duration": {"nanoseconds": max(last - first, 0)},
                    "message_count": count,
                }
                for name, first, last, count in per_file
            ],
            "custom_data": None,
            "ros_distro": "rosbags",
        }
    }
