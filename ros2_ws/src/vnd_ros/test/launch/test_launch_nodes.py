"""`vnd launch` with real ROS nodes on each backend: they talk, and SIGINT stops both cleanly."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PEERS_LAUNCH = Path(__file__).parent / "launch_fixtures" / "peers.launch.yaml"
HEAR_TIMEOUT_S = 30.0  # two interpreters start and discover each other on a busy machine


def test_launched_nodes_talk_and_sigint_stops_both(middleware):
    topic = f"/launch_peers_{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", "vnd_tools.cli", "launch", str(PEERS_LAUNCH)]
    command += [f"python:={sys.executable}", f"topic:={topic}"]
    env = dict(os.environ, VND_MIDDLEWARE=middleware, PYTHONUNBUFFERED="1")
    launcher = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    pump = threading.Thread(target=lambda: [lines.put(x) for x in launcher.stdout], daemon=True)
    pump.start()
    try:
        deadline = time.monotonic() + HEAR_TIMEOUT_S
        while not any(line.startswith("[listener] RECV msg") for line in seen):
            assert time.monotonic() < deadline, "listener heard nothing:\n" + "".join(seen)
            try:
                seen.append(lines.get(timeout=0.5))
            except queue.Empty:
                assert launcher.poll() is None, "launch ended early:\n" + "".join(seen)
        sent_at = time.monotonic()
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=10) == 0, "".join(seen)
        stop_s = time.monotonic() - sent_at
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    pump.join(timeout=5)
    while not lines.empty():
        seen.append(lines.get_nowait())
    text = "".join(seen)
    assert stop_s < 5.0
    assert "[talker] EXIT clean" in text and "[listener] EXIT clean" in text, text
    assert "Traceback" not in text, text
