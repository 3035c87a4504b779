"""The learner's on-disk replay store: one topic's CDR messages in rotating rosbag2 MCAP segments.

Layout under ``root``::

    segment_000001/   a complete rosbag2 bag (metadata.yaml + segment_000001.mcap)
    segment_000002/
    ...
    segment_000007/   the segment being written (no metadata.yaml until it is closed)

Segments are written by :class:`vnd_core.bagfile.DurableBagWriter`: the open segment's pending
messages go to disk as one MCAP chunk (write + fsync) once the oldest is ``flush_period_s``
old or ``flush_max_messages`` are pending, and :meth:`ReplayStore.append` rotates every
``segment_period_s`` or ``segment_max_messages``. A process killed with SIGKILL leaves its open
segment without metadata, its .mcap without summary and footer: on the next
:meth:`ReplayStore.open` every flushed chunk is salvaged with the mcap library's non-seeking
reader into a new, closed segment and the broken one is removed. What was lost (at most one
flush period: the last second of ticks) comes back from the publisher's transient-local
history, which is far longer.

Every message has a dedup key computed by the caller's ``key_fn(cdr_bytes)`` (for tick records
the stamp and the tick counter): a message whose key is already stored is not written again,
on disk or in memory. The middleware stays out of this module: the caller passes the message
type, its definition and its type hash, and the CDR bytes.
"""

from __future__ import annotations

import re
import shutil
import struct
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path

from mcap.exceptions import McapError
from mcap.reader import NonSeekingReader, SeekingReader
from rosbags.interfaces import Connection, Qos
from vnd_core.bagfile import (
    BagFileError,
    DurableBagWriter,
    FlushPolicy,
    being_written,
    close_torn_file,
    scan_file,
)

SEGMENT_PREFIX = "segment_"
_SEGMENT_RE = re.compile(rf"^{SEGMENT_PREFIX}(\d{{6}})$")


class ReplayStoreError(RuntimeError):
    """The replay store cannot be opened or written (names the path and the reason)."""


@dataclass(frozen=True)
class StoredMessage:
    """One message of the store."""

    stamp_ns: int  # log time of the message in the bag [ns since epoch]
    data: bytes  # CDR bytes with encapsulation header, as on the wire


@dataclass
class OpenReport:
    """What :meth:`ReplayStore.open` found on disk."""

    segments: int = 0  # complete segments read
    messages: int = 0  # unique messages loaded
    duplicates: int = 0  # messages skipped because their key was already loaded
    salvaged: dict[str, int] = field(default_factory=dict)  # broken segment -> messages saved
    salvage_errors: dict[str, str] = field(default_factory=dict)  # broken segment -> why it ended

    def describe(self) -> str:
        """One log line."""
        text = (
            f"{self.messages} messages in {self.segments} segments"
            f" ({self.duplicates} duplicates skipped)"
        )
        for name, count in self.salvaged.items():
            why = self.salvage_errors.get(name, "no metadata")
            text += f"; salvaged {count} messages from truncated segment {name} ({why})"
        return text


@dataclass(frozen=True)
class StoreTopic:
    """The topic a store holds and what rosbag2 needs to describe it."""

    name: str  # absolute ROS topic name, e.g. "/vnd1/vnd/replay"
    msgtype: str  # ROS type name, e.g. "vnd_msgs/msg/Transition"
    msgdef: str  # ros2msg definition text (with nested types)
    rihs01: str  # type description hash "RIHS01_..."
    qos: tuple[Qos, ...] = ()  # offered QoS stored in the bag metadata


