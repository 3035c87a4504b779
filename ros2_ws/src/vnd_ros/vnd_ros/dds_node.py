"""The dds backend: an rclpy-compatible Node subset on Eclipse Cyclone DDS.

One DDS participant per process (per :class:`Context`), shared by every node of the process, as
rmw does. An executor owns a Cyclone WaitSet holding one ReadCondition per subscription plus a
GuardCondition that shutdown triggers; it sleeps in the WaitSet until data arrives or the next
timer is due (monotonic deadlines), then runs the ready callbacks one after the other on the
spinning thread, like rclpy's SingleThreadedExecutor: callbacks never run concurrently.

Signals: ``init()`` installs SIGINT and SIGTERM handlers. SIGINT raises KeyboardInterrupt in the
main thread, as Python does by default (rclpy behaves the same); SIGTERM requests shutdown so
``spin()`` returns. ``shutdown()`` deletes the participant, so peers see the node leave at once
instead of after a 10 s lease, and an atexit hook does it for programs that forget.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cyclonedds.core import (
    DDSException,
    Entity,
    GuardCondition,
    InstanceState,
    ReadCondition,
    SampleState,
    ViewState,
    WaitSet,
)
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from vnd_ros import log
from vnd_ros.backend import ros_distro
from vnd_ros.clock import NS_PER_S, Clock
from vnd_ros.cyclone_compat import delete_entity, forget_entity, take_cdr, write_cdr
from vnd_ros.names import (
    dds_topic_name,
    fully_qualified_name,
    normalize_namespace,
    validate_node_name,
)
from vnd_ros.parameter import (
    InvalidParameterTypeException,
    Parameter,
    ParameterAlreadyDeclaredException,
    ParameterDescriptor,
    ParameterNotDeclaredException,
    ParameterType,
    parameter_type_of,
)
from vnd_ros.ros_args import ParamOverride, RosArgs, parse_ros_args

# Longest single WaitSet sleep: Python runs signal handlers only between bytecodes, so a Ctrl-C
# waits at most this long to be seen by a thread blocked in the C wait.
MAX_WAIT_NS = 100_000_000
# Samples taken from one reader per call; more stay queued for the next pass of the executor.
TAKE_BATCH = 64
_ANY_STATE = SampleState.Any | ViewState.Any | InstanceState.Any


class NotInitializedError(RuntimeError):
    """A node or an executor was used before ``init()`` or after ``shutdown()``."""


class Context:
    """Process-wide middleware state: parsed ROS arguments, the participant and its nodes."""

    def __init__(self) -> None:
        self.args = RosArgs()
        self.participant: DomainParticipant | None = None
        self.guard: GuardCondition | None = None
        self.graph: Any = None  # vnd_ros.graph.DiscoveryInfoPublisher once initialised
        self.nodes: list[Node] = []
        self._topics: dict[tuple[str, str], Topic] = {}
        self._shutdown_requested = False
        self._lock = threading.RLock()
        # held by an executor while it runs callbacks; shutdown waits for it to be released
        self.spin_lock = threading.RLock()
        self.atexit_registered = False

    def init(self, args: Sequence[str] | None, domain_id: int | None) -> None:
        """Parse ``args`` and create the participant (see :func:`init`)."""
        with self._lock:
            if self.participant is not None:
                raise RuntimeError("init() must only be called once (call shutdown() first)")
            self.args = parse_ros_args(list(args) if args is not None else [])
            _apply_log_levels(self.args)
            domain = int(os.environ.get("ROS_DOMAIN_ID", "0")) if domain_id is None else domain_id
            # 'enclave=/;' makes ROS 2 tools treat the participant as a ROS participant.
            self.participant = DomainParticipant(domain, qos=Qos(Policy.Userdata(b"enclave=/;")))
            self.guard = GuardCondition(self.participant)
            self._shutdown_requested = False
            from vnd_ros.graph import DiscoveryInfoPublisher

            self.graph = DiscoveryInfoPublisher(self.participant, ros_distro())

    def ok(self) -> bool:
        """True between ``init()`` and ``shutdown()`` (or a SIGTERM)."""
        return self.participant is not None and not self._shutdown_requested

    def request_shutdown(self) -> None:
        """Make ``ok()`` false and wake every executor; safe from signal handlers and threads."""
        self._shutdown_requested = True
        guard = self.guard
        if guard is not None:
            guard.set(True)

    def shutdown(self) -> None:
        """Destroy all nodes and delete the participant (and with it every DDS entity)."""
        with self._lock:
            if self.participant is None:
                raise RuntimeError("shutdown() called on a context that is not initialised")
            self.request_shutdown()
            acquired = self.spin_lock.acquire(timeout=2.0)  # let a running callback finish
            try:
                for node in list(self.nodes):
                    node.destroy_node()
                if self.graph is not None:
                    self.graph.close()
                for topic in self._topics.values():
                    forget_entity(topic)
                forget_entity(self.guard)
                delete_entity(self.participant)
            finally:
                if acquired:
                    self.spin_lock.release()
            self.participant = None
            self.guard = None
            self.graph = None
            self._topics.clear()

    def topic(self, dds_name: str, msg_type: type) -> Topic:
        """The (cached) DDS topic ``dds_name`` of ``msg_type``."""
        key = (dds_name, msg_type.__idl_typename__)
        with self._lock:
            if key not in self._topics:
                self._topics[key] = Topic(self._participant(), dds_name, msg_type)
            return self._topics[key]

    def _participant(self) -> DomainParticipant:
        if self.participant is None:
            raise NotInitializedError("call init() before creating nodes or entities")
        return self.participant

    def graph_changed(self) -> None:
        """Republish ros_discovery_info after an entity was created or destroyed."""
        if self.graph is not None:
            self.graph.publish(self.nodes)


def _apply_log_levels(args: RosArgs) -> None:
    if args.log_level:
        log.set_default_level(args.log_level)
    for name, level in args.logger_levels.items():
        log.set_logger_level(name, level)


_default_context = Context()


def get_default_context() -> Context:
    """The process-wide context used when none is passed."""
    return _default_context


class Publisher:
    """A DDS writer on one ROS topic (rclpy Publisher subset)."""

    def __init__(
        self, node: Node, msg_type: type, topic_name: str, qos: Any, extra_qos: Qos | None = None
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
        node: Node,
        msg_type: type,
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

    def __init__(self, node: Node, period_s: float, callback: Callable[[], Any]) -> None:
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


def _endpoint_qos(msg_type: type, qos: Any) -> Qos:
    """Cyclone QoS of a profile (or a depth) plus the Jazzy ``typehash=`` user data."""
    from vnd_ros import messages
    from vnd_ros.qos import to_cyclone_qos

    cyclone_qos = to_cyclone_qos(qos)
    if ros_distro() == "humble":  # Humble's rmw does not announce type hashes
        return cyclone_qos
    type_hash = messages.type_hash(msg_type.__msgtype__)
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


class _RosoutPublisher:
    """A node's ``/rosout`` writer: its logger's lines as rcl_interfaces/msg/Log, as rcl's
    rosout output handler publishes them for rclpy nodes."""

    def __init__(self, node: Node, logger_name: str) -> None:
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


class Node:
    """An rclpy-compatible node on the dds backend (subclass it, as with rclpy.node.Node).

    Args:
        node_name: node name before ``-r __node:=`` remaps.
        context: the context; the process-wide default when None.
        namespace: node namespace before ``-r __ns:=`` remaps ('/' when None).
    """

    def __init__(
        self, node_name: str, *, context: Context | None = None, namespace: str | None = None
    ) -> None:
        self.context = context or _default_context
        if not self.context.ok():
            raise NotInitializedError(f"node '{node_name}': call init() before creating nodes")
        args = self.context.args
        self._name = args.node_name(validate_node_name(node_name))
        self._namespace = args.namespace(normalize_namespace(namespace), self._name)
        self._overrides = args.parameter_overrides(self._namespace, self._name)
        self._parameters: dict[str, Parameter] = {}
        self._descriptors: dict[str, ParameterDescriptor] = {}
        self.publishers: list[Publisher] = []
        self.subscriptions: list[Subscription] = []
        self.timers: list[Timer] = []
        self.generation = 0  # bumped whenever subscriptions change (executors re-sync)
        logger_name = self.get_fully_qualified_name().lstrip("/").replace("/", ".")
        self._logger = log.Logger(logger_name)
        self._clock = Clock()
        self._rosout = _RosoutPublisher(self, logger_name) if args.rosout_logs else None
        if self.declare_parameter("use_sim_time", False).value:
            self._logger.warning("use_sim_time is not supported by the dds backend: wall time")
        self.context.nodes.append(self)
        self.context.graph_changed()

    # --- identity -------------------------------------------------------------------------
    def get_name(self) -> str:
        """Node name (after remapping)."""
        return self._name

    def get_namespace(self) -> str:
        """Node namespace, absolute ('/' or '/ns')."""
        return self._namespace

    def get_fully_qualified_name(self) -> str:
        """'/ns/name'."""
        return fully_qualified_name(self._namespace, self._name)

    def get_logger(self) -> log.Logger:
        """This node's logger."""
        return self._logger

    def get_clock(self) -> Clock:
        """The node's ROS clock (system time)."""
        return self._clock

    def resolve_topic_name(self, topic: str) -> str:
        """Fully qualified name of ``topic`` for this node, after remapping."""
        return self.context.args.resolve_topic(topic, self._namespace, self._name)

    # --- entities -------------------------------------------------------------------------
    def create_publisher(self, msg_type: type, topic: str, qos_profile: Any) -> Publisher:
        """A publisher of ``msg_type`` on ``topic`` with a QoS profile or a keep-last depth."""
        publisher = Publisher(self, msg_type, self.resolve_topic_name(topic), qos_profile)
        self.publishers.append(publisher)
        self.context.graph_changed()
        return publisher

    def create_subscription(
        self,
        msg_type: type,
        topic: str,
        callback: Callable[[Any], Any],
        qos_profile: Any,
        *,
        raw: bool = False,
    ) -> Subscription:
        """A subscription calling ``callback(msg)`` on the spinning thread for each message
        (``raw``: ``callback(serialized bytes)``, as rclpy)."""
        sub = Subscription(
            self, msg_type, self.resolve_topic_name(topic), callback, qos_profile, raw
        )
        self.subscriptions.append(sub)
        self.generation += 1
        self.context.graph_changed()
        return sub

    def create_timer(self, timer_period_sec: float, callback: Callable[[], Any]) -> Timer:
        """A timer calling ``callback()`` every ``timer_period_sec`` seconds."""
        timer = Timer(self, timer_period_sec, callback)
        self.timers.append(timer)
        return timer

    def destroy_publisher(self, publisher: Publisher) -> bool:
        """Delete ``publisher``; False when it is not one of this node's."""
        if publisher not in self.publishers:
            return False
        self.publishers.remove(publisher)
        publisher._delete()
        self.context.graph_changed()
        return True

    def destroy_subscription(self, subscription: Subscription) -> bool:
        """Delete ``subscription``; False when it is not one of this node's."""
        if subscription not in self.subscriptions:
            return False
        self.subscriptions.remove(subscription)
        self.generation += 1
        subscription._delete()
        self.context.graph_changed()
        return True

    def destroy_timer(self, timer: Timer) -> bool:
        """Remove ``timer``; False when it is not one of this node's."""
        if timer not in self.timers:
            return False
        timer.cancel()
        self.timers.remove(timer)
        return True

    def destroy_node(self) -> None:
        """Delete every entity of the node and leave the ROS graph."""
        if self._rosout is not None:
            self._rosout.close()
        for timer in list(self.timers):
            self.destroy_timer(timer)
        for sub in list(self.subscriptions):
            sub._delete()
        for pub in list(self.publishers):
            pub._delete()
        self.subscriptions.clear()
        self.publishers.clear()
        self.generation += 1
        if self in self.context.nodes:
            self.context.nodes.remove(self)
            self.context.graph_changed()

    # --- parameters -----------------------------------------------------------------------
    @property
    def parameter_overrides(self) -> dict[str, ParamOverride]:
        """Overrides from ``-p`` and ``--params-file`` that apply to this node, by name."""
        return dict(self._overrides)

    def declare_parameter(
        self, name: str, value: Any = None, descriptor: ParameterDescriptor | None = None
    ) -> Parameter:
        """Declare ``name`` with default ``value``; an override from the command line wins.

        Raises ParameterAlreadyDeclaredException, or InvalidParameterTypeException when the
        override's type differs from the default's (an int is accepted for a float).
        """
        if name in self._parameters:
            raise ParameterAlreadyDeclaredException(f"parameter '{name}' is already declared")
        descriptor = descriptor or ParameterDescriptor()
        declared_type = (
            ParameterType(descriptor.type) if descriptor.type else parameter_type_of(value)
        )
        if name in self._overrides:
            override = self._overrides[name]
            value = _coerce(name, override.value, declared_type, override.source, descriptor)
        parameter = Parameter(name, None if value is not None else declared_type, value)
        self._parameters[name] = parameter
        self._descriptors[name] = descriptor
        return parameter

    def declare_parameters(self, namespace: str, parameters: Iterable[tuple]) -> list[Parameter]:
        """Declare ``(name[, value[, descriptor]])`` tuples under ``namespace.`` (or none)."""
        declared = []
        for entry in parameters:
            name, *rest = entry
            full_name = f"{namespace}.{name}" if namespace else name
            declared.append(self.declare_parameter(full_name, *rest))
        return declared

    def has_parameter(self, name: str) -> bool:
        """True when ``name`` is declared."""
        return name in self._parameters

    def get_parameter(self, name: str) -> Parameter:
        """The declared parameter ``name``; ParameterNotDeclaredException otherwise."""
        try:
            return self._parameters[name]
        except KeyError:
            raise ParameterNotDeclaredException(f"parameter '{name}' is not declared") from None

    def get_parameters(self, names: Iterable[str]) -> list[Parameter]:
        """The declared parameters ``names``, in order."""
        return [self.get_parameter(name) for name in names]

    def describe_parameter(self, name: str) -> ParameterDescriptor:
        """Descriptor given when ``name`` was declared."""
        self.get_parameter(name)
        return self._descriptors[name]


