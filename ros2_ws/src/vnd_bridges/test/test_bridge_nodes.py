"""Bridge nodes as real processes on the dds backend: a valid command stream comes out as PX4 /
MAVROS messages with the hand-computed values, and the PX4 heartbeat ends with the commands."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from vnd_ros import dds_node
from vnd_ros.messages import get_message
from vnd_ros.qos import qos_profile_default, qos_profile_sensor_data

pytestmark = pytest.mark.slow

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 20.0  # child import + discovery on a busy 2-core machine
PERIOD_S = 0.02  # 50 Hz, like the policy node
# Stamp age accepted by the bridges under test: generous, since several test suites share two
# cores (the default one-period limit is tested with an injected clock in test_bridge_logic).
MAX_AGE_PARAM = "command.max_age_s:=0.25"
CTBR = get_message("vnd_msgs/msg/CtbrCommand")


class Harness:
    """A private dds context with one node that publishes commands and records bridge output."""

    def __init__(self, namespace: str) -> None:
        self.ctx = dds_node.Context()
        self.ctx.init([], None)
        self.node = dds_node.Node("bridge_test", context=self.ctx, namespace=namespace)
        self.executor = dds_node.SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.command_pub = self.node.create_publisher(CTBR, "vnd/command", qos_profile_sensor_data)
        self.received: dict[str, list] = {}  # topic -> messages in arrival order

    def record(self, msgtype: str, topic: str) -> None:
        log = self.received.setdefault(topic, [])
        self.node.create_subscription(
            get_message(msgtype),
            topic,
            log.append,
            qos_profile_default,
        )

    def spin_for(self, duration_s: float) -> None:
        end = time.monotonic() + duration_s
        while (remaining := end - time.monotonic()) > 0:
            self.executor.spin_once(timeout_sec=min(remaining, 0.005))

    def wait_matched(self, proc: subprocess.Popen, topics: list[str]) -> None:
        """Until the bridge's reader of our commands and its writers to us are matched."""
        deadline = time.monotonic() + START_TIMEOUT_S
        subs = [s for s in self.node.subscriptions if s.topic_name in topics]
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"bridge exited early:\n{bridge_output(proc)}")
            if self.command_pub.get_subscription_count() and all(
                s.get_publisher_count() for s in subs
            ):
                return
            self.spin_for(0.05)
        raise AssertionError(f"bridge did not match within {START_TIMEOUT_S} s")

    def send(self, mode: int, thrust_n: float = 7.5, rates=(0.5, -0.25, 1.0)) -> None:
        stamp = self.node.get_clock().now().to_msg()
        msg = CTBR(thrust_n=thrust_n, body_rate_radps=list(rates), mode=mode, policy_version=3)
        msg.header.stamp = stamp
        msg.header.frame_id = "base_link"
        self.command_pub.publish(msg)

    def stream(self, duration_s: float, mode: int, **command) -> None:
        """Commands at 50 Hz for ``duration_s`` (``command``: thrust_n, rates)."""
        for _ in range(round(duration_s / PERIOD_S)):
            self.send(mode, **command)
            self.spin_for(PERIOD_S)

    def close(self) -> None:
        self.ctx.shutdown()


def start_bridge(executable: str, namespace: str, params: list[str]) -> subprocess.Popen:
    env = dict(
        os.environ,
        VND_MIDDLEWARE=os.environ.get("VND_NODE_MIDDLEWARE", "dds"),
        PYTHONUNBUFFERED="1",
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            f"vnd_bridges.{executable}",
            "--ros-args",
            "-r",
            f"__ns:={namespace}",
        ]
        + [arg for p in params for arg in ("-p", p)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.fixture
def run_bridge():
    """Factory starting a bridge process; stops it (SIGINT, then kill) after the test."""
    procs: list[subprocess.Popen] = []

    def run(executable: str, namespace: str, params: list[str]) -> subprocess.Popen:
        proc = start_bridge(executable, namespace, params)
        procs.append(proc)
        return proc

    yield run
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(subprocess.signal.SIGINT)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def unique_namespace() -> str:
    return f"/bridge_test_{uuid.uuid4().hex[:8]}"


def bridge_output(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(subprocess.signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    return out


def test_px4_bridge_forwards_and_stops_heartbeat(run_bridge, middleware):
    namespace = unique_namespace()
    prefix = f"{namespace}/fmu/in"  # private PX4 topics: other tests may share the domain
    proc = run_bridge("px4_bridge_node", namespace, [f"fmu_prefix:={prefix}", MAX_AGE_PARAM])
    harness = Harness(namespace)
    try:
        mode_topic, rates_topic = (
            f"{prefix}/offboard_control_mode",
            f"{prefix}/vehicle_rates_setpoint",
        )
        harness.record("px4_msgs/msg/OffboardControlMode", mode_topic)
        harness.record("px4_msgs/msg/VehicleRatesSetpoint", rates_topic)
        harness.wait_matched(proc, [mode_topic, rates_topic])
        harness.stream(1.0, CTBR.MODE_POLICY)
        # Disarmed commands carry a payload of their own: none of it may reach PX4.
        harness.stream(0.5, CTBR.MODE_DISARMED, thrust_n=0.0, rates=(0.0, 0.0, 0.0))
        harness.spin_for(0.3)
        modes, rates = harness.received[mode_topic], harness.received[rates_topic]
    finally:
        harness.close()
    assert proc.poll() is None, bridge_output(proc)
    assert 45 <= len(rates) <= 50, f"{len(rates)} set points for 50 valid commands"
    assert len(modes) == len(rates), "heartbeat and set points must flow together"
    for sp, heartbeat in zip(rates, modes, strict=True):
        # FLU (0.5, -0.25, 1.0) rad/s is FRD (0.5, 0.25, -1.0); 7.5 N of 30 N (agile) is 0.25.
        assert (sp.roll, sp.pitch, sp.yaw) == (0.5, 0.25, -1.0)
        assert list(sp.thrust_body) == [0.0, 0.0, pytest.approx(-7.5 / 30.0)]
        assert heartbeat.body_rate and not (heartbeat.position or heartbeat.attitude)
        assert heartbeat.timestamp == sp.timestamp > 1e15  # microseconds since the epoch
    assert "command refused (mode)" in bridge_output(proc)


def test_mavros_bridge_forwards_attitude_targets(run_bridge, middleware):
    namespace = unique_namespace()
    topic = f"{namespace}/mavros/setpoint_raw/attitude"
    proc = run_bridge(
        "mavros_bridge_node",
        namespace,
        [
            f"output_topic:={topic}",
            "thrust.quadratic_n:=20.0",
            "thrust.linear_n:=10.0",
            MAX_AGE_PARAM,
        ],
    )
    harness = Harness(namespace)
    try:
        harness.record("mavros_msgs/msg/AttitudeTarget", topic)
        harness.wait_matched(proc, [topic])
        harness.stream(0.5, CTBR.MODE_FALLBACK_HOLD)
        harness.spin_for(0.3)
        targets = harness.received[topic]
    finally:
        harness.close()
    assert proc.poll() is None, bridge_output(proc)
    assert len(targets) >= 20
    target = targets[-1]
    assert target.type_mask == 128
    assert (target.body_rate.x, target.body_rate.y, target.body_rate.z) == (0.5, -0.25, 1.0)
    # 20 u^2 + 10 u = 7.5 N  ->  u = (-10 + sqrt(100 + 600)) / 40
    assert target.thrust == pytest.approx((-10.0 + 700.0**0.5) / 40.0, rel=1e-6)
    assert target.header.frame_id == "base_link"
