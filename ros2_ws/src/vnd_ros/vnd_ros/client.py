"""Operator-side access to a running stack: checkpoint requests and status snapshots over topics.

Requests and answers are topics (DESIGN.md section 2: services do not cross DDS vendors):
:meth:`StackClient.checkpoint` publishes a ``vnd_msgs/CheckpointCommand`` with a fresh request
id on ``/<ns>/vnd/checkpoint/command`` and collects the ``vnd_msgs/CheckpointStatus`` answers
carrying that id. How many answers to expect is read from the graph: every model-holding node
(encoder, policy) writes ``vnd/checkpoint/status``, so the number of writers of that topic is
the number of answering nodes (1 when the request targets one node).

:meth:`StackClient.snapshot` reads ``vnd/node_status`` (every node, latest sample per writer:
transient local) and ``vnd/learner/status``.

Usage::

    with StackClient("vnd1") as client:
        result = client.checkpoint(CheckpointAction.LIST, timeout_s=5.0)
        for reply in result.replies: ...
"""

from __future__ import annotations

import enum
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vnd_ros import messages
from vnd_ros.bag import GraphProbe, NodeSession
from vnd_ros.qos import QoSProfile, qos_profile_default, qos_profile_status

SPIN_STEP_S = 0.02  # longest executor wait: keeps deadlines and Ctrl-C prompt
CHECKPOINT_STATUS_QOS = QoSProfile(depth=50)  # docs/topics.md: default, depth 50
# After the first reader of the command topic matched, wait this long for the others (all
# nodes of a stack are discovered within a few SPDP/SEDP rounds on loopback).
MATCH_SETTLE_S = 0.5
# Controller modes (vnd_msgs/CtbrCommand MODE_*), for printing.
NS_PER_S = 1_000_000_000
MODE_NAMES = {0: "idle", 1: "policy", 2: "hold", 3: "land", 4: "disarmed"}
# Learner states (vnd_msgs/LearnerStatus STATE_*), for printing.
LEARNER_STATE_NAMES = {
    0: "idle",
    1: "collecting",
    2: "fitting",
    3: "training",
    4: "validating",
    5: "error",
}


class CheckpointAction(enum.IntEnum):
    """vnd_msgs/CheckpointCommand ACTION_* values."""

    LIST = 0
    LOAD = 1
    ACTIVATE = 2
    ROLLBACK = 3
    PIN = 4
    UNPIN = 5
    ARM = 6  # policy node only
    DISARM = 7  # policy node only


class ClientError(RuntimeError):
    """The request could not be sent (no node listens) or the stack is not reachable."""


@dataclass(frozen=True)
class CheckpointReply:
    """One node's ``vnd_msgs/CheckpointStatus`` answer."""

    node: str  # fully qualified name of the answering node
    accepted: bool  # the request was carried out
    message: str  # what happened, or why not
    active_version: int  # version active after the request (0 = none)
    available_versions: tuple[int, ...]  # versions held and ready to activate
    pinned: bool  # learner bundles refused while True
    stamp_ns: int  # time the node produced the answer [ns, node clock]

    @classmethod
    def from_msg(cls, msg: Any) -> CheckpointReply:
        """From a ``vnd_msgs/CheckpointStatus`` of either backend."""
        return cls(
            node=str(msg.node),
            accepted=bool(msg.accepted),
            message=str(msg.message),
            active_version=int(msg.active_version),
            available_versions=tuple(int(v) for v in msg.available_versions),
            pinned=bool(msg.pinned),
            stamp_ns=stamp_ns(msg.header.stamp),
        )


@dataclass
class CheckpointResult:
    """Answers to one request and whether every expected node answered in time."""

    request_id: str  # id sent with the request
    expected: int  # answers expected (writers of vnd/checkpoint/status, or 1 when targeted)
    replies: list[CheckpointReply] = field(default_factory=list)  # in arrival order

    @property
    def timed_out(self) -> bool:
        """True when fewer answers than expected arrived."""
        return len(self.replies) < self.expected

    @property
    def ok(self) -> bool:
        """True when every expected node answered and accepted."""
        return not self.timed_out and all(reply.accepted for reply in self.replies)


