"""What ``vnd fly`` watches while a flight runs: the progress line from the nodes' status
and the learner's state (:class:`FlightMonitor`) and the per-tick control latency
(:class:`LatencyProbe`), written to the run directory for the report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from vnd_core.wire import LEARNER_STATE_NAMES, MODE_NAMES
from vnd_ros import messages, runtime
from vnd_ros.client import StackClient
from vnd_ros.launch import LaunchService
from vnd_ros.qos import QoSProfile, ReliabilityPolicy, qos_profile_status
from vnd_ros.stack_records import stamp_ns

from vnd_tools import hostcpu

SETTLE_AFTER_DONE_S = 1.0  # keep recording this long after 'done' (last replies, statuses)
PROGRESS_PERIOD_S = 0.5  # progress line refresh (a TTY); non-TTY prints every 10 s
SPIN_STEP_S = 0.02


@dataclass
class FlightOutcome:
    """How the flight ended."""

    reason: str  # done | timeout | interrupted | stack failed
    exit_code: int  # 0 when done and the stack stopped cleanly
    failures: list[str] = field(default_factory=list)  # launcher failure lines
    respawns: list[str] = field(default_factory=list)  # expected restarts (respawn: true)


class FlightMonitor:
    """Live view of a flight: condition, tracking error, modes, versions, learner state, and
    the per-tick latency samples (source timestamps of command and odometry)."""

    def __init__(self, vehicle: str, measure_latency: bool, sample_host_cpu: bool = False) -> None:
        self.client = StackClient(vehicle, node_name="vnd_fly_monitor")
        self.snapshot = self.client.watch_status()
        self.condition = "no sim yet"
        self.truth: dict[int, np.ndarray] = {}  # recent truth positions by stamp
        self.error_m: float | None = None
        self.last_tick: Any = None
        node, topic = self.client.node, self.client.topic
        latest = QoSProfile(ReliabilityPolicy.BEST_EFFORT, depth=50)
        node.create_subscription(
            messages.get_message("std_msgs/msg/String"),
            topic("sim/condition"),
            self._on_condition,
            qos_profile_status,
        )
        node.create_subscription(
            messages.get_message("nav_msgs/msg/Odometry"),
            topic("sim/truth"),
            self._on_truth,
            latest,
        )
        node.create_subscription(
            messages.get_message("vnd_msgs/msg/Transition"),
            topic("vnd/replay"),
            self._on_tick,
            latest,
        )
        self.latency = (
            LatencyProbe(node, topic("vnd/command"), topic("odom"))
            if measure_latency and runtime.BACKEND == "dds"
            else None
        )
        # the host's CPU times (steal), beside the latency, when host diagnostics are asked for
        self.cpu = hostcpu.CpuSampler() if sample_host_cpu else None

    def _on_condition(self, msg: Any) -> None:
        self.condition = str(msg.data)

    def _on_truth(self, msg: Any) -> None:
        p = msg.pose.pose.position
        self.truth[stamp_ns(msg.header.stamp)] = np.array([p.x, p.y, p.z])
        if len(self.truth) > 400:  # keep about 4 s
            for key in sorted(self.truth)[:200]:
                del self.truth[key]

    def _on_tick(self, msg: Any) -> None:
        self.last_tick = msg
        truth = self.truth.get(stamp_ns(msg.header.stamp))
        if truth is not None:
            self.error_m = float(np.linalg.norm(truth - np.asarray(msg.reference[:3])))

    def watch(
        self, service: LaunchService, vital: set[str], timeout_s: float, out: TextIO
    ) -> FlightOutcome:
        """Spin until 'done', timeout, the end of a ``vital`` process (one that is not
        respawned) or Ctrl-C; prints the progress line."""
        start = time.monotonic()
        next_print = 0.0
        tty = out.isatty()
        try:
            while True:
                self.client.cli_node.spin_once(SPIN_STEP_S)
                if self.latency is not None:
                    self.latency.poll()
                if self.cpu is not None:
                    self.cpu.poll()
                now = time.monotonic()
                if now >= next_print:
                    line = self.progress_line(now - start)
                    out.write(f"\r{line:<150}" if tty else line + "\n")
                    out.flush()
                    next_print = now + (PROGRESS_PERIOD_S if tty else 10.0)
                if self.condition == "done":
                    self.client.spin_for(SETTLE_AFTER_DONE_S)
                    return FlightOutcome("done", 0)
                if now - start > timeout_s:
                    out.write(f"\nvnd fly: timeout after {timeout_s:.0f} s\n")
                    return FlightOutcome("timeout", 1)
                dead = [p.name for p in service.processes() if p.name in vital and not p.running]
                if dead:
                    out.write(f"\nvnd fly: stack process {', '.join(dead)} has exited\n")
                    return FlightOutcome("stack failed", 1)
                if not runtime.ok():
                    return FlightOutcome("interrupted", 130)
        except KeyboardInterrupt:
            out.write("\nvnd fly: interrupted\n")
            return FlightOutcome("interrupted", 130)
        finally:
            if tty:
                out.write("\n")

    def progress_line(self, wall_s: float) -> str:
        """sim time / duration, phase, error, mode, versions, learner state."""
        sim = next((h for n, h in self.snapshot.nodes.items() if n.endswith("/sim")), None)
        sim_s = sim.counters.get("scenario_time_ms", 0) / 1e3 if sim else 0.0
        tick = self.last_tick
        mode = MODE_NAMES.get(int(tick.mode), "?") if tick is not None else "-"
        versions = f"v{tick.policy_version}/enc v{tick.encoder_version}" if tick else "-"
        error = f"{self.error_m:.3f} m" if self.error_m is not None else "-"
        learner = self.snapshot.learner
        learning = (
            f"{LEARNER_STATE_NAMES.get(learner.state, '?')} ({learner.ticks_stored} ticks, "
            f"latest v{learner.latest_version})"
            if learner
            else "-"
        )
        return (
            f"[{wall_s:5.0f} s] sim {sim_s:6.1f} s  {self.condition:<8} err {error:<8} "
            f"mode {mode:<6} policy {versions}  learner {learning}"
        )

    def save_latency(self, path: Path) -> None:
        """Per-tick latency samples (when measured) as a numpy archive."""
        if self.latency is not None:
            self.latency.poll()
            self.latency.save(path)

    def close(self) -> None:
        """Leave the graph."""
        if self.latency is not None:
            self.latency.close()
        self.client.close()


class LatencyProbe:
    """Raw Cyclone readers of the command and odometry topics that keep each sample's source
    timestamp (the writer's clock at publication). dds backend only."""

    def __init__(self, node: Any, command_topic: str, odom_topic: str) -> None:
        from cyclonedds.sub import DataReader
        from vnd_ros.names import dds_topic_name
        from vnd_ros.qos import to_cyclone_qos

        self._readers = {}
        for key, topic, type_name in (
            ("command", command_topic, "vnd_msgs/msg/CtbrCommand"),
            ("odom", odom_topic, "nav_msgs/msg/Odometry"),
        ):
            msg_type = messages.get_message(type_name)
            dds_topic = node.context.topic(dds_topic_name(topic), msg_type)
            qos = to_cyclone_qos(QoSProfile(ReliabilityPolicy.BEST_EFFORT, depth=200))
            reader = DataReader(node.context.participant, dds_topic, qos)
            self._readers[key] = (reader, msg_type.deserialize)
        self.command_stamp_ns: list[int] = []  # odometry stamp each command answers
        self.command_source_ns: list[int] = []  # publication time of the command
        self.odom_source_ns: dict[int, int] = {}  # odometry stamp -> its publication time

    def poll(self) -> None:
        """Take everything received so far."""
        from cyclonedds.core import InstanceState, SampleState, ViewState
        from vnd_ros.cyclone_compat import take_cdr

        state = SampleState.Any | ViewState.Any | InstanceState.Any
        for key, (reader, deserialize) in self._readers.items():
            while True:
                samples = take_cdr(reader, state, 256)
                if isinstance(samples, int) or not samples:
                    break
                for data, info in samples:
                    if not info.valid_data:
                        continue
                    stamp = stamp_ns(deserialize(data).header.stamp)
                    if key == "command":
                        self.command_stamp_ns.append(stamp)
                        self.command_source_ns.append(int(info.source_timestamp))
                    else:
                        self.odom_source_ns.setdefault(stamp, int(info.source_timestamp))

    def save(self, path: Path) -> None:
        """``command_stamp_ns``, ``command_source_ns``, ``odom_stamp_ns``, ``odom_source_ns``."""
        odom = sorted(self.odom_source_ns.items())
        np.savez(
            path,
            command_stamp_ns=np.array(self.command_stamp_ns, dtype=np.int64),
            command_source_ns=np.array(self.command_source_ns, dtype=np.int64),
            odom_stamp_ns=np.array([k for k, _ in odom], dtype=np.int64),
            odom_source_ns=np.array([v for _, v in odom], dtype=np.int64),
        )

    def close(self) -> None:
        """Drop the readers (deleted with their participant at the latest)."""
        self._readers.clear()
