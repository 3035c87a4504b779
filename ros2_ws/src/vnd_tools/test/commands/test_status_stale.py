"""``vnd status`` keeps a node that stopped reporting: real pose-filter node processes (they
report on vnd/node_status at 1 Hz), one killed with SIGKILL, a real ``vnd status --watch``
process and fresh one-shot ``vnd status`` processes reading them over DDS."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from vnd_ros.stack_records import LearnerHealth, NodeHealth, StackSnapshot
from vnd_tools.commands.status import (
    STALE_AFTER_S,
    StatusMemory,
    format_table,
    report_time_ns,
)

START_TIMEOUT_S = 90.0  # node start (vnd_core imports) on a busy 2-core machine
CLI_TIMEOUT_S = 60.0
ROW_RE = r"^{name}\s.*?(?:STALE (?P<age>\d+\.\d) s)?$"


def _env(state_dir: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", VND_STATE_DIR=str(state_dir))


def _status(vehicle: str, state_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vnd_tools.cli", "status", "--vehicle", vehicle, *extra],
        capture_output=True,
        text=True,
        env=_env(state_dir),
        timeout=CLI_TIMEOUT_S,
    )


def _row(table: str, name: str) -> re.Match | None:
    return re.search(ROW_RE.format(name=re.escape(name)), table, re.MULTILINE)


@pytest.fixture
def stack(tmp_path) -> Iterator[tuple[str, dict[str, subprocess.Popen]]]:
    """Two pose filter nodes (``victim`` and ``keeper``) in a namespace of their own."""
    vehicle = f"st{uuid.uuid4().hex[:8]}"
    node = [sys.executable, "-m", "vnd_encoder.pose_filter_node", "--ros-args"]
    procs = {
        name: subprocess.Popen(
            [*node, "-r", f"__ns:=/{vehicle}", "-r", f"__node:={name}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_env(tmp_path),
        )
        for name in ("victim", "keeper")
    }
    try:
        yield vehicle, procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_for_rows(vehicle: str, state_dir: Path, names: list[str]) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        result = _status(vehicle, state_dir, "--spin-time", "2")
        if result.returncode == 0 and all(_row(result.stdout, n) for n in names):
            return result.stdout
        if time.monotonic() > deadline:
            pytest.fail(f"rows {names} never appeared:\n{result.stdout}{result.stderr}")
        time.sleep(1.0)


def test_killed_node_stays_in_the_table_as_stale_with_its_age(stack, tmp_path):
    vehicle, procs = stack
    victim, keeper = f"/{vehicle}/victim", f"/{vehicle}/keeper"
    table = _wait_for_rows(vehicle, tmp_path, [victim, keeper])
    assert _row(table, victim)["age"] is None and _row(table, keeper)["age"] is None

    watch = subprocess.Popen(
        [sys.executable, "-m", "vnd_tools.cli", "status", "--vehicle", vehicle, "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),  # one memory, as for an operator's terminals on one machine
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in watch.stdout], daemon=True).start()
    try:
        _next_line(lines, victim, timeout_s=CLI_TIMEOUT_S)  # the watcher saw the victim alive
        procs["victim"].kill()  # SIGKILL: no goodbye, its latched report dies with it
        procs["victim"].wait()
        killed_at = time.monotonic()

        # --watch: the row stays and turns STALE with a growing age
        ages = []
        while len(ages) < 2:
            match = _row(_next_line(lines, victim, timeout_s=STALE_AFTER_S + 10), victim)
            if match["age"] is not None:
                ages.append(float(match["age"]))
        elapsed_s = time.monotonic() - killed_at
        assert STALE_AFTER_S <= ages[0] < ages[1] <= elapsed_s + 1.5
    finally:
        watch.send_signal(signal.SIGINT)
        watch.wait(timeout=CLI_TIMEOUT_S)
    assert "Traceback" not in watch.stderr.read()

    # one-shot, started after the kill: the victim is no longer on the graph at all, the row
    # comes from the memory the watcher kept, with the age of the last report it saw
    started_s = time.monotonic() - killed_at
    result = _status(vehicle, tmp_path)  # prints after its 1.5 s spin time
    elapsed_s = time.monotonic() - killed_at
    assert result.returncode == 1, result.stdout + result.stderr  # a stale row fails the check
    row = _row(result.stdout, victim)
    assert row is not None and row["age"] is not None, result.stdout
    assert started_s + 1.5 <= float(row["age"]) < elapsed_s + 1.5  # reports come at 1 Hz
    assert _row(result.stdout, keeper)["age"] is None, result.stdout


def _next_line(lines: queue.Queue[str], prefix: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01)).rstrip("\n")
        except queue.Empty:
            break
        if line.startswith(prefix + " "):
            return line
    raise AssertionError(f"no row {prefix} within {timeout_s} s")


def test_status_watch_into_a_closed_pipe_ends_quietly(stack, tmp_path):
    """``vnd status --watch | head -1``: the reader goes away, vnd ends with 141, no traceback."""
    vehicle, _procs = stack
    _wait_for_rows(vehicle, tmp_path, [f"/{vehicle}/keeper"])
    watch = subprocess.Popen(
        [sys.executable, "-m", "vnd_tools.cli", "status", "--vehicle", vehicle, "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
    )
    assert watch.stdout.readline().startswith(b"node ")
    watch.stdout.close()  # what head does after its first line
    assert watch.wait(timeout=CLI_TIMEOUT_S) == 141
    stderr = watch.stderr.read().decode()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def _health(name: str, stamp_ns: int) -> NodeHealth:
    return NodeHealth(
        node=name,
        mode=0,
        active_version=1,
        previous_version=0,
        pinned=False,
        rate_hz=50.0,
        latency_p50_ms=1.0,
        latency_p99_ms=2.0,
        ticks=10,
        missed_ticks=0,
        counters={},
        stamp_ns=stamp_ns,
    )


def test_memory_marks_silent_nodes_and_learner_stale(tmp_path):
    now_ns = 1_800_000_000 * 10**9
    learner = LearnerHealth(
        state=1,
        ticks_stored=5,
        latest_version=1,
        updates_accepted=0,
        updates_rejected=0,
        last_update_duration_s=0.0,
        message="",
        stamp_ns=now_ns,
    )
    live = StackSnapshot(
        nodes={"/v/a": _health("/v/a", now_ns), "/v/b": _health("/v/b", now_ns)},
        learner=learner,
        node_received_ns={"/v/a": now_ns, "/v/b": now_ns},
        learner_received_ns=now_ns,
    )
    StatusMemory(tmp_path / "m.json").update(live, now_ns)
    later_ns = now_ns + 5 * 10**9
    fresh = StackSnapshot(
        nodes={"/v/a": _health("/v/a", later_ns)}, node_received_ns={"/v/a": later_ns}
    )
    view = StatusMemory(tmp_path / "m.json").update(fresh, later_ns)  # a new process
    table = format_table(view, later_ns)
    assert _row(table, "/v/a")["age"] is None
    assert _row(table, "/v/b")["age"] == "5.0"
    assert table.splitlines()[-1].endswith("STALE 5.0 s")  # the learner line
    assert sorted(view.stale_rows(later_ns)) == ["/v/b", "learner"]


def test_report_time_uses_the_stamp_unless_it_is_another_clock():
    received = 1_800_000_000 * 10**9
    assert report_time_ns(received - 7 * 10**9, received) == received - 7 * 10**9  # latched, old
    assert report_time_ns(received + 10**9, received) == received  # a clock ahead of ours
    assert report_time_ns(12 * 10**9, received) == received  # sim time
