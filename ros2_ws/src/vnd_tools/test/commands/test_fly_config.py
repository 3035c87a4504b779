"""``vnd fly`` hands its options to the nodes through the run's copy of config/: the learner's
``learn`` (--no-learn) and the policy's ``host_diagnostics`` (--host-diagnostics, the per-tick
schedstat reads of the tick thread), while the repository's files stay as they are."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml
from vnd_policy.parameters import PolicyNodeConfig
from vnd_tools.commands.fly import CONFIG_DIR, FlightOptions, add_arguments, prepare_config


def _parameters(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["/**"]["ros__parameters"]


@pytest.mark.parametrize("host_diagnostics", [False, True])
def test_the_run_config_carries_the_host_diagnostics_choice(tmp_path, host_diagnostics):
    target = prepare_config(tmp_path / "config", learn=False, host_diagnostics=host_diagnostics)
    assert _parameters(target / "policy.yaml")["host_diagnostics"] is host_diagnostics
    assert _parameters(target / "learner.yaml")["learn"] is False
    # everything else of the policy's file is the repository's, which keeps the reads off
    shipped = _parameters(CONFIG_DIR / "policy.yaml")
    assert shipped["host_diagnostics"] is False
    copied = _parameters(target / "policy.yaml")
    assert {**copied, "host_diagnostics": False} == shipped


def test_host_diagnostics_are_off_unless_asked_for():
    assert PolicyNodeConfig().host_diagnostics is False
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert FlightOptions.from_args(parser.parse_args([])).host_diagnostics is False
    asked = parser.parse_args(["--host-diagnostics"])
    assert FlightOptions.from_args(asked).host_diagnostics is True
