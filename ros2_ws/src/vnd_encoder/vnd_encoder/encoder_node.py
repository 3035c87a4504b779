"""Encoder node: (state, action) context -> latent z of the active bundle's VND encoder.

Event-driven: every ``vnd/command`` names (by its header stamp) the odometry it answers; the
node pairs it with that odometry sample, advances the context window and publishes
``vnd/latent`` at once, so the policy's next tick has a latent for the newest state. A timer
(``gap_check_period_s``) breaks the context when commands stop (no new entry at two checks in
a row: one late check is this node's own delay) and announces an invalid latent. ``valid``
is false until the window holds C transitions (C = the bundle's context length), after a gap,
and always for a bundle without a VND model (z empty then); the ``encoder_version`` is the
active bundle's version in every case.

Bundles arrive like the policy's: ``vnd/model`` (learner) and ``vnd/checkpoint/command``
(operator), loaded and checked off the callback thread, swapped between two messages and
answered on ``vnd/checkpoint/status``. ``vnd/node_status`` at 1 Hz.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from vnd_core.bundle import Bundle, BundleError, shipped_bundle_path
from vnd_core.latent_estimator import LatentEstimator
from vnd_core.vehicle import load_vehicle
from vnd_flight.bundle_runtime import BundleRuntime, encoder_validator
from vnd_flight.checkpoint_endpoint import CheckpointEndpoint
from vnd_flight.msgfields import odometry_state, set_stamp, stamp_ns
from vnd_flight.realtime import request_realtime
from vnd_flight.stats import LatencyWindow, RateEstimator, TickMonitor
from vnd_ros.messages import get_message
from vnd_ros.params import ParameterError, freeze_parameters, param
from vnd_ros.qos import (
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_checkpoint_status,
    qos_profile_default,
    qos_profile_model,
    qos_profile_sensor_data,
    qos_profile_status,
)
from vnd_ros.runtime import Node, init, spin_until_shutdown, start_node

# Sensor-data QoS (best effort) with a deeper reader queue: a burst of load on the encoder
# must not drop the odometry a later command has to be paired with. Matching is unchanged.
PAIRING_QOS = QoSProfile(ReliabilityPolicy.BEST_EFFORT, depth=20)


@dataclass(frozen=True)
class EncoderNodeConfig:
    """Parameters of the encoder node."""

    bundle: str = param("", "start-up bundle path; empty = the shipped base bundle")
    vehicle: str = param("agile", "vehicle name or YAML path: bundles for another are refused")
    period_s: float = param(0.02, "control period the context advances at (s)")
    max_gap_ms: float = param(45.0, "context entries further apart than this break it (ms)")
    gap_check_period_s: float = param(0.02, "period of the gap check and bundle swap timer (s)")
    smoke_budget_us: float = param(100000.0, "bundle check: median per-tick encode limit (us)")
    startup_timeout_s: float = param(60.0, "longest wait for the start-up bundle (s)")
    status_period_s: float = param(1.0, "period of vnd/node_status reports (s)")
    realtime_priority: int = param(
        0, "SCHED_FIFO priority of the encoder, 1-99, below the control path's; 0 = off"
    )


class EncoderNode(Node):
    """odom + vnd/command -> context window -> encoder -> vnd/latent."""

    def __init__(self) -> None:
        super().__init__("encoder")
        self._bundles: BundleRuntime | None = None  # set once the parameters are read
        self.cfg = freeze_parameters(self, EncoderNodeConfig)
        self.get_logger().info(request_realtime(self.cfg.realtime_priority))
        validator = encoder_validator(load_vehicle(self.cfg.vehicle), self.cfg.smoke_budget_us)
        self._bundles = BundleRuntime(self.get_fully_qualified_name(), validator)
        path = self.cfg.bundle or str(shipped_bundle_path())
        self.get_logger().info(f"start-up bundle {path}")
        self.bundles.load_startup(path, self.cfg.startup_timeout_s)
        self.estimator = LatentEstimator(self.cfg.max_gap_ms)
        self.model_of: Bundle | None = None  # bundle whose model the estimator uses
        self._use_active_bundle()
        self.ticks = TickMonitor(self.cfg.period_s)
        self.rate = RateEstimator()
        self.latency = LatencyWindow()
        self._wire()
        self.get_logger().info(f"encoder node ready: {self.bundles.describe()}")

    def _wire(self) -> None:
        msg = get_message
        self.Latent = msg("vnd_msgs/msg/Latent")
        self.CheckpointStatus = msg("vnd_msgs/msg/CheckpointStatus")
        self.NodeStatus = msg("vnd_msgs/msg/NodeStatus")
        self.latent_pub = self.create_publisher(self.Latent, "vnd/latent", qos_profile_sensor_data)
        self.checkpoint = CheckpointEndpoint.for_node(
            self, self.bundles, self.CheckpointStatus, qos_profile_checkpoint_status
        )
        self.status_pub = self.create_publisher(
            self.NodeStatus, "vnd/node_status", qos_profile_status
        )
        subscriptions = (
            ("nav_msgs/msg/Odometry", "odom", self.on_odom, PAIRING_QOS),
            ("vnd_msgs/msg/CtbrCommand", "vnd/command", self.on_command, PAIRING_QOS),
            ("vnd_msgs/msg/ModelBundle", "vnd/model", self.checkpoint.on_model, qos_profile_model),
            (
                "vnd_msgs/msg/CheckpointCommand",
                "vnd/checkpoint/command",
                self.on_checkpoint,
                qos_profile_default,
            ),
        )
        for type_name, topic, callback, qos in subscriptions:
            self.create_subscription(msg(type_name), topic, callback, qos)
        self.create_timer(self.cfg.gap_check_period_s, self.on_timer)
        self.create_timer(self.cfg.status_period_s, self.publish_status)

    # ------------------------------------------------------------------ inputs
    def on_odom(self, msg: Any) -> None:
        """Keep the odometry for pairing; publish when a waiting command got its state."""
        if self.estimator.add_odometry(stamp_ns(msg.header.stamp), odometry_state(msg)):
            self.publish_latent()

    def on_command(self, msg: Any) -> None:
        """Pair the command with its odometry; publish the latent when the context advanced."""
        answered_ns = stamp_ns(msg.header.stamp)
        action = np.array([msg.thrust_n, *msg.body_rate_radps], dtype=float)
        if self.estimator.add_command(answered_ns, action):
            self.publish_latent()

    def on_checkpoint(self, msg: Any) -> None:
        """An operator request (answered when addressed to this node); a swap takes effect
        before the next command."""
        if self.checkpoint.on_command(msg):
            self._use_active_bundle()

    def on_timer(self) -> None:
        """Apply finished bundle loads; break the context when commands stopped."""
        if self.checkpoint.poll():
            self._use_active_bundle()
        if self.estimator.break_on_gap(self.get_clock().now().nanoseconds):
            self.get_logger().warning("command stream gap: context cleared")
            self.publish_latent()

    # ------------------------------------------------------------------ outputs
    def publish_latent(self) -> None:
        """vnd/latent for the current window (valid=false while it is not full)."""
        z = self.estimator.latent()
        msg = self.Latent(
            encoder_version=self.bundles.active_version,
            valid=z is not None,
            z=[] if z is None else z.tolist(),
        )
        newest_ns = self.estimator.newest_stamp_ns
        now_ns = self.get_clock().now().nanoseconds
        set_stamp(msg.header.stamp, newest_ns if newest_ns is not None else now_ns)
        self.latent_pub.publish(msg)
        if newest_ns is not None:
            published_ns = self.get_clock().now().nanoseconds
            self.latency.add_ns(published_ns - newest_ns)
            self.ticks.tick()
            self.rate.add(published_ns)

    def publish_status(self) -> None:
        """vnd/node_status: versions, latent rate and latency, counters."""
        now_ns = self.get_clock().now().nanoseconds
        counters = self.estimator.all_counters()
        counters["bundle_rejections"] = self.bundles.rejections
        status = self.NodeStatus(
            node=self.get_fully_qualified_name(),
            active_version=self.bundles.active_version,
            previous_version=self.bundles.previous_version,
            pinned=self.bundles.pinned,
            rate_hz=self.rate.rate_hz(now_ns),
            latency_p50_ms=_finite(self.latency.p50_ms),
            latency_p99_ms=_finite(self.latency.p99_ms),
            ticks=self.ticks.ticks,
            missed_ticks=self.ticks.missed_ticks,
            counters_json=json.dumps(counters, sort_keys=True),
        )
        set_stamp(status.header.stamp, now_ns)
        self.status_pub.publish(status)

    def _use_active_bundle(self) -> None:
        """Point the estimator at the active bundle's model after a swap."""
        bundle = self.bundles.active
        if bundle is not self.model_of:
            self.model_of = bundle
            self.estimator.set_model(bundle.model if bundle is not None else None)

    @property
    def bundles(self) -> BundleRuntime:
        """The node's bundle runtime: there from the parameters on (start-up creates it)."""
        if self._bundles is None:
            raise RuntimeError("the bundle runtime is used before start-up created it")
        return self._bundles

    def destroy_node(self) -> None:
        """Stop the bundle loader (if start-up got that far), then leave the graph."""
        if self._bundles is not None:
            self._bundles.close()
        super().destroy_node()


def _finite(value: float) -> float:
    """NaN (an empty latency window) reported as 0."""
    return value if value == value else 0.0


def main(args: list[str] | None = None) -> None:
    """Run the encoder node until Ctrl-C or SIGTERM."""
    torch.set_num_threads(1)  # two cores shared with the policy and the learner
    sys.setswitchinterval(0.0005)  # the loader thread must not stall a callback for 5 ms
    init(args=args)
    spin_until_shutdown(
        start_node(EncoderNode, (BundleError, ParameterError, ValueError), "encoder")
    )


if __name__ == "__main__":
    main()
