"""Latency of the dds backend between two OS processes on loopback.

    .venv/bin/python benchmarks/middleware_latency.py [--round-trips 2000] [--bundles 20]

Starts an echo process (this script with ``--role echo``) and measures, through the node API
(so executor dispatch on both sides is included):

- rtt_p50_ms / rtt_p99_ms: std_msgs/String ping -> pong round trips (reliable, keep-last 10);
- one_way_p50_ms / one_way_p99_ms: ping publish -> echo callback (CLOCK_MONOTONIC is shared
  by all processes of the machine);
- bundle_1mb_p50_ms / bundle_1mb_p99_ms: a 1 MB vnd_msgs/ModelBundle from publish() to the
  echo's callback (serialisation, transport, deserialisation, dispatch);
- discovery_ms (median): a new subscription in a running process until it receives the
  transient-local sample of an existing publisher of the other process;
- timer_jitter_p50_ms / timer_jitter_p99_ms: lateness of a 50 Hz timer's callbacks.

Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("CYCLONEDDS_URI", f"file://{REPO / 'config' / 'cyclonedds_loopback.xml'}")
os.environ.setdefault("VND_MIDDLEWARE", "dds")

from vnd_ros import qos  # noqa: E402  (after the loopback configuration is in the environment)
from vnd_ros.messages import get_message  # noqa: E402
from vnd_ros.runtime import Node, init, shutdown, spin  # noqa: E402

if TYPE_CHECKING:
    from vnd_ros.dds_node import SingleThreadedExecutor

PING, PONG = "bench/ping", "bench/pong"
BUNDLE, BUNDLE_ACK = "bench/bundle", "bench/bundle_ack"
BEACON = "bench/beacon"
BUNDLE_BYTES = 1_000_000
TIMER_PERIOD_S = 0.02  # the control loop's 50 Hz


class Echo(Node):
    """Child process: answers pings and bundle deliveries with its receive time."""

    def __init__(self) -> None:
        super().__init__("bench_echo")
        self.string = get_message("std_msgs/msg/String")
        self.pong = self.create_publisher(self.string, PONG, qos.qos_profile_default)
        self.ack = self.create_publisher(self.string, BUNDLE_ACK, qos.qos_profile_default)
        self.create_subscription(self.string, PING, self.on_ping, qos.qos_profile_default)
        bundle_cls = get_message("vnd_msgs/msg/ModelBundle")
        self.create_subscription(bundle_cls, BUNDLE, self.on_bundle, qos.qos_profile_default)
        beacon = self.create_publisher(self.string, BEACON, qos.qos_profile_status)
        beacon.publish(self.string(data="beacon"))
        print("READY", flush=True)

    def on_ping(self, msg: Any) -> None:
        """Answer a ping with its payload and this process's receive time."""
        self.pong.publish(self.string(data=f"{msg.data} {time.monotonic_ns()}"))

    def on_bundle(self, msg: Any) -> None:
        """Acknowledge a bundle with its version and this process's receive time."""
        self.ack.publish(self.string(data=f"{msg.version} {time.monotonic_ns()}"))


class Driver(Node):
    """Parent process: sends pings and bundles, waits for each answer."""

    def __init__(self) -> None:
        super().__init__("bench_driver")
        self.string = get_message("std_msgs/msg/String")
        self.bundle_cls = get_message("vnd_msgs/msg/ModelBundle")
        self.ping = self.create_publisher(self.string, PING, qos.qos_profile_default)
        self.bundle = self.create_publisher(self.bundle_cls, BUNDLE, qos.qos_profile_default)
        self.replies: list[tuple[str, int]] = []
        self.create_subscription(self.string, PONG, self._reply, qos.qos_profile_default)
        self.create_subscription(self.string, BUNDLE_ACK, self._reply, qos.qos_profile_default)

    def _reply(self, msg: Any) -> None:
        self.replies.append((msg.data, time.monotonic_ns()))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _await_reply(
    driver: Driver, executor: SingleThreadedExecutor, timeout_s: float = 5.0
) -> tuple[str, int]:
    deadline = time.monotonic() + timeout_s
    while not driver.replies:
        if time.monotonic() > deadline:
            raise TimeoutError("no reply from the echo process")
        executor.spin_once(timeout_sec=0.1)
    return driver.replies.pop(0)


def _wait_matched(driver: Driver, executor: SingleThreadedExecutor) -> None:
    deadline = time.monotonic() + 15
    while driver.ping.get_subscription_count() == 0 or driver.bundle.get_subscription_count() == 0:
        if time.monotonic() > deadline:
            raise TimeoutError("echo process never matched")
        executor.spin_once(timeout_sec=0.05)
    for _ in range(50):  # warm up both paths (discovery of the reply writers included)
        driver.ping.publish(driver.string(data=str(time.monotonic_ns())))
        _await_reply(driver, executor, 15)


