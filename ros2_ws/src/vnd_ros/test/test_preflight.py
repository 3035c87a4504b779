"""``vnd preflight`` against fake flight stacks over the dds backend, all real processes.

One helper process (preflight_fake_stack.py) publishes three vehicle namespaces: a healthy
stack, one with three faults in independent rows (slow mocap, version mismatch, missing
learner) and one with a stale bundle. ``vnd preflight`` runs as a subprocess per namespace,
all at once, and each test checks the exit code and the table line of its fault.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

TEST_DIR = Path(__file__).resolve().parent
FAKE_STACK = TEST_DIR / "preflight_fake_stack.py"
START_TIMEOUT_S = 60.0  # imports (torch) take long on a busy 2-core machine
RUN_TIMEOUT_S = 120.0
LISTEN_S = 2.5  # --duration of each preflight run
# Three preflight processes and the fake stack share two cores with other test suites: a
# starved reader receives mocap late, so the clock-offset limit is loosened here (its
# threshold is unit-tested both ways in vnd_core/test/test_preflight_checks.py).
LOADED_MACHINE_OFFSET_MS = "200"

ODOM_ARGS = ["--mocap-type", "odometry", "--mocap-topic", "mocap/odom"]
REFUSAL = (
    "/pf_stale/policy refused v4: rejected: behaviour check: body rate 6.9 rad/s > 6.0 rad/s "
    "at t=0.14 s from initial state 'below' on the nominal model"
)
SCENARIOS: dict[str, tuple[dict, list[str]]] = {
    # vehicle -> (fake spec, extra preflight args). Each preflight process costs seconds of
    # imports, so one namespace carries three faults that show in three different rows.
    "pf_ok": ({"mocap_type": "pose"}, []),
    "pf_faults": (
        {
            "mocap_type": "pose",
            "mocap_rate_hz": 20.0,  # slow mocap
            "encoder_version": 2,  # version mismatch (policy 3)
            "learner_version": -1,  # missing learner
        },
        [],
    ),
    # nodes behind the learner because they refused its newest bundle (two rows say so)
    "pf_stale": (
        {
            "mocap_type": "odometry",
            "encoder_version": 2,
            "policy_version": 2,
            "learner_version": 4,
            "learner_refusal": REFUSAL,
        },
        ODOM_ARGS,
    ),
}
# What the faults of pf_faults must fail, and nothing else: mocap at 20 Hz also slows the
# policy's commands (it ticks off odometry).
FAULT_ROWS = {"mocap rate", "policy commands", "bundle versions", "learner"}


ROW = re.compile(r"^(?P<name>\S.*?)\s{2,}(?P<verdict>PASS|FAIL|SKIP)\s{2,}")


@dataclass
class Outcome:
    """One preflight run."""

    returncode: int  # exit code
    stdout: str  # the table
    stderr: str  # diagnostics
    json_path: Path  # the --json output

    def verdicts(self) -> dict[str, str]:
        """Check name -> PASS / FAIL / SKIP, from the table."""
        return {m["name"]: m["verdict"] for m in map(ROW.match, self.stdout.splitlines()) if m}

    def row(self, name: str) -> str:
        """The table line of check ``name``."""
        for line in self.stdout.splitlines():
            match = ROW.match(line)
            if match and match["name"] == name:
                return line
        raise AssertionError(f"no '{name}' row in:\n{self.stdout}\n{self.stderr}")

    def failed_rows(self) -> set[str]:
        """Names of the FAIL rows."""
        return {name for name, verdict in self.verdicts().items() if verdict == "FAIL"}


def _env() -> dict[str, str]:
    return dict(
        os.environ,
        VND_MIDDLEWARE=os.environ.get("VND_NODE_MIDDLEWARE", "dds"),
        PYTHONUNBUFFERED="1",
    )


def _start_fake_stack() -> subprocess.Popen:
    specs = [{"vehicle": vehicle, **spec} for vehicle, (spec, _) in SCENARIOS.items()]
    proc = subprocess.Popen(
        [sys.executable, str(FAKE_STACK), json.dumps(specs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    line = proc.stdout.readline()  # blocks until READY or exit
    if line.strip() != "READY" or time.monotonic() > deadline:
        proc.kill()
        raise AssertionError(f"fake stack did not start: {line!r} {proc.stderr.read()}")
    return proc


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> Iterator[dict[str, Outcome]]:
    """Preflight outcome per vehicle, all runs concurrent against one fake-stack process."""
    run_dir = tmp_path_factory.mktemp("run")
    fake = _start_fake_stack()
    runs: dict[str, subprocess.Popen] = {}
    try:
        for vehicle, (_, extra) in SCENARIOS.items():
            args = [
                sys.executable,
                "-m",
                "vnd_tools.cli",
                "preflight",
                "--vehicle",
                vehicle,
                "--duration",
                str(LISTEN_S),
                "--run-dir",
                str(run_dir / vehicle),
                "--min-free-mb",
                "1",
                "--max-clock-offset-ms",
                LOADED_MACHINE_OFFSET_MS,
                "--json",
                str(run_dir / f"{vehicle}.json"),
                *extra,
            ]
            runs[vehicle] = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
            )
        results = {}
        for vehicle, proc in runs.items():
            stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
            json_path = run_dir / f"{vehicle}.json"
            results[vehicle] = Outcome(proc.returncode, stdout, stderr, json_path)
        yield results
    finally:
        for proc in runs.values():
            _stop(proc)
        _stop(fake)


def test_healthy_stack_passes(outcomes) -> None:
    result = outcomes["pf_ok"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(result.verdicts().values()) == {"PASS"}
    assert result.stdout.splitlines()[-1].startswith("preflight passed: 11 checks")
    assert "100.0 Hz" in result.row("mocap rate")
    assert "mode policy" in result.row("policy commands")
    assert "LIST: active v3" in result.row("bundle active")


def test_healthy_stack_json_report(outcomes) -> None:
    result = outcomes["pf_ok"]
    doc = json.loads(result.json_path.read_text())
    assert doc["passed"] is True and doc["vehicle"] == "pf_ok"
    assert [row["name"] for row in doc["rows"]] == list(result.verdicts())
    assert {row["verdict"] for row in doc["rows"]} == {"PASS"}


def test_failed_run_json_report_names_the_failed_rows(outcomes) -> None:
    doc = json.loads(outcomes["pf_faults"].json_path.read_text())
    assert doc["passed"] is False
    failed = {row["name"]: row for row in doc["rows"] if row["verdict"] == "FAIL"}
    assert set(failed) == FAULT_ROWS
    assert failed["learner"]["expected"].startswith("vnd/learner/status within")


def test_faults_fail_only_their_rows(outcomes) -> None:
    result = outcomes["pf_faults"]
    assert result.returncode == 1
    assert result.failed_rows() == FAULT_ROWS, result.stdout
    assert result.stdout.splitlines()[-1].startswith("preflight FAILED: 4 of 11 checks")


def test_slow_mocap_fails_with_the_measured_rate(outcomes) -> None:
    row = outcomes["pf_faults"].row("mocap rate")
    assert " FAIL " in row and "20.0 Hz" in row and "90.0-400.0 Hz" in row
    assert "too slow" in outcomes["pf_faults"].row("policy commands")


def test_version_mismatch_fails_naming_both_versions(outcomes) -> None:
    row = outcomes["pf_faults"].row("bundle versions")
    assert "encoder v2, policy v3" in row and "version mismatch" in row


def test_stale_bundle_fails_naming_the_learner_version(outcomes) -> None:
    result = outcomes["pf_stale"]
    assert result.returncode == 1
    assert result.failed_rows() == {"bundle versions", "learner"}, result.stdout
    row = result.row("bundle versions")
    assert "encoder v2, policy v2, learner latest v4" in row and "stale bundle" in row


def test_a_refused_learner_bundle_fails_the_learner_row(outcomes) -> None:
    row = outcomes["pf_stale"].row("learner")
    assert " FAIL " in row and f"BAD: newest bundle refused: {REFUSAL}" in row


def test_missing_learner_fails(outcomes) -> None:
    row = outcomes["pf_faults"].row("learner")
    assert " FAIL " in row and "no vnd/learner/status report in" in row


def test_inconsistent_thresholds_are_a_usage_error(capsys) -> None:
    """Checked before the middleware starts (in-process: no DDS participant is created)."""
    from vnd_tools.commands import preflight

    parser = argparse.ArgumentParser()
    preflight.add_arguments(parser)
    assert preflight.run(parser.parse_args(["--mocap-min-hz", "500"])) == 2
    assert "mocap_min_rate_hz 500.0 > mocap_max_rate_hz 400.0" in capsys.readouterr().err
    assert preflight.run(parser.parse_args(["--duration", "0"])) == 2


def test_topics_resolve_in_the_vehicle_namespace() -> None:
    from vnd_tools.commands import preflight

    parser = argparse.ArgumentParser()
    preflight.add_arguments(parser)
    pose = preflight.Topics.from_args(parser.parse_args(["--vehicle", "vnd2"]))
    assert (pose.mocap, pose.odom, pose.command) == (
        "/vnd2/mocap/pose",
        "/vnd2/odom",
        "/vnd2/vnd/command",
    )
    odom = preflight.Topics.from_args(
        parser.parse_args(["--mocap-type", "odometry", "--mocap-topic", "/mocap/vnd1/odom"])
    )
    assert odom.mocap == odom.odom == "/mocap/vnd1/odom"
