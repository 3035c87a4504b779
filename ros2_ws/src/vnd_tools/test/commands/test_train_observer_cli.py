"""``vnd train-observer`` and the shipped force-observer start bundle it made."""

from __future__ import annotations

import torch
from vnd_core.bundle import load_bundle, shipped_bundle_path, shipped_observer_bundle_path
from vnd_core.evaluation.continual_loop import Method, run_method
from vnd_core.scenario import Phase, Scenario, WindEvent
from vnd_flight.evaluation_flight import fly_runtime
from vnd_tools.cli import main as vnd_main

WINDY = Scenario(
    name="windy",
    duration_s=12.0,
    phases=(Phase("calm", 0.0), Phase("wind", 2.0)),
    events=(WindEvent(type="wind", at_s=2.0, kind="constant", velocity_mps=(4.0, 0.0, 0.0)),),
)


def test_the_command_writes_a_force_input_bundle_whose_force_starts_as_dobs(tmp_path, capsys):
    """A short training (the chain, not its budget): the written bundle loads, its policy reads
    a force input, and z starts silent (the learner gives it its meaning)."""
    out = tmp_path / "observer.safetensors"
    code = vnd_main(
        ["train-observer", "--out", str(out), "--iterations", "2", "--envs", "16", "--seed", "3"]
    )
    assert code == 0
    assert "wrote" in capsys.readouterr().out
    bundle = load_bundle(out)
    assert bundle.policy.force_dim == 3
    assert bundle.summary["force_input_from"] == "dob"
    latent = bundle.policy.observation.layout.blocks[-1]
    assert latent[0] == "latent"
    first = bundle.policy.net[0].weight
    assert torch.all(first[:, -latent[1] :] == 0), "z must start silent"


def test_the_shipped_observer_start_holds_a_wind_the_base_bundle_is_blown_off_by():
    """The shipped start bundle with its observer in the loop, on the true plant: a 4 m/s wind
    the base bundle (blind, z = 0) flies several centimetres off is held within 2 cm."""
    errors = {}
    for name, path in (
        ("base", shipped_bundle_path()),
        ("observer", shipped_observer_bundle_path()),
    ):
        run = run_method(Method(name, load_bundle(path)), WINDY, seed=0, fly=fly_runtime)
        errors[name] = float(run.error_m[run.time_s > 6.0].mean())
    assert errors["base"] > 0.05, errors
    assert errors["observer"] < 0.02, errors
