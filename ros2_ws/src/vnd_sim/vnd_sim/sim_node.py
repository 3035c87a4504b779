"""Simulated vehicle node: the true plant of vnd_core in (scaled) real time, seen through mocap.

Subscribes:
    vnd/command (vnd_msgs/CtbrCommand, sensor data): applied with the plant's own latency.
        Commands in IDLE or DISARMED mode or with non-finite values are refused and counted,
        as the hardware bridges refuse them.
Publishes:
    mocap/pose (geometry_msgs/PoseStamped, sensor data): noisy pose at ``pose_rate_hz`` of
        simulated time; stamp = measurement time on the node clock; frame_id 'world'.
    sim/truth (nav_msgs/Odometry, default): true state at each pose sample, in the stack's odom
        convention: pose in 'world', twist.linear = world velocity [m/s], twist.angular = FLU
        body rates [rad/s] (child_frame_id 'base_link').
    sim/disturbance (geometry_msgs/Vector3Stamped, default): true external force [N], world.
    sim/condition (std_msgs/String, status): 'waiting' until scenario time starts, then the
        scenario phase name (calm, wind_a, ...), then 'done' once the scenario's duration is
        over (the vehicle keeps flying). Sent on every change and at 1 Hz.
    vnd/node_status (vnd_msgs/NodeStatus, status), 1 Hz: rate_hz = plant timer rate,
        latency_p50/p99 = how late the timer woke after the sample it was set for [ms],
        missed_ticks = timer intervals longer than 1.5 pose periods; counters_json
        has poses, commands, refused_mode, refused_invalid, started, done, crashed,
        scenario_time_ms and slipped_ms.

Pacing: the plant timer is a deadline, not a fast poll. Each call integrates up to now,
publishes the samples due, and sets the timer to the next sample's clock time
(``SimulatedVehicle.next_sample_ns``), so a sample goes out as soon as its stamp is reached
and the node wakes once per pose period (100 Hz), not at the physics rate; a command
integrates up to its arrival itself. A periodic timer fast enough to publish each sample
within a millisecond of its stamp would cost a callback every millisecond, which rclpy's
executors cannot afford beside the control nodes on a small flight computer.

The vehicle waits on a stand at the scenario's start point until the first valid command
(``start_on_command``). Run: ``ros2 run vnd_sim sim_node --ros-args -p scenario:=recurring_wind``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from vnd_core.config_io import ConfigError
from vnd_core.counters import ReasonCounter
from vnd_core.plant_parts import PlantConfig
from vnd_core.scenario import load_scenario
from vnd_core.simulation import SimSample, SimulatedVehicle, SimulationConfig
from vnd_core.state import OMEGA, POS, QUAT, VEL
from vnd_core.units import NS_PER_S
from vnd_core.vehicle import load_vehicle
from vnd_flight.realtime import request_realtime
from vnd_flight.stats import LatencyWindow, RateEstimator, TickMonitor
from vnd_ros.messages import get_message
from vnd_ros.params import freeze_parameters
from vnd_ros.qos import qos_profile_default, qos_profile_sensor_data, qos_profile_status
from vnd_ros.runtime import Node, init, spin_until_shutdown, start_node

WORLD_FRAME_ID = "world"  # ENU world frame of mocap and truth (REP 103)
BODY_FRAME_ID = "base_link"  # FLU body frame (REP 105)
STATUS_PERIOD_S = 1.0  # node status and condition heartbeat period
MIN_TIMER_WAIT_NS = 50_000  # shortest plant timer period (a sample already due: soon)


@dataclass(frozen=True)
class SimNodeConfig:
    """Parameters of the simulated vehicle node."""

    vehicle: str = "agile"  # vehicle name (config/vehicles) or YAML path
    realtime_priority: int = 0  # SCHED_FIFO priority of the simulated vehicle, 1-99; 0 = off
    scenario: str = "hover_calm"  # scenario name (config/scenarios) or YAML path
    seed: int = 0  # seed of the plant's measurement noise and gusts
    real_time_factor: float = 1.0  # simulated seconds per clock second (> 1 only for tests)
    start_on_command: bool = True  # scenario time starts at the first valid command, else at once
    match_start_velocity: bool = False  # start moving with the reference instead of at rest
    pose_rate_hz: float = 100.0  # mocap pose rate in simulated time (divides physics rate)
    max_catch_up_s: float = 0.25  # most simulated time one tick integrates; beyond, time slips
    plant: PlantConfig = field(default_factory=PlantConfig)  # true-plant settings (plant.*)

    def simulation(self) -> SimulationConfig:
        """The pacing part as vnd_core's SimulationConfig."""
        return SimulationConfig(
            pose_rate_hz=self.pose_rate_hz,
            real_time_factor=self.real_time_factor,
            start_on_command=self.start_on_command,
            match_start_velocity=self.match_start_velocity,
            max_catch_up_s=self.max_catch_up_s,
        )


