"""Helpers of the learner node tests: the node as a real process, a 50 Hz replay publisher and a
listener, all over the dds backend on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT_S = 40.0  # a node process imports torch: slow on a busy 2-core machine


class LearnerProcess:
    """``python -m vnd_learner.learner_node`` with its log lines collected."""

    def __init__(self, params: dict[str, str], cwd: Path, ros_args: tuple[str, ...] = ()) -> None:
        args = [arg for name, value in params.items() for arg in ("-p", f"{name}:={value}")]
        args = [*ros_args, *args]
        env = dict(
            os.environ,
            VND_MIDDLEWARE=os.environ.get("VND_NODE_MIDDLEWARE", "dds"),
            PYTHONUNBUFFERED="1",
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vnd_learner.learner_node", "--ros-args", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=cwd,
        )
        self.lines: list[str] = []
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, text: str, timeout_s: float = START_TIMEOUT_S) -> str:
        """First log line containing ``text`` (waits for it)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no log line with {text!r}; log:\n" + "\n".join(self.lines[-30:]))

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGINT and wait; SIGKILL when it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._pump.join(timeout=2)
        return self.proc.returncode


@pytest.fixture
def start_learner(tmp_path: Path) -> Iterator[Callable[..., LearnerProcess]]:
    """Factory: ``start_learner(run_dir=..., learn='false', ...)`` -> a running LearnerProcess
    (``ros_args=(...)`` go before the parameters, e.g. a namespace remap)."""
    started: list[LearnerProcess] = []

    def start(ros_args: tuple[str, ...] = (), **params: str) -> LearnerProcess:
        process = LearnerProcess(params, tmp_path, ros_args)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


class DdsPeer:
    """A private dds-backend context spun on a thread: the test's publishers and listeners."""

    def __init__(self) -> None:
        from vnd_ros import dds_node

        self.context = dds_node.Context()
        self.context.init([], None)
        self.node = dds_node.Node("learner_test_peer", context=self.context)
        self.executor = dds_node.SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set() and self.context.ok():
            self.executor.spin_once(0.05)

    def close(self) -> None:
        """Stop spinning and delete the participant."""
        self._stop.set()
        self._thread.join(timeout=5)
        self.executor.shutdown()
        self.context.shutdown()


@pytest.fixture
def dds_peer() -> Iterator[DdsPeer]:
    """A DdsPeer, closed after the test."""
    peer = DdsPeer()
    yield peer
    peer.close()


class ReplayPublisher:
    """Publishes vnd_msgs/Transition on ``vnd/replay`` at 50 Hz with the replay QoS."""

    def __init__(self, peer: DdsPeer, rate_hz: float = 50.0) -> None:
        from vnd_ros.messages import get_message
        from vnd_ros.qos import qos_profile_replay

        self.Transition = get_message("vnd_msgs/msg/Transition")
        self.publisher = peer.node.create_publisher(
            self.Transition, "vnd/replay", qos_profile_replay
        )
        self.period_s = 1.0 / rate_hz
        self.keys: list[tuple[int, int]] = []  # (stamp ns, tick) of every published record
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ReplayPublisher:
        """Begin publishing on a thread."""
        self._thread.start()
        return self

    def _run(self) -> None:
        next_s = time.monotonic()
        tick = 0
        while not self._stop.is_set():
            self.publish_one(tick)
            tick += 1
            next_s += self.period_s
            self._stop.wait(max(0.0, next_s - time.monotonic()))

    def publish_one(self, tick: int) -> None:
        """One hover-like tick record; its key is remembered."""
        stamp_ns = time.time_ns()
        msg = self.Transition(
            tick=tick,
            state=[0.0, 0.0, 1.0, 1.0] + [0.001 * tick] * 9,
            action=[9.81, 0.0, 0.0, 0.0],
            policy_version=1,
            encoder_version=1,
            mode=1,
        )
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        msg.header.frame_id = "world"
        self.publisher.publish(msg)
        self.keys.append((stamp_ns, tick))

    def publish_records(self, records: Any, first_stamp_ns: int) -> None:
        """Publish TickRecords rows at once, restamped from ``first_stamp_ns`` every 20 ms."""
        for i in range(len(records)):
            msg = self.Transition(
                tick=i,
                state=records.state[i].tolist(),
                action=records.action[i].tolist(),
                policy_version=int(records.policy_version[i]),
                encoder_version=int(records.encoder_version[i]),
                mode=int(records.mode[i]),
            )
            stamp_ns = first_stamp_ns + i * 20_000_000
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
            self.publisher.publish(msg)
            self.keys.append((stamp_ns, i))

    def stop(self) -> int:
        """Stop publishing; the number of records published."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        return len(self.keys)


class Listener:
    """Keeps every message received on a topic (thread-safe list)."""

    def __init__(self, peer: DdsPeer, type_name: str, topic: str, qos: Any) -> None:
        from vnd_ros.messages import get_message

        self.messages: list[Any] = []
        peer.node.create_subscription(get_message(type_name), topic, self.messages.append, qos)

    def wait_for(self, predicate: Callable[[Any], bool], timeout_s: float, after: int = 0) -> Any:
        """The first message from index ``after`` on satisfying ``predicate`` (waits for it)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for msg in self.messages[after:]:
                if predicate(msg):
                    return msg
            time.sleep(0.05)
        last = self.messages[-1] if self.messages else None
        raise AssertionError(f"no matching message within {timeout_s} s; last: {last}")


