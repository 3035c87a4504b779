"""``vnd topic list|echo|hz`` against a live talker process (real DDS), plus their formatting."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from vnd_tools.commands.topic import RateMonitor, format_message, format_stats

TEST_DIR = Path(__file__).parent
TIMEOUT_S = 60.0
TALKER_RATE_HZ = 20.0  # bag_talker.py streams at 1 / FOREVER_PERIOD_S

_spec = importlib.util.spec_from_file_location("bag_talker", TEST_DIR / "bag_talker.py")
talker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(talker)


def test_format_message_is_yaml_like_ros2_topic_echo():
    text = format_message(talker.expected_pose(3))
    assert text.startswith("header:\n  stamp:\n    sec: 3\n    nanosec: 3000\n")
    assert "  frame_id: map\n" in text and "    x: 1.5\n" in text and "    w: 1.0\n" in text
    assert "__msgtype__" not in text
    bundle = format_message(talker.expected_bundle(), truncate_length=3)
    assert "payload:\n- 0\n- 1\n- 2\n- '...'\n" in bundle and "sha256: aba...\n" in bundle


def test_rate_monitor_statistics_and_window():
    monitor = RateMonitor(window=3)
    assert monitor.stats() is None
    for now_s in (0.0, 0.1, 0.3, 0.4):
        monitor.tick(now_s)
    stats = monitor.stats()
    assert stats.window == 3
    assert stats.rate_hz == pytest.approx(3 / 0.4)
    assert (stats.min_s, stats.max_s) == (pytest.approx(0.1), pytest.approx(0.2))
    assert stats.std_s == pytest.approx(0.0471404, rel=1e-5)
    monitor.tick(0.5)
    monitor.tick(0.6)  # the 0.2 s period leaves the window of 3
    assert monitor.stats().max_s == pytest.approx(0.1) and monitor.stats().window == 3
    assert "average rate: 10.000" in format_stats(monitor.stats())


def _vnd(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "vnd_tools.cli", "topic", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_list_echo_and_hz_on_a_live_topic():
    prefix = f"/vnd_topic_test_{uuid.uuid4().hex[:8]}"
    source = subprocess.Popen(
        [sys.executable, str(TEST_DIR / "bag_talker.py"), prefix, "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert source.stdout.readline().startswith("STREAMING"), source.stderr.read()
        tools = {  # run concurrently: each needs its own discovery time
            "list": _vnd("list", "-t", "--spin-time", "2"),
            "echo": _vnd("echo", f"{prefix}/chatter", "-n", "2", "--timeout", str(TIMEOUT_S)),
            "hz": _vnd("hz", f"{prefix}/chatter", "--duration", "3.5", "--timeout", str(TIMEOUT_S)),
            "missing": _vnd("echo", f"{prefix}/nothing", "--timeout", "1"),
        }
        results = {name: proc.communicate(timeout=TIMEOUT_S) for name, proc in tools.items()}
        codes = {name: proc.returncode for name, proc in tools.items()}
    finally:
        source.terminate()
        source.wait(timeout=10)
    assert codes == {"list": 0, "echo": 0, "hz": 0, "missing": 1}, results
    listed = results["list"][0].splitlines()
    assert f"{prefix}/chatter [std_msgs/msg/String]" in listed
    assert f"{prefix}/model [vnd_msgs/msg/ModelBundle]" in listed
    numbers = [int(n) for n in re.findall(r"^data: msg (\d+)$", results["echo"][0], re.M)]
    assert len(numbers) == 2 and numbers[1] == numbers[0] + 1
    assert results["echo"][0].count("---\n") == 2
    rates = [float(r) for r in re.findall(r"average rate: ([\d.]+)", results["hz"][0])]
    assert rates and abs(rates[-1] - TALKER_RATE_HZ) < 3.0, results["hz"]
    assert "no writer of" in results["missing"][1]
