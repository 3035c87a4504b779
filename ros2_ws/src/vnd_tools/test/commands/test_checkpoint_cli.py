"""``vnd checkpoint``, ``vnd arm`` / ``disarm`` and ``vnd status`` against a real policy node
process (dds backend): a corrupt bundle is refused with its reason and a non-zero exit, a valid
one is accepted, activated and rolled back; arming is refused with its reason; ``inspect``
works offline on a file."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from vnd_core.bundle import Bundle, bundle_to_bytes, load_bundle, shipped_bundle_path
from vnd_core.vehicle import load_vehicle
from vnd_tools.cli import main as vnd_main

START_TIMEOUT_S = 90.0  # torch import and the start-up bundle check on a busy 2-core machine
CLI_TIMEOUT_S = 60.0


def _bundle_bytes(version: int) -> bytes:
    """The shipped policy (trained: the node's behavioural check passes it) as ``version``."""
    vehicle = load_vehicle("agile")
    policy = load_bundle(shipped_bundle_path()).policy
    return bundle_to_bytes(Bundle(version, version - 1, policy, vehicle, summary={"t": version}))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("bundles")
    paths = {}
    for version in (1, 2):
        paths[f"v{version}"] = root / f"v{version}.safetensors"
        paths[f"v{version}"].write_bytes(_bundle_bytes(version))
    data = paths["v2"].read_bytes()
    paths["truncated"] = root / "truncated.safetensors"
    paths["truncated"].write_bytes(data[: len(data) // 2])
    return paths


# (policy node backend, CLI backend): both on dds, and each vendor's CLI against the other's
# node. A node's Fast DDS writer may match a dds-backend CLI's new reader only after the first
# answer went out: the CLI's resend of the same request id must bring the answer.
BACKEND_PAIRS = [("dds", "dds"), ("dds", "rclpy"), ("rclpy", "dds")]
_backends = {"node": "dds", "cli": "dds"}  # the pair of the module's current policy node


def _env(role: str = "node") -> dict[str, str]:
    return dict(
        os.environ,
        VND_MIDDLEWARE=_backends[role],
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
    )


@pytest.fixture(scope="module", params=BACKEND_PAIRS, ids=lambda p: f"node_{p[0]}-cli_{p[1]}")
def policy_node(request, bundles) -> Iterator[str]:
    """A policy node process in a namespace of its own on one backend, asked by the CLI on
    the pair's other; yields the namespace."""
    if "rclpy" in request.param and importlib.util.find_spec("rclpy") is None:
        pytest.skip("rclpy is not installed: run `make ros`")
    _backends["node"], _backends["cli"] = request.param
    namespace = f"cpt{os.getpid()}{request.param[0]}{request.param[1]}"
    cmd = [sys.executable, "-m", "vnd_policy.policy_node", "--ros-args", "-r"]
    cmd += [f"__ns:=/{namespace}", "-p", f"bundle:={bundles['v1']}"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env()
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    seen = []
    while not any("policy node ready" in line for line in seen):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("policy node did not start:\n" + "".join(seen[-20:]))
        with contextlib.suppress(queue.Empty):
            seen.append(lines.get(timeout=1.0))
    yield namespace
    proc.terminate()  # SIGTERM: spin returns (dds) or raises (rclpy); the node cleans up
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def vnd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vnd_tools.cli", *args],
        capture_output=True,
        text=True,
        env=_env("cli"),
        timeout=CLI_TIMEOUT_S,
    )


def checkpoint(namespace: str, *args: str) -> subprocess.CompletedProcess:
    return vnd("checkpoint", *args, "--vehicle", namespace, "--timeout", "30")


def test_corrupt_bundle_is_rejected_with_the_reason(policy_node, bundles):
    result = checkpoint(policy_node, "load", str(bundles["truncated"]))
    assert result.returncode == 1, result.stdout + result.stderr
    line = result.stdout.strip().splitlines()[0]
    assert line.startswith(f"/{policy_node}/policy: REJECTED")
    assert "corrupted bundle" in line  # the reason, from the node
    assert "active 1" in line  # the active bundle keeps flying


def test_valid_bundle_load_activate_rollback(policy_node, bundles):
    loaded = checkpoint(policy_node, "load", str(bundles["v2"]))
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    assert f"/{policy_node}/policy: accepted" in loaded.stdout
    assert "available 1,2" in loaded.stdout and "active 1" in loaded.stdout
    activated = checkpoint(policy_node, "activate", "2", "--node", "policy")
    assert activated.returncode == 0, activated.stdout + activated.stderr
    assert "active 2" in activated.stdout
    missing = checkpoint(policy_node, "activate", "7")
    assert missing.returncode == 1 and "REJECTED" in missing.stdout
    rolled = checkpoint(policy_node, "rollback")
    assert rolled.returncode == 0 and "active 1" in rolled.stdout, rolled.stdout
    status = vnd("status", "--vehicle", policy_node, "--spin-time", "3")
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"/{policy_node}/policy" in status.stdout


def test_arm_and_disarm(policy_node):
    """Without odometry: arm while idle is a no-op, disarm always works, arm is then refused
    with the reason and a non-zero exit."""
    idle = vnd("arm", "--vehicle", policy_node, "--timeout", "30")
    assert idle.returncode == 0 and "accepted: already armed (mode idle)" in idle.stdout
    disarmed = vnd("disarm", "--vehicle", policy_node, "--timeout", "30")
    assert disarmed.returncode == 0, disarmed.stdout + disarmed.stderr
    assert f"/{policy_node}/policy: accepted: disarmed (was idle)" in disarmed.stdout
    refused = vnd("arm", "--vehicle", policy_node, "--timeout", "30")
    assert refused.returncode == 1
    assert f"/{policy_node}/policy: REJECTED: arm rejected: no odometry received" in refused.stdout


def test_no_stack_times_out_with_an_error():
    result = vnd("checkpoint", "list", "--vehicle", f"nobody{os.getpid()}", "--timeout", "1")
    assert result.returncode == 1
    assert "no node listens" in result.stderr


def test_inspect_offline(bundles, capsys):
    """A file needs no stack (runs in-process: no middleware is started)."""
    assert vnd_main(["checkpoint", "inspect", str(bundles["v2"])]) == 0
    out = capsys.readouterr().out
    assert "version:         2 (parent 1)" in out
    assert "check:           loads" in out
    assert vnd_main(["checkpoint", "inspect", str(bundles["truncated"])]) == 1
    assert "INVALID" in capsys.readouterr().out


def test_inspect_runs_the_behaviour_check(tmp_path, capsys):
    """A well-formed bundle that flies badly (first layer x1e6) loads, so inspect exits 0, but
    it says the policy node would refuse it and names the figure."""
    vehicle = load_vehicle("agile")
    policy = load_bundle(shipped_bundle_path()).policy
    with torch.no_grad():
        policy.net[0].weight.mul_(1e6)
    path = tmp_path / "scaled.safetensors"
    path.write_bytes(bundle_to_bytes(Bundle(3, 2, policy, vehicle, lineage="run-a")))
    assert vnd_main(["checkpoint", "inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "lineage:         run-a" in out
    assert "behaviour:       FAILS, a policy node refuses it: behaviour check: " in out
    assert "from initial state" in out
