"""rosbag2 bags without ROS: record from the live graph, play back with original timing, inspect.

Bags are written with rosbags' Writer (rosbag2 format version 9, MCAP storage by default, sqlite3
optional) with the ``ros2msg`` definition of every type stored, so ``ros2 bag``, Foxglove and
the ``mcap`` tools open them. Messages travel through the node runtime (``vnd_ros.runtime``),
so recording and playback work on both backends.

MCAP recording survives SIGKILL: the pending messages go to disk as one chunk (write + fsync)
at least every ``FlushPolicy.period_s`` (1 s) or ``max_messages`` (10 000), so a killed recorder
loses at most its last second. :func:`recover` (``vnd bag reindex``) closes such a bag and
writes its metadata.yaml from the MCAP records (:mod:`vnd_core.bagfile`).

Recording QoS adapts per topic the way ``ros2 bag record`` does: reliable only when every
writer offers reliable (a reliable reader would not match a best-effort writer), transient
local when every writer offers it (so a late recorder still gets the latched sample), else
best effort and volatile, which matches any writer.

Library use::

    with BagRecorder("run1", ["/odom", "/vnd/replay"]):
        ...  # messages are written while the block runs
    for topic, msgtype, stamp_ns, msg in read_messages("run1", ["/odom"]):
        ...
    play("run1", rate=2.0)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability
from rosbags.interfaces import QosTime as RosbagsQosTime
from rosbags.rosbag2 import StoragePlugin, Writer
from vnd_core.bagfile import (
    DurableBagWriter,
    FlushPolicy,
)

from vnd_ros import messages, runtime
from vnd_ros.bag_read import BagError, _absolute
from vnd_ros.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

BAG_FORMAT_VERSION: Final = 9  # rosbag2 metadata version written (Jazzy reads 9, Humble reads <= 9)
STORAGES = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
RECORD_DEPTH = 1000  # reader history per topic: absorbs bursts between executor passes
PLAY_DEPTH = 1000  # writer history per topic when the bag stores no QoS for it
SPIN_STEP_S = 0.05  # longest executor wait, so stop requests are seen promptly
DISCOVERY_PERIOD_S = 0.25  # how often a recorder looks for newly announced topics
_ZERO_TIME = RosbagsQosTime(sec=0, nsec=0)


@dataclass(frozen=True)
class WriterOffer:
    """What one writer of a topic offers."""

    msgtype: str  # ROS type name, e.g. "nav_msgs/msg/Odometry"
    reliable: bool  # offers reliable delivery
    transient_local: bool  # keeps samples for late-joining readers


class GraphProbe:
    """Topics, types and offered QoS of the writers on the graph, seen from ``node``."""

    def __init__(self, node: Any) -> None:
        self._node = node
        self._reader: Any = None
        if runtime.BACKEND == "dds":
            from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsPublication

            self._reader = BuiltinDataReader(node.context.participant, BuiltinTopicDcpsPublication)

    def writers(self) -> dict[str, list[WriterOffer]]:
        """ROS topic name -> offers of the writers currently alive."""
        if self._reader is None:
            return self._rclpy_writers()
        from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState
        from cyclonedds.qos import Policy

        from vnd_ros.names import ros_topic_name, ros_type_name

        alive = ReadCondition(self._reader, SampleState.Any | ViewState.Any | InstanceState.Alive)
        offers: dict[str, list[WriterOffer]] = {}
        for sample in self._reader.read(N=100_000, condition=alive):
            topic = ros_topic_name(sample.topic_name)
            if topic is None:
                continue
            qos = sample.qos
            offers.setdefault(topic, []).append(
                WriterOffer(
                    msgtype=ros_type_name(sample.type_name),
                    reliable=isinstance(qos[Policy.Reliability], Policy.Reliability.Reliable),
                    transient_local=Policy.Durability.TransientLocal in qos,
                )
            )
        return offers

    def _rclpy_writers(self) -> dict[str, list[WriterOffer]]:
        from rclpy.qos import DurabilityPolicy as RclDurability
        from rclpy.qos import ReliabilityPolicy as RclReliability

        offers: dict[str, list[WriterOffer]] = {}
        for topic, _types in self._node.get_topic_names_and_types():
            for info in self._node.get_publishers_info_by_topic(topic):
                offers.setdefault(topic, []).append(
                    WriterOffer(
                        msgtype=info.topic_type,
                        reliable=info.qos_profile.reliability == RclReliability.RELIABLE,
                        transient_local=info.qos_profile.durability
                        == RclDurability.TRANSIENT_LOCAL,
                    )
                )
        return offers

    def close(self) -> None:
        """Release the built-in reader (before the participant goes away)."""
        self._reader = None


def matching_qos(offers: Sequence[WriterOffer], depth: int = RECORD_DEPTH) -> QoSProfile:
    """Reader QoS that matches every writer in ``offers`` and is as strong as they allow."""
    reliable = bool(offers) and all(offer.reliable for offer in offers)
    latched = bool(offers) and all(offer.transient_local for offer in offers)
    return QoSProfile(
        ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
        depth=depth,
    )


def _rosbags_qos(profile: QoSProfile) -> Qos:
    """The offered-QoS entry rosbag2 stores per topic (``ros2 bag play`` publishes with it)."""
    reliable = profile.reliability is ReliabilityPolicy.RELIABLE
    latched = profile.durability is DurabilityPolicy.TRANSIENT_LOCAL
    return Qos(
        history=QosHistory.KEEP_LAST,
        depth=profile.depth,
        reliability=QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
        durability=QosDurability.TRANSIENT_LOCAL if latched else QosDurability.VOLATILE,
        deadline=_ZERO_TIME,
        lifespan=_ZERO_TIME,
        liveliness=QosLiveliness.AUTOMATIC,
        liveliness_lease_duration=_ZERO_TIME,
        avoid_ros_namespace_conventions=False,
    )


def _profile_from_rosbags(qos: Qos) -> QoSProfile:
    latched = qos.durability == QosDurability.TRANSIENT_LOCAL
    return QoSProfile(
        ReliabilityPolicy.BEST_EFFORT
        if qos.reliability == QosReliability.BEST_EFFORT
        else ReliabilityPolicy.RELIABLE,
        DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
        depth=max(int(qos.depth), 1),
    )


# ---------------------------------------------------------------- node plumbing


class CliNode:
    """A runtime node with its own executor; initialises the middleware when nobody did."""

    def __init__(self, node_name: str) -> None:
        self.owns_init = not runtime.ok()
        if self.owns_init:
            runtime.init(args=[])
        self.node = runtime.Node(node_name)
        self.executor = _new_executor()
        self.executor.add_node(self.node)

    def spin_once(self, timeout_s: float) -> bool:
        """Run ready callbacks, waiting up to ``timeout_s``; False once the runtime shut down
        (SIGTERM: the dds backend's spin returns, rclpy's raises), so callers' loops end."""
        if not runtime.ok():
            return False
        try:
            self.executor.spin_once(timeout_sec=timeout_s)
        except runtime.ExternalShutdownException:
            return False
        return True

    def close(self) -> None:
        """Destroy the node, and shut the middleware down if this node started it."""
        self.executor.remove_node(self.node)
        self.node.destroy_node()
        if self.owns_init:
            runtime.try_shutdown()