def _coerce(
    name: str, value: Any, declared: ParameterType, source: str, descriptor: ParameterDescriptor
) -> Any:
    """Override ``value`` checked against the declared type (int widens to float)."""
    if descriptor.dynamic_typing or declared == ParameterType.PARAMETER_NOT_SET:
        return value
    actual = parameter_type_of(value) if value != [] else declared
    if actual == declared:
        return value
    if (actual, declared) == (ParameterType.PARAMETER_INTEGER, ParameterType.PARAMETER_DOUBLE):
        return float(value)
    if (actual, declared) == (
        ParameterType.PARAMETER_INTEGER_ARRAY,
        ParameterType.PARAMETER_DOUBLE_ARRAY,
    ):
        return [float(v) for v in value]
    raise InvalidParameterTypeException(
        f"parameter '{name}' from {source}: expected {declared.name[10:].lower()}, "
        f"got {actual.name[10:].lower()} {value!r}"
    )


class SingleThreadedExecutor:
    """Runs the callbacks of its nodes one at a time on the calling thread."""

    def __init__(self, *, context: Context | None = None) -> None:
        self.context = context or _default_context
        self._nodes: list[Node] = []
        self._waitset: WaitSet | None = None
        self._attached: dict[int, tuple[Node, int]] = {}

    def add_node(self, node: Node) -> bool:
        """Spin ``node`` too; False when it was already added."""
        if node in self._nodes:
            return False
        self._nodes.append(node)
        return True

    def remove_node(self, node: Node) -> None:
        """Stop spinning ``node``."""
        if node in self._nodes:
            self._nodes.remove(node)

    def get_nodes(self) -> list[Node]:
        """Nodes this executor spins."""
        return list(self._nodes)

    def spin(self) -> None:
        """Run callbacks until shutdown (returns) or Ctrl-C (KeyboardInterrupt)."""
        while self.context.ok():
            self.spin_once()

    def spin_once(self, timeout_sec: float | None = None) -> None:
        """Wait up to ``timeout_sec`` (forever when None) for work, then run what is ready."""
        if not self.context.ok():
            raise NotInitializedError("spin on a context that is shut down")
        end_ns = None if timeout_sec is None else time.monotonic_ns() + int(timeout_sec * 1e9)
        while True:
            with self.context.spin_lock:
                if not self.context.ok():
                    return
                if self._run_ready():
                    return
                waitset = self._sync_waitset()
                wait_ns = self._wait_ns(end_ns)
                if wait_ns is None:
                    return
                try:
                    waitset.wait(wait_ns)
                except DDSException:
                    if self.context.ok():
                        raise
                    return

    def shutdown(self) -> None:
        """Forget the nodes and release the WaitSet."""
        self._nodes.clear()
        delete_entity(self._waitset)
        self._waitset = None

    def _wait_ns(self, end_ns: int | None) -> int | None:
        """Sleep length until the next timer, the spin_once timeout or MAX_WAIT_NS."""
        now_ns = time.monotonic_ns()
        wait_ns = MAX_WAIT_NS
        for node in self._nodes:
            for timer in node.timers:
                if not timer._canceled:
                    wait_ns = min(wait_ns, timer.next_deadline_ns - now_ns)
        if end_ns is not None:
            if now_ns >= end_ns:
                return None
            wait_ns = min(wait_ns, end_ns - now_ns)
        return max(wait_ns, 0)

    def _sync_waitset(self) -> WaitSet:
        """Attach the guard and every subscription's ReadCondition (re-sync on changes)."""
        participant = self.context._participant()
        key = {id(node): (node, node.generation) for node in self._nodes}
        key[id(participant)] = (participant, 0)
        if self._waitset is not None and key == self._attached:
            return self._waitset
        if self._waitset is not None and self._attached.get(id(participant)):
            delete_entity(self._waitset)
        else:  # its participant is gone and took the WaitSet with it
            forget_entity(self._waitset)
        waitset = WaitSet(participant)
        waitset.attach(self.context.guard)
        for node in self._nodes:
            for sub in node.subscriptions:
                waitset.attach(sub.condition)
        self._waitset, self._attached = waitset, key
        return waitset

    def _run_ready(self) -> bool:
        """Run due timers, then pending messages; True when any callback ran."""
        ran = False
        now_ns = time.monotonic_ns()
        for node in list(self._nodes):
            for timer in list(node.timers):
                if timer.is_ready(now_ns):
                    timer.advance(now_ns)
                    timer.callback()
                    ran = True
        for node in list(self._nodes):
            for sub in list(node.subscriptions):
                if not sub.alive or not sub.condition.is_triggered():
                    continue
                for msg in sub.take_messages():
                    sub.callback(msg)
                    ran = True
        return ran


