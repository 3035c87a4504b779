"""The dds backend: an rclpy-compatible Node subset on Eclipse Cyclone DDS.

One DDS participant per process (per :class:`Context`), shared by every node of the process, as
rmw does. The parts live by role, and this module names them all (import from here):

- :mod:`vnd_ros.dds_context`: the Context and ``init`` / ``ok`` / ``shutdown`` / ``try_shutdown``
  (signal handlers, the atexit hook);
- :mod:`vnd_ros.dds_endpoints`: Publisher, Subscription, Timer and the ``/rosout`` writer;
- :mod:`vnd_ros.dds_executor`: the SingleThreadedExecutor and ``spin`` / ``spin_once``;
- here: the :class:`Node` (names and remapping, entities, parameters).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from vnd_ros import log
from vnd_ros.clock import Clock
from vnd_ros.dds_context import (
    Context,
    NotInitializedError,
    get_default_context,
    init,
    ok,
    shutdown,
    try_shutdown,
)
from vnd_ros.dds_endpoints import Publisher, RosoutPublisher, Subscription, Timer
from vnd_ros.dds_executor import SingleThreadedExecutor, get_global_executor, spin, spin_once
from vnd_ros.names import fully_qualified_name, normalize_namespace, validate_node_name
from vnd_ros.parameter import (
    InvalidParameterTypeException,
    Parameter,
    ParameterAlreadyDeclaredException,
    ParameterDescriptor,
    ParameterNotDeclaredException,
    ParameterType,
    parameter_type_of,
)
from vnd_ros.ros_args import ParamOverride

__all__ = [
    "Context",
    "Node",
    "NotInitializedError",
    "Publisher",
    "SingleThreadedExecutor",
    "Subscription",
    "Timer",
    "get_default_context",
    "get_global_executor",
    "init",
    "ok",
    "shutdown",
    "spin",
    "spin_once",
    "try_shutdown",
]


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
        self.context = context or get_default_context()
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
        self._rosout = RosoutPublisher(self, logger_name) if args.rosout_logs else None
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
