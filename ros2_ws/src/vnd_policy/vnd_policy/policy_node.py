"""Policy node: the 50 Hz control tick (policy -> safety filter -> CTBR command + tick record).

Timing: the tick runs in the odometry callback (event-driven, lowest latency from odometry to
command): a sample stamped at least ``min_tick_interval_s`` after the odometry the previous
tick used triggers it, so 100 Hz odometry gives 50 Hz ticks, each on a fresh sample. Deciding
on stamps, not arrival times, keeps the ticks on every second sample whatever the transport
jitter, and resumes odometry-driven ticks right after a watchdog tick. The watchdog is a
deadline timer, not a poll: every odometry tick restarts it with one period plus
``tick_margin_s`` (26 ms), so it fires only when no tick happened for that long (odometry late
or gone; the margin tolerates 6 ms of odometry jitter and stays below the 30 ms that counts as
a missed tick), runs the tick itself, then keeps ticking every period (the 50 Hz grid) until
odometry is back; the safety filter sees the odometry age and falls back. A fast periodic
poll would cost a callback every few milliseconds, which rclpy's executors cannot afford on a
small flight computer. Finished bundle loads are applied right after each tick's publications
and in the watchdog callback (every 26 ms without odometry), so swaps happen between ticks.
Operator arm / disarm requests (``vnd arm``, ``vnd disarm``: vnd/checkpoint/command) are
decided and applied in their callback, between two ticks as well
(``vnd_flight.arming``).

Topics (relative, in the vehicle namespace; see docs/topics.md):
    in   odom (nav_msgs/Odometry), vnd/latent, vnd/reference, vnd/model,
         vnd/checkpoint/command
    out  vnd/command (CtbrCommand, header.stamp = the odometry stamp), vnd/replay (one
         Transition per tick), vnd/force_input (geometry_msgs/Vector3Stamped per tick while a
         bundle with a force input flies: the observer's force estimate), vnd/checkpoint/status,
         vnd/node_status (1 Hz)

Odometry with NaN/inf or a stamp not newer than the last one is dropped and counted. Bundles
(learner, operator) are loaded and checked on a worker thread (``vnd_flight
.bundle_runtime``); the tick never waits for a load.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from vnd_core.behaviour import BehaviourCheckConfig
from vnd_core.bundle import BundleError, shipped_bundle_path
from vnd_core.config_io import ConfigError
from vnd_core.counters import ReasonCounter
from vnd_core.scenario import load_scenario
from vnd_core.units import NS_PER_S
from vnd_core.vehicle import load_vehicle
from vnd_core.wire import CheckpointAction, Mode
from vnd_flight.bundle_runtime import BundleRuntime, CheckpointReply, policy_validator
from vnd_flight.checkpoint_endpoint import CheckpointEndpoint
from vnd_flight.controller import (
    LATENT_MISMATCH,
    LATENT_MISSING,
    LATENT_SIZE,
    LATENT_STALE,
    ExternalReference,
    LatentSample,
    PolicyController,
    TickRecord,
)
from vnd_flight.msgfields import odometry_state, set_stamp, stamp_ns
from vnd_flight.realtime import request_realtime
from vnd_flight.safety import EVENT_CRASH
from vnd_flight.safety_config import ModeChange
from vnd_flight.stats import (
    LatencyWindow,
    RateEstimator,
    ThreadSchedStat,
    TickMonitor,
    late_tick_breakdown,
)
from vnd_ros.messages import get_message
from vnd_ros.params import ParameterError, freeze_parameters
from vnd_ros.qos import (
    qos_profile_checkpoint_status,
    qos_profile_default,
    qos_profile_model,
    qos_profile_replay,
    qos_profile_sensor_data,
    qos_profile_status,
)
from vnd_ros.runtime import Node, init, spin_until_shutdown, start_node

from vnd_policy.parameters import PolicyNodeConfig

# Node counters (besides the controller's and the safety filter's).
ODOM_NON_FINITE = "odom_non_finite_dropped"
ODOM_OUT_OF_ORDER = "odom_out_of_order_dropped"
WATCHDOG_TICK = "watchdog_ticks"
BUNDLE_REJECTED = "bundle_rejections"
# A latent problem this long is reported: shorter ones are the encoder and the policy
# activating a new bundle a few ticks apart.
LATENT_WARN_NS = 500_000_000
MIN_TIMER_WAIT_NS = 100_000  # shortest watchdog timer period (a due time already passed)
WARNED_LATENT = frozenset({LATENT_MISSING, LATENT_STALE, LATENT_MISMATCH, LATENT_SIZE})


class PolicyNode(Node):
    """odom + latent + reference -> policy -> safety -> vnd/command and vnd/replay."""

    def __init__(self) -> None:
        super().__init__("policy")
        self._bundles: BundleRuntime | None = None  # set once the parameters are read
        self.cfg = freeze_parameters(self, PolicyNodeConfig)
        # The tick thread's scheduling (this one: the executor's), read each tick only when the
        # host diagnostics are asked for (vnd fly --host-diagnostics), as the others are.
        self.sched = ThreadSchedStat() if self.cfg.host_diagnostics else None
        self.last_sched: tuple[int, int] | None = None  # its reading at the previous tick
        self.get_logger().info(request_realtime(self.cfg.realtime_priority))
        vehicle = load_vehicle(self.cfg.vehicle)
        reference = load_scenario(self.cfg.scenario).reference if self.cfg.scenario else None
        self.controller = PolicyController.create(
            vehicle, self.cfg.safety, reference or self.cfg.reference, self.cfg.latent_max_age_s
        )
        behaviour = BehaviourCheckConfig.for_flight(
            vehicle, self.cfg.safety, enabled=not self.cfg.unsafe_skip_behaviour_check
        )
        if not behaviour.enabled:
            self.get_logger().error(
                "UNSAFE: unsafe_skip_behaviour_check is set: bundles become active WITHOUT the "
                "behavioural check (closed-loop envelope rollouts); a test-only parameter"
            )
        self._bundles = BundleRuntime(
            self.get_fully_qualified_name(),
            policy_validator(vehicle, self.cfg.smoke_budget_us, behaviour),
        )
        path = self.cfg.bundle or str(shipped_bundle_path())
        self.get_logger().info(f"start-up bundle {path}")
        self.bundles.load_startup(path, self.cfg.startup_timeout_s)
        self.counters = ReasonCounter()
        self.period_ns = round(self.cfg.safety.period_s * NS_PER_S)
        self.ticks = TickMonitor(self.cfg.safety.period_s)
        self.rate = RateEstimator()
        self.latency = LatencyWindow()
        self.tick_count = 0
        self.odom: tuple[np.ndarray, int] | None = None  # latest (state (13,), stamp ns)
        self.odom_msg = None  # the message of self.odom (rehearsal re-reads it)
        self.latent: LatentSample | None = None
        self.last_tick_mono_ns: int | None = None
        self.ticked_stamp_ns: int | None = None  # odometry stamp the last tick used
        self.watchdog_due_ns: int | None = None  # monotonic time the watchdog ticks at
        self.watchdog_timer: Any = None  # the deadline timer of the node's backend (set by _wire)
        self.status_period_ns = round(self.cfg.status_period_s * NS_PER_S)
        self.last_status_ns: int | None = None  # clock time of the last vnd/node_status
        self.mode_reason = ""  # why the controller is in its mode (the last change's reason)
        self.latent_problem_since_ns: int | None = None  # flying on z = 0 since (clock ns)
        self._wire()
        self.get_logger().info(f"policy node ready: {self.bundles.describe()}")

    def _wire(self) -> None:
        msg = get_message
        self.CtbrCommand = msg("vnd_msgs/msg/CtbrCommand")
        self.Transition = msg("vnd_msgs/msg/Transition")
        self.CheckpointStatus = msg("vnd_msgs/msg/CheckpointStatus")
        self.NodeStatus = msg("vnd_msgs/msg/NodeStatus")
        self.command_pub = self.create_publisher(
            self.CtbrCommand, "vnd/command", qos_profile_sensor_data
        )
        self.replay_pub = self.create_publisher(self.Transition, "vnd/replay", qos_profile_replay)
        self.Vector3Stamped = msg("geometry_msgs/msg/Vector3Stamped")
        self.force_pub = self.create_publisher(
            self.Vector3Stamped, "vnd/force_input", qos_profile_sensor_data
        )
        arming: dict[int, Callable[[str], CheckpointReply]] = {
            CheckpointAction.ARM: self.arm_reply,
            CheckpointAction.DISARM: self.disarm_reply,
        }
        self.checkpoint = CheckpointEndpoint.for_node(
            self, self.bundles, self.CheckpointStatus, qos_profile_checkpoint_status, arming
        )
        self.status_pub = self.create_publisher(
            self.NodeStatus, "vnd/node_status", qos_profile_status
        )
        subscriptions = (
            ("nav_msgs/msg/Odometry", "odom", self.on_odom, qos_profile_sensor_data),
            ("vnd_msgs/msg/Latent", "vnd/latent", self.on_latent, qos_profile_sensor_data),
            ("vnd_msgs/msg/Reference", "vnd/reference", self.on_reference, qos_profile_default),
            ("vnd_msgs/msg/ModelBundle", "vnd/model", self.checkpoint.on_model, qos_profile_model),
            (
                "vnd_msgs/msg/CheckpointCommand",
                "vnd/checkpoint/command",
                self.checkpoint.on_command,
                qos_profile_default,
            ),
        )
        for type_name, topic, callback, qos in subscriptions:
            self.create_subscription(msg(type_name), topic, callback, qos)
        self.deadline_s = self.cfg.safety.period_s + self.cfg.tick_margin_s
        self.watchdog_timer = self.create_timer(self.deadline_s, self.on_watchdog)
        self.watchdog_wait_ns = round(self.deadline_s * NS_PER_S)  # its period
        self.rehearsal_timer = None
        if not 0.0 <= self.cfg.rehearsal_lead_s < self.cfg.safety.period_s:
            raise ValueError(
                f"rehearsal_lead_s must be in [0, {self.cfg.safety.period_s}) s, "
                f"got {self.cfg.rehearsal_lead_s}"
            )
        if self.cfg.rehearsal_lead_s > 0.0:
            rehearse_after_s = self.cfg.safety.period_s - self.cfg.rehearsal_lead_s
            self.rehearsal_timer = self.create_timer(rehearse_after_s, self.on_rehearse)
        self.create_timer(self.cfg.status_period_s / 2, self.on_status_timer)

    # ------------------------------------------------------------------ inputs
    def on_odom(self, msg: Any) -> None:
        """Keep the newest finite odometry; tick when it is stamped a period past the last
        tick's odometry."""
        stamp = stamp_ns(msg.header.stamp)
        state = odometry_state(msg)
        if not np.isfinite(state).all():
            self.counters.count(ODOM_NON_FINITE)
            self.get_logger().warning("dropped non-finite odometry", throttle_duration_sec=1.0)
            return
        if self.odom is not None and stamp <= self.odom[1]:
            self.counters.count(ODOM_OUT_OF_ORDER)
            return
        self.odom = (state, stamp)
        self.odom_msg = msg
        last = self.ticked_stamp_ns
        if last is None or stamp - last >= self.cfg.min_tick_interval_s * NS_PER_S:
            self.tick(fresh=True)

    def on_latent(self, msg: Any) -> None:
        """Keep the newest latent (version-checked by the controller at the tick)."""
        self.latent = LatentSample(
            received_ns=self.get_clock().now().nanoseconds,
            encoder_version=int(msg.encoder_version),
            valid=bool(msg.valid),
            z=np.asarray(msg.z, dtype=np.float32),
        )

    def on_reference(self, msg: Any) -> None:
        """Follow an external reference sample from now on (overrides the parameter one)."""
        self.controller.set_external_reference(
            ExternalReference(
                stamp_ns=stamp_ns(msg.header.stamp),
                position_m=np.asarray(msg.position_m, dtype=float),
                velocity_mps=np.asarray(msg.velocity_mps, dtype=float),
                acceleration_mps2=np.asarray(msg.acceleration_mps2, dtype=float),
            )
        )

    def arm_reply(self, request_id: str) -> CheckpointReply:
        """Arm now (``vnd arm``): callbacks never run during a tick (single-threaded
        executor), so the next tick is the first in the new mode."""
        outcome = self.controller.arm(self.get_clock().now().nanoseconds, self.odom)
        return self.bundles.reply(request_id, outcome.accepted, outcome.message)

    def disarm_reply(self, request_id: str) -> CheckpointReply:
        """Disarm now (``vnd disarm``), between two ticks as arming."""
        outcome = self.controller.disarm(self.get_clock().now().nanoseconds)
        return self.bundles.reply(request_id, outcome.accepted, outcome.message)

    # ------------------------------------------------------------------ tick
    def on_watchdog(self) -> None:
        """Apply finished bundle loads; tick when odometry is overdue (the timer fires at the
        deadline; the due-time check guards against a call racing an odometry tick)."""
        self.apply_bundle_loads()
        if self.watchdog_due_ns is None or time.monotonic_ns() < self.watchdog_due_ns:
            return
        self.counters.count(WATCHDOG_TICK)
        self.tick(fresh=False)

    def apply_bundle_loads(self) -> None:
        """Swap in the bundles whose load and checks finished; reply to their requests."""
        self.checkpoint.poll()

    def on_rehearse(self) -> None:
        """Cache warming (``vnd_flight.rehearsal``): run the next tick's path on the
        newest odometry with every effect undone and nothing published, a lead time before
        the next sample is due (the timer restarts at every odometry tick)."""
        if self.odom is None:
            return
        odometry_state(self.odom_msg)  # the message decode of on_odom (result not needed)
        state, odom_stamp_ns = self.odom
        now_ns = self.get_clock().now().nanoseconds
        record = self.controller.rehearse(
            now_ns, state, odom_stamp_ns, self.bundles.active, self.latent
        )
        if record is None:
            return
        messages = [self.command(record, odom_stamp_ns), self.transition(record, odom_stamp_ns)]
        if record.force_n is not None:
            messages.append(self.force_input(record.force_n, odom_stamp_ns))
        for msg in messages:
            serialize = getattr(msg, "serialize", None)  # the dds backend's codec; rclpy: in C
            if serialize is not None:
                serialize()

    def tick(self, fresh: bool) -> None:
        """One control tick on the newest odometry; ``fresh`` when a new sample triggered it."""
        self.last_tick_mono_ns = now_mono_ns = time.monotonic_ns()
        self._schedule_watchdog(now_mono_ns, fresh)
        if fresh and self.rehearsal_timer is not None:
            self.rehearsal_timer.reset()
        assert self.odom is not None  # ticks start with the first odometry
        state, odom_stamp_ns = self.odom
        self.ticked_stamp_ns = odom_stamp_ns
        now_ns = self.get_clock().now().nanoseconds
        record = self.controller.tick(
            now_ns, state, odom_stamp_ns, self.bundles.active, self.latent
        )
        self.command_pub.publish(self.command(record, odom_stamp_ns))
        published_ns = self.get_clock().now().nanoseconds
        self._note_latent(now_ns)
        for change in self.controller.safety.pop_mode_changes():
            self.log_mode_change(change)
        if fresh:
            self.latency.add_ns(published_ns - odom_stamp_ns)
        self.tick_count += 1
        self.replay_pub.publish(self.transition(record, odom_stamp_ns))
        if record.force_n is not None:
            self.force_pub.publish(self.force_input(record.force_n, odom_stamp_ns))
        self.controller.after_publish()
        self.apply_bundle_loads()
        self._check_tick_interval()
        self.rate.add(published_ns)
        # Status goes out right after a command, when the next odometry is a period away: a
        # timer firing just before an odometry sample would delay that tick's command by the
        # status's cost (a 1-Hz pattern of > 2 ms ticks).
        if self._status_due(published_ns):
            self.publish_status()

    def _check_tick_interval(self) -> None:
        """Count the tick; a late one is logged, with where its interval went when the host
        diagnostics read the tick thread's schedstat."""
        sched = self.sched.read() if self.sched is not None else None
        before, self.last_sched = self.last_sched, sched
        if not self.ticks.tick(self.last_tick_mono_ns):
            return
        if sched is None or before is None:
            hint = " (host_diagnostics: true splits it)" if self.sched is None else ""
            self.get_logger().warning(
                f"late tick {self.ticks.last_interval_ns / 1e6:.1f} ms after the previous "
                f"one{hint}",
                throttle_duration_sec=1.0,
            )
        else:
            split = late_tick_breakdown(self.ticks.last_interval_ns, before, sched)
            self.get_logger().warning(
                f"late tick {split['interval_ms']:.1f} ms after the previous one: this thread "
                f"on a CPU {split['ran_ms']:.1f} ms, waiting for one "
                f"{split['waited_for_cpu_ms']:.1f} ms, off-CPU {split['off_cpu_ms']:.1f} ms "
                "(host stalls the guest does not see as steal count as on a CPU; report.json "
                "host_stalls has what the host took)",
                throttle_duration_sec=1.0,
            )

    def _schedule_watchdog(self, now_ns: int, fresh: bool) -> None:
        """Next watchdog tick: one period + margin after an odometry tick; on the 50 Hz grid
        (previous due time + one period) while the watchdog itself is ticking. The deadline
        timer is set to fire then (``now_ns``: this tick's monotonic time)."""
        if fresh or self.watchdog_due_ns is None:
            margin_ns = round(self.cfg.tick_margin_s * NS_PER_S)
            due_ns = now_ns + self.period_ns + margin_ns
        else:
            due_ns = max(self.watchdog_due_ns + self.period_ns, now_ns + 1)
        self.watchdog_due_ns = due_ns
        wait_ns = max(due_ns - now_ns, MIN_TIMER_WAIT_NS)
        if self.watchdog_wait_ns != wait_ns:  # a period change is a middleware call: only then
            self.watchdog_timer.timer_period_ns = self.watchdog_wait_ns = wait_ns
        self.watchdog_timer.reset()

    def command(self, record: TickRecord, odom_stamp_ns: int) -> Any:
        """The vnd/command message of one tick."""
        command = self.CtbrCommand(
            thrust_n=float(record.action[0]),
            body_rate_radps=record.action[1:].tolist(),
            mode=int(record.mode),
            policy_version=record.policy_version,
        )
        set_stamp(command.header.stamp, odom_stamp_ns)
        command.header.frame_id = self.cfg.body_frame
        return command

    def transition(self, record: TickRecord, odom_stamp_ns: int) -> Any:
        """The vnd/replay record of one tick."""
        msg = self.Transition(
            tick=self.tick_count,
            state=record.state.tolist(),
            action=record.action.tolist(),
            reference=record.reference.tolist(),
            z=record.z.tolist(),
            z_valid=record.z_valid,
            policy_version=record.policy_version,
            encoder_version=record.encoder_version,
            mode=int(record.mode),
        )
        set_stamp(msg.header.stamp, odom_stamp_ns)
        msg.header.frame_id = self.cfg.world_frame
        return msg

    def force_input(self, force_n: np.ndarray, odom_stamp_ns: int) -> Any:
        """The vnd/force_input message of one tick: the observer's force ``force_n`` (3,) in
        newtons, world frame (the policy read its horizontal part, the thrust feed-forward
        answered the vertical one)."""
        msg = self.Vector3Stamped()
        msg.vector.x, msg.vector.y, msg.vector.z = (float(f) for f in force_n)
        set_stamp(msg.header.stamp, odom_stamp_ns)
        msg.header.frame_id = self.cfg.world_frame
        return msg

    # ------------------------------------------------------------------ reports
    def log_mode_change(self, change: ModeChange) -> None:
        """Log one mode change with its reason (a warning unless it hands control back)."""
        self.mode_reason = change.reason
        text = f"mode {change.previous.name.lower()} -> {change.mode.name.lower()}: {change.reason}"
        if change.mode in (Mode.POLICY, Mode.IDLE):
            self.get_logger().info(text)
        else:
            self.get_logger().warning(text)

    def _note_latent(self, now_ns: int) -> None:
        """Track how long the policy has flown on z = 0 for lack of a usable latent."""
        problem = self.controller.latent_problem
        if problem is None:
            self.latent_problem_since_ns = None
        elif self.latent_problem_since_ns is None:
            self.latent_problem_since_ns = now_ns

    def warnings(self, now_ns: int) -> list[str]:
        """Conditions the operator must act on now, one line each (vnd/node_status)."""
        out = []
        since = self.latent_problem_since_ns
        problem = self.controller.latent_problem
        # "latent_invalid" is the encoder running without a full context or a fitted model (the
        # shipped base bundle has none): expected, counted, not an operator warning.
        if problem in WARNED_LATENT and since is not None and now_ns - since >= LATENT_WARN_NS:
            age_s = (now_ns - since) / NS_PER_S
            out.append(
                f"{problem.replace('_', ' ')} for {age_s:.1f} s: flying on z = 0 "
                "(is the encoder running and on the same bundle?)"
            )
        suspended = self.controller.safety.suspended
        if suspended is not None:
            out.append(
                f"policy suspended after {suspended.reason} ({suspended.detail}): fallback "
                "until another bundle is activated or the vehicle is re-armed"
            )
        mode = self.controller.mode
        if mode in (Mode.FALLBACK_HOLD, Mode.FALLBACK_LAND):
            out.append(f"{mode.name.lower()}: {self.mode_reason}")
        elif mode == Mode.DISARMED and self.mode_reason.startswith(EVENT_CRASH):
            out.append(f"disarmed: {self.mode_reason}")
        return out

    def on_status_timer(self) -> None:
        """vnd/node_status while no tick publishes it (before the first odometry, stopped)."""
        last_tick = self.last_tick_mono_ns
        ticking = last_tick is not None and time.monotonic_ns() - last_tick < 2 * self.period_ns
        if not ticking and self._status_due(self.get_clock().now().nanoseconds):
            self.publish_status()

    def _status_due(self, now_ns: int) -> bool:
        last = self.last_status_ns
        return last is None or now_ns - last >= self.status_period_ns

    def publish_status(self) -> None:
        """vnd/node_status: mode, versions, tick rate, latency, missed ticks, counters."""
        now_ns = self.get_clock().now().nanoseconds
        counters = {**self.controller.all_counters(), **self.counters.totals}
        counters[BUNDLE_REJECTED] = self.bundles.rejections
        status = self.NodeStatus(
            node=self.get_fully_qualified_name(),
            mode=int(self.controller.mode),
            active_version=self.bundles.active_version,
            previous_version=self.bundles.previous_version,
            pinned=self.bundles.pinned,
            rate_hz=self.rate.rate_hz(now_ns),
            latency_p50_ms=_finite(self.latency.p50_ms),
            latency_p99_ms=_finite(self.latency.p99_ms),
            ticks=self.ticks.ticks,
            missed_ticks=self.ticks.missed_ticks,
            counters_json=json.dumps(counters, sort_keys=True),
            warnings=self.warnings(now_ns),
        )
        set_stamp(status.header.stamp, now_ns)
        self.status_pub.publish(status)
        self.last_status_ns = now_ns

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
        if self.sched is not None:
            self.sched.close()
        super().destroy_node()


def _finite(value: float) -> float:
    """NaN (an empty latency window) reported as 0."""
    return value if value == value else 0.0


def main(args: list[str] | None = None) -> None:
    """Run the policy node until Ctrl-C or SIGTERM."""
    torch.set_num_threads(1)  # two cores shared with the encoder and the learner
    # The bundle loader thread must not hold the GIL for the default 5 ms while a tick waits.
    sys.setswitchinterval(0.0005)
    init(args=args)
    errors = (BundleError, ConfigError, ParameterError, ValueError)
    node = start_node(PolicyNode, errors, "policy")
    gc.collect()
    gc.freeze()  # start-up objects never need scanning again: shorter collector pauses
    spin_until_shutdown(node)


if __name__ == "__main__":
    main()
