"""What the operator client reads from and sends to a running stack: checkpoint replies
and results, node and learner health, the stack snapshot, and the small helpers for
stamps, request ids and namespaced topic names.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from vnd_core.units import NS_PER_S
from vnd_core.wire import learner_state_name


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
    expected_nodes: tuple[str, ...]  # fully qualified names of the nodes that must answer
    replies: list[CheckpointReply] = field(default_factory=list)  # sorted by node name
    not_found: tuple[str, ...] = ()  # expected nodes never seen reading the command topic
    # Namespace nodes still looking under construction when the wait ran out, not asked
    # ("(unannounced)": a participant had not announced its nodes yet).
    starting: tuple[str, ...] = ()

    @property
    def expected(self) -> int:
        """How many answers were expected."""
        return len(self.expected_nodes)

    @property
    def missing(self) -> tuple[str, ...]:
        """Expected nodes that did not answer in time, sorted."""
        answered = {reply.node for reply in self.replies}
        return tuple(sorted(set(self.expected_nodes) - answered))

    @property
    def timed_out(self) -> bool:
        """True when an expected node did not answer in time."""
        return bool(self.missing)

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
    warnings: tuple[str, ...] = ()  # conditions the operator must act on now

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
            warnings=tuple(str(w) for w in getattr(msg, "warnings", ())),
        )


@dataclass(frozen=True)
class LearnerHealth:
    """One ``vnd_msgs/LearnerStatus`` report."""

    state: int  # LearnerStatus STATE_*
    ticks_stored: int  # transitions in the replay store
    latest_version: int  # newest bundle version published (0 = none)
    updates_accepted: int  # model updates whose candidate passed validation
    updates_rejected: int  # model updates whose candidate was refused by validation
    last_update_duration_s: float  # wall time of the last update cycle [s]
    message: str  # human-readable detail
    stamp_ns: int  # time of the report [ns]
    bundles_refused: int = 0  # published bundles a flight node refused [count]
    latest_refused: bool = False  # a flight node refused the newest published bundle
    refusal: str = ""  # newest refusal: '<node> refused v<N>: <reason>' ('' = none)
    improvements_accepted: int = 0  # policy-only versions between model updates [count]

    @property
    def state_name(self) -> str:
        """Lower-case name of ``state``."""
        return learner_state_name(self.state)

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
            bundles_refused=int(getattr(msg, "bundles_refused", 0)),
            latest_refused=bool(getattr(msg, "latest_refused", False)),
            refusal=str(getattr(msg, "refusal", "")),
            improvements_accepted=int(getattr(msg, "improvements_accepted", 0)),
        )


@dataclass
class StackSnapshot:
    """The latest status of every node of one vehicle namespace."""

    nodes: dict[str, NodeHealth] = field(default_factory=dict)  # node name -> latest report
    learner: LearnerHealth | None = None  # latest learner report (None: no learner seen)
    # When this process received each node's latest report [ns since epoch, wall clock]
    node_received_ns: dict[str, int] = field(default_factory=dict)
    learner_received_ns: int = 0  # when the latest learner report arrived [ns, wall clock]


def stamp_ns(stamp: Any) -> int:
    """Nanoseconds of a ``builtin_interfaces/Time``.

    (vnd_flight.msgfields has the same helper, but importing it pulls in torch: this
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
