"""A model-holding node for the request/answer tests, run as its own OS process.

    python checkpoint_responder.py --namespace /ns --name policy [--join-delay-s S]
                                   [--build-delay-s S] [--answer-delay-s S] [--version N]

Answers every ``vnd_msgs/CheckpointCommand`` addressed to it (empty target_node, its name or
its fully qualified name) with a ``CheckpointStatus`` after ``--answer-delay-s``, and reports
``vnd/node_status`` once running, the way the encoder and policy nodes do.

``--join-delay-s`` shows the domain a participant whose endpoints are not discovered for that
long before the node appears -- what a slowly discovered node looks like to a client (its
participant known, its endpoints not yet): a bare participant without endpoints stands in for
that time, then the node's own participant and entities come up and the stand-in leaves.
``--build-delay-s`` spends that long in the constructor between announcing the node and
creating its entities, as the policy node does while it checks its start-up bundle. Prints
'PARTICIPANT' once the first participant exists and 'READY' once the node's entities exist.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from cyclonedds.domain import DomainParticipant
from vnd_core.units import NS_PER_S
from vnd_ros.cyclone_compat import delete_entity
from vnd_ros.messages import get_message
from vnd_ros.qos import QoSProfile, qos_profile_default, qos_profile_status
from vnd_ros.runtime import ExternalShutdownException, Node, init, spin, try_shutdown


class Responder(Node):
    """Answers checkpoint commands after a delay."""

    def __init__(
        self, name: str, namespace: str, answer_delay_s: float, version: int, build_delay_s: float
    ) -> None:
        super().__init__(name, namespace=namespace)
        time.sleep(build_delay_s)  # announced on the graph, no entity of its own yet
        self.answer_delay_s = answer_delay_s
        self.version = version
        self.Status = get_message("vnd_msgs/msg/CheckpointStatus")
        self.pending: list[tuple[float, str]] = []  # (due monotonic time, request id)
        self.answers = self.create_publisher(
            self.Status, "vnd/checkpoint/status", QoSProfile(depth=50)
        )
        self.create_subscription(
            get_message("vnd_msgs/msg/CheckpointCommand"),
            "vnd/checkpoint/command",
            self.on_command,
            qos_profile_default,
        )
        self.NodeStatus = get_message("vnd_msgs/msg/NodeStatus")
        self.status = self.create_publisher(self.NodeStatus, "vnd/node_status", qos_profile_status)
        self.create_timer(0.02, self.flush)
        self.create_timer(1.0, self.report)
        self.reported = False

    def report(self) -> None:
        """vnd/node_status, first sent from the spinning thread (constructor finished)."""
        msg = self.NodeStatus(node=self.get_fully_qualified_name(), active_version=self.version)
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(time.time_ns(), NS_PER_S)
        self.status.publish(msg)

    def on_command(self, msg) -> None:
        target = str(msg.target_node)
        if target and target not in (self.get_name(), self.get_fully_qualified_name()):
            return
        print(f"REQUEST {msg.request_id}", flush=True)
        self.pending.append((time.monotonic() + self.answer_delay_s, str(msg.request_id)))

    def flush(self) -> None:
        if not self.reported:
            self.reported = True
            self.report()
        now = time.monotonic()
        due = [item for item in self.pending if item[0] <= now]
        self.pending = [item for item in self.pending if item[0] > now]
        for _, request_id in due:
            answer = self.Status(
                request_id=request_id,
                node=self.get_fully_qualified_name(),
                accepted=True,
                message="listed",
                active_version=self.version,
                available_versions=list(range(1, self.version + 1)),
            )
            answer.header.stamp.sec, answer.header.stamp.nanosec = divmod(time.time_ns(), NS_PER_S)
            self.answers.publish(answer)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--join-delay-s", type=float, default=0.0)
    parser.add_argument("--build-delay-s", type=float, default=0.0)
    parser.add_argument("--answer-delay-s", type=float, default=0.0)
    parser.add_argument("--version", type=int, default=1)
    args = parser.parse_args()
    stand_in = DomainParticipant(int(os.environ.get("ROS_DOMAIN_ID", "0")))
    print("PARTICIPANT", flush=True)
    time.sleep(args.join_delay_s)  # a participant on the domain, no endpoint discovered yet
    init(args=[])
    try:
        node = Responder(
            args.name, args.namespace, args.answer_delay_s, args.version, args.build_delay_s
        )
        print("READY", flush=True)
        # The node's own participant is up: the stand-in leaves the domain (deleted now, not
        # whenever Python would collect it).
        delete_entity(stand_in)
        spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
