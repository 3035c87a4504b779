"""``vnd fly --middleware``: which backend each node process of the shipped sim launch file gets,
and the one-line refusal when rclpy is asked for and does not import.

The flights themselves (minutes each) are benchmarks/control_latency.py's; here the launch file
is resolved for real and the refusal comes from a real ``vnd fly`` process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from vnd_ros.launch.resolve import resolve_launch
from vnd_tools.commands.fly import LAUNCH_FILE, node_backends, with_backends

LAUNCH_ARGS = {"vehicle": "vnd_mw", "output": "log", "run_dir": "/tmp/vnd_mw_run"}


@pytest.mark.parametrize(
    ("middleware", "sim", "control"),
    [("dds", "dds", "dds"), ("rclpy", "rclpy", "rclpy"), ("mixed", "dds", "rclpy")],
)
def test_each_node_process_gets_the_chosen_backend(middleware, sim, control):
    processes = with_backends(resolve_launch(LAUNCH_FILE, LAUNCH_ARGS).processes, middleware)
    backends = {spec.node_name: spec.env["VND_MIDDLEWARE"] for spec in processes}
    assert backends == {
        "/vnd_mw/sim": sim,
        "/vnd_mw/pose_filter": control,
        "/vnd_mw/encoder": control,
        "/vnd_mw/policy": control,
        "/vnd_mw/learner": control,
    }
    assert node_backends(middleware) == (sim, control)


def test_unknown_middleware_is_refused_by_name():
    with pytest.raises(ValueError, match=r"'cyclone'.*dds, rclpy, mixed"):
        node_backends("cyclone")


def test_rclpy_asked_for_and_absent_stops_with_one_line_naming_make_ros(tmp_path: Path):
    # An rclpy that does not import (as without `make ros`): a package of that name whose import
    # fails the way a missing shared library makes the real one fail, first on the path.
    broken = tmp_path / "site" / "rclpy"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('librcl.so: cannot open shared file')\n")
    env = dict(os.environ, VND_MIDDLEWARE="dds")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(broken.parent), env.get("PYTHONPATH")]))
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "vnd_tools.cli", "fly", "--middleware", "rclpy", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "vnd fly: error: --middleware needs rclpy" in lines[0]
    assert "librcl.so" in lines[0] and "`make ros`" in lines[0]
    assert not out.exists(), "nothing may be launched or recorded"
