"""How the learned model meets a condition stronger than any it has learned, without learning.

Flies VND (the standard learner preset) through a training scenario in simulated time, as
``vnd eval`` does, then flies its final bundle, frozen (its encoder's latents, no updates),
through a probe scenario whose disturbance lies outside what the learner saw (by default
``hover_wind_strong``'s 9 m/s wind along y, 2.25x the 4 m/s wind B of ``recurring_wind``).
On the probe condition's replay windows it compares the velocity residual, as an acceleration
(m/s^2, world frame), of:

- ``target``: the prior's error (what the residual should predict);
- ``model``: the frozen model's residual under each window's own latent (what the policy
  trained against and what the deployed stack assumes);
- ``constant``: the mean prior error of the condition's first 5 s, held (what a re-fit of a
  latent-free constant gives after 5 s);
- ``zero``: no residual (the prior alone).

The comparison runs on the windows after those first 5 s; ``explained_fraction`` is the share
of the mean target the model's mean residual covers along it (1: all of the wind's force). The
same figures for the training scenario's own conditions show what the model holds of the
conditions it learned.

Where a shortfall sits, encoder or residual, the ``latent`` figures tell: the learned condition
whose mean force points most nearly along the probe's (``nearest``), the probe's latent as a
multiple of the step from calm to that condition's latent (``probe_scale``: 1 means the
encoder reads the probe as that condition), the force ratio a linear model would need
(``force_ratio``), and the model's residual on the probe's windows with the latent moved along
that step by several multiples (``residual_along_step_mps2``): a residual that extrapolates
gives about the probe's force at the force ratio.

Prints one JSON object last: the flights' per-phase RMSE (whole phase and second half), the
updates, and these figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

import torch
from residual_gap import encoded_replay, phase_rmse
from vnd_core.bundle import Bundle, load_bundle, shipped_bundle_path
from vnd_core.evaluation.continual_loop import (
    LATENT_ENCODER,
    Method,
    RunResult,
    VNDMethod,
    run_method,
)
from vnd_core.learner.config import LearnerConfig
from vnd_core.scenario import load_scenario
from vnd_core.vnd.model import VNDModel
from vnd_flight.evaluation_flight import fly_runtime

FIRST_TICKS = 250  # the constant residual's fitting span: the condition's first 5 s at 50 Hz
VEL_SLICE = slice(6, 9)  # the velocity components of the 12-component residual


@dataclass
class ReplayView:
    """A flight's replay as the model reads it: windows, their latents and conditions."""

    tensors: dict[str, torch.Tensor]  # the dataset's tensors (inputs, targets, ...)
    rows: dict[str, torch.Tensor]  # per condition: the transition after each window (M,)
    latents: dict[str, torch.Tensor]  # per condition: each window's latent (M, nz)


def replay_view(
    bundle: Bundle, model: VNDModel, config: LearnerConfig, run: RunResult
) -> ReplayView:
    """``run``'s records as the learner's replay, encoded by ``model`` (``bundle``'s), in time
    order per condition."""
    dataset, latents, label_ids = encoded_replay(bundle, model, config, run.records)
    view = ReplayView(tensors=dataset.tensors(), rows={}, latents={})
    for name, label in label_ids.items():
        chosen = latents.labels == label
        rows = latents.starts[chosen] + model.context_len
        order = torch.argsort(rows)
        view.rows[name], view.latents[name] = rows[order], latents.z[chosen][order]
    return view


def condition_accels(model: VNDModel, view: ReplayView) -> dict[str, dict[str, object]]:
    """Per condition of ``view`` with enough windows: target, model, constant and zero residual
    accelerations (see the module docstring) after the condition's first 5 s."""
    dt_s = model.prior.config.dt_s
    return {
        name: accel_figures(model, view.tensors, rows, view.latents[name], dt_s)
        for name, rows in view.rows.items()
        if len(rows) >= 2 * FIRST_TICKS
    }


