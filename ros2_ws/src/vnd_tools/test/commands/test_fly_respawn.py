"""``vnd fly`` tells an expected learner respawn from a failed stack: a real launch of stand-in
processes (a sim that ends the flight with 'done', a learner that SIGKILLs itself once), the
real launcher, recorder and flight monitor over DDS."""

from __future__ import annotations

import io
import json
import os
import sys
import uuid
from pathlib import Path

import pytest
from vnd_ros.launch.resolve import default_environment
from vnd_tools.commands.fly import FlightOptions, fly
from vnd_tools.flight_bag import HOST_CPU_FILE, HOST_STALLS_FILE, META_FILE

FIXTURES = Path(__file__).resolve().parent / "fly_fixtures"


def _fly(tmp_path: Path, monkeypatch, launch_file: str):
    monkeypatch.setenv("VND_TEST_PYTHON", sys.executable)
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("VND_TEST_MARKERS", str(markers))
    progress = io.StringIO()
    options = FlightOptions(
        scenario="recurring_wind",
        out=tmp_path / "run",
        vehicle=f"fly{uuid.uuid4().hex[:8]}",
        launch_file=FIXTURES / launch_file,
        timeout_s=60.0,
        measure_latency=False,
        progress=progress,
    )
    outcome = fly(options)
    meta = json.loads((options.out / META_FILE).read_text())
    return outcome, meta, progress.getvalue()


def test_a_respawned_learner_is_reported_as_a_respawn_not_a_failure(tmp_path, monkeypatch, capfd):
    outcome, meta, progress = _fly(tmp_path, monkeypatch, "respawn.launch.yaml")
    assert (outcome.reason, outcome.exit_code) == ("done", 0), (outcome, progress)
    assert outcome.failures == []
    (respawn,) = outcome.respawns
    assert "'learner'" in respawn and "exited with code -9" in respawn
    assert "respawned (respawn: true)" in respawn
    assert meta["end_reason"] == "done" and meta["stack_exit_code"] == 0
    assert meta["failures"] == [] and meta["respawns"] == outcome.respawns
    stderr = capfd.readouterr().err
    assert "[stack] expected respawn: 'learner'" in stderr
    assert "respawning 'learner'" in stderr and "(expected: respawn: true)" in stderr
    assert "stack failed" not in progress
    # host diagnostics run only when asked for (--host-diagnostics)
    assert not (tmp_path / "run" / HOST_CPU_FILE).exists()
    assert not (tmp_path / "run" / HOST_STALLS_FILE).exists()


def test_a_learner_out_of_respawns_fails_the_stack(tmp_path, monkeypatch):
    outcome, meta, progress = _fly(tmp_path, monkeypatch, "respawn_exhausted.launch.yaml")
    assert (outcome.reason, outcome.exit_code) == ("stack failed", 1), (outcome, progress)
    assert outcome.respawns == []
    assert any("not respawning 'learner' again" in line for line in outcome.failures)
    assert any("'learner'" in line and "exit code -9" in line for line in outcome.failures)
    assert meta["stack_exit_code"] == 1 and meta["failures"] == outcome.failures


@pytest.fixture(autouse=True)
def _loopback(monkeypatch):
    """fly() sets up the project's loopback DDS configuration unless one is chosen."""
    for key, value in default_environment(os.environ).items():
        monkeypatch.setenv(key, value)
