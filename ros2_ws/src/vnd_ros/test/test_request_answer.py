"""Request/answer commands wait for the nodes that should answer, found on the graph, and exit
non-zero naming each node that did not answer in time (real node processes, dds backend)."""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

RESPONDER = Path(__file__).parent / "checkpoint_responder.py"
START_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 90.0


def _env() -> dict[str, str]:
    return dict(os.environ, VND_MIDDLEWARE="dds", PYTHONUNBUFFERED="1")


class Responder:
    """A checkpoint_responder.py process; its stdout lines go to a queue."""

    def __init__(self, namespace: str, name: str, *options: str) -> None:
        command = [sys.executable, str(RESPONDER), "--namespace", namespace, "--name", name]
        self.proc = subprocess.Popen(
            [*command, *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(
            target=lambda: [self.lines.put(x.strip()) for x in self.proc.stdout], daemon=True
        ).start()

    def wait_line(self, text: str, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                if self.lines.get(timeout=0.2) == text:
                    return
        pytest.fail(f"responder did not print {text!r} within {timeout_s} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def namespace() -> str:
    return f"ra{os.getpid()}x{time.monotonic_ns() % 100_000}"


@pytest.fixture
def responders() -> Iterator[list[Responder]]:
    started: list[Responder] = []
    yield started
    for responder in started:
        responder.stop()


def vnd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vnd_tools.cli", *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=CLI_TIMEOUT_S,
    )


def test_a_node_discovered_late_is_waited_for_not_missed(namespace, responders):
    """A participant whose endpoints are not discovered is on the domain for 3 s before the
    policy node appears (slow endpoint discovery): a fixed settle time after the encoder
    matched would report success with one answer; the graph says a participant may still
    announce nodes, so the client waits and asks the policy too."""
    encoder = Responder(namespace, "encoder")
    responders.append(encoder)
    encoder.wait_line("READY")
    policy = Responder(namespace, "policy", "--join-delay-s", "3.0")
    responders.append(policy)
    policy.wait_line("PARTICIPANT")
    result = vnd("checkpoint", "list", "--vehicle", namespace, "--timeout", "30")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith(f"/{namespace}/encoder: accepted: listed") for line in lines)
    assert any(line.startswith(f"/{namespace}/policy: accepted: listed") for line in lines)


def test_a_node_still_in_its_constructor_is_waited_for(namespace, responders):
    """The policy is on the graph 2 s before it creates its command reader (as while it
    checks its start-up bundle): a node that reads nothing yet is not taken as final."""
    encoder = Responder(namespace, "encoder")
    responders.append(encoder)
    encoder.wait_line("READY")
    policy = Responder(namespace, "policy", "--build-delay-s", "2.5")
    responders.append(policy)
    policy.wait_line("PARTICIPANT")
    result = vnd("checkpoint", "list", "--vehicle", namespace, "--timeout", "30")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"/{namespace}/policy: accepted: listed" in result.stdout


def test_a_slow_answer_is_awaited_and_a_missing_one_is_named(namespace, responders):
    for name, delay_s in (("encoder", "0"), ("policy", "6")):
        responders.append(Responder(namespace, name, "--answer-delay-s", delay_s))
    for responder in responders:
        responder.wait_line("READY")
    short = vnd("checkpoint", "list", "--vehicle", namespace, "--timeout", "3")
    assert short.returncode == 1
    assert f"/{namespace}/encoder: accepted: listed" in short.stdout
    assert f"/{namespace}/policy: DID NOT ANSWER (no answer)" in short.stdout
    assert f"no answer within 3 s from /{namespace}/policy" in short.stderr
    patient = vnd("checkpoint", "list", "--vehicle", namespace, "--timeout", "30")
    assert patient.returncode == 0, patient.stdout + patient.stderr
    assert f"/{namespace}/policy: accepted: listed" in patient.stdout


def test_a_named_node_that_does_not_exist_fails_naming_it(namespace, responders):
    responders.append(Responder(namespace, "policy"))
    responders[0].wait_line("READY")
    result = vnd("arm", "--vehicle", namespace, "--node", "ghost", "--timeout", "3")
    assert result.returncode == 1
    assert (
        f"/{namespace}/ghost: DID NOT ANSWER (not found reading the command topic)" in result.stdout
    )
    assert f"no answer within 3 s from /{namespace}/ghost" in result.stderr
    named = vnd("checkpoint", "list", "--vehicle", namespace, "--node", "policy", "--timeout", "30")
    assert named.returncode == 0, named.stdout + named.stderr
    assert named.stdout.startswith(f"/{namespace}/policy: accepted: listed")
