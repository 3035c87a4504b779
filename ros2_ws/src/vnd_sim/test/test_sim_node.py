"""The sim node as a real process (on each backend, driven by the test's dds-backend peer): it
waits on its stand, starts at the first command, publishes best-effort mocap at the pose rate
with stamps on simulated time, holds height under hover thrust and climbs with more, plays the
scenario's wind, and reports 'done'."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from vnd_ros import dds_node
from vnd_ros.messages import get_message
from vnd_ros.qos import qos_profile_default, qos_profile_sensor_data, qos_profile_status

pytestmark = pytest.mark.slow

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
SIM_CONFIG = PACKAGE_ROOT.parents[2] / "config" / "sim.yaml"
START_TIMEOUT_S = 60.0  # child imports torch; several suites share two cores
RTF = 1.25  # simulated seconds per wall second (the sim needs spare CPU to keep up)
COMMAND_PERIOD_S = 0.02  # 50 Hz, like the policy node
HOVER_THRUST_N = 0.752 * 9.81  # agile: mass_kg * g
CTBR = get_message("vnd_msgs/msg/CtbrCommand")
SCENARIO_YAML = """\
name: sim_node_test
duration_s: 2.5
reference: {kind: hover, center_m: [0.0, 0.0, 1.2]}
phases:
  - {name: calm, start_s: 0.0}
  - {name: wind_a, start_s: 1.8}
events:
  - {at_s: 1.8, type: wind, kind: constant, velocity_mps: [4.0, 0.0, 0.0]}
"""


class Harness:
    """A private dds context with one node that commands the sim and records its topics."""

    def __init__(self, namespace: str) -> None:
        self.ctx = dds_node.Context()
        self.ctx.init([], None)
        self.node = dds_node.Node("sim_test", context=self.ctx, namespace=namespace)
        self.executor = dds_node.SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.command_pub = self.node.create_publisher(CTBR, "vnd/command", qos_profile_sensor_data)
        self.received: dict[str, list[tuple[int, object]]] = {}  # topic -> (arrival ns, msg)

    def record(self, msgtype: str, topic: str, qos, key: str | None = None):
        log = self.received.setdefault(key or topic, [])

        def on_message(msg) -> None:
            log.append((time.time_ns(), msg))

        return self.node.create_subscription(get_message(msgtype), topic, on_message, qos)

    def spin_for(self, duration_s: float) -> None:
        end = time.monotonic() + duration_s
        while (remaining := end - time.monotonic()) > 0:
            self.executor.spin_once(timeout_sec=min(remaining, 0.002))

    def spin_until(self, done, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, f"nothing within {timeout_s} s"
            self.spin_for(0.05)

    def wait_matched(self, proc: subprocess.Popen, subscriptions: list) -> None:
        """Until the sim reads our commands and every one of ``subscriptions`` has a writer."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"sim exited early:\n{output_of(proc)}")
            if self.command_pub.get_subscription_count() and all(
                s.get_publisher_count() for s in subscriptions
            ):
                return
            self.spin_for(0.05)
        raise AssertionError(f"sim did not match within {START_TIMEOUT_S} s")

    def stream(self, duration_s: float, thrust_n: float) -> None:
        """Commands at 50 Hz (wall) for ``duration_s``."""
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            msg = CTBR(thrust_n=thrust_n, body_rate_radps=[0.0, 0.0, 0.0], mode=CTBR.MODE_POLICY)
            self.command_pub.publish(msg)
            self.spin_for(COMMAND_PERIOD_S)

    def messages(self, key: str) -> list:
        return [msg for _, msg in self.received.get(key, [])]

    def close(self) -> None:
        self.ctx.shutdown()


