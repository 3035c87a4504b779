"""Open-loop prediction errors of each segment of a replay: position, velocity and attitude
after H steps, prior alone against prior + residual(z), and a figure of them.

The windows are those of :func:`vnd_core.vnd.metrics.open_loop_errors` (every window of the
segment with H target transitions, encoded from its context, both models rolling out the
logged actions), taken one segment at a time so a bad flight stands out from the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from vnd_core.state import POS, QUAT, VEL
from vnd_core.vnd.data import Segment
from vnd_core.vnd.model import VNDModel

ERROR_KINDS = ("position_m", "velocity_mps", "attitude_rad")


def _errors(predicted: torch.Tensor, truth: torch.Tensor) -> dict[str, float]:
    """Mean errors of predicted vs true final states (W, 13)."""
    dot = (predicted[:, QUAT] * truth[:, QUAT]).sum(dim=-1).abs().clamp(max=1.0)
    return {
        "position_m": float((predicted[:, POS] - truth[:, POS]).norm(dim=-1).mean()),
        "velocity_mps": float((predicted[:, VEL] - truth[:, VEL]).norm(dim=-1).mean()),
        "attitude_rad": float((2.0 * torch.acos(dot)).mean()),
    }


@torch.no_grad()
def segment_errors(
    model: VNDModel, segments: Sequence[Segment], horizons: Sequence[int] = (1, 10, 50)
) -> list[dict]:
    """One entry per segment: ``{"segment": i, "ticks": n, "H": {"prior": {...}, "model":
    {...}, "windows": w}}`` with the errors of :data:`ERROR_KINDS`; horizons longer than the
    segment allows are left out."""
    was_training = model.training
    model.eval()
    out = []
    try:
        for i, segment in enumerate(segments):
            dataset = model.new_dataset()
            entry: dict = {"segment": i, "ticks": len(segment.states)}
            if dataset.add_segment(segment):
                for horizon in horizons:
                    starts = dataset.window_starts(model.context_len, horizon)
                    if len(starts) == 0:
                        continue
                    batch = dataset.gather(starts, model.context_len, horizon)
                    z = model.encoder(batch.context)
                    initial, truth = batch.states[:, 0], batch.states[:, -1]
                    learned = model.rollout(initial, batch.actions, z)[:, -1]
                    prior = model.rollout_prior(initial, batch.actions)[:, -1]
                    entry[str(horizon)] = {
                        "prior": _errors(prior, truth),
                        "model": _errors(learned, truth),
                        "windows": len(starts),
                    }
            out.append(entry)
    finally:
        model.train(was_training)
    return out


def plot_segment_errors(entries: Sequence[dict], horizon: int, path: str | Path) -> Path:
    """Bar chart (PNG) of each segment's errors at ``horizon``, prior against model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = str(horizon)
    shown = [e for e in entries if key in e]
    fig, axes = plt.subplots(1, len(ERROR_KINDS), figsize=(4 * len(ERROR_KINDS), 3.2))
    x = torch.arange(len(shown)).numpy()
    for ax, kind in zip(axes, ERROR_KINDS, strict=True):
        ax.bar(x - 0.2, [e[key]["prior"][kind] for e in shown], 0.4, label="prior")
        ax.bar(x + 0.2, [e[key]["model"][kind] for e in shown], 0.4, label="VND")
        ax.set_xticks(x, [str(e["segment"]) for e in shown])
        ax.set_xlabel("segment")
        ax.set_title(f"{kind} after {horizon} steps")
    axes[0].legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
