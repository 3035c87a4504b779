"""Replay bags (rosbags, MCAP), ``vnd learn`` and ``vnd model-eval`` on a short simulated flight."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from rosbags.rosbag2 import Reader
from vnd_core.bundle import Bundle, load_bundle, save_bundle, shipped_bundle_path
from vnd_core.evaluation.replay_bag import (
    REPLAY_TOPIC,
    TRANSITION_TYPE,
    ReplayBagError,
    read_transitions,
    write_transitions,
)
from vnd_core.learner import TickRecords
from vnd_core.learner.records import MODE_FALLBACK_HOLD, MODE_POLICY
from vnd_core.plant import TruePlant
from vnd_core.policy import PolicyRunner
from vnd_core.scenario import Phase, Scenario, WindEvent
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import FitConfig, VNDModel, fit_vnd
from vnd_tools.cli import main as vnd_main
from vnd_tools.commands import learn, model_eval

VEHICLE = load_vehicle("agile")
T0_NS = 1_700_000_000_000_000_000  # a wall-clock-like first stamp (seconds and nanoseconds)
WINDY = Scenario(
    name="windy",
    duration_s=8.0,
    phases=(Phase("calm", 0.0), Phase("wind", 1.0)),
    events=(WindEvent(type="wind", at_s=1.0, kind="constant", velocity_mps=(4.0, 0.0, 0.0)),),
)


@pytest.fixture(scope="module")
def flight() -> TickRecords:
    """8 s of hover in wind flown by the shipped base policy, as tick records."""
    runner = PolicyRunner(load_bundle(shipped_bundle_path()).policy, WINDY.reference)
    plant = TruePlant(VEHICLE, WINDY, batch_size=1, seed=2)
    plant.reset(WINDY.start_state(1))
    rows = {"stamp": [], "state": [], "action": []}
    for _ in range(400):
        t_s = plant.time_s
        measured = plant.measure()[0].double().numpy()
        action = runner.act(measured, t_s)
        plant.step(torch.from_numpy(action).float())
        rows["stamp"].append(T0_NS + round(t_s * 1e9))
        rows["state"].append(measured)
        rows["action"].append(action)
    n = len(rows["stamp"])
    return TickRecords(
        stamp_ns=np.array(rows["stamp"], dtype=np.int64),
        state=np.stack(rows["state"]),
        action=np.stack(rows["action"]),
        mode=np.full(n, MODE_POLICY, dtype=np.uint8),
        policy_version=np.ones(n, dtype=np.uint32),
        encoder_version=np.zeros(n, dtype=np.uint32),
    )


@pytest.fixture(scope="module")
def bag(flight, tmp_path_factory):
    """The flight as an MCAP bag of Transition messages (newest ticks in fallback mode)."""
    flight = flight.take(slice(None))
    flight.mode[-20:] = MODE_FALLBACK_HOLD
    path = tmp_path_factory.mktemp("bags") / "flight"
    write_transitions(path, flight, latents=[np.full(8, 0.5)] * len(flight))
    return path


def test_bag_round_trip(bag, flight):
    with Reader(bag) as reader:
        (connection,) = reader.connections
        assert connection.topic == REPLAY_TOPIC and connection.msgtype == TRANSITION_TYPE
        assert reader.message_count == len(flight)
    back = read_transitions(bag)
    assert np.array_equal(back.stamp_ns, flight.stamp_ns)
    assert np.allclose(back.state, flight.state) and np.allclose(back.action, flight.action)
    assert np.sum(back.mode == MODE_FALLBACK_HOLD) == 20
    # a directory of bags (like the learner's replay store) reads every bag, deduplicated
    assert len(read_transitions(bag.parent)) == len(flight)
    with pytest.raises(ReplayBagError, match="no vnd_msgs/msg/Transition topic named /other"):
        read_transitions(bag, topic="/other")
    empty = bag.parent / "empty"
    empty.mkdir()
    with pytest.raises(ReplayBagError, match="neither a rosbag2 bag"):
        read_transitions(empty)


def test_model_eval_reports_prior_and_model_errors(bag, tmp_path):
    records = read_transitions(bag)
    torch.manual_seed(0)
    model = VNDModel(VEHICLE)
    dataset, _ = model_eval.replay_dataset(model, records)
    fit_vnd(model, dataset, FitConfig.quick(steps=60), warm_start=False)
    base = load_bundle(shipped_bundle_path())
    bundle_path = save_bundle(
        Bundle(version=2, parent_version=1, policy=base.policy, vehicle=VEHICLE, model=model),
        tmp_path / "v2.safetensors",
    )
    out, latents = tmp_path / "eval.json", tmp_path / "latents.npz"
    argv = ["model-eval", "--bag", str(bag), "--bundle", str(bundle_path), "--json", str(out)]
    assert vnd_main([*argv, "--latents", str(latents)]) == 0
    report = json.loads(out.read_text())
    for key in ("prior_err_m", "model_err_m"):
        assert set(report[key]) == {"1", "10", "50"}
    # fallback ticks are not learnable: 380 POLICY ticks, one segment; the first d states
    # have no delayed action (action_delay_ticks)
    delay = model.config.action_delay_ticks
    assert report["segments"] == 1 and report["transitions"] == 379 - delay
    assert report["model_err_m"]["10"] < report["prior_err_m"]["10"]  # the wind is learned
    saved = np.load(latents)
    policy_stamps = records.stamp_ns[records.mode == MODE_POLICY]
    assert saved["z"].shape == (len(policy_stamps) - model.context_len - delay, 8)
    # the first latent serves the state after the first C context transitions
    assert saved["stamp_ns"][0] == policy_stamps[model.context_len + delay]
    assert np.all(np.diff(saved["stamp_ns"]) == 20_000_000) and int(saved["bundle_version"]) == 2


def test_model_eval_needs_a_model(bag, tmp_path):
    argv = [
        "--bag",
        str(bag),
        "--bundle",
        str(shipped_bundle_path()),
        "--json",
        str(tmp_path / "x"),
    ]
    parser = _parser(model_eval)
    assert model_eval.run(parser.parse_args(argv)) == 2


def test_learn_writes_the_next_version(bag, tmp_path, capsys):
    out = tmp_path / "learned.safetensors"
    argv = ["--bag", str(bag), "--init", str(shipped_bundle_path()), "--out", str(out), "--quick"]
    argv += ["--fit-steps", "30", "--train-iterations", "2", "--summary", str(tmp_path / "s.json")]
    code = learn.run(_parser(learn).parse_args(argv))
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["ticks_read"] == 400 and summary["ticks_stored"] == 380
    assert summary["metrics"]["fit"]["steps"] == 30
    if code == 0:
        learned = load_bundle(out)
        assert learned.version == 2 and learned.parent_version == 1 and learned.model is not None
    else:  # a rejected candidate is reported and not written
        assert code == learn.EXIT_REJECTED and not out.exists()
        assert "rejected" in capsys.readouterr().out and summary["reason"]
    progress = capsys.readouterr().err
    for stage in ("fit", "train", "validate"):
        assert f"vnd learn: {stage} " in progress, progress


def test_learn_trains_the_new_policy_further_in_improvement_rounds(bag, tmp_path, capsys):
    out = tmp_path / "learned.safetensors"
    argv = ["--bag", str(bag), "--init", str(shipped_bundle_path()), "--out", str(out), "--quick"]
    argv += ["--fit-steps", "30", "--train-iterations", "2", "--improve-rounds", "2"]
    code = learn.run(_parser(learn).parse_args(argv))
    printed = capsys.readouterr()
    if code != 0:  # the update itself was rejected: no rounds
        assert code == learn.EXIT_REJECTED and "improvement round" not in printed.out
        return
    rounds = [line for line in printed.out.splitlines() if "improvement round" in line]
    assert rounds or "improvement paused" in printed.out, printed.out
    assert "vnd learn: improve " in printed.err  # each round reports its progress
    learned = load_bundle(out)
    accepted = sum(": v" in line for line in rounds)
    assert learned.version == 2 + accepted and learned.model is not None


def test_learn_refuses_a_bag_without_learnable_data(flight, tmp_path):
    idle = flight.take(slice(0, 50))
    idle.mode[:] = MODE_FALLBACK_HOLD
    path = write_transitions(tmp_path / "idle", idle)
    argv = ["--bag", str(path), "--init", str(shipped_bundle_path()), "--out", str(tmp_path / "o")]
    assert learn.run(_parser(learn).parse_args(argv)) == 2
    assert not (tmp_path / "o").exists()


def _parser(module):
    import argparse

    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser
