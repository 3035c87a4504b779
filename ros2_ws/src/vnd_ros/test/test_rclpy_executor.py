"""The executor node processes spin on under rclpy (vnd_ros.runtime.spin_until_shutdown): the
EventsExecutor by default, the SingleThreadedExecutor on request, and on either a node that
SIGINT or SIGTERM stops promptly with exit code 0 (the EventsExecutor's own spin() would never
return on a signal; the runtime's spin_once loop must).

Each case is a real process on real rclpy with the wheels' environment (the root conftest).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("rclpy") is None, reason="rclpy is not installed: run `make ros`"
)

# A node with a 2 ms timer that publishes, spun by spin_until_shutdown; prints its executor,
# then 'TICKING' once the timer runs, and 'EXIT' after spin_until_shutdown returned. A stop
# that shuts the context down under a running or queued callback makes its publish fail.
NODE_SCRIPT = """
import sys
from vnd_ros import runtime
from vnd_ros.messages import get_message

runtime.init(args=sys.argv)
node = runtime.Node("executor_probe")
print("EXECUTOR", type(runtime.node_executor()).__name__, flush=True)
ticks = []
String = get_message("std_msgs/msg/String")
publisher = node.create_publisher(String, "executor_probe/ticks", 10)

def on_timer():
    publisher.publish(String(data="tick"))
    ticks.append(1)
    if len(ticks) == 50:
        print("TICKING", flush=True)

node.create_timer(0.002, on_timer)
runtime.spin_until_shutdown(node)
print("EXIT", len(ticks), flush=True)
"""


def _start(executor: str | None) -> subprocess.Popen:
    env = dict(os.environ, VND_MIDDLEWARE="rclpy", PYTHONUNBUFFERED="1")
    env.pop("VND_RCLPY_EXECUTOR", None)
    if executor is not None:
        env["VND_RCLPY_EXECUTOR"] = executor
    return subprocess.Popen(
        [sys.executable, "-c", NODE_SCRIPT],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_line(proc: subprocess.Popen, prefix: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line.strip()
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"no '{prefix}' line; stderr:\n{proc.stderr.read()}")


@pytest.mark.parametrize(
    ("executor", "expected"),
    [(None, "EventsExecutor"), ("events", "EventsExecutor"), ("single", "SingleThreadedExecutor")],
)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_node_spins_on_the_chosen_executor_and_stops_on_a_signal(executor, expected, signum):
    proc = _start(executor)
    try:
        assert _wait_line(proc, "EXECUTOR", 60).split()[1] == expected
        _wait_line(proc, "TICKING", 30)  # the timer runs on this executor
        sent_at = time.monotonic()
        proc.send_signal(signum)
        assert proc.wait(timeout=10) == 0, proc.stderr.read()
        assert time.monotonic() - sent_at < 5
        rest, errors = proc.stdout.read(), proc.stderr.read()
        assert "EXIT" in rest, rest
        for sign in ("Traceback", "FATAL", "context is invalid", "Error occurred"):
            assert sign not in errors + rest, errors + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_unknown_executor_stops_start_up_with_one_line_naming_it():
    proc = _start("multi")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.strip().splitlines() == [
        "[FATAL] cannot start: VND_RCLPY_EXECUTOR='multi': expected one of events, single"
    ]
