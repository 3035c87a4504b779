"""Open-loop prediction errors of each segment of a replay: position, velocity, tilt and
attitude after H steps, prior alone against prior + residual(z), and a figure of them.

The windows are those of :func:`vnd_core.vnd.metrics.open_loop_errors` (every window of the
segment with H target transitions, encoded from its context, both models rolling out the
logged actions, the model applying the residual components the policy trained against), taken
one segment at a time so a bad flight stands out from the others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from vnd_core.vnd.components import DEFAULT_COMPONENTS, check_components
from vnd_core.vnd.data import Segment
from vnd_core.vnd.metrics import ERROR_KINDS, window_errors
from vnd_core.vnd.model import VNDModel


@torch.no_grad()
def segment_errors(
    model: VNDModel,
    segments: Sequence[Segment],
    horizons: Sequence[int] = (1, 10, 50),
    components: str = DEFAULT_COMPONENTS,
) -> list[dict]:
    """One entry per segment: ``{"segment": i, "ticks": n, "H": {"prior": {...}, "model":
    {...}, "windows": w}}`` with the errors of :data:`ERROR_KINDS`, the model applying the
    residual ``components``; horizons longer than the segment allows are left out."""
    check_components(components)
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
                    errors = window_errors(model, dataset, starts, horizon, components)
                    entry[str(horizon)] = {**errors, "windows": len(starts)}
            out.append(entry)
    finally:
        model.train(was_training)
    return out


def plot_segment_errors(
    entries: Sequence[dict],
    horizons: Sequence[int],
    path: str | Path,
    overall: Mapping[str, dict] | None = None,
    components: str = DEFAULT_COMPONENTS,
) -> Path:
    """Bar charts (PNG) of each segment's errors, prior against model: one row per horizon of
    ``horizons``, one column per :data:`ERROR_KINDS` (angles in degrees); ``overall``
    (``open_loop_errors(...)["errors"]``), when given, adds an "all" bar group per chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = len(horizons)
    fig, axes = plt.subplots(
        rows, len(ERROR_KINDS), figsize=(3.6 * len(ERROR_KINDS), 2.8 * rows), squeeze=False
    )
    for row, horizon in zip(axes, horizons, strict=True):
        key = str(horizon)
        groups = [(str(e["segment"]), e[key]) for e in entries if key in e]
        if overall is not None and key in overall:
            groups.append(("all", overall[key]))
        x = np.arange(len(groups))
        for ax, kind in zip(row, ERROR_KINDS, strict=True):
            scale, unit = (math.degrees(1.0), "deg") if kind.endswith("_rad") else (1.0, "")
            label = kind.removesuffix("_rad") + (f"_{unit}" if unit else "")
            for shift, name, shown in ((-0.2, "prior", "prior"), (0.2, "model", "VND")):
                values = [g[name][kind] * scale for _, g in groups]
                ax.bar(x + shift, values, 0.4, label=shown)
            ax.set_xticks(x, [name for name, _ in groups])
            ax.set_title(f"{label} after {horizon} steps", fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("segment")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"open-loop errors, residual components: {components}", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
