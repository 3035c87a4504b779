"""The dds backend's endpoints: :class:`Publisher` and :class:`Subscription` (a Cyclone writer
or reader on one ROS topic, XCDR1 through vnd_ros._cdr), :class:`Timer` (monotonic deadlines)
and the ``/rosout`` writer of a node's logger. Nodes (vnd_ros.dds_node) own them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from cyclonedds.core import (
    DDSException,
    Entity,
    InstanceState,
    ReadCondition,
    SampleState,
    ViewState,
)
from cyclonedds.idl import IdlStruct
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader

from vnd_ros import log
from vnd_ros.backend import ros_distro
from vnd_ros.clock import NS_PER_S
from vnd_ros.cyclone_compat import delete_entity, take_cdr, write_cdr
from vnd_ros.dds_context import Context
from vnd_ros.names import dds_topic_name

# Samples taken from one reader per call; more stay queued for the next pass of the executor.
TAKE_BATCH = 64
_ANY_STATE = SampleState.Any | ViewState.Any | InstanceState.Any


class EndpointOwner(Protocol):
    """What an endpoint needs of its node (vnd_ros.dds_node.Node)."""

    context: Context
    publishers: list[Publisher]

    def get_logger(self) -> log.Logger:
        """The node's logger (malformed samples are reported there)."""
        ...

    def destroy_publisher(self, publisher: Publisher) -> bool:
        """Delete ``publisher`` (what :meth:`Publisher.destroy` asks for)."""
        ...

    def destroy_subscription(self, subscription: Subscription) -> bool:
        """Delete ``subscription`` (what :meth:`Subscription.destroy` asks for)."""
        ...

    def destroy_timer(self, timer: Timer) -> bool:
        """Remove ``timer`` (what :meth:`Timer.destroy` asks for)."""
        ...


class Publisher:
    """A DDS writer on one ROS topic (rclpy Publisher subset)."""

    def __init__(
        self,
        node: EndpointOwner,
        msg_type: type[IdlStruct],
        topic_name: str,
        qos: Any,
        extra_qos: Qos | None = None,
    ) -> None:
        """``extra_qos``: Cyclone policies added to the profile's (the /rosout lifespan)."""
        self.msg_type = msg_type
        self.topic_name = topic_name
        self._node = node
        topic = node.context.topic(dds_topic_name(topic_name), msg_type)
        writer_qos = _endpoint_qos(msg_type, qos)
        if extra_qos is not None:
            writer_qos = writer_qos + extra_qos
        self._writer = DataWriter(node.context._participant(), topic, writer_qos)
        self.gid = _gid_bytes(self._writer)

    def publish(self, msg: Any) -> None:
        """Send ``msg`` (an instance of the publisher's message class)."""
        if not isinstance(msg, self.msg_type):
            raise TypeError(
                f"publisher on {self.topic_name} expects {self.msg_type.__name__}, "
                f"got {type(msg).__name__}"
            )
        data = msg.serialize()  # compiled XCDR1 codec of vnd_ros._cdr (about 10x faster)
        padded = data.ljust((len(data) + 3) & ~3, b"\0")  # Cyclone wants 4-byte multiples
        ret = write_cdr(self._writer, padded)
        if ret < 0:
            raise DDSException(ret, f"while publishing on {self.topic_name}")

    def get_subscription_count(self) -> int:
        """Number of matched readers."""
        return len(self._writer.get_matched_subscriptions())

    def wait_for_acks(self, timeout_s: float) -> bool:
        """Block until every reliable reader acknowledged what was written (True) or timeout."""
        return self._writer.wait_for_acks(int(timeout_s * NS_PER_S))

    def destroy(self) -> None:
        """Delete the writer."""
        self._node.destroy_publisher(self)

    def _delete(self) -> None:
        delete_entity(self._writer)