@dataclass(frozen=True)
class NodeHealth:
    """One ``vnd_msgs/NodeStatus`` report."""

    node: str  # fully qualified node name
    mode: int  # CtbrCommand MODE_* (policy node), 0 for the others
    active_version: int  # bundle version in use (0 = none)
    previous_version: int  # version a rollback restores (0 = none)
    pinned: bool  # learner updates refused
    rate_hz: float  # main-loop rate [Hz]
    latency_p50_ms: float  # main-path latency median over the node's window [ms]
    latency_p99_ms: float  # main-path latency 99th percentile over the node's window [ms]
    ticks: int  # main-loop iterations since start
    missed_ticks: int  # late iterations since start
    counters: dict[str, Any]  # fault and event counters by name
    stamp_ns: int  # time of the report [ns]

    @classmethod
    def from_msg(cls, msg: Any) -> NodeHealth:
        """From a ``vnd_msgs/NodeStatus`` of either backend (bad counters JSON kept as text)."""
        try:
            counters = json.loads(msg.counters_json) if msg.counters_json else {}
        except json.JSONDecodeError:
            counters = {"counters_json": str(msg.counters_json)}
        return cls(
            node=str(msg.node),
            mode=int(msg.mode),
            active_version=int(msg.active_version),
            previous_version=int(msg.previous_version),
            pinned=bool(msg.pinned),
            rate_hz=float(msg.rate_hz),
            latency_p50_ms=float(msg.latency_p50_ms),
            latency_p99_ms=float(msg.latency_p99_ms),
            ticks=int(msg.ticks),
            missed_ticks=int(msg.missed_ticks),
            counters=counters if isinstance(counters, dict) else {"counters": counters},
            stamp_ns=stamp_ns(msg.header.stamp),
        )


@dataclass(frozen=True)
class LearnerHealth:
    """One ``vnd_msgs/LearnerStatus`` report."""

    state: int  # LearnerStatus STATE_*
    ticks_stored: int  # transitions in the replay store
    latest_version: int  # newest bundle version published (0 = none)
    updates_accepted: int  # candidate bundles that passed validation
    updates_rejected: int  # candidate bundles refused by validation
    last_update_duration_s: float  # wall time of the last update cycle [s]
    message: str  # human-readable detail
    stamp_ns: int  # time of the report [ns]

    @property
    def state_name(self) -> str:
        """Lower-case name of ``state``."""
        return LEARNER_STATE_NAMES.get(self.state, f"state {self.state}")

    @classmethod
    def from_msg(cls, msg: Any) -> LearnerHealth:
        """From a ``vnd_msgs/LearnerStatus`` of either backend."""
        return cls(
            state=int(msg.state),
            ticks_stored=int(msg.ticks_stored),
            latest_version=int(msg.latest_version),
            updates_accepted=int(msg.updates_accepted),
            updates_rejected=int(msg.updates_rejected),
            last_update_duration_s=float(msg.last_update_duration_s),
            message=str(msg.message),
            stamp_ns=stamp_ns(msg.header.stamp),
        )


@dataclass
class StackSnapshot:
    """The latest status of every node of one vehicle namespace."""

    nodes: dict[str, NodeHealth] = field(default_factory=dict)  # node name -> latest report
    learner: LearnerHealth | None = None  # latest learner report (None: no learner seen)


def stamp_ns(stamp: Any) -> int:
    """Nanoseconds of a ``builtin_interfaces/Time``.

    (vnd_core.flight.msgfields has the same helper, but importing it pulls in torch: this
    module serves quick command-line tools.)
    """
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def set_stamp(stamp: Any, ns: int) -> None:
    """Write ``ns`` nanoseconds into a ``builtin_interfaces/Time`` in place."""
    stamp.sec, stamp.nanosec = divmod(int(ns), NS_PER_S)


