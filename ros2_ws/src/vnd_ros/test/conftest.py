"""Shared helpers of the vnd_ros tests: peer node processes and a private DDS context."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TEST_DIR = Path(__file__).resolve().parent
PEER_SCRIPT = TEST_DIR / "dds_peer.py"
# Child processes take about a second to import and discover each other on a busy machine.
START_TIMEOUT_S = 15.0


class PeerProcess:
    """A dds_peer.py child process whose stdout lines are collected by a thread."""

    def __init__(self, ros_args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(PEER_SCRIPT), "--ros-args", *ros_args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr_lines: list[str] = []
        self._pumps = [
            threading.Thread(target=self._pump, args=(stream, is_stdout), daemon=True)
            for stream, is_stdout in ((self.proc.stdout, True), (self.proc.stderr, False))
        ]
        for pump in self._pumps:
            pump.start()

    def _pump(self, stream, is_stdout: bool) -> None:
        for line in stream:
            if is_stdout:
                self.lines.put(line.rstrip("\n"))
            else:
                self.stderr_lines.append(line.rstrip("\n"))

    def wait_line(self, prefix: str, timeout_s: float = START_TIMEOUT_S) -> str:
        """Next stdout line starting with ``prefix`` (earlier lines are discarded)."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"no '{prefix}' line within {timeout_s} s; stderr:\n"
                    + "\n".join(self.stderr_lines[-20:])
                )
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line.startswith(prefix):
                return line

    def drain(self) -> list[str]:
        """Every stdout line received so far and not yet consumed."""
        out = []
        while not self.lines.empty():
            out.append(self.lines.get_nowait())
        return out

    def wait_exit(self, timeout_s: float) -> int:
        """Exit code once the child ended and all its output was collected."""
        code = self.proc.wait(timeout=timeout_s)
        for pump in self._pumps:
            pump.join(timeout=2)
        return code

    def send_signal(self, signum: int) -> None:
        """Deliver ``signum`` to this child only."""
        self.proc.send_signal(signum)

    def stop(self) -> None:
        """SIGINT, then SIGKILL if the child has not exited after 5 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def spawn_peer() -> Iterator:
    """Factory: ``spawn_peer(['-p', 'role:=talker', ...], middleware=None)`` -> a started
    PeerProcess on ``middleware`` (default: the ``middleware`` fixture's, else dds)."""
    peers: list[PeerProcess] = []

    def spawn(ros_args: list[str], middleware: str | None = None) -> PeerProcess:
        chosen = middleware or os.environ.get("VND_NODE_MIDDLEWARE", "dds")
        env = dict(os.environ, VND_MIDDLEWARE=chosen, PYTHONUNBUFFERED="1")
        peer = PeerProcess(ros_args, env)
        peers.append(peer)
        return peer

    yield spawn
    for peer in peers:
        peer.stop()


@pytest.fixture
def dds_context() -> Iterator:
    """A private, initialised dds-backend Context (no signal handlers), shut down afterwards."""
    from vnd_ros import dds_node

    ctx = dds_node.Context()
    ctx.init([], None)
    yield ctx
    if ctx.participant is not None:
        ctx.shutdown()
