"""A small node for the middleware tests and benchmark, run as its own OS process.

    python dds_peer.py --ros-args -p role:=talker -p topic:=chatter -p reliable:=false

Roles (parameter ``role``):
    talker    publish std_msgs/String 'msg <i>' every ``period_s`` (``count`` times, 0 = forever)
    listener  print 'RECV <data> malformed=<n>' for every std_msgs/String received
    echo      republish every std_msgs/String from ``topic`` on ``reply_topic`` (ping-pong)
    bundle    publish one vnd_msgs/ModelBundle of ``size_bytes`` on the model QoS, then spin
    bundle_listener  print 'BUNDLE <version> <bytes> <sha ok>' for each bundle received
    crash     dereference a null pointer from a timer callback (a C-extension crash)

Runs on the backend VND_MIDDLEWARE selects. Prints 'READY <participant guid hex, or rclpy>
<node fqn> <resolved topic>' once its entities exist,
and 'EXIT clean' after a clean shutdown (SIGINT or SIGTERM).
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass

from vnd_ros import qos
from vnd_ros.messages import get_message
from vnd_ros.params import freeze_parameters, param
from vnd_ros.runtime import (
    BACKEND,
    ExternalShutdownException,
    Node,
    init,
    ok,
    spin,
    start_node,
    try_shutdown,
)


@dataclass(frozen=True)
class PeerConfig:
    role: str = param("listener", "talker, listener, echo, bundle, bundle_listener or crash")
    topic: str = param("chatter", "topic to publish or subscribe")
    reply_topic: str = param("pong", "echo role: topic the replies go to")
    reliable: bool = param(True, "reliable (true) or best-effort (false) QoS")
    count: int = param(0, "talker: messages to send, 0 = forever")
    period_s: float = param(0.01, "talker: publishing period (s)")
    size_bytes: int = param(1_000_000, "bundle: payload size (bytes)")


def _profile(reliable: bool) -> qos.QoSProfile:
    return qos.qos_profile_default if reliable else qos.qos_profile_sensor_data


class Peer(Node):
    """One of the test roles (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__("peer")
        self.cfg = freeze_parameters(self, PeerConfig)
        self.string = get_message("std_msgs/msg/String")
        self.sent = 0
        self.subscription = None
        getattr(self, f"_start_{self.cfg.role}")()

    def _start_talker(self) -> None:
        self.pub = self.create_publisher(self.string, self.cfg.topic, _profile(self.cfg.reliable))
        self.create_timer(self.cfg.period_s, self._talk)
        self._ready(self.pub.topic_name)

    def _talk(self) -> None:
        if self.cfg.count and self.sent >= self.cfg.count:
            return
        self.sent += 1
        self.pub.publish(self.string(data=f"msg {self.sent}"))

    def _start_listener(self) -> None:
        self.subscription = self.create_subscription(
            self.string, self.cfg.topic, self._heard, _profile(self.cfg.reliable)
        )
        self._ready(self.subscription.topic_name)

    def _heard(self, msg) -> None:
        malformed = getattr(self.subscription, "malformed_count", 0)  # dds backend only
        print(f"RECV {msg.data} malformed={malformed}", flush=True)

    def _start_echo(self) -> None:
        self.pub = self.create_publisher(
            self.string, self.cfg.reply_topic, _profile(self.cfg.reliable)
        )
        self.subscription = self.create_subscription(
            self.string, self.cfg.topic, self.pub.publish, _profile(self.cfg.reliable)
        )
        self._ready(self.subscription.topic_name)

    def _start_bundle(self) -> None:
        bundle_cls = get_message("vnd_msgs/msg/ModelBundle")
        self.pub = self.create_publisher(bundle_cls, self.cfg.topic, qos.qos_profile_model)
        payload = bytes(i % 251 for i in range(self.cfg.size_bytes))
        for version in (1, 2):  # a late joiner must get only the last one
            self.pub.publish(
                bundle_cls(
                    version=version,
                    sha256=hashlib.sha256(payload).hexdigest(),
                    payload=payload,
                )
            )
        self._ready(self.pub.topic_name)

    def _start_bundle_listener(self) -> None:
        bundle_cls = get_message("vnd_msgs/msg/ModelBundle")
        self.subscription = self.create_subscription(
            bundle_cls, self.cfg.topic, self._got_bundle, qos.qos_profile_model
        )
        self._ready(self.subscription.topic_name)

    def _got_bundle(self, msg) -> None:
        ok = hashlib.sha256(msg.payload).hexdigest() == msg.sha256
        print(f"BUNDLE {msg.version} {len(msg.payload)} {ok}", flush=True)

    def _start_crash(self) -> None:
        self.create_timer(0.05, self._crash_in_c)
        self._ready("")

    def _crash_in_c(self) -> None:
        import ctypes

        ctypes.string_at(0)  # SIGSEGV inside C code, like a faulty extension

    def _ready(self, topic: str) -> None:
        """Print READY from the first timer callback: once the node spins, so a test's signal
        cannot land while spin() is still building its executor (rclpy then prints an
        'Exception ignored' traceback from the half-built executor)."""
        guid = "rclpy"  # rclpy does not expose its participant's GUID
        if BACKEND == "dds":
            from vnd_ros.dds_node import get_default_context

            guid = get_default_context().participant.get_guid().bytes.hex()
        line = f"READY {guid} {self.get_fully_qualified_name()} {topic}"
        timer = None

        def announce() -> None:
            timer.cancel()
            print(line, flush=True)

        timer = self.create_timer(0.001, announce)


def main(args: list[str] | None = None) -> int:
    """Run one peer until SIGINT/SIGTERM."""
    init(args=args)
    node = None
    try:  # construction inside the try: a Ctrl-C may arrive at any moment
        node = start_node(Peer, (), "peer")  # as every VND node starts (faulthandler on)
        spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if ok():  # else a signal shut the context down as spin() started (rclpy raises)
            raise
    finally:
        if node is not None:
            node.destroy_node()
        try_shutdown()
    print("EXIT clean", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
