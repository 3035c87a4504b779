"""Operator-side access to a running stack: checkpoint requests and status snapshots over topics.

Requests and answers are topics, because services do not reliably cross DDS vendors:
:meth:`StackClient.checkpoint` publishes a ``vnd_msgs/CheckpointCommand`` with a fresh request
id on ``/<ns>/vnd/checkpoint/command`` and collects the ``vnd_msgs/CheckpointStatus`` answers
carrying that id. Which nodes must answer is read from the graph, not from a fixed wait after
the first match: the nodes of the namespace that read the command topic (the model holders:
encoder, policy), once the view is complete, or the one node a request names. Complete means:
no new participant for ``PARTICIPANTS_QUIET_S``; every participant that writes
``ros_discovery_info`` announced its nodes; every reader those nodes announce is discovered;
and every node of the namespace reported ``vnd/node_status`` or announces entities and stopped
creating them (a node announces itself before its entities, so one still in its
constructor is not taken for one that reads nothing). What stays incomplete is waited for at
most ``STARTING_GRACE_S`` (and half the timeout); nodes still incomplete then are listed in
``CheckpointResult.starting``. Every expected node that did not answer within the timeout is
named in ``CheckpointResult.missing``.

:meth:`StackClient.snapshot` reads ``vnd/node_status`` (every node, latest sample per writer:
transient local) and ``vnd/learner/status``.

Usage::

    with StackClient("vnd1") as client:
        result = client.checkpoint(CheckpointAction.LIST, timeout_s=5.0)
        for reply in result.replies: ...
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from vnd_core.wire import CheckpointAction

from vnd_ros import messages
from vnd_ros.bag import CliNode
from vnd_ros.qos import (
    QoSProfile,
    qos_profile_checkpoint_status,
    qos_profile_default,
    qos_profile_status,
)
from vnd_ros.stack_records import (
    CheckpointReply,
    CheckpointResult,
    ClientError,
    LearnerHealth,
    NodeHealth,
    StackSnapshot,
    namespaced,
    new_request_id,
    set_stamp,
)

SPIN_STEP_S = 0.02  # longest executor wait: keeps deadlines and Ctrl-C prompt
# Longest wait for a participant that has not announced its ROS nodes yet and for a node of
# the namespace that still looks under construction; at most half the request's timeout, so
# the answers keep the other half. Past it, the nodes that are ready decide who must answer.
STARTING_GRACE_S = 3.0
# A node counts as constructed once it reported vnd/node_status (stack nodes do, from their
# first timer tick), or once it announces an entity besides /rosout and its entity list
# stayed unchanged this long: a node announces itself before creating its entities, one by
# one, and may spend seconds in between (the policy checks its start-up bundle).
ENTITIES_QUIET_S = 0.3
# A participant the client has not heard from yet is invisible: the view counts as complete
# only once no new participant appeared for this long (on loopback every existing
# participant answers a new one's announcement within tens of milliseconds; the margin is
# for a loaded machine).
PARTICIPANTS_QUIET_S = 0.5
# First wait for every answer before the request goes out again. An answer is volatile: a
# node's writer that has not matched this client's new reader yet (discovery across DDS
# vendors can take longer than the client's own matching) drops it; the node answers a
# repeated request id again without repeating the action.
FIRST_RESEND_S = 0.5


class StackClient:
    """A short-lived node that talks to the flight stack of one vehicle namespace.

    Args:
        vehicle: vehicle namespace (``vnd1``); topics are ``/<vehicle>/...``.
        node_name: name of this client node on the graph.
    """

    def __init__(self, vehicle: str = "vnd1", node_name: str | None = None) -> None:
        self.vehicle = vehicle
        self.cli_node = CliNode(node_name or f"vnd_cli_{uuid.uuid4().hex[:6]}")
        self.node = self.cli_node.node

    def topic(self, name: str) -> str:
        """Absolute name of ``name`` in this client's vehicle namespace."""
        return namespaced(self.vehicle, name)

    def close(self) -> None:
        """Leave the graph."""
        self.cli_node.close()

    def __enter__(self) -> StackClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ spinning
    def spin_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Run callbacks until ``done()`` or the timeout; True when ``done()`` held."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() >= deadline or not self.cli_node.spin_once(SPIN_STEP_S):
                return done()
        return True

    def spin_for(self, duration_s: float) -> None:
        """Run callbacks for ``duration_s`` seconds."""
        self.spin_until(lambda: False, duration_s)

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(
        self,
        action: CheckpointAction,
        *,
        path: str = "",
        version: int = 0,
        target_node: str = "",
        timeout_s: float = 10.0,
    ) -> CheckpointResult:
        """Send one checkpoint request and collect the answers carrying its id.

        Waits (within ``timeout_s``) until the command topic has readers and the answering
        nodes are known, then publishes once and waits for their answers. Raises ClientError
        when no node listens on the command topic.
        """
        request_id = new_request_id()
        replies: dict[str, CheckpointReply] = {}

        def on_status(msg: Any) -> None:
            if msg.request_id == request_id and msg.node not in replies:
                replies[msg.node] = CheckpointReply.from_msg(msg)

        deadline = time.monotonic() + timeout_s
        status_cls = messages.get_message("vnd_msgs/msg/CheckpointStatus")
        command_cls = messages.get_message("vnd_msgs/msg/CheckpointCommand")
        self.node.create_subscription(
            status_cls,
            self.topic("vnd/checkpoint/status"),
            on_status,
            qos_profile_checkpoint_status,
        )
        publisher = self.node.create_publisher(
            command_cls, self.topic("vnd/checkpoint/command"), qos_profile_default
        )
        expected, found, starting = self._wait_for_responders(publisher, target_node, deadline)
        command = command_cls(
            request_id=request_id,
            action=int(action),
            path=path,
            version=int(version),
            target_node=target_node,
        )
        set_stamp(command.header.stamp, self.node.get_clock().now().nanoseconds)
        if found:
            publisher.publish(command)
        result = CheckpointResult(
            request_id, expected, not_found=expected if not found else (), starting=starting
        )

        def answered() -> bool:
            return all(node in replies for node in expected)

        if found:
            self._await_answers(publisher, command, answered, deadline)
        result.replies = sorted(replies.values(), key=lambda reply: reply.node)
        return result

    def _await_answers(
        self, publisher: Any, command: Any, answered: Callable[[], bool], deadline: float
    ) -> None:
        """Spin until ``answered()`` or the deadline, resending ``command`` (same request id)
        at growing intervals while answers are missing: a node answers once per request id and
        re-sends that answer to a repeat, which reaches a reader its first answer could not."""
        interval_s = FIRST_RESEND_S
        while not self.spin_until(answered, min(interval_s, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                return
            publisher.publish(command)
            interval_s *= 2.0

    def expected_name(self, target_node: str) -> str:
        """Fully qualified name of ``target_node`` ('policy' or '/vnd1/policy')."""
        if target_node.startswith("/"):
            return target_node
        return namespaced(self.vehicle, target_node)

    def _wait_for_responders(
        self, publisher: Any, target_node: str, deadline: float
    ) -> tuple[tuple[str, ...], bool, tuple[str, ...]]:
        """The nodes that must answer; whether they were all found reading the command topic
        (with the publisher matched to each) before the deadline; and the namespace's nodes
        that were still starting when the grace ran out (not asked).

        Untargeted: the namespace's readers of the command topic once the view is complete.
        Targeted: that node. Raises ClientError when no node at all reads the command topic.
        """
        command_topic = self.topic("vnd/checkpoint/command")
        namespace = namespaced(self.vehicle, "").rstrip("/") or "/"
        reported: set[str] = set()  # nodes whose vnd/node_status arrived

        def on_status(msg: Any) -> None:
            reported.add(str(msg.node))

        status_sub = self.node.create_subscription(
            messages.get_message("vnd_msgs/msg/NodeStatus"),
            self.topic("vnd/node_status"),
            on_status,
            QoSProfile(qos_profile_status.reliability, qos_profile_status.durability, depth=50),
        )
        search = _ReaderSearch(self.node, command_topic, namespace)
        started = time.monotonic()
        grace_s = min(STARTING_GRACE_S, (deadline - started) / 2.0)
        readers: set[str] = set()
        starting: set[str] = set()
        announced = True
        matched = False
        participants: frozenset[bytes] = frozenset()
        participants_changed = started
        entities: dict[str, Any] = {}
        entities_changed: dict[str, float] = {}
        try:
            while True:
                view = search.poll()
                readers, now = view.readers, time.monotonic()
                announced = view.all_announced
                if view.participants - participants:
                    participants_changed = now
                participants = view.participants
                for name, announced in view.entities.items():
                    if entities.get(name) != announced:
                        entities[name], entities_changed[name] = announced, now
                matched = publisher.get_subscription_count() >= len(readers) > 0
                starting = {
                    name
                    for name in view.nodes
                    if name not in reported
                    and not (
                        any(view.entities.get(name, ((), ())))
                        and now - entities_changed.get(name, now) >= ENTITIES_QUIET_S
                    )
                }
                patient = now - started < grace_s
                quiet = now - participants_changed >= PARTICIPANTS_QUIET_S
                complete = (
                    view.endpoints_known
                    and quiet
                    and not (patient and (starting or not view.all_announced))
                )
                if target_node:
                    done = self.expected_name(target_node) in readers and matched
                else:
                    done = complete and matched
                if done or now >= deadline or not self.cli_node.spin_once(SPIN_STEP_S):
                    break
        finally:
            search.close()
            self.node.destroy_subscription(status_sub)
        # A participant that never announced its nodes in time: what it holds was not asked.
        not_asked = tuple(sorted(starting - readers)) + (() if announced else ("(unannounced)",))
        if target_node:
            name = self.expected_name(target_node)
            return (name,), name in readers and matched, ()
        if not readers:
            raise ClientError(
                f"no node listens on {command_topic} "
                f"(is the stack of vehicle '{self.vehicle}' running?)"
            )
        return tuple(sorted(readers)), True, not_asked

    # ------------------------------------------------------------------ status
    def watch_status(self) -> StackSnapshot:
        """Subscribe to node and learner status; the returned snapshot fills while spinning."""
        snapshot = StackSnapshot()

        def on_node(msg: Any) -> None:
            health = NodeHealth.from_msg(msg)
            snapshot.nodes[health.node] = health
            snapshot.node_received_ns[health.node] = time.time_ns()

        def on_learner(msg: Any) -> None:
            snapshot.learner = LearnerHealth.from_msg(msg)
            snapshot.learner_received_ns = time.time_ns()

        # Transient local with depth 1 per writer: each node's latest report arrives at once.
        self.node.create_subscription(
            messages.get_message("vnd_msgs/msg/NodeStatus"),
            self.topic("vnd/node_status"),
            on_node,
            QoSProfile(qos_profile_status.reliability, qos_profile_status.durability, depth=50),
        )
        self.node.create_subscription(
            messages.get_message("vnd_msgs/msg/LearnerStatus"),
            self.topic("vnd/learner/status"),
            on_learner,
            qos_profile_status,
        )
        return snapshot

    def snapshot(self, spin_time_s: float = 1.5) -> StackSnapshot:
        """Status of every node seen within ``spin_time_s`` seconds."""
        snapshot = self.watch_status()
        self.spin_for(spin_time_s)
        return snapshot


class _ReaderSearch:
    """Which nodes of a namespace read a topic, from the graph of either backend."""

    def __init__(self, node: Any, topic: str, namespace: str) -> None:
        from vnd_ros import runtime

        self._node, self._topic, self._namespace = node, topic, namespace
        self._view: Any = None
        if runtime.BACKEND == "dds":
            from vnd_ros.graph import GraphView

            self._view = GraphView(node.context.participant)

    def poll(self) -> Any:
        """The namespace's readers of the topic (a ``vnd_ros.graph.NamespaceReaders``)."""
        if self._view is not None:
            return self._view.readers_of(self._topic, self._namespace)
        return self._rclpy_poll()

    def _rclpy_poll(self) -> Any:
        from vnd_ros.graph import NamespaceReaders

        # rclpy's graph cache maps endpoints to nodes through ros_discovery_info, as GraphView
        # does, and lists only nodes whose announcement arrived. A node of the namespace with
        # no reader known yet is taken as not discovered (every rclpy node reads its parameter
        # services, so it has readers).
        infos = self._node.get_subscriptions_info_by_topic(self._topic)
        readers = {
            namespaced(info.node_namespace, info.node_name)
            for info in infos
            if info.node_namespace == self._namespace
        }
        nodes: set[str] = set()
        entities: dict[str, Any] = {}
        known = True
        for name, namespace in self._node.get_node_names_and_namespaces():
            if namespace != self._namespace:
                continue
            fqn = namespaced(namespace, name)
            nodes.add(fqn)
            try:
                subs = self._node.get_subscriber_names_and_types_by_node(name, namespace)
                pubs = self._node.get_publisher_names_and_types_by_node(name, namespace)
            except Exception:  # the node left between the two calls
                continue
            known &= bool(subs)
            entities[fqn] = (
                tuple(topic.encode() for topic, _ in sorted(subs)),
                tuple(topic.encode() for topic, _ in sorted(pubs)),
            )
        return NamespaceReaders(
            readers=readers,
            nodes=nodes,
            endpoints_known=known,
            all_announced=True,
            participants=frozenset(name.encode() for name in nodes),
            entities=entities,
        )

    def close(self) -> None:
        """Drop the graph view's built-in readers."""
        self._view = None