def new_request_id() -> str:
    """A request id no other requester will choose: ``cli-<12 hex digits>``."""
    return f"cli-{uuid.uuid4().hex[:12]}"


def namespaced(vehicle: str, topic: str) -> str:
    """Absolute topic name of ``topic`` in the vehicle namespace (``/vnd1/odom``)."""
    ns = "/" + vehicle.strip("/") if vehicle.strip("/") else ""
    return f"{ns}/{topic.lstrip('/')}"


class StackClient:
    """A short-lived node that talks to the flight stack of one vehicle namespace.

    Args:
        vehicle: vehicle namespace (``vnd1``); topics are ``/<vehicle>/...``.
        node_name: name of this client node on the graph.
    """

    def __init__(self, vehicle: str = "vnd1", node_name: str | None = None) -> None:
        self.vehicle = vehicle
        self.session = NodeSession(node_name or f"vnd_cli_{uuid.uuid4().hex[:6]}")
        self.node = self.session.node

    def topic(self, name: str) -> str:
        """Absolute name of ``name`` in this client's vehicle namespace."""
        return namespaced(self.vehicle, name)

    def close(self) -> None:
        """Leave the graph."""
        self.session.close()

    def __enter__(self) -> StackClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ spinning
    def spin_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Run callbacks until ``done()`` or the timeout; True when ``done()`` held."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() >= deadline or not self.session.spin_once(SPIN_STEP_S):
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
            status_cls, self.topic("vnd/checkpoint/status"), on_status, CHECKPOINT_STATUS_QOS
        )
        publisher = self.node.create_publisher(
            command_cls, self.topic("vnd/checkpoint/command"), qos_profile_default
        )
        expected = self._wait_for_responders(publisher, target_node, deadline)
        command = command_cls(
            request_id=request_id,
            action=int(action),
            path=path,
            version=int(version),
            target_node=target_node,
        )
        set_stamp(command.header.stamp, self.node.get_clock().now().nanoseconds)
        publisher.publish(command)
        result = CheckpointResult(request_id, expected)
        self.spin_until(lambda: len(replies) >= expected, deadline - time.monotonic())
        result.replies = sorted(replies.values(), key=lambda reply: reply.node)
        return result

    def _wait_for_responders(self, publisher: Any, target_node: str, deadline: float) -> int:
        """Answers to expect once the command readers matched and their count settled."""
        probe = GraphProbe(self.node)
        status_topic = self.topic("vnd/checkpoint/status")
        try:
            settled_at: float | None = None
            last_count = -1
            while True:
                count = publisher.get_subscription_count()
                writers = len(probe.writers().get(status_topic, []))
                now = time.monotonic()
                if count != last_count:
                    last_count, settled_at = count, now
                ready = count > 0 and writers > 0 and now - settled_at >= MATCH_SETTLE_S
                if ready or now >= deadline or not self.session.spin_once(SPIN_STEP_S):
                    break
        finally:
            probe.close()
        if last_count <= 0:
            raise ClientError(
                f"no node listens on {self.topic('vnd/checkpoint/command')} "
                f"(is the stack of vehicle '{self.vehicle}' running?)"
            )
        # Each answering node writes vnd/checkpoint/status once; a targeted request has one.
        return 1 if target_node else max(writers, 1)

    # ------------------------------------------------------------------ status
    def watch_status(self) -> StackSnapshot:
        """Subscribe to node and learner status; the returned snapshot fills while spinning."""
        snapshot = StackSnapshot()

        def on_node(msg: Any) -> None:
            health = NodeHealth.from_msg(msg)
            snapshot.nodes[health.node] = health

        def on_learner(msg: Any) -> None:
            snapshot.learner = LearnerHealth.from_msg(msg)

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