def measure_round_trips(
    driver: Driver, executor: SingleThreadedExecutor, count: int
) -> tuple[list[float], list[float]]:
    """(round-trip ms, one-way ms) of ``count`` sequential pings."""
    rtts, one_way = [], []
    for _ in range(count):
        sent_ns = time.monotonic_ns()
        driver.ping.publish(driver.string(data=str(sent_ns)))
        data, got_ns = _await_reply(driver, executor)
        echoed_sent, echo_recv = (int(x) for x in data.split())
        assert echoed_sent == sent_ns, "reply to an older ping"
        rtts.append((got_ns - sent_ns) / 1e6)
        one_way.append((echo_recv - sent_ns) / 1e6)
    return rtts, one_way


def measure_bundles(driver: Driver, executor: SingleThreadedExecutor, count: int) -> list[float]:
    """Publish-to-callback ms of ``count`` 1 MB bundles."""
    payload = os.urandom(BUNDLE_BYTES)
    times = []
    for version in range(1, count + 1):
        sent_ns = time.monotonic_ns()
        driver.bundle.publish(driver.bundle_cls(version=version, payload=payload))
        data, _ = _await_reply(driver, executor)
        acked_version, recv_ns = (int(x) for x in data.split())
        assert acked_version == version
        times.append((recv_ns - sent_ns) / 1e6)
    return times


def measure_discovery(executor: SingleThreadedExecutor, repeats: int) -> list[float]:
    """ms from creating a subscription to receiving the echo's transient-local beacon."""
    string = get_message("std_msgs/msg/String")
    times = []
    for i in range(repeats):
        node = Node(f"bench_late_{i}")
        got: list[int] = []
        start_ns = time.monotonic_ns()
        node.create_subscription(
            string,
            BEACON,
            lambda _m, got=got: got.append(time.monotonic_ns()),
            qos.qos_profile_status,
        )
        executor.add_node(node)
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        executor.remove_node(node)
        node.destroy_node()
        if got:
            times.append((got[0] - start_ns) / 1e6)
    return times


def measure_timer_jitter(executor: SingleThreadedExecutor, duration_s: float) -> list[float]:
    """Lateness (ms) of each 50 Hz timer callback against its ideal monotonic deadline."""
    node = Node("bench_timer")
    start_ns = time.monotonic_ns()
    stamps: list[int] = []
    node.create_timer(TIMER_PERIOD_S, lambda: stamps.append(time.monotonic_ns()))
    executor.add_node(node)
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.1)
    executor.remove_node(node)
    node.destroy_node()
    period_ns = round(TIMER_PERIOD_S * 1e9)
    return [(t - start_ns - (k + 1) * period_ns) / 1e6 for k, t in enumerate(stamps)]


def run_echo() -> int:
    """Child process entry: spin the echo node until SIGINT/SIGTERM."""
    init(args=sys.argv)
    node = Echo()
    try:
        spin(node)
    except KeyboardInterrupt:
        pass
    finally:
        shutdown()
    return 0


def run_driver(round_trips: int, bundles: int) -> dict[str, float]:
    """Parent process: start the echo, measure, stop the echo; returns the figures."""
    from vnd_ros.dds_node import SingleThreadedExecutor

    child = subprocess.Popen(
        [sys.executable, __file__, "--role", "echo"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "READY"
        init(args=[])
        driver = Driver()
        executor = SingleThreadedExecutor()
        executor.add_node(driver)
        _wait_matched(driver, executor)
        print(f"round trips: {round_trips}", file=sys.stderr)
        rtts, one_way = measure_round_trips(driver, executor, round_trips)
        print(f"bundles: {bundles} x {BUNDLE_BYTES} bytes", file=sys.stderr)
        bundle_ms = measure_bundles(driver, executor, bundles)
        discovery = measure_discovery(executor, 5)
        jitter = measure_timer_jitter(executor, 2.0)
        shutdown()
    finally:
        child.terminate()
        child.wait(timeout=10)
    return {
        "rtt_p50_ms": round(_percentile(rtts, 0.5), 4),
        "rtt_p99_ms": round(_percentile(rtts, 0.99), 4),
        "one_way_p50_ms": round(_percentile(one_way, 0.5), 4),
        "one_way_p99_ms": round(_percentile(one_way, 0.99), 4),
        "bundle_1mb_p50_ms": round(_percentile(bundle_ms, 0.5), 3),
        "bundle_1mb_p99_ms": round(_percentile(bundle_ms, 0.99), 3),
        "discovery_ms": round(statistics.median(discovery), 2) if discovery else None,
        "timer_jitter_p50_ms": round(_percentile(jitter, 0.5), 4),
        "timer_jitter_p99_ms": round(_percentile(jitter, 0.99), 4),
        "round_trips": round_trips,
        "bundles": bundles,
    }


def main() -> int:
    """Parse options and run the parent or the child role."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=("driver", "echo"), default="driver")
    parser.add_argument("--round-trips", type=int, default=2000)
    parser.add_argument("--bundles", type=int, default=20)
    options, _ = parser.parse_known_args()
    if options.role == "echo":
        return run_echo()
    print(json.dumps(run_driver(options.round_trips, options.bundles)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
