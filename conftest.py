"""Workspace-wide pytest setup: every DDS participant a test starts stays on loopback, and the
node processes of a test run on the backend its ``middleware`` fixture selects."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

_ROOT = Path(__file__).resolve().parent
os.environ.setdefault("CYCLONEDDS_URI", f"file://{_ROOT / 'config' / 'cyclonedds_loopback.xml'}")
os.environ.setdefault("VND_MIDDLEWARE", "dds")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from vnd_ros.ros_env import node_environment  # noqa: E402 - after the loopback defaults

# The loopback Fast DDS profile and, with rclpy from the PyPI wheels (make ros), the variables
# rclpy needs: child processes inherit them.
os.environ.update(node_environment(os.environ))

# Property tests check what comes out, not how fast: timing targets are the benchmarks' job,
# and on this virtual machine the host takes a CPU away for hundreds of milliseconds now and
# then, which Hypothesis's per-example deadline (200 ms) reports as a flaky failure.
settings.register_profile("workspace", deadline=None)
settings.load_profile("workspace")

MIDDLEWARES = ("dds", "rclpy")
# Read by the node-process helpers of the tests (flight_harness.child_env and others).
NODE_MIDDLEWARE_VARIABLE = "VND_NODE_MIDDLEWARE"


def rclpy_ready() -> str | None:
    """None when rclpy and the stack's rclpy messages import here, else why not."""
    if importlib.util.find_spec("rclpy") is None:
        return "rclpy is not installed: run `make ros`"
    if importlib.util.find_spec("vnd_msgs") is None:
        return "vnd_msgs is not built for rclpy: run `make ros`"
    return None


def _rclpy_messages_stale() -> str | None:
    """Why the venv's rclpy messages do not match the .msg files here (None when they do)."""
    script = _ROOT / "scripts" / "ros_wheels.py"
    spec = importlib.util.spec_from_file_location("vnd_ros_wheels", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stamp = Path(sys.prefix) / module.STAMP_NAME
    if not stamp.exists() or stamp.read_text().strip() != module.inputs_digest():
        return (
            f"vnd_msgs for rclpy were built from other .msg files or pins ({stamp}): run `make ros`"
        )
    return None


@pytest.fixture(params=MIDDLEWARES)
def middleware(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Backend of the node processes this test starts (VND_MIDDLEWARE of the children); the
    test process's own peers stay on dds, so an ``rclpy`` run is a mixed graph as well."""
    if request.param == "rclpy":
        if reason := rclpy_ready():
            pytest.skip(reason)
        if reason := _rclpy_messages_stale():
            pytest.fail(reason)  # rclpy nodes would speak other types than the dds ones
    monkeypatch.setenv(NODE_MIDDLEWARE_VARIABLE, request.param)
    return request.param