class Subscription:
    """A DDS reader on one ROS topic and its callback (rclpy Subscription subset).

    A sample that does not deserialise as ``msg_type`` is dropped and counted in
    ``malformed_count``; the node keeps running. With ``raw`` the callback gets the sample's
    serialized bytes (CDR with its encapsulation header, as on the wire), as rclpy's ``raw``.
    """

    def __init__(
        self,
        node: EndpointOwner,
        msg_type: type[IdlStruct],
        topic_name: str,
        callback: Callable,
        qos: Any,
        raw: bool = False,
    ) -> None:
        self.msg_type = msg_type
        self.topic_name = topic_name
        self.callback = callback
        self.malformed_count = 0
        self._node = node
        topic = node.context.topic(dds_topic_name(topic_name), msg_type)
        self._reader = DataReader(node.context._participant(), topic, _endpoint_qos(msg_type, qos))
        self.condition = ReadCondition(self._reader, _ANY_STATE)
        self.gid = _gid_bytes(self._reader)
        # compiled XCDR1 codec of vnd_ros._cdr, or the bytes as they came
        self._deserialize = bytes if raw else msg_type.deserialize
        self.alive = True  # False once deleted (a callback may destroy a subscription)

    def take_messages(self) -> list[Any]:
        """Up to TAKE_BATCH received messages, oldest first; malformed ones counted, dropped."""
        samples = take_cdr(self._reader, _ANY_STATE, TAKE_BATCH)
        if isinstance(samples, int):
            raise DDSException(samples, f"while taking from {self.topic_name}")
        messages = []
        for data, info in samples:
            if not info.valid_data:  # dispose/unregister notifications carry no message
                continue
            try:
                messages.append(self._deserialize(data))
            except Exception as err:  # any decode failure: count it and keep the node alive
                self.malformed_count += 1
                self._node.get_logger().warning(
                    f"dropped malformed sample on {self.topic_name} "
                    f"({self.malformed_count} so far): {type(err).__name__}: {err}",
                    throttle_duration_sec=1.0,
                )
        return messages

    def get_publisher_count(self) -> int:
        """Number of matched writers."""
        return len(self._reader.get_matched_publications())

    def destroy(self) -> None:
        """Delete the reader."""
        self._node.destroy_subscription(self)

    def _delete(self) -> None:
        self.alive = False
        delete_entity(self.condition)
        delete_entity(self._reader)


class Timer:
    """A periodic callback on monotonic deadlines (rclpy Timer subset).

    Deadlines advance by exactly one period per call, so there is no drift; after an overrun
    the missed periods are skipped (as rcl does) rather than fired in a burst.
    """

    def __init__(self, node: EndpointOwner, period_s: float, callback: Callable[[], Any]) -> None:
        if period_s <= 0:
            raise ValueError(f"timer period must be positive, got {period_s} s")
        self.timer_period_ns = round(period_s * NS_PER_S)
        self.callback = callback
        self._node = node
        self._canceled = False
        self.next_deadline_ns = time.monotonic_ns() + self.timer_period_ns

    def is_ready(self, now_ns: int) -> bool:
        """True when the timer is due at monotonic time ``now_ns``."""
        return not self._canceled and now_ns >= self.next_deadline_ns

    def advance(self, now_ns: int) -> None:
        """Move the deadline one period on, skipping periods already missed at ``now_ns``."""
        self.next_deadline_ns += self.timer_period_ns
        if self.next_deadline_ns <= now_ns:
            missed = (now_ns - self.next_deadline_ns) // self.timer_period_ns + 1
            self.next_deadline_ns += missed * self.timer_period_ns

    def time_until_next_call(self) -> int | None:
        """Nanoseconds until the next call (negative when late); None when cancelled."""
        return None if self._canceled else self.next_deadline_ns - time.monotonic_ns()

    def cancel(self) -> None:
        """Stop calling the callback until :meth:`reset`."""
        self._canceled = True

    def is_canceled(self) -> bool:
        """True after :meth:`cancel`."""
        return self._canceled

    def reset(self) -> None:
        """Restart the period from now (and undo a cancel)."""
        self._canceled = False
        self.next_deadline_ns = time.monotonic_ns() + self.timer_period_ns

    def destroy(self) -> None:
        """Remove the timer from its node."""
        self._node.destroy_timer(self)