def start_sim(namespace: str, scenario: Path) -> subprocess.Popen:
    env = dict(
        os.environ,
        VND_MIDDLEWARE=os.environ.get("VND_NODE_MIDDLEWARE", "dds"),
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    params = [f"scenario:={scenario}", f"real_time_factor:={RTF}", "seed:=3"]
    return subprocess.Popen(
        [sys.executable, "-m", "vnd_sim.sim_node", "--ros-args", "-r", f"__ns:={namespace}"]
        + ["--params-file", str(SIM_CONFIG)]  # the shipped config must be accepted
        + [arg for p in params for arg in ("-p", p)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def output_of(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def stamp_ns(msg) -> int:
    return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec


@pytest.fixture
def sim_run(tmp_path, middleware):
    """Start the sim, wait on the stand, hover, climb, run past the end; return the harness."""
    scenario = tmp_path / "sim_node_test.yaml"
    scenario.write_text(SCENARIO_YAML)
    namespace = f"/sim_test_{uuid.uuid4().hex[:8]}"
    proc = start_sim(namespace, scenario)
    harness = Harness(namespace)
    try:
        subscriptions = [
            harness.record("geometry_msgs/msg/PoseStamped", "mocap/pose", qos_profile_sensor_data),
            harness.record("nav_msgs/msg/Odometry", "sim/truth", qos_profile_default),
            harness.record(
                "geometry_msgs/msg/Vector3Stamped", "sim/disturbance", qos_profile_default
            ),
            harness.record("std_msgs/msg/String", "sim/condition", qos_profile_status),
            harness.record("vnd_msgs/msg/NodeStatus", "vnd/node_status", qos_profile_status),
        ]
        # A reliable reader must not match the best-effort mocap writer (request/offer rule).
        harness.reliable_pose = harness.record(
            "geometry_msgs/msg/PoseStamped", "mocap/pose", qos_profile_default, "reliable_pose"
        )
        harness.wait_matched(proc, subscriptions)
        # The latched condition reaches a late reader once the writer answers its first
        # acknowledgement; a Fast DDS writer (rclpy sim) may take its heartbeat period for that.
        harness.spin_until(lambda: bool(harness.received["sim/condition"]), START_TIMEOUT_S)
        harness.spin_for(0.5)  # on the stand
        harness.marks = {"start_ns": time.time_ns()}
        harness.stream(1.2, HOVER_THRUST_N)  # 1.5 s of simulated hover
        harness.stream(1.2, 1.2 * HOVER_THRUST_N)  # 1.5 s of climbing, past the 2.5 s end
        harness.spin_for(1.2)  # one more status report
        harness.marks["end_ns"] = time.time_ns()
        yield harness, proc
    finally:
        harness.close()
        out = output_of(proc)
        print(out)


def test_sim_node_flies_the_scenario(sim_run):
    harness, proc = sim_run
    last = harness.messages("vnd/node_status")[-1]
    counters = json.loads(last.counters_json)
    print("last status:", last.rate_hz, last.latency_p50_ms, last.latency_p99_ms, counters)
    assert proc.poll() is None, "the sim must keep running after the scenario's end"
    assert harness.reliable_pose.get_publisher_count() == 0
    assert not harness.received.get("reliable_pose")

    poses = harness.received["mocap/pose"]
    start_ns = harness.marks["start_ns"]
    stand = [msg for arrival, msg in poses if arrival < start_ns]
    assert len(stand) >= 20, "the resting vehicle is seen by mocap before the start"
    assert all(abs(m.pose.position.z - 1.2) < 0.01 for m in stand)
    assert all(m.header.frame_id == "world" for _, m in poses)

    # Flying: stamps step exactly one pose period of simulated time (10 ms / RTF) apart,
    # except where best-effort samples were dropped, and never run ahead of the clock.
    flying = [(arrival, msg) for arrival, msg in poses if arrival > start_ns + 100_000_000]
    stamps = np.array([stamp_ns(m) for _, m in flying])
    steps = np.diff(stamps)
    assert (steps > 0).all()
    assert np.mean(steps == round(10_000_000 / RTF)) > 0.95
    assert (stamps <= np.array([a for a, _ in flying]) + 1_000_000).all()
    # The pace as the sim's plant timer measures it (its status): the test's own arrival times
    # also hold the delays of this receiving process, which a host stall stretches.
    assert 0.8 * 100 * RTF < last.rate_hz < 1.2 * 100 * RTF, f"plant timer {last.rate_hz:.1f} Hz"

    # Ground truth: height held under hover thrust, climbing with 1.2x hover.
    truth = [m for _, m in harness.received["sim/truth"]]
    by_stamp = {stamp_ns(m): m for m in truth}
    first_flying = min(s for s in by_stamp if s > start_ns)
    heights = {
        round((s - first_flying) * 1e-9 * RTF, 2): m.pose.pose.position.z
        for s, m in by_stamp.items()
        if s >= first_flying
    }
    hover_heights = [z for t, z in heights.items() if t <= 1.4]
    assert len(hover_heights) > 100
    assert max(abs(z - 1.2) for z in hover_heights) < 0.03, "height not held under hover thrust"
    assert max(heights.values()) > 1.5, "1.2x hover thrust must climb"
    assert truth[-1].child_frame_id == "base_link"

    # Wind from 1.8 s of simulated time: the disturbance appears along +x.
    forces = [m.vector.x for m in harness.messages("sim/disturbance")]
    assert forces[0] == 0.0 and max(forces) > 0.3

    conditions = [m.data for m in harness.messages("sim/condition")]
    changes = [c for i, c in enumerate(conditions) if i == 0 or c != conditions[i - 1]]
    assert changes == ["waiting", "calm", "wind_a", "done"], changes

    assert last.node.endswith("/sim")
    assert counters["started"] == 1 and counters["done"] == 1 and counters["crashed"] == 0
    assert counters["commands"] > 50 and counters["refused_mode"] == 0
    assert counters["scenario_time_ms"] > 2500
    assert counters["slipped_ms"] < 100, "the sim could not keep up"
    # The plant timer is a deadline at each sample's time: at most about one wake-up per pose
    # period (not a poll at the physics rate), on time at the median. (Throughput is the pose
    # rate above: a starved process integrates several samples in one late wake-up.)
    assert last.rate_hz < 1.5 * 100 * RTF, f"timer {last.rate_hz:.1f} Hz: polling"
    assert last.latency_p50_ms < 1.0, f"plant timer woke {last.latency_p50_ms:.2f} ms late"
    assert last.ticks > 100


def test_sim_node_exits_with_a_clear_error_for_an_unknown_scenario(capsys):
    from vnd_sim.sim_node import main

    with pytest.raises(SystemExit) as exit_info:
        main(["sim_node", "--ros-args", "-p", "scenario:=no_such_scenario"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown scenario 'no_such_scenario'" in err and "recurring_wind" in err