_global_executor: SingleThreadedExecutor | None = None


def get_global_executor() -> SingleThreadedExecutor:
    """The executor used by :func:`spin` and :func:`spin_once`."""
    global _global_executor
    if _global_executor is None or _global_executor.context is not _default_context:
        _global_executor = SingleThreadedExecutor()
    return _global_executor


def init(
    *,
    args: Sequence[str] | None = None,
    context: Context | None = None,
    domain_id: int | None = None,
    signal_handlers: bool = True,
) -> None:
    """Start the middleware: parse ``args`` (``--ros-args`` ...), create the participant.

    Installs SIGINT/SIGTERM handlers when called from the main thread and an atexit hook that
    deletes the participant.
    """
    ctx = context or _default_context
    ctx.init(args, domain_id)
    if signal_handlers and threading.current_thread() is threading.main_thread():
        _install_signal_handlers(ctx)
    if not ctx.atexit_registered:
        atexit.register(_shutdown_at_exit, ctx)
        ctx.atexit_registered = True


def _shutdown_at_exit(ctx: Context) -> None:
    if ctx.participant is not None:
        ctx.shutdown()


def _install_signal_handlers(ctx: Context) -> None:
    def on_sigint(signum: int, frame: Any) -> None:
        ctx.request_shutdown()
        raise KeyboardInterrupt

    def on_sigterm(signum: int, frame: Any) -> None:
        ctx.request_shutdown()

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigterm)


def ok(*, context: Context | None = None) -> bool:
    """True between init() and shutdown()."""
    return (context or _default_context).ok()


def shutdown(*, context: Context | None = None) -> None:
    """Destroy all nodes and delete the participant; RuntimeError when not initialised."""
    (context or _default_context).shutdown()


def try_shutdown(*, context: Context | None = None) -> None:
    """:func:`shutdown` when still initialised, else nothing."""
    ctx = context or _default_context
    if ctx.participant is not None:
        ctx.shutdown()


def spin(node: Node, executor: SingleThreadedExecutor | None = None) -> None:
    """Run ``node``'s callbacks until shutdown; Ctrl-C raises KeyboardInterrupt."""
    executor = executor or get_global_executor()
    executor.add_node(node)
    try:
        executor.spin()
    finally:
        executor.remove_node(node)


def spin_once(
    node: Node, *, executor: SingleThreadedExecutor | None = None, timeout_sec: float | None = None
) -> None:
    """Run the callbacks that are ready, waiting up to ``timeout_sec`` for one."""
    executor = executor or get_global_executor()
    executor.add_node(node)
    try:
        executor.spin_once(timeout_sec)
    finally:
        executor.remove_node(node)