def _endpoint_qos(msg_type: type[IdlStruct], qos: Any) -> Qos:
    """Cyclone QoS of a profile (or a depth) plus the Jazzy ``typehash=`` user data."""
    from vnd_ros import messages
    from vnd_ros.qos import to_cyclone_qos

    cyclone_qos = to_cyclone_qos(qos)
    if ros_distro() == "humble":  # Humble's rmw does not announce type hashes
        return cyclone_qos
    type_hash = messages.type_hash(messages.message_type_name(msg_type))
    return cyclone_qos + Qos(Policy.Userdata(f"typehash={type_hash};".encode()))


def _gid_bytes(entity: Entity) -> bytes:
    """16-byte DDS GUID of ``entity`` (what rmw_cyclonedds reports as the endpoint GID)."""
    return entity.get_guid().bytes


ROSOUT_TOPIC = "/rosout"
# rcl's rcl_qos_profile_rosout_default (rcl/logging_rosout.h): reliable, transient local,
# keep last 1000, lifespan 10 s -- what `ros2 topic echo /rosout` and rqt_console expect.
ROSOUT_DEPTH = 1000
ROSOUT_LIFESPAN_S = 10.0
ROSOUT_DROP_REPORT_PERIOD_S = 10.0  # at most one stderr line per period about dropped lines


class RosoutPublisher:
    """A node's ``/rosout`` writer: its logger's lines as rcl_interfaces/msg/Log, as rcl's
    rosout output handler publishes them for rclpy nodes."""

    def __init__(self, node: EndpointOwner, logger_name: str) -> None:
        from cyclonedds.util import duration

        from vnd_ros import messages
        from vnd_ros.qos import DurabilityPolicy, QoSProfile

        self._log_cls = messages.get_message("rcl_interfaces/msg/Log")
        profile = QoSProfile(durability=DurabilityPolicy.TRANSIENT_LOCAL, depth=ROSOUT_DEPTH)
        # Never block the logging caller (a control tick that logs a late tick): a write a
        # slow /rosout reader would hold up fails at once instead; the line is on stderr.
        extra = Qos(
            Policy.Lifespan(duration(seconds=ROSOUT_LIFESPAN_S)),
            Policy.Reliability.Reliable(max_blocking_time=0),
        )
        self._publisher: Publisher | None = Publisher(
            node, self._log_cls, ROSOUT_TOPIC, profile, extra_qos=extra
        )
        self._dropped = 0  # lines /rosout could not take
        self._dropped_reported_s = -float("inf")
        node.publishers.append(self._publisher)
        self._node = node
        self._logger_name = logger_name
        log.add_rosout_sink(logger_name, self.publish)

    def publish(self, record: log.LogRecord) -> None:
        """Send one log line (called by the logger after it printed the line)."""
        publisher = self._publisher
        if publisher is None:
            return
        msg = self._log_cls(
            level=record.level,
            name=record.name,
            msg=record.msg,
            file=record.file,
            function=record.function,
            line=record.line,
        )
        msg.stamp.sec, msg.stamp.nanosec = divmod(record.stamp_ns, NS_PER_S)
        try:
            publisher.publish(msg)
        except DDSException as err:  # the line is on stderr already; say why rosout lacks it
            self._dropped += 1
            now_s = time.monotonic()
            if now_s - self._dropped_reported_s >= ROSOUT_DROP_REPORT_PERIOD_S:
                self._dropped_reported_s = now_s
                sys.stderr.write(
                    f"[WARN] [{record.name}]: /rosout did not take {self._dropped} line(s) "
                    f"so far (a reader is behind): {err}\n"
                )

    def close(self) -> None:
        """Stop forwarding; the writer goes with the node's other publishers."""
        log.remove_rosout_sink(self._logger_name, self.publish)
        self._publisher = None
