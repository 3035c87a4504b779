"""The ``vnd`` entry point: which middleware a subcommand's own process speaks."""

from __future__ import annotations

import os

import pytest
from vnd_tools.cli import main as vnd_main


def test_vnd_fly_watches_the_flight_on_dds_unless_told_otherwise(monkeypatch, capsys):
    """With the ROS wheels installed, "auto" would put ``vnd fly``'s monitor on rclpy, which
    cannot read the DDS source timestamps of the per-tick latency figures; an explicit choice
    is kept."""
    monkeypatch.delenv("VND_MIDDLEWARE", raising=False)
    with pytest.raises(SystemExit) as done:
        vnd_main(["fly", "--help"])
    assert done.value.code == 0
    assert os.environ["VND_MIDDLEWARE"] == "dds"
    monkeypatch.setenv("VND_MIDDLEWARE", "rclpy")
    with pytest.raises(SystemExit):
        vnd_main(["fly", "--help"])
    assert os.environ["VND_MIDDLEWARE"] == "rclpy"
    capsys.readouterr()
