"""The worker's update loop in-process: tick frames that arrive during a refine preempt it."""

from __future__ import annotations

import io
import queue

import torch
from vnd_core.bundle import Bundle
from vnd_core.dynamics import NominalModel
from vnd_core.learner import ContinualLearner, LearnerConfig
from vnd_core.learner.records import TickRecords, records_from_arrays
from vnd_core.learner.segmenter import to_segments
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.trainer import TrainerConfig
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.fit import FitConfig
from vnd_core.vnd.model import VNDModel, VNDModelConfig
from vnd_core.vnd.synthetic import simulate_with_forces
from vnd_flight.learner_store.ipc import Frame, read_frame
from vnd_learner.worker import Channel, run_update

VEHICLE = load_vehicle("agile")
PERIOD_S = 0.02


def flight(force_n: tuple[float, float, float], start_s: float) -> TickRecords:
    """150 ticks (3 s) under a constant external force, stamped from ``start_s``."""
    prior = NominalModel(VEHICLE)
    (segment,) = simulate_with_forces(
        prior, torch.tensor([force_n]), 150, torch.Generator().manual_seed(0)
    )
    start_ns = round(start_s * 1e9)
    return records_from_arrays(
        segment.states.numpy(), segment.actions.numpy(), start_ns, PERIOD_S, "flight"
    )


def bundle_knowing(records: TickRecords) -> Bundle:
    """A bundle whose model's residual is the mean prior error of ``records`` (whatever z)."""
    model = VNDModel(VEHICLE, VNDModelConfig(latent_dim=4))
    dataset = TransitionDataset(model.prior, to_segments(records, PERIOD_S), 2)
    model.residual.set_constant(dataset.tensors()["targets"].mean(dim=0))
    torch.manual_seed(0)
    policy = PolicyNet(VEHICLE, PolicyConfig(latent_dim=4, hidden=(16, 16)))
    return Bundle(3, 2, policy, VEHICLE, model=model)


def test_ticks_arriving_during_a_refine_are_ingested_and_preempt_it():
    wind = flight((2.0, 0.0, 0.0), 0.0)
    calm = flight((0.0, 0.0, 0.0), 10.0)
    config = LearnerConfig.quick(
        min_new_ticks=50,
        min_unexplained_ticks=100,
        fit=FitConfig(steps=10, batch_size=16, log_every=5),
        trainer=TrainerConfig(num_envs=8, horizon_ticks=4, episode_ticks=40, iterations=2),
    )
    learner = ContinualLearner(VEHICLE, config, bundle_knowing(wind))
    learner.ingest(wind)  # known to the active model: the next update is a refine
    inbox: queue.Queue = queue.Queue()
    inbox.put(Frame("ticks", arrays=calm.to_arrays()))  # arrives while it runs
    inbox.put(Frame("stop"))
    held: list[Frame] = []
    stream = io.BytesIO()
    run_update(learner, Channel(stream), inbox, held)

    stream.seek(0)
    frames = []
    while (frame := read_frame(stream)) is not None:
        frames.append(frame)
    result = frames[-1]
    assert result.kind == "result" and result.meta["preempted"] is True
    assert result.meta["accepted"] is False and "preempted" in result.meta["reason"]
    assert "bundle" not in result.blobs
    assert learner.ticks_stored == 300  # the calm ticks were ingested mid-update
    assert [f.kind for f in held] == ["stop"]  # kept for the main loop
    assert learner.should_update(1e6)  # the update that learns the new flight is due at once
