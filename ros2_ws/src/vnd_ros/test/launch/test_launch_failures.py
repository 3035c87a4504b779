"""Failure semantics of ``vnd launch`` with real processes: a required process's exit shuts the
launch down with its reason and a non-zero exit; a respawning process that keeps failing at
start-up is respawned within the budget, with a growing delay, and then given up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from vnd_ros.launch import LaunchService, RespawnPolicy

HELPER = Path(__file__).parent / "launch_fixtures" / "helper_node.py"
PYTHON = sys.executable


def _helper(label: str, marker_dir: Path, extra: str = "") -> str:
    return f"{PYTHON} {HELPER} --label {label} --marker-dir {marker_dir} {extra}".strip()


def _run_vnd_launch(path: Path, log_dir: Path, timeout_s: float) -> subprocess.CompletedProcess:
    command = [PYTHON, "-m", "vnd_tools.cli", "launch", str(path), "--log-dir", str(log_dir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)


def test_required_process_exit_shuts_the_launch_down_naming_it_and_its_code(tmp_path):
    path = tmp_path / "required.launch.yaml"
    path.write_text(
        f"""launch:
- executable:
    cmd: {_helper("talker", tmp_path)}
    name: talker
    output: log
- executable:
    cmd: {_helper("policy", tmp_path, "--crash-after 1.0 --exit-code 7")}
    name: policy
    output: log
    on_exit: shutdown
"""
    )
    start = time.monotonic()
    result = _run_vnd_launch(path, tmp_path / "log", timeout_s=60.0)
    elapsed_s = time.monotonic() - start
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        "vnd launch: required process 'policy' exited with code 7: shutting the launch down"
    )
    # The other process got the forwarded SIGINT and stopped cleanly; nothing was left behind.
    talker_pid = next(int(p.name.split(".")[1]) for p in tmp_path.glob("talker.*.started"))
    assert (tmp_path / f"talker.{talker_pid}.stopped").read_text().strip() == "SIGINT"
    assert not _alive(talker_pid)
    assert elapsed_s < 30.0


def test_required_process_that_finishes_cleanly_ends_the_launch_with_exit_0(tmp_path):
    path = tmp_path / "done.launch.yaml"
    path.write_text(
        f"""launch:
- executable:
    cmd: {_helper("talker", tmp_path)}
    name: talker
    output: log
- executable:
    cmd: {_helper("sim", tmp_path, "--crash-after 0.5 --exit-code 0")}
    name: sim
    output: log
    on_exit: shutdown
"""
    )
    service = LaunchService.from_file(path, {}, log_dir=tmp_path / "log", report=_quiet)
    service.start()
    assert service.wait(timeout_s=30.0) == 0
    assert service.shutdown_reason == (
        "required process 'sim' finished cleanly: shutting the launch down"
    )
    kinds = [(event.kind, event.name) for event in service.events]
    assert ("required_exit", "sim") in kinds
    assert not any(info.running for info in service.processes())


def test_start_up_crash_loop_is_respawned_within_the_budget_then_given_up(tmp_path):
    """The default budget: three start-up failures in a row, the delay doubling."""
    path = tmp_path / "loop.launch.yaml"
    path.write_text(
        f"""launch:
- executable:
    cmd: {_helper("learner", tmp_path, "--crash-after 0.1 --exit-code 134")}
    name: learner
    output: log
    respawn: "true"
    respawn_delay: 0.3
"""
    )
    result = _run_vnd_launch(path, tmp_path / "log", timeout_s=60.0)
    assert result.returncode == 1
    assert len(list(tmp_path.glob("learner.*.started"))) == 3  # one start and two respawns
    lines = result.stderr.splitlines()
    assert any("respawning 'learner' in 0.3 s (start-up failure 1 of 3" in x for x in lines)
    assert any("respawning 'learner' in 0.6 s (start-up failure 2 of 3" in x for x in lines)
    assert (
        "[ERROR] [launch]: not respawning 'learner' again: it died within 10 s of starting "
        "3 times in a row (last exit code 134)"
    ) in lines


def test_respawn_max_retries_bounds_the_respawns_and_events_tell_them_apart(tmp_path):
    """respawn_max_retries as ros2 launch counts it: N respawns, N + 1 runs. Runs outlive the
    (here shortened) start-up window, so only the file's budget stops them."""
    path = tmp_path / "retries.launch.yaml"
    path.write_text(
        f"""launch:
- executable:
    cmd: {_helper("talker", tmp_path)}
    name: talker
    output: log
- executable:
    cmd: {_helper("learner", tmp_path, "--crash-after 0.3 --exit-code 3")}
    name: learner
    output: log
    respawn: "true"
    respawn_delay: 0.1
    respawn_max_retries: 2
"""
    )
    policy = RespawnPolicy(startup_window_s=0.05)
    service = LaunchService.from_file(
        path, {}, log_dir=tmp_path / "log", report=_quiet, respawn_policy=policy
    )
    service.start()
    try:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and service.processes()[1].gave_up is None:
            time.sleep(0.05)
        talker, learner = service.processes()
        assert talker.running  # a non-required process giving up does not end the launch
        assert learner.gave_up == "respawn_max_retries (2) used up"
        assert learner.respawns == 2 and not learner.running and not learner.respawn_pending
    finally:
        code = service.shutdown()
    assert code == 1  # the crashes are failures
    learner_events = [e.kind for e in service.events if e.name == "learner"]
    assert learner_events == ["exit", "respawn", "exit", "respawn", "exit", "gave_up"]
    assert all(e.returncode == 3 for e in service.events if e.name == "learner")
    assert service.shutdown_reason is None
    assert len(list(tmp_path.glob("learner.*.started"))) == 3
    # What `vnd fly` reports: the two respawned crashes were expected, the last one and the
    # given-up respawn were not.
    assert len(service.failures) == 4
    unexpected = service.unexpected_failures
    assert len(unexpected) == 2 and "died with exit code 3" in unexpected[0]
    assert unexpected[1].startswith("not respawning 'learner' again: respawn_max_retries (2)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _quiet(level: str, text: str) -> None:
    del level, text