def _new_executor() -> Any:
    return runtime.SingleThreadedExecutor()  # the backend's own


# ---------------------------------------------------------------- recording


class BagRecorder:
    """Record topics of the live graph into a rosbag2 bag (MCAP by default).

    Args:
        output_dir: bag folder to create (must not exist yet).
        topics: ROS topic names to record; ignored when ``all_topics``.
        all_topics: record every topic that has a writer (now or later).
        storage: "mcap" or "sqlite3".
        node_name: name of the recording node on the graph.
        flush: when MCAP chunks are put on disk (bounds what a SIGKILL loses; sqlite3
            storage commits only on close).

    Topics are subscribed once a writer announces them (its type and QoS are needed); the
    receive time is the message timestamp, as with ``ros2 bag record``.
    """

    def __init__(
        self,
        output_dir: str | Path,
        topics: Sequence[str] = (),
        *,
        all_topics: bool = False,
        storage: str = "mcap",
        node_name: str = "vnd_bag_recorder",
        flush: FlushPolicy | None = None,
    ) -> None:
        if storage not in STORAGES:
            raise BagError(f"storage '{storage}' not supported (use one of {', '.join(STORAGES)})")
        if not topics and not all_topics:
            raise BagError("nothing to record: give topic names or all_topics=True")
        self.output_dir = Path(output_dir)
        if self.output_dir.exists():
            raise BagError(f"{self.output_dir} already exists; rosbag2 bags need a new folder")
        self._wanted = {_absolute(topic) for topic in topics}
        self._all = all_topics
        self._storage = storage
        self._node_name = node_name
        self._lock = threading.Lock()
        self._connections: dict[str, Any] = {}  # topic -> rosbags Connection
        self._counts: dict[str, int] = {}
        self._skipped: dict[str, str] = {}  # topic -> why it cannot be recorded
        self._subscriptions: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._flush = flush or FlushPolicy()
        self._writer: Writer | DurableBagWriter | None = None
        self._error: BaseException | None = None

    def start(self) -> BagRecorder:
        """Open the bag and start recording on a background thread."""
        if self._thread is not None:
            raise BagError("BagRecorder.start() called twice")
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="vnd-bag-record")
        self._thread.start()
        ready.wait()
        if self._error is not None:
            raise BagError(f"recorder failed to start: {self._error}") from self._error
        return self

    def stop(self) -> dict[str, int]:
        """Stop recording, close the bag; returns the message count per topic."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise BagError(f"recording into {self.output_dir} failed: {self._error}")
        return self.counts

    @property
    def counts(self) -> dict[str, int]:
        """Messages written so far, per topic."""
        with self._lock:
            return dict(self._counts)

    @property
    def subscribed_topics(self) -> list[str]:
        """Topics being recorded (their writers were discovered)."""
        with self._lock:
            return sorted(self._connections)

    @property
    def skipped_topics(self) -> dict[str, str]:
        """Topics seen but not recorded, with the reason (an unknown message type)."""
        with self._lock:
            return dict(self._skipped)

    def __enter__(self) -> BagRecorder:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self, ready: threading.Event) -> None:
        """Recording thread: node, probe and writer live and die here (sqlite3 storage may
        only be used from the thread that opened it)."""
        cli_node: CliNode | None = None
        probe: GraphProbe | None = None
        try:
            cli_node = CliNode(self._node_name)
            probe = GraphProbe(cli_node.node)
            if self._storage == "mcap":
                writer: Writer | DurableBagWriter = DurableBagWriter(self.output_dir, self._flush)
            else:
                writer = Writer(
                    self.output_dir, version=BAG_FORMAT_VERSION, storage_plugin=STORAGES["sqlite3"]
                )
            writer.open()
            self._writer = writer
        except BaseException as err:  # reported by start()
            self._error = err
            _close_cli_node(cli_node, probe)
            return
        finally:
            ready.set()
        try:
            self._record(cli_node, probe)
        except BaseException as err:  # surfaced by stop(); the thread must not die silently
            self._error = err
        finally:
            self._subscriptions.clear()
            _close_cli_node(cli_node, probe)
            self._close_writer()

    def _close_writer(self) -> None:
        """Write the metadata and close the storage; a failure is kept for stop()."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            writer.close()
        except Exception as err:  # rosbags/sqlite/mcap errors alike: the bag is unusable
            self._error = self._error or err

    def _record(self, cli_node: CliNode, probe: GraphProbe) -> None:
        next_discovery = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_discovery:
                self._subscribe_new(cli_node.node, probe.writers())
                next_discovery = time.monotonic() + DISCOVERY_PERIOD_S
            if not cli_node.spin_once(SPIN_STEP_S):
                raise BagError("the node runtime shut down while recording")
            if isinstance(self._writer, DurableBagWriter):
                self._writer.flush_if_due()  # a quiet topic's last messages reach the disk too

    def _subscribe_new(self, node: Any, writers: Mapping[str, list[WriterOffer]]) -> None:
        for topic, offers in writers.items():
            if topic in self._connections or topic in self._skipped:
                continue
            if not (self._all or topic in self._wanted):
                continue
            msgtype = offers[0].msgtype
            try:
                definition, _encoding = messages.message_definition(msgtype)
            except messages.UnknownMessageTypeError as err:
                with self._lock:  # reported by skipped_topics; retrying would fail again
                    self._skipped[topic] = str(err)
                continue
            profile = matching_qos(offers)
            assert self._writer is not None
            connection = self._writer.add_connection(
                topic,
                msgtype,
                msgdef=definition,
                rihs01=messages.type_hash(msgtype),
                offered_qos_profiles=[_rosbags_qos(profile)],
            )
            with self._lock:
                self._connections[topic] = connection
                self._counts[topic] = 0
            msg_class = messages.get_message(msgtype)
            callback = self._make_callback(topic, connection, node)
            # raw: the wire bytes go to the bag as they came, never decoded and re-encoded
            self._subscriptions.append(
                node.create_subscription(msg_class, topic, callback, profile, raw=True)
            )

    def _make_callback(self, topic: str, connection: Any, node: Any) -> Callable[[Any], None]:
        clock = node.get_clock()

        def on_message(data: bytes) -> None:
            stamp_ns = clock.now().nanoseconds
            assert self._writer is not None
            self._writer.write(connection, stamp_ns, bytes(data))
            with self._lock:
                self._counts[topic] += 1

        return on_message


def _close_cli_node(cli_node: CliNode | None, probe: GraphProbe | None) -> None:
    if probe is not None:
        probe.close()
    if cli_node is not None:
        cli_node.close()


def _flush(publisher: Any, timeout_s: float = 2.0) -> None:
    """Let reliable readers acknowledge the last messages before the writer goes away."""
    if runtime.BACKEND == "rclpy":
        from rclpy.duration import Duration

        publisher.wait_for_all_acked(Duration(seconds=timeout_s))
    else:
        publisher.wait_for_acks(timeout_s)