@torch.no_grad()
def accel_figures(
    model: VNDModel, tensors: dict, rows: torch.Tensor, z: torch.Tensor, dt_s: float
) -> dict[str, object]:
    """Mean accelerations (3,) and per-window RMS errors against the target of the model,
    the first-5-s constant and zero, over ``rows`` (M,) after the first :data:`FIRST_TICKS`;
    ``z`` (M, nz) the rows' latents."""
    target = tensors["targets"][rows][:, VEL_SLICE] / dt_s
    model_accel = model.residual(tensors["inputs"][rows], z)[:, VEL_SLICE] / dt_s
    constant = target[:FIRST_TICKS].mean(0)
    target, model_accel = target[FIRST_TICKS:], model_accel[FIRST_TICKS:]
    mean_target = target.mean(0)

    def rms(predicted: torch.Tensor) -> float:
        return round(float((predicted - target).norm(dim=-1).square().mean().sqrt()), 4)

    along = float(model_accel.mean(0) @ mean_target / mean_target.square().sum().clamp_min(1e-9))
    return {
        "windows": len(target),
        "mean_mps2": {
            "target": [round(v, 4) for v in mean_target.tolist()],
            "model": [round(v, 4) for v in model_accel.mean(0).tolist()],
            "constant": [round(v, 4) for v in constant.tolist()],
        },
        "rms_error_mps2": {
            "model": rms(model_accel),
            "constant": rms(constant.expand_as(target)),
            "zero": rms(torch.zeros_like(target)),
        },
        "explained_fraction": round(along, 3),
    }


@torch.no_grad()
def latent_figures(
    model: VNDModel, learned: ReplayView, probe: ReplayView, condition: str
) -> dict[str, object]:
    """The ``latent`` figures of the module docstring for the probe's ``condition``."""
    dt_s = model.prior.config.dt_s

    def mean_force(view: ReplayView, name: str) -> torch.Tensor:
        return view.tensors["targets"][view.rows[name]][:, VEL_SLICE].mean(0) / dt_s

    probe_force = mean_force(probe, condition)
    candidates = [n for n in learned.rows if n != "calm" and len(learned.rows[n])]
    if "calm" not in learned.rows or not candidates:
        return {}
    nearest = max(
        candidates,
        key=lambda n: float(mean_force(learned, n) @ probe_force / mean_force(learned, n).norm()),
    )
    z_calm = learned.latents["calm"].mean(0)
    step = learned.latents[nearest].mean(0) - z_calm
    probe_z = probe.latents[condition]
    scale = float((probe_z.mean(0) - z_calm) @ step / step.square().sum().clamp_min(1e-9))
    inputs = probe.tensors["inputs"][probe.rows[condition]]
    along = {}
    for k in (1.0, 1.5, 2.0, 3.0, 4.0):
        z = (z_calm + k * step).expand(len(inputs), -1)
        accel = model.residual(inputs, z)[:, VEL_SLICE].mean(0) / dt_s
        along[f"{k:g}"] = [round(v, 3) for v in accel.tolist()]
    return {
        "nearest": nearest,
        "probe_scale": round(scale, 3),
        "force_ratio": round(float(probe_force.norm() / mean_force(learned, nearest).norm()), 3),
        "probe_force_mps2": [round(v, 3) for v in probe_force.tolist()],
        "residual_along_step_mps2": along,
    }


def main() -> None:
    """Fly, freeze, probe; print the JSON figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="recurring_wind", help="scenario VND learns on")
    parser.add_argument("--probe", default="hover_wind_strong", help="scenario flown frozen")
    parser.add_argument("--condition", default="wind_strong", help="the probe's condition")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = LearnerConfig.standard()
    scenario, probe = load_scenario(args.scenario), load_scenario(args.probe)
    learned = run_method(
        VNDMethod(load_bundle(shipped_bundle_path()), config), scenario, args.seed, fly_runtime
    )
    print(f"{args.scenario} flown in {learned.wall_s:.0f} s", file=sys.stderr)
    bundle = learned.final_bundle
    frozen = run_method(Method("frozen", bundle, LATENT_ENCODER), probe, args.seed, fly_runtime)
    print(f"{args.probe} flown frozen in {frozen.wall_s:.0f} s", file=sys.stderr)
    model = bundle.model
    if model is None:
        raise SystemExit("the final bundle carries no model: nothing to measure")
    learned_view = replay_view(bundle, model, config, learned)
    probe_view = replay_view(bundle, model, config, frozen)
    if args.condition not in probe_view.rows:
        raise SystemExit(
            f"{args.probe} has no condition {args.condition!r}: {sorted(probe_view.rows)}"
        )
    result = {
        "scenario": args.scenario,
        "probe": args.probe,
        "seed": args.seed,
        "learned": {
            "rmse_m": phase_rmse(scenario, learned.time_s, learned.error_m),
            "updates_accepted": sum(u.accepted for u in learned.updates),
            "final_version": bundle.version,
            "conditions": condition_accels(model, learned_view),
        },
        "probe_frozen": {
            "rmse_m": phase_rmse(probe, frozen.time_s, frozen.error_m),
            "conditions": condition_accels(model, probe_view),
            "latent": latent_figures(model, learned_view, probe_view, args.condition),
        },
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