class SimNode(Node):
    """Steps the true plant on a timer and publishes mocap, truth, condition and status."""

    def __init__(self) -> None:
        super().__init__("sim")
        torch.set_num_threads(1)
        self.config = freeze_parameters(self, SimNodeConfig)
        self.get_logger().info(request_realtime(self.config.realtime_priority))
        cfg = self.config
        if not cfg.pose_rate_hz > 0 or not cfg.real_time_factor > 0:
            raise ValueError(
                f"pose_rate_hz and real_time_factor must be > 0, got {cfg.pose_rate_hz} and "
                f"{cfg.real_time_factor}"
            )
        scenario = load_scenario(cfg.scenario)
        self.sim = SimulatedVehicle(
            load_vehicle(cfg.vehicle), scenario, cfg.simulation(), cfg.plant, cfg.seed
        )
        self._ctbr_cls = get_message("vnd_msgs/msg/CtbrCommand")
        self._pose_cls = get_message("geometry_msgs/msg/PoseStamped")
        self._odom_cls = get_message("nav_msgs/msg/Odometry")
        self._force_cls = get_message("geometry_msgs/msg/Vector3Stamped")
        self._string_cls = get_message("std_msgs/msg/String")
        self._status_cls = get_message("vnd_msgs/msg/NodeStatus")
        self._refused_modes = {self._ctbr_cls.MODE_IDLE, self._ctbr_cls.MODE_DISARMED}
        self._pose_pub = self.create_publisher(
            self._pose_cls, "mocap/pose", qos_profile_sensor_data
        )
        self._truth_pub = self.create_publisher(self._odom_cls, "sim/truth", qos_profile_default)
        self._force_pub = self.create_publisher(
            self._force_cls, "sim/disturbance", qos_profile_default
        )
        self._condition_pub = self.create_publisher(
            self._string_cls, "sim/condition", qos_profile_status
        )
        self._status_pub = self.create_publisher(
            self._status_cls, "vnd/node_status", qos_profile_status
        )
        self.create_subscription(
            self._ctbr_cls, "vnd/command", self._on_command, qos_profile_sensor_data
        )
        period_s = 1.0 / (cfg.pose_rate_hz * cfg.real_time_factor)  # clock time
        self._pose_period_ns = round(period_s * NS_PER_S)
        self._ticks = TickMonitor(period_s)
        self._tick_rate = RateEstimator()
        self._jitter = LatencyWindow(window=round(10.0 / period_s))  # last 10 s
        self._due_ns: int | None = None  # clock time the plant timer is set for
        self._counters = ReasonCounter()
        self._condition: str | None = None
        self._crash_logged = False
        self._plant_timer = self.create_timer(period_s, self._on_tick)
        self.create_timer(STATUS_PERIOD_S, self._on_status)
        start = "at the first command" if cfg.start_on_command else "now"
        self.get_logger().info(
            f"sim: vehicle '{cfg.vehicle}', scenario '{scenario.name}' ({scenario.duration_s} s), "
            f"real-time factor {cfg.real_time_factor}; scenario time starts {start}"
        )

    # -------------------------------------------------------------------------- callbacks

    def _on_tick(self) -> None:
        now_ns = self._now_ns()
        self._record_tick(now_ns)
        self._publish_samples(self.sim.advance_to(now_ns))
        self._schedule_tick()

    def _on_command(self, msg: Any) -> None:
        # Idle and disarmed commands (zero thrust) never start the scenario; once it runs they
        # are applied like any other: a disarm in flight cuts the motors.
        if msg.mode in self._refused_modes and not self.sim.started:
            self._refuse("refused_mode", f"command refused: mode {msg.mode} (idle/disarmed)")
            return
        now_ns = self._now_ns()
        # Integrate up to now first, so the command takes effect at its arrival time.
        self._publish_samples(self.sim.advance_to(now_ns))
        was_started = self.sim.started
        action = np.array([msg.thrust_n, *msg.body_rate_radps], dtype=float)
        if not self.sim.command(action, now_ns):
            self._refuse("refused_invalid", "command refused: non-finite values")
            return
        if not was_started:
            self.get_logger().info("first command: scenario time starts")

    def _on_status(self) -> None:
        self._publish_condition(self.sim.condition)
        now_ns = self._now_ns()
        msg = self._status_cls()
        stamp_msg(msg.header.stamp, now_ns)
        msg.node = self.get_fully_qualified_name()
        msg.rate_hz = self._tick_rate.rate_hz()
        msg.latency_p50_ms = self._jitter.p50_ms if len(self._jitter) else 0.0
        msg.latency_p99_ms = self._jitter.p99_ms if len(self._jitter) else 0.0
        msg.ticks = self._ticks.ticks
        msg.missed_ticks = self._ticks.missed_ticks
        msg.counters_json = json.dumps(self._status_counters(), sort_keys=True)
        self._status_pub.publish(msg)

    # ---------------------------------------------------------------------------- helpers

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _record_tick(self, now_ns: int) -> None:
        self._ticks.tick()
        self._tick_rate.add(now_ns)
        if self._due_ns is not None:
            self._jitter.add_ns(max(now_ns - self._due_ns, 0))

    def _schedule_tick(self) -> None:
        """Plant timer to the next sample's clock time (at most one pose period away)."""
        now_ns = self._now_ns()
        self._due_ns = min(self.sim.next_sample_ns(now_ns), now_ns + self._pose_period_ns)
        self._plant_timer.timer_period_ns = max(self._due_ns - now_ns, MIN_TIMER_WAIT_NS)
        self._plant_timer.reset()

    def _refuse(self, reason: str, message: str) -> None:
        self._counters.count(reason)
        self.get_logger().warning(message, throttle_duration_sec=5.0)

    def _status_counters(self) -> dict[str, int]:
        sim = self.sim
        return {
            "poses": self._counters.total("poses"),
            "commands": sim.commands_applied,
            "refused_mode": self._counters.total("refused_mode"),
            "refused_invalid": self._counters.total("refused_invalid"),
            "started": int(sim.started),
            "done": int(sim.done),
            "crashed": int(bool(sim.plant.crashed[0])),
            "scenario_time_ms": round(1e3 * sim.time_s),
            "slipped_ms": round(1e3 * sim.slipped_s),
        }

    def _publish_samples(self, samples: list[SimSample]) -> None:
        for sample in samples:
            self._pose_pub.publish(self._pose_msg(sample))
            self._truth_pub.publish(self._truth_msg(sample))
            self._force_pub.publish(self._force_msg(sample))
            self._publish_condition(sample.condition, on_change=True)
            if sample.crashed and not self._crash_logged:
                self._crash_logged = True
                self.get_logger().error(f"vehicle crashed at scenario time {sample.time_s:.2f} s")
        self._counters.count("poses", len(samples))

    def _publish_condition(self, condition: str, on_change: bool = False) -> None:
        if on_change and condition == self._condition:
            return
        if condition != self._condition:
            self.get_logger().info(f"condition: {condition}")
        self._condition = condition
        self._condition_pub.publish(self._string_cls(data=condition))

    def _pose_msg(self, sample: SimSample) -> Any:
        msg = self._pose_cls()
        fill_header(msg.header, sample.stamp_ns, WORLD_FRAME_ID)
        fill_point(msg.pose.position, sample.measured[POS])
        fill_quaternion(msg.pose.orientation, sample.measured[QUAT])
        return msg

    def _truth_msg(self, sample: SimSample) -> Any:
        msg = self._odom_cls()
        fill_header(msg.header, sample.stamp_ns, WORLD_FRAME_ID)
        msg.child_frame_id = BODY_FRAME_ID
        fill_point(msg.pose.pose.position, sample.truth[POS])
        fill_quaternion(msg.pose.pose.orientation, sample.truth[QUAT])
        fill_point(msg.twist.twist.linear, sample.truth[VEL])
        fill_point(msg.twist.twist.angular, sample.truth[OMEGA])
        return msg

    def _force_msg(self, sample: SimSample) -> Any:
        msg = self._force_cls()
        fill_header(msg.header, sample.stamp_ns, WORLD_FRAME_ID)
        fill_point(msg.vector, sample.disturbance_n)
        return msg


def stamp_msg(stamp: Any, stamp_ns: int) -> Any:
    """``stamp`` (builtin_interfaces/Time) set to ``stamp_ns`` nanoseconds since the epoch."""
    stamp.sec, stamp.nanosec = divmod(int(stamp_ns), NS_PER_S)
    return stamp


def fill_header(header: Any, stamp_ns: int, frame_id: str) -> None:
    """Set a std_msgs/Header's stamp and frame."""
    stamp_msg(header.stamp, stamp_ns)
    header.frame_id = frame_id


def fill_point(target: Any, values: np.ndarray) -> None:
    """Set x, y, z of a Point or Vector3 from a (3,) array."""
    target.x, target.y, target.z = (float(v) for v in values)


def fill_quaternion(target: Any, wxyz: np.ndarray) -> None:
    """Set a geometry_msgs/Quaternion (x y z w fields) from a (4,) w x y z array."""
    target.w, target.x, target.y, target.z = (float(v) for v in wxyz)


def main(args: list[str] | None = None) -> None:
    """Entry point of ``sim_node``."""
    init(args=args)
    spin_until_shutdown(start_node(SimNode, (ConfigError, ValueError), "sim_node", 2))


if __name__ == "__main__":
    main()
