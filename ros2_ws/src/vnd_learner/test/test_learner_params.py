"""The learner's configuration as ROS parameters, in real node processes on both backends:
every LearnerConfig field declared with its description under its nested name, the preset as
defaults, explicit values over it, and start-up refusals that name the parameter."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from vnd_core.learner import LearnerConfig
from vnd_core.learner.settings import config_mapping, flatten, learner_preset, with_overrides

START_TIMEOUT_S = 60.0  # a node process imports torch: slow on a busy 2-core machine


def run_learner(args: list[str], cwd: Path, timeout_s: float = START_TIMEOUT_S) -> Any:
    """``python -m vnd_learner.learner_node ARGS`` to its end, on the middleware under test."""
    env = dict(os.environ, VND_MIDDLEWARE=os.environ.get("VND_NODE_MIDDLEWARE", "dds"))
    return subprocess.run(
        [sys.executable, "-m", "vnd_learner.learner_node", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout_s,
    )


def field_types(cls: type, prefix: str = "") -> dict[str, Any]:
    """Dotted name -> annotation of every leaf field of dataclass ``cls`` and its sections."""
    hints = typing.get_type_hints(cls)
    leaves: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            leaves.update(field_types(hints[f.name], f"{prefix}{f.name}."))
        else:
            leaves[prefix + f.name] = hints[f.name]
    return leaves


def ros_type_word(hint: Any) -> str:
    """The parameter type a field annotation should be declared with ('integer', ...)."""
    words = {bool: "bool", int: "integer", float: "double", str: "string"}
    args = [a for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis]
    if typing.get_origin(hint) in (list, tuple):
        return words[args[0]] + "_array"
    return words[hint if hint in words else args[0]]  # X or X | None


def test_every_learner_field_is_declared_with_description_preset_defaults_and_overrides(
    tmp_path: Path, middleware: str
) -> None:
    params = tmp_path / "learner.yaml"
    params.write_text(
        "/**:\n  ros__parameters:\n    preset: quick\n"
        "    trainer:\n      learning_rate: 0.0005\n      reference_kind_probs: [0.2, 0.5, 0.3]\n"
        "    fit:\n      max_time_s: 3\n"
    )
    args = ["--describe-parameters", "--ros-args", "--params-file", str(params)]
    args += ["-p", "trainer.iterations:=7", "-p", "validation.behaviour_check:=false"]
    done = run_learner(args, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {row["name"]: row for row in map(json.loads, done.stdout.splitlines())}

    expected = with_overrides(
        learner_preset("quick"),
        {
            "trainer.learning_rate": 5e-4,
            "trainer.reference_kind_probs": [0.2, 0.5, 0.3],
            "fit.max_time_s": 3.0,
            "trainer.iterations": 7,
            "validation.behaviour_check": False,
        },
        "test",
    )
    values = flatten(config_mapping(expected))
    for name, hint in field_types(LearnerConfig).items():
        assert name in rows, f"LearnerConfig field {name} is not a declared parameter"
        row = rows[name]
        assert row["description"].strip(), f"parameter {name} has no description"
        assert row["type"] == ros_type_word(hint), row
        assert row["value"] == values[name], row
    assert rows["preset"]["value"] == "quick" and rows["run_dir"]["type"] == "string"
    # an optional field the preset leaves unset stays unset
    assert values["refine_fit_steps"] is None and rows["refine_fit_steps"]["type"] == "integer"
    # descriptions come from the field's trailing comment, or the comment lines above it
    assert "optimiser steps" in rows["trainer.iterations"]["description"]
    assert "new ticks whose window" in rows["min_unexplained_ticks"]["description"]


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (
            "trainer.iterations:=many",
            "parameter 'trainer.iterations' from -p flag 'trainer.iterations:=many': "
            "expected int, got str 'many'",
        ),
        (
            "trainer.iterationz:=3",
            "parameter 'trainer.iterationz' from -p flag 'trainer.iterationz:=3' is not "
            "declared by node '/learner' (did you mean 'trainer.iterations'?",
        ),
        (  # the JSON string as it used to be given
            """learner_overrides:='{"fit": {"steps": 3}}'""",
            "parameter 'learner_overrides' from -p flag "
            """'learner_overrides:='{"fit": {"steps": 3}}'' no longer exists: set LearnerConfig """
            "fields as parameters of their own, by nested name (-p trainer.iterations:=100",
        ),
        ("preset:=fastest", "parameter 'preset': unknown learner preset 'fastest'"),
        ("gap_factor:=3.0", "learner parameters: gap_factor must be within (1, 2), got 3.0"),
    ],
)
def test_start_up_refuses_a_bad_learner_parameter_naming_it(
    tmp_path: Path, middleware: str, flag: str, message: str
) -> None:
    run_dir = tmp_path / "run"
    args = ["--ros-args", "-p", f"run_dir:={run_dir}", "-p", "learn:=false", "-p", flag]
    done = run_learner(args, tmp_path)
    assert done.returncode != 0
    assert message in done.stdout + done.stderr
    assert not (run_dir / "learner_config.yaml").exists()  # refused before anything ran


def test_the_typed_file_round_trips_and_names_what_is_wrong(tmp_path: Path) -> None:
    from vnd_core.config_io import ConfigError
    from vnd_core.learner.settings import read_config_file, write_config_file

    config = with_overrides(learner_preset("standard"), {"trainer.iterations": 9}, "test")
    path = write_config_file(tmp_path / "learner_config.yaml", config, "standard")
    assert read_config_file(path) == config

    document = yaml.safe_load(path.read_text())
    document["learner"]["trainer"]["iterationz"] = 9
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match="trainer: unknown field 'iterationz'"):
        read_config_file(path)
    del document["learner"]["trainer"]["iterationz"]
    document["learner"]["trainer"]["iterations"] = "nine"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match="iterations: expected an integer, got 'nine'"):
        read_config_file(path)
    del document["learner"]["trainer"]["iterations"]
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match=r"missing field\(s\) trainer\.iterations"):
        read_config_file(path)
    with pytest.raises(ConfigError, match="expected 3 values"):
        bad = dataclasses.replace(
            config, trainer=dataclasses.replace(config.trainer, reference_kind_probs=(1.0,))
        )
        write_config_file(tmp_path / "bad.yaml", bad, "standard")


def test_worker_process_refuses_a_config_file_with_a_mistyped_field(tmp_path: Path) -> None:
    from vnd_core.bundle import shipped_bundle_path
    from vnd_core.learner.settings import write_config_file
    from vnd_flight.learner_store.ipc import read_frame

    path = write_config_file(tmp_path / "learner_config.yaml", learner_preset("quick"), "quick")
    document = yaml.safe_load(path.read_text())
    document["learner"]["fit"]["steps"] = "many"
    path.write_text(yaml.safe_dump(document))
    command = [sys.executable, "-m", "vnd_learner.worker", "--vehicle", "agile", "--nice", "0"]
    command += ["--bundle", str(shipped_bundle_path()), "--config", str(path)]
    worker = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert worker.stdout is not None
        frame = read_frame(worker.stdout)
        assert worker.wait(timeout=START_TIMEOUT_S) == 2  # EXIT_ERROR: the node reports it
    finally:
        worker.kill()
        worker.wait()
    assert frame is not None and frame.kind == "error"
    assert "fit: steps: expected an integer, got 'many'" in frame.meta["message"]
    assert str(path) in frame.meta["message"]
