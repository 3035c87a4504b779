"""Model-quality figures: open-loop prediction error and how well latents separate conditions."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vnd_core.state import POS
from vnd_core.vnd.data import NO_LABEL, TransitionDataset
from vnd_core.vnd.model import VNDModel


def _evenly(starts: torch.Tensor, max_windows: int | None) -> torch.Tensor:
    """At most ``max_windows`` of ``starts``, spread evenly over the data (deterministic)."""
    if max_windows is None or len(starts) <= max_windows:
        return starts
    return starts[torch.linspace(0, len(starts) - 1, max_windows).round().long()]


@torch.no_grad()
def open_loop_errors(
    model: VNDModel,
    dataset: TransitionDataset,
    horizons: Sequence[int] = (1, 10, 50),
    max_windows: int | None = 2000,
) -> dict[str, dict[str, float]]:
    """Mean position error (m) after H open-loop steps, prior alone vs prior + residual(z).

    For each horizon H, every window with H target transitions (at most ``max_windows``, evenly
    spread) is encoded from its context, then both models roll out the logged actions from the
    first predicted-from state; the error is ||p_pred - p_true|| at step H, averaged over
    windows. Returns ``{"prior_err_m": {"H": e}, "model_err_m": {"H": e},
    "num_windows": {"H": n}}``; horizons without any window are left out.
    """
    model.check_dataset(dataset)
    result: dict[str, dict[str, float]] = {"prior_err_m": {}, "model_err_m": {}, "num_windows": {}}
    was_training = model.training
    model.eval()
    try:
        for horizon in horizons:
            starts = _evenly(dataset.window_starts(model.context_len, horizon), max_windows)
            if len(starts) == 0:
                continue
            batch = dataset.gather(starts, model.context_len, horizon)
            z = model.encoder(batch.context)
            initial, truth = batch.states[:, 0], batch.states[:, -1, POS]
            learned = model.rollout(initial, batch.actions, z)[:, -1, POS]
            prior = model.rollout_prior(initial, batch.actions)[:, -1, POS]
            key = str(horizon)
            result["prior_err_m"][key] = float((prior - truth).norm(dim=-1).mean())
            result["model_err_m"][key] = float((learned - truth).norm(dim=-1).mean())
            result["num_windows"][key] = len(starts)
    finally:
        model.train(was_training)
    return result


def latent_knn_accuracy(
    z: torch.Tensor, labels: torch.Tensor, k: int = 5, max_points: int | None = 3000
) -> float:
    """Leave-one-out k-NN accuracy of predicting ``labels`` (M,) from latents ``z`` (M, nz).

    Points labelled NO_LABEL are ignored; at most ``max_points`` (evenly spread) are used.
    Ties in the vote go to the smallest label. Raises ValueError with fewer than k + 1 points.
    """
    keep = labels != NO_LABEL
    z, labels = z[keep], labels[keep]
    index = _evenly(torch.arange(len(z)), max_points)
    z, labels = z[index], labels[index]
    if len(z) <= k:
        raise ValueError(f"k-NN with k={k} needs more than {k} labelled latents, got {len(z)}")
    dist = torch.cdist(z, z)
    dist.fill_diagonal_(float("inf"))
    neighbours = labels[dist.topk(k, largest=False).indices]  # (M, k)
    classes = labels.unique()
    votes = (neighbours[..., None] == classes).sum(dim=1)  # (M, n_classes)
    predicted = classes[votes.argmax(dim=1)]
    return float((predicted == labels).float().mean())
