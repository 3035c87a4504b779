"""Workspace-wide pytest setup: every DDS participant a test starts stays on loopback, and the
node processes of a test run on the backend its ``middleware`` fixture selects."""

import importlib.util
import os
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parent
os.environ.setdefault("CYCLONEDDS_URI", f"file://{_ROOT / 'config' / 'cyclonedds_loopback.xml'}")
os.environ.setdefault("VND_MIDDLEWARE", "dds")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from vnd_ros.ros_env import node_environment  # noqa: E402 - after the loopback defaults

# The loopback Fast DDS profile and, with rclpy from the PyPI wheels (make ros), the variables
# rclpy needs: child processes inherit them.
os.environ.update(node_environment(os.environ))

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


@pytest.fixture(params=MIDDLEWARES)
def middleware(request, monkeypatch) -> str:
    """Backend of the node processes this test starts (VND_MIDDLEWARE of the children); the
    test process's own peers stay on dds, so an ``rclpy`` run is a mixed graph as well."""
    if request.param == "rclpy" and (reason := rclpy_ready()):
        pytest.skip(reason)
    monkeypatch.setenv(NODE_MIDDLEWARE_VARIABLE, request.param)
    return request.param
