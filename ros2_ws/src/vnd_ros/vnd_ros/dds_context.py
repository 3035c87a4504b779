"""The dds backend's process-wide state: the :class:`Context` (parsed ROS arguments, the one
DDS participant of the process, its nodes) and its lifecycle functions (``init``, ``ok``,
``shutdown``, ``try_shutdown``).

Signals: ``init()`` installs SIGINT and SIGTERM handlers. SIGINT raises KeyboardInterrupt in the
main thread, as Python does by default (rclpy behaves the same); SIGTERM requests shutdown so
``spin()`` returns. ``shutdown()`` deletes the participant, so peers see the node leave at once
instead of after a 10 s lease, and an atexit hook does it for programs that forget.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from cyclonedds.core import GuardCondition
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlStruct
from cyclonedds.qos import Policy, Qos
from cyclonedds.topic import Topic

from vnd_ros import log
from vnd_ros.backend import ros_distro
from vnd_ros.cyclone_compat import delete_entity, forget_entity
from vnd_ros.ros_args import RosArgs, parse_ros_args


class ContextNode(Protocol):
    """What a context needs of its nodes (vnd_ros.dds_node.Node): destroying them at shutdown
    (the graph publisher reads their names and endpoints)."""

    def destroy_node(self) -> None:
        """Delete the node's entities and leave the graph."""


class NotInitializedError(RuntimeError):
    """A node or an executor was used before ``init()`` or after ``shutdown()``."""


class Context:
    """Process-wide middleware state: parsed ROS arguments, the participant and its nodes."""

    def __init__(self) -> None:
        self.args = RosArgs()
        self.participant: DomainParticipant | None = None
        self.guard: GuardCondition | None = None
        self.graph: Any = None  # vnd_ros.graph.DiscoveryInfoPublisher once initialised
        self.nodes: list[ContextNode] = []
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

    def topic(self, dds_name: str, msg_type: type[IdlStruct]) -> Topic:
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

    def _guard(self) -> GuardCondition:
        if self.guard is None:
            raise NotInitializedError("call init() before spinning an executor")
        return self.guard

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
