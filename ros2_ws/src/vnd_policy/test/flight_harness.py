"""Test harness for the flight nodes (shared by the vnd_policy and vnd_encoder tests).

- :class:`NodeProcess`: one flight node run as its own OS process, on the dds backend or (the
  ``middleware`` fixture) rclpy;
- :class:`Peer`: the test's own DDS node in the same namespace and domain, spinning on a
  background thread, with publishers, recorders (arrival time + message) and timers;
- :class:`SimStack`: sim, pose filter (and an odometry fault injector), encoder and policy
  processes in one namespace with a peer recording truth, commands and status (the fault
  tests and ``benchmarks/fault_drills.py``);
- :func:`make_bundles`: small real bundles plus corrupt, truncated, wrong-architecture and
  wrong-vehicle files.

Every test process uses its own DDS domain (from the pid) so parallel test runs of other
packages never see these topics; all traffic stays on loopback (CYCLONEDDS_URI).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from vnd_core.bundle import (
    Bundle,
    bundle_to_bytes,
    load_bundle,
    pack,
    read_metadata,
    save_bundle,
    shipped_bundle_path,
)
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import VNDModel, VNDModelConfig
from vnd_core.wire import Mode
from vnd_flight.msgfields import fill_odometry, odometry_state, set_stamp
from vnd_flight.msgfields import stamp_ns as stamp_of

ROOT = Path(__file__).resolve().parents[4]
# Loopback only, also when the harness is used outside pytest (the root conftest sets it too).
os.environ.setdefault("CYCLONEDDS_URI", f"file://{ROOT / 'config' / 'cyclonedds_loopback.xml'}")
DOMAIN_ID = 100 + os.getpid() % 100  # private DDS domain of this test process
START_TIMEOUT_S = 60.0  # importing torch on a busy 2-core machine takes a while
CONTEXT_LEN = 5  # C of the test bundles' encoders
SMALL_MODEL = VNDModelConfig(
    context_len=CONTEXT_LEN, encoder_hidden=8, residual_hidden=(16,), decoder_hidden=(16,)
)


def node_middleware() -> str:
    """Backend of the node processes: the ``middleware`` fixture's choice (VND_NODE_MIDDLEWARE,
    set by the root conftest), dds by default."""
    return os.environ.get("VND_NODE_MIDDLEWARE", "dds")


def child_env(middleware: str | None = None) -> dict[str, str]:
    """Environment of node processes: ``middleware`` (default :func:`node_middleware`),
    loopback-only Cyclone DDS and Fast DDS, private domain."""
    return dict(
        os.environ,
        VND_MIDDLEWARE=middleware or node_middleware(),
        ROS_DOMAIN_ID=str(DOMAIN_ID),
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
    )


class NodeProcess:
    """``python -m <module> --ros-args ...`` with its log lines (stderr) collected."""

    def __init__(self, module: str, ros_args: list[str], middleware: str | None = None) -> None:
        self.middleware = middleware or node_middleware()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--ros-args", *ros_args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=child_env(self.middleware),
        )
        self.lines: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)

    def wait_log(self, text: str, timeout_s: float = START_TIMEOUT_S) -> str:
        """The next log line containing ``text``; fails with the log when none comes."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._new.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if text in line:
                return line
        raise AssertionError(f"no log line with {text!r}; log:\n" + "\n".join(self.lines[-30:]))

    def stop(self) -> int:
        """SIGINT, then SIGKILL after 5 s; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._pump.join(timeout=2)
        return self.proc.returncode


class Peer:
    """The test's DDS node: create entities, then :meth:`start` spinning on a thread."""

    def __init__(self, namespace: str) -> None:
        from vnd_ros import dds_node

        self.context = dds_node.Context()
        self.context.init([], DOMAIN_ID)
        self.node = dds_node.Node("test_peer", context=self.context, namespace=namespace)
        self.executor = dds_node.SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread: threading.Thread | None = None
        self._running = False

    def publisher(self, type_name: str, topic: str, qos: Any):
        """(message class, publisher)."""
        from vnd_ros.messages import get_message

        cls = get_message(type_name)
        return cls, self.node.create_publisher(cls, topic, qos)

    def record(self, type_name: str, topic: str, qos: Any) -> list[tuple[float, Any]]:
        """A list that receives (wall-clock arrival time [s], message) for each message."""
        from vnd_ros.messages import get_message

        received: list[tuple[float, Any]] = []
        self.node.create_subscription(
            get_message(type_name), topic, lambda m: received.append((time.time(), m)), qos
        )
        return received

    def every(self, period_s: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` every ``period_s`` on the spinning thread."""
        self.node.create_timer(period_s, callback)

    def start(self) -> None:
        """Spin on a background thread."""
        self._running = True
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while self._running:
            self.executor.spin_once(timeout_sec=0.05)

    def close(self) -> None:
        """Stop spinning and delete the participant."""
        self._running = False
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.context.shutdown()


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``predicate`` until truthy (returned) or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def hover_state(z_m: float = 1.0) -> np.ndarray:
    """Level, at rest, at height ``z_m`` (13,)."""
    state = np.zeros(13)
    state[2], state[3] = z_m, 1.0
    return state


def odometry_message(cls: type, stamp_ns: int, state: np.ndarray):
    """nav_msgs/Odometry of ``state`` stamped ``stamp_ns``."""
    msg = cls()
    set_stamp(msg.header.stamp, stamp_ns)
    msg.header.frame_id, msg.child_frame_id = "world", "base_link"
    fill_odometry(msg, state)
    return msg


def make_bundle(version: int, vehicle: str = "agile", with_model: bool = True) -> Bundle:
    """A valid bundle that flies: the shipped base policy (trained: it passes the policy node's
    behavioural check, an untrained one does not) and, by default, a small untrained model
    (seeded by ``version``). Another vehicle gets a small untrained policy (refused anyway)."""
    torch.manual_seed(version)
    params = load_vehicle(vehicle)
    if vehicle == "agile":
        policy = copy.deepcopy(shipped_policy())
    else:
        policy = PolicyNet(params, PolicyConfig(hidden=(32, 32)))
    model = VNDModel(params, SMALL_MODEL) if with_model else None
    return Bundle(version, max(version - 1, 0), policy, params, model=model)


@functools.cache
def shipped_policy() -> PolicyNet:
    """The policy of the shipped base bundle (loaded once)."""
    return load_bundle(shipped_bundle_path()).policy


def make_bundles(root: Path) -> dict[str, Path]:
    """v1, v2, v3 (no VND model) and the bad files, by name."""
    paths = {f"v{v}": save_bundle(make_bundle(v), root / f"v{v}.safetensors") for v in (1, 2)}
    paths["v3"] = save_bundle(make_bundle(3, with_model=False), root / "v3.safetensors")
    data = bytearray(bundle_to_bytes(make_bundle(4)))
    data[-100] ^= 0xFF  # one flipped bit pattern inside the tensor data
    paths["corrupt"] = root / "corrupt.safetensors"
    paths["corrupt"].write_bytes(bytes(data))
    paths["truncated"] = root / "truncated.safetensors"
    paths["truncated"].write_bytes(bytes(data[: len(data) // 2]))
    import safetensors.torch

    good = bundle_to_bytes(make_bundle(5))
    tensors = dict(safetensors.torch.load(good))
    tensors["policy.net.0.weight"] = tensors["policy.net.0.weight"][:, :-1].contiguous()
    paths["wrong_arch"] = root / "wrong_arch.safetensors"
    paths["wrong_arch"].write_bytes(pack(tensors, read_metadata(good)))
    paths["wrong_vehicle"] = save_bundle(make_bundle(6, "small"), root / "small.safetensors")
    return paths


class OdomFeeder:
    """Publishes ``odom`` at 100 Hz from the peer's thread, stamped with the wall clock.

    ``running`` stops and resumes it, ``nan_left`` makes the next samples all-NaN, and
    ``last_good_stamp_ns`` is the stamp of the newest finite sample sent.
    """

    def __init__(self, peer: Peer, period_s: float = 0.01) -> None:
        from vnd_ros.qos import qos_profile_sensor_data

        self.cls, self.pub = peer.publisher(
            "nav_msgs/msg/Odometry", "odom", qos_profile_sensor_data
        )
        self.state = hover_state()
        self.running = True
        self.nan_left = 0
        self.last_good_stamp_ns: int | None = None
        self._rng = np.random.default_rng(0)
        peer.every(period_s, self._send)

    def _send(self) -> None:
        if not self.running:
            return
        stamp_ns = time.time_ns()
        if self.nan_left > 0:
            self.nan_left -= 1
            state = np.full(13, np.nan)
        else:
            # Real motion capture never repeats a pose to the last bit in flight (the safety
            # filter calls such a source frozen): a micrometre of noise on the height.
            state = self.state.copy()
            state[2] += 1e-6 * self._rng.standard_normal()
            self.last_good_stamp_ns = stamp_ns
        self.pub.publish(odometry_message(self.cls, stamp_ns, state))


FLY_BEFORE_FAULT_S = 3.0  # policy flight before a fault


class SimStack:
    """sim + pose filter (+ encoder) + policy in namespace ``ns``, and a recording peer."""

    def __init__(
        self,
        ns: str,
        scenario: str,
        encoder: bool,
        *policy_args: str,
        odom_faults: bool = False,
        seed: int = 1,
        sim_params: tuple[str, ...] = (),
    ):
        common = ["-r", f"__ns:={ns}"]
        # With odom_faults the injector sits between the pose filter and the policy.
        filtered = ["-r", "odom:=odom_filtered"] if odom_faults else []
        self.nodes = {
            "sim": NodeProcess(
                "vnd_sim.sim_node",
                [
                    *common,
                    "-p",
                    f"scenario:={scenario}",
                    "-p",
                    f"seed:={seed}",
                    *(arg for p in sim_params for arg in ("-p", p)),
                ],
            ),
            "pose_filter": NodeProcess("vnd_encoder.pose_filter_node", [*common, *filtered]),
            "policy": NodeProcess(
                "vnd_policy.policy_node",
                [
                    *common,
                    "-p",
                    f"scenario:={scenario}",
                    "-p",
                    "status_period_s:=0.25",
                    *policy_args,
                ],
            ),
        }
        if encoder:
            self.nodes["encoder"] = NodeProcess("vnd_encoder.encoder_node", common)
        if odom_faults:
            self.nodes["odom_fault"] = NodeProcess(
                "vnd_sim.odom_fault_node", [*common, "-r", "odom_in:=odom_filtered"]
            )
        from vnd_ros.qos import qos_profile_default, qos_profile_sensor_data, qos_profile_status

        self.peer = Peer(ns)
        self.truth = self.peer.record("nav_msgs/msg/Odometry", "sim/truth", qos_profile_default)
        self.commands = self.peer.record(
            "vnd_msgs/msg/CtbrCommand", "vnd/command", qos_profile_sensor_data
        )
        self.status = self.peer.record(
            "vnd_msgs/msg/NodeStatus", "vnd/node_status", qos_profile_status
        )
        self.peer.start()

    def fly(self) -> None:
        """Wait until the policy has flown ``FLY_BEFORE_FAULT_S``."""
        self.nodes["policy"].wait_log("policy node ready")
        wait_for(
            lambda: self.commands and self.commands[-1][1].mode == Mode.POLICY,
            60.0,
            "the policy flying",
        )
        time.sleep(FLY_BEFORE_FAULT_S)

    @staticmethod
    def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
        """:func:`wait_for`."""
        return wait_for(predicate, timeout_s, what)

    def kill(self, name: str) -> float:
        """SIGKILL node ``name``; returns the wall time."""
        self.nodes[name].proc.send_signal(signal.SIGKILL)
        self.nodes[name].proc.wait(timeout=10)
        return time.time()

    def inject(self, fault: str) -> int:
        """Ask the fault injector for ``fault``; returns the stamp of its first faulty sample."""
        from vnd_ros.qos import qos_profile_status

        cls, pub = self.peer.publisher("std_msgs/msg/String", "sim/odom_fault", qos_profile_status)
        pub.publish(cls(data=fault))
        line = self.nodes["odom_fault"].wait_log(f"odometry fault {fault} from stamp", 10.0)
        return int(line.rsplit(" ", 1)[1])

    def truth_from_stamp(self, stamp_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """(time since ``stamp_ns`` (N,) [s], true states (N, 13)) stamped from it on."""
        rows = [(stamp_of(m.header.stamp), m) for _, m in list(self.truth)]
        rows = [(t, m) for t, m in rows if t >= stamp_ns]
        t_s = np.array([(t - stamp_ns) / 1e9 for t, _ in rows])
        return t_s, np.array([odometry_state(m) for _, m in rows])

    def truth_after(self, t_s: float) -> np.ndarray:
        """True states (N, 13) received after wall time ``t_s``."""
        return np.array([odometry_state(m) for t, m in self.truth if t >= t_s])

    def latest_status(self, role: str):
        """The newest NodeStatus of the node named ``role``."""
        return next(m for _, m in reversed(self.status) if m.node.endswith("/" + role))

    def sim_counters(self) -> dict:
        """The sim node's newest status counters."""
        return json.loads(self.latest_status("sim").counters_json)

    def close(self) -> None:
        """Stop the peer and every node."""
        self.peer.close()
        for node in self.nodes.values():
            node.stop()
