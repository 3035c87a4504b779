"""Model-quality figures: open-loop prediction error and how well latents separate conditions."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vnd_core.so3 import body_z_axis
from vnd_core.state import POS, QUAT, VEL
from vnd_core.vnd.components import DEFAULT_COMPONENTS, check_components, compose
from vnd_core.vnd.data import NO_LABEL, TransitionDataset
from vnd_core.vnd.model import VNDModel


def evenly_spread(starts: torch.Tensor, max_windows: int | None) -> torch.Tensor:
    """At most ``max_windows`` of ``starts``, spread evenly over the data (deterministic)."""
    if max_windows is None or len(starts) <= max_windows:
        return starts
    return starts[torch.linspace(0, len(starts) - 1, max_windows).round().long()]


ERROR_KINDS = ("position_m", "velocity_mps", "tilt_rad", "attitude_rad")  # of state_errors


def state_errors(predicted: torch.Tensor, truth: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-row errors (W,) of predicted vs true states (W, 13), one entry per
    :data:`ERROR_KINDS`: position and velocity distance, tilt (angle between the body z axes:
    what tilts the thrust) and attitude angle (the whole rotation between the two)."""
    up = (body_z_axis(predicted[:, QUAT]) * body_z_axis(truth[:, QUAT])).sum(dim=-1)
    dot = (predicted[:, QUAT] * truth[:, QUAT]).sum(dim=-1).abs()
    return {
        "position_m": (predicted[:, POS] - truth[:, POS]).norm(dim=-1),
        "velocity_mps": (predicted[:, VEL] - truth[:, VEL]).norm(dim=-1),
        "tilt_rad": torch.acos(up.clamp(-1.0, 1.0)),
        "attitude_rad": 2.0 * torch.acos(dot.clamp(max=1.0)),
    }


def rollout_components(
    model: VNDModel, state: torch.Tensor, actions: torch.Tensor, z: torch.Tensor, components: str
) -> torch.Tensor:
    """Like :meth:`VNDModel.rollout` with only the residual ``components`` applied
    (:mod:`vnd_core.vnd.components`): states (B, H+1, 13) from ``state`` (B, 13) under
    ``actions`` (B, H, 4), one latent ``z`` (B, nz) for the whole rollout."""
    check_components(components)
    states = [state]
    for k in range(actions.shape[-2]):
        prior_next = model.prior(states[-1], actions[..., k, :])
        residual = model.residual_correction(states[-1], actions[..., k, :], z)
        states.append(compose(prior_next, residual, components))
    return torch.stack(states, dim=-2)


@torch.no_grad()
def window_errors(
    model: VNDModel,
    dataset: TransitionDataset,
    starts: torch.Tensor,
    horizon: int,
    components: str = DEFAULT_COMPONENTS,
) -> dict[str, dict[str, float]]:
    """Mean errors after ``horizon`` open-loop steps of the windows starting at ``starts`` (W,)
    (each needs ``horizon`` targets after its context): ``{"prior": {kind: e}, "model":
    {kind: e}}`` over :data:`ERROR_KINDS`. Each window is encoded from its context; the prior
    alone and prior + the ``components`` of D(z) roll out the logged actions from the first
    predicted-from state. W must be >= 1."""
    batch = dataset.gather(starts, model.context_len, horizon)
    z = model.encoder(batch.context)
    initial, truth = batch.states[:, 0], batch.states[:, -1]
    learned = rollout_components(model, initial, batch.actions, z, components)[:, -1]
    prior = model.rollout_prior(initial, batch.actions)[:, -1]
    return {
        name: {kind: float(e.mean()) for kind, e in state_errors(predicted, truth).items()}
        for name, predicted in (("prior", prior), ("model", learned))
    }


@torch.no_grad()
def open_loop_errors(
    model: VNDModel,
    dataset: TransitionDataset,
    horizons: Sequence[int] = (1, 10, 50),
    max_windows: int | None = 2000,
    components: str = DEFAULT_COMPONENTS,
) -> dict:
    """Mean open-loop errors after H steps, prior alone vs prior + the ``components`` of
    residual(z) (by default the translational ones the policy trains against).

    For each horizon H, every window with H target transitions (at most ``max_windows``, evenly
    spread) is scored by :func:`window_errors`. Returns ``{"components": components,
    "prior_err_m": {"H": e}, "model_err_m": {"H": e}, "num_windows": {"H": n},
    "errors": {"H": {"prior": {kind: e}, "model": {kind: e}}}}``: the position errors (m) under
    their own keys, every kind of :data:`ERROR_KINDS` under ``errors``; horizons without any
    window are left out.
    """
    model.check_dataset(dataset)
    check_components(components)
    result: dict = {
        "components": components,
        "prior_err_m": {},
        "model_err_m": {},
        "num_windows": {},
        "errors": {},
    }
    was_training = model.training
    model.eval()
    try:
        for horizon in horizons:
            starts = evenly_spread(dataset.window_starts(model.context_len, horizon), max_windows)
            if len(starts) == 0:
                continue
            key = str(horizon)
            errors = window_errors(model, dataset, starts, horizon, components)
            result["prior_err_m"][key] = errors["prior"]["position_m"]
            result["model_err_m"][key] = errors["model"]["position_m"]
            result["num_windows"][key] = len(starts)
            result["errors"][key] = errors
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
    index = evenly_spread(torch.arange(len(z)), max_points)
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