class ReplayStore:
    """Append-only, deduplicated, segment-rotating rosbag2 MCAP store of one topic.

    Args:
        root: store directory (created when missing).
        topic: what is stored.
        key_fn: dedup key of a message from its CDR bytes.
        segment_period_s: close the open segment once it is this old [s].
        segment_max_messages: close the open segment once it holds this many messages.
        flush_period_s: put pending messages on disk once the oldest is this old [s]; bounds
            what a SIGKILL loses.
        flush_max_messages: put pending messages on disk once this many are pending.
        clock: monotonic time source [s] (tests pass a fake).
    """

    def __init__(
        self,
        root: str | Path,
        topic: StoreTopic,
        key_fn: Callable[[bytes], Hashable],
        *,
        segment_period_s: float = 10.0,
        segment_max_messages: int = 1000,
        flush_period_s: float = 1.0,
        flush_max_messages: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if segment_period_s <= 0 or segment_max_messages < 1:
            raise ValueError("segment_period_s must be > 0 and segment_max_messages >= 1")
        self._flush = FlushPolicy(period_s=flush_period_s, max_messages=flush_max_messages)
        self.root = Path(root)
        self.topic = topic
        self._key_fn = key_fn
        self._period_s = segment_period_s
        self._max_messages = segment_max_messages
        self._clock = clock
        self._keys: set[Hashable] = set()
        self._next_index = 1
        self._writer: DurableBagWriter | None = None
        self._connection: Connection | None = None
        self._open_count = 0  # messages in the open segment
        self._opened_at_s = 0.0
        self._is_open = False

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> tuple[list[StoredMessage], OpenReport]:
        """Recover the store: salvage broken segments, load every message once (time order).

        Returns the unique messages in stamp order and a report; after this call
        :meth:`append` may be used. Raises ReplayStoreError when a complete segment is
        unreadable (that is data loss the operator must look at, not something to skip).
        """
        if self._is_open:
            raise ReplayStoreError(f"replay store {self.root} is already open")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ReplayStoreError(f"cannot create replay store {self.root}: {err}") from err
        report = OpenReport()
        complete, broken = self._scan()
        live = [path.name for _, path in broken if being_written(path)]
        if live:  # salvaging would cut a segment that another process is still appending to
            raise ReplayStoreError(
                f"replay store {self.root} is in use: another process writes {', '.join(live)}"
            )
        self._next_index = 1 + max((i for i, _ in complete + broken), default=0)
        salvaged: list[list[StoredMessage]] = []
        for _, path in broken:
            messages, why = _salvage(path, self.topic.name)
            report.salvaged[path.name] = len(messages)
            if why:
                report.salvage_errors[path.name] = why
            salvaged.append(messages)
        loaded: list[StoredMessage] = []
        for _, path in complete:
            report.segments += 1
            self._take_unique(_read_segment(path, self.topic.name), loaded, report)
        self._is_open = True
        for (_, path), messages in zip(broken, salvaged, strict=True):
            fresh: list[StoredMessage] = []
            self._take_unique(messages, fresh, report)
            if fresh:  # rewrite as a closed segment first, then drop the broken one
                self._write_closed_segment(fresh)
                report.segments += 1
                loaded.extend(fresh)
            shutil.rmtree(path)
        report.messages = len(loaded)
        loaded.sort(key=lambda m: m.stamp_ns)
        return loaded, report

    def close(self) -> None:
        """Close the open segment (making it durable); the store can be opened again later."""
        self._close_segment()
        self._is_open = False

    # ------------------------------------------------------------------ writing
    def contains(self, key: Hashable) -> bool:
        """True when a message with ``key`` is stored."""
        return key in self._keys

    def append(self, stamp_ns: int, data: bytes, key: Hashable | None = None) -> bool:
        """Write one message unless its key is stored; True when written.

        ``key`` defaults to ``key_fn(data)``. The message is in the open segment when this
        returns (on disk within one flush period, see the module docstring).
        """
        if not self._is_open:
            raise ReplayStoreError(f"replay store {self.root} is not open")
        key = self._key_fn(data) if key is None else key
        if key in self._keys:
            return False
        if self._writer is None:
            self._start_segment()
        assert self._writer is not None and self._connection is not None
        self._writer.write(self._connection, int(stamp_ns), data)
        self._keys.add(key)
        self._open_count += 1
        if self._open_count >= self._max_messages:
            self._close_segment()
        return True

    def rotate_if_due(self) -> bool:
        """Close the open segment when it is older than the segment period, else put its
        pending messages on disk when the flush period is over; True if closed."""
        if self._writer is not None and self._clock() - self._opened_at_s >= self._period_s:
            self._close_segment()
            return True
        if self._writer is not None:
            self._writer.flush_if_due()
        return False

    @property
    def count(self) -> int:
        """Unique messages stored (closed segments and the open one)."""
        return len(self._keys)

    @property
    def pending(self) -> int:
        """Messages of the open segment not yet on disk (what a SIGKILL now would lose)."""
        return 0 if self._writer is None else self._writer.pending

    def segment_paths(self) -> list[Path]:
        """Paths of the complete (closed) segments in order: what a bag reader opens."""
        return [path for _, path in self._scan()[0]]

    # ------------------------------------------------------------------ internals
    def _take_unique(self, messages: list[StoredMessage], out: list, report: OpenReport) -> None:
        for message in messages:
            key = self._key_fn(message.data)
            if key in self._keys:
                report.duplicates += 1
                continue
            self._keys.add(key)
            out.append(message)

    def _scan(self) -> tuple[list[tuple[int, Path]], list[tuple[int, Path]]]:
        """(complete, broken) segments as (index, path), each sorted by index."""
        complete: list[tuple[int, Path]] = []
        broken: list[tuple[int, Path]] = []
        for path in sorted(self.root.iterdir()):
            match = _SEGMENT_RE.match(path.name)
            if not match or not path.is_dir():
                continue
            target = complete if (path / "metadata.yaml").is_file() else broken
            target.append((int(match.group(1)), path))
        return complete, broken

    def _new_writer(self) -> DurableBagWriter:
        path = self.root / f"{SEGMENT_PREFIX}{self._next_index:06d}"
        self._next_index += 1
        writer = DurableBagWriter(path, self._flush, clock=self._clock)
        try:
            writer.open()
        except (BagFileError, OSError) as err:
            raise ReplayStoreError(f"cannot open replay segment {path}: {err}") from err
        self._connection = writer.add_connection(
            self.topic.name,
            self.topic.msgtype,
            msgdef=self.topic.msgdef,
            rihs01=self.topic.rihs01,
            offered_qos_profiles=list(self.topic.qos),
        )
        return writer

    def _start_segment(self) -> None:
        self._writer = self._new_writer()
        self._open_count = 0
        self._opened_at_s = self._clock()

    def _close_segment(self) -> None:
        writer, self._writer = self._writer, None
        self._open_count = 0
        if writer is not None:
            writer.close()

    def _write_closed_segment(self, messages: list[StoredMessage]) -> None:
        writer = self._new_writer()
        assert self._connection is not None  # _new_writer adds the topic's connection
        for message in messages:
            writer.write(self._connection, message.stamp_ns, message.data)
        writer.close()


def _read_segment(path: Path, topic: str) -> list[StoredMessage]:
    """Messages of one complete segment in log-time order.

    The .mcap file is read with the mcap library's indexed reader: the segment is a complete
    rosbag2 bag (its metadata.yaml exists), and skipping the YAML parse makes reloading a long
    store several times faster.
    """
    files = sorted(path.glob("*.mcap"))
    if not files:
        raise ReplayStoreError(f"cannot read replay segment {path}: no .mcap file")
    messages: list[StoredMessage] = []
    for file in files:
        try:
            with file.open("rb") as stream:
                reader = SeekingReader(stream)
                # File order: open() sorts once at the end (the heap merge costs more).
                for _schema, _channel, message in reader.iter_messages(
                    topics=[topic], log_time_order=False
                ):
                    messages.append(StoredMessage(int(message.log_time), bytes(message.data)))
        except (McapError, struct.error, EOFError, ValueError, OSError) as err:
            raise ReplayStoreError(f"cannot read replay segment {path}: {err}") from err
    return messages


def _salvage(path: Path, topic: str) -> tuple[list[StoredMessage], str]:
    """Readable messages of a segment left open by a killed process, and why reading stopped
    ('' when the file ended cleanly between records).

    The file is first closed after its last complete record (a torn record at its end would
    otherwise stop the reader before the chunk in front of it is handed out).
    """
    files = sorted(path.glob("*.mcap"))
    messages: list[StoredMessage] = []
    why = ""
    for file in files:
        try:
            scan = scan_file(file)
            if not scan.complete:
                close_torn_file(scan)
                if scan.size > scan.end_of_records:
                    why = f"{scan.size - scan.end_of_records} torn bytes at its end dropped"
        except (BagFileError, OSError) as err:
            why = str(err)
            continue
        with file.open("rb") as stream:
            try:
                for _schema, channel, message in NonSeekingReader(stream).iter_messages(
                    log_time_order=False
                ):
                    if channel.topic == topic:
                        messages.append(StoredMessage(int(message.log_time), bytes(message.data)))
            except (McapError, struct.error, EOFError, ValueError) as err:
                why = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    if not files:
        why = "no .mcap file"
    return messages, why
