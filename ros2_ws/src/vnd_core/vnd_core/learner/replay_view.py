"""The continual learner's replay: how it is built, and what the learner reads from it
(datasets, fit-window counts, eviction descriptors, latent spread)."""

from __future__ import annotations

import numpy as np
import torch

from vnd_core.dynamics import NominalModel
from vnd_core.learner.config import LearnerConfig
from vnd_core.learner.records import TickRecords
from vnd_core.learner.replay import ReplayBuffer
from vnd_core.learner.segmenter import to_segments
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.data import NO_LABEL, TransitionDataset
from vnd_core.vnd.features import prior_error
from vnd_core.vnd.metrics import latent_knn_accuracy
from vnd_core.vnd.model import EncodedLatents, VNDModel


def new_replay(config: LearnerConfig) -> ReplayBuffer:
    """An empty replay with the capacity and eviction rule of ``config``."""
    return ReplayBuffer(
        config.capacity_ticks,
        config.control_period_s,
        config.gap_factor,
        config.chunk_ticks,
        config.eviction_clusters,
        config.eviction_slack,
        config.seed,
    )


def replay_dataset(
    replay: ReplayBuffer,
    config: LearnerConfig,
    label_ids: dict[str, int],
    prior: NominalModel,
    action_delay_ticks: int,
) -> TransitionDataset:
    """Transition dataset of every learnable segment of ``replay`` (``label_ids`` grows with
    the condition names it meets)."""
    segments = to_segments(
        replay.records,
        config.control_period_s,
        config.gap_factor,
        label_ids,
        velocity_half_window=config.velocity_half_window,
    )
    return TransitionDataset(prior, segments, action_delay_ticks)


def fit_window_count(replay: ReplayBuffer, min_run_ticks: int) -> int:
    """Fit windows ``replay`` holds now, in runs of at least ``min_run_ticks`` ticks (cheap:
    from stamps and modes only)."""
    chunks, _ = replay.chunks(min_run_ticks)
    if not chunks:
        return 0
    lengths: list[int] = []
    run_stop = -1
    for chunk in chunks:  # chunks of one run are adjacent: rebuild run lengths
        if chunk.start == run_stop:
            lengths[-1] += chunk.stop - chunk.start
        else:
            lengths.append(chunk.stop - chunk.start)
        run_stop = chunk.stop
    return sum(n - min_run_ticks + 1 for n in lengths)


def chunk_descriptors(
    model: VNDModel | None, vehicle: VehicleParams, records: TickRecords, chunks: list[slice]
) -> np.ndarray:
    """Condition descriptor (M, d) per chunk: ``model``'s latent of the chunk's last context
    window, or, with no model yet, the chunk's mean prior error."""
    if model is not None:
        c, d = model.context_len, model.config.action_delay_ticks
        # transition t is paired with the action logged d ticks before it (data.py)
        states = torch.stack(
            [torch.as_tensor(records.state[s.stop - c - 1 : s.stop]) for s in chunks]
        ).float()
        actions = torch.stack(
            [torch.as_tensor(records.action[s.stop - c - 1 - d : s.stop - 1 - d]) for s in chunks]
        ).float()
        with torch.no_grad():
            return model.encode(states, actions).numpy()
    prior = NominalModel(vehicle)
    rows = []
    with torch.no_grad():
        for s in chunks:
            states = torch.as_tensor(records.state[s]).float()
            actions = torch.as_tensor(records.action[s]).float()
            rows.append(prior_error(prior, states[:-1], actions[:-1], states[1:]).mean(0))
    return torch.stack(rows).numpy()


def latent_metrics(latents: EncodedLatents | None) -> dict:
    """Spread of re-encoded latents and, with condition labels, their k-NN accuracy."""
    if latents is None or len(latents.z) == 0:
        return {}
    out = {
        "windows": len(latents.z),
        "z_mean_norm": float(latents.z.mean(0).norm()),
        "z_std_mean": float(latents.z.std(0).mean()) if len(latents.z) > 1 else 0.0,
    }
    labelled = latents.labels[latents.labels != NO_LABEL]
    if len(labelled.unique()) >= 2 and len(labelled) > 5:
        out["knn_accuracy"] = latent_knn_accuracy(latents.z, latents.labels, max_points=1000)
    return out