@pytest.fixture
def replay_publisher(dds_peer: DdsPeer) -> Iterator[ReplayPublisher]:
    """A ReplayPublisher (not started yet), stopped after the test."""
    publisher = ReplayPublisher(dds_peer)
    yield publisher
    publisher.stop()


@pytest.fixture
def listen(dds_peer: DdsPeer) -> Callable[[str, str, Any], Listener]:
    """Factory: ``listen(type_name, topic, qos)`` -> a Listener on the test's peer."""
    return lambda type_name, topic, qos: Listener(dds_peer, type_name, topic, qos)


# A learner config small enough for an update in seconds on one busy core; the gates are opened
# wide because a few seconds of fitting cannot beat a policy on quality, and these tests check
# the node's plumbing, not learning (vnd_core's learner tests do that).
TINY_LEARNER = {
    "min_new_ticks": 100,
    "min_interval_s": 0.0,
    "min_windows": 16,
    "min_unexplained_ticks": 0,  # update on the calm test flights too
    "fit": {"steps": 20, "batch_size": 32, "log_every": 5},
    "trainer": {"num_envs": 16, "horizon_ticks": 8, "episode_ticks": 40, "iterations": 3},
    "validation": {
        "probe_observations": 32,
        "model_check_windows": 32,
        "eval_rollouts": 8,
        "eval_ticks": 20,
        "hover_ticks": 20,
        "model_margin_frac": 1e6,
        "cost_margin_m": 1e6,
        "hover_max_dev_m": 1e6,
        "rotation_margin_frac": 1e6,  # 20 fit steps place no rate offset within the gate's 10 %
        "behaviour_check": False,  # the untrained test policies cannot hover
    },
    # these tests count model updates; policy improvement rounds have a test of their own
    "improvement": {"enabled": False},
}


def small_bundle(version: int, parent_version: int = 0) -> Any:
    """A small untrained policy bundle for the agile vehicle (seeded)."""
    import torch
    from vnd_core.bundle import Bundle
    from vnd_core.policy import PolicyConfig, PolicyNet
    from vnd_core.vehicle import load_vehicle

    torch.manual_seed(version)
    policy = PolicyNet(load_vehicle("agile"), PolicyConfig(hidden=(16, 16)))
    return Bundle(version, parent_version, policy, policy.vehicle, summary={"test": True})


@pytest.fixture
def make_bundle() -> Callable[..., Any]:
    """Factory: ``make_bundle(version, parent_version=0)`` -> a small Bundle."""
    return small_bundle


@pytest.fixture
def tiny_learner_params() -> dict[str, str]:
    """TINY_LEARNER as ``-p name:=value`` parameters (values written as YAML)."""
    import yaml
    from vnd_core.learner.settings import flatten

    return {
        name: yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
        for name, value in flatten(TINY_LEARNER).items()
    }


@pytest.fixture
def tiny_learner_file(tmp_path: Path) -> Path:
    """TINY_LEARNER as a parameters file with nested keys, for ``--params-file``."""
    import yaml

    path = tmp_path / "tiny_learner.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": TINY_LEARNER}}))
    return path


def process_gone(pid: int) -> bool:
    """True when ``pid`` does not exist or is a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


@pytest.fixture
def wait_gone() -> Callable[[int, float], bool]:
    """Factory: ``wait_gone(pid, timeout_s)`` -> True once the process has ended."""

    def wait(pid: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process_gone(pid):
                return True
            time.sleep(0.05)
        return False

    return wait
