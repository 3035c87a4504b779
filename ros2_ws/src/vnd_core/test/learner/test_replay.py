"""Bounded replay: cluster-balanced eviction keeps a rare condition that FIFO would drop."""

from __future__ import annotations

import numpy as np
import torch
from vnd_core.bundle import Bundle
from vnd_core.dynamics import NominalModel
from vnd_core.learner.continual import ContinualLearner, LearnerConfig
from vnd_core.learner.records import TickRecords, records_from_arrays
from vnd_core.learner.replay import kmeans
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd.model import VNDModel, VNDModelConfig
from vnd_core.vnd.synthetic import simulate_with_forces

VEHICLE = load_vehicle("agile")
PERIOD_S = 0.02
TICKS = 250  # 5 s per segment


def flights(forces: list[tuple[float, float, float]], names: list[str]) -> TickRecords:
    """Consecutive segments (1 s apart) flown by the prior plus a constant force each."""
    prior = NominalModel(VEHICLE)
    generator = torch.Generator().manual_seed(0)
    segments = simulate_with_forces(prior, torch.tensor(forces), TICKS, generator)
    period_ns = round(PERIOD_S * 1e9)
    batches = [
        records_from_arrays(
            s.states.numpy(), s.actions.numpy(), i * (TICKS + 50) * period_ns, PERIOD_S, name
        )
        for i, (s, name) in enumerate(zip(segments, names, strict=True))
    ]
    return TickRecords.concat(batches)


def base_bundle() -> Bundle:
    torch.manual_seed(0)
    policy = PolicyNet(VEHICLE, PolicyConfig(hidden=(16,)))
    return Bundle(version=1, parent_version=0, policy=policy, vehicle=VEHICLE)


def test_kmeans_is_seeded_and_finds_separated_groups():
    rng = np.random.default_rng(3)
    points = np.concatenate([rng.normal(0, 0.1, (30, 2)), rng.normal(5, 0.1, (10, 2))])
    a, b = kmeans(points, 2, seed=1), kmeans(points, 2, seed=1)
    np.testing.assert_array_equal(a, b)
    assert len(set(a[:30])) == 1 and len(set(a[30:])) == 1 and a[0] != a[-1]


def test_eviction_keeps_a_rare_condition_that_fifo_would_drop():
    # The rare gusty condition is flown first (oldest), then a long calm stretch.
    names = ["wind"] + ["calm"] * 9
    forces = [(3.0, 0.0, 0.0)] + [(0.0, 0.0, 0.0)] * 9
    records = flights(forces, names)
    capacity = 1250  # half of the 2500 ticks
    config = LearnerConfig.quick(capacity_ticks=capacity, chunk_ticks=50, eviction_clusters=4)
    learner = ContinualLearner(VEHICLE, config, base_bundle())
    learner.ingest(records)
    stored = learner.replay.records
    report = learner.last_eviction
    assert report is not None and report.evicted_ticks >= len(records) - capacity
    assert len(stored) <= capacity
    wind_kept = int((stored.condition == "wind").sum())
    # FIFO would keep none of the (oldest) wind ticks; the balanced rule keeps most of them.
    assert wind_kept >= 0.6 * TICKS, report
    assert int((stored.condition == "calm").sum()) > 0
    # Within the common condition the newest data stays.
    assert stored.stamp_ns[-1] == records.stamp_ns[-1]


def test_eviction_is_deterministic():
    records = flights([(3.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)], ["w", "c", "c"])
    config = LearnerConfig.quick(capacity_ticks=400, chunk_ticks=50, eviction_clusters=3)
    kept = []
    for _ in range(2):
        learner = ContinualLearner(VEHICLE, config, base_bundle())
        learner.ingest(records)
        kept.append(learner.replay.records.stamp_ns)
    np.testing.assert_array_equal(*kept)


def test_eviction_with_a_model_uses_encoder_latents():
    records = flights([(3.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)], ["w", "c", "c"])
    torch.manual_seed(0)
    bundle = base_bundle()
    bundle.model = VNDModel(VEHICLE, VNDModelConfig(latent_dim=bundle.policy.latent_dim))
    config = LearnerConfig.quick(capacity_ticks=400, chunk_ticks=50, eviction_clusters=3)
    learner = ContinualLearner(VEHICLE, config, bundle)
    learner.replay.add(records)  # stored without evicting, to look at the descriptors first
    chunks, _ = learner.replay.chunks(31)
    latents = learner._descriptors(learner.replay.records, chunks)
    assert latents.shape == (len(chunks), bundle.model.latent_dim)
    learner = ContinualLearner(VEHICLE, config, bundle)  # now through the public path
    learner.ingest(records)
    assert len(learner.replay) <= 400 and learner.last_eviction.clusters == 3
