"""Figures of ``vnd eval``: per-run metrics, aggregation over seeds, results.json / results.md and
plots (error over time with update markers; 2-D PCA of latents coloured by the true condition).

Recovery time (also written into results.md): :mod:`vnd_core.recovery`, the definition the
``vnd fly`` report uses, for every phase that starts after t = 0 (a condition appears or
re-appears): the time from the onset until the 1-s moving RMSE is back within 1.2x (+ 1 cm) of
the phase's steady level at the same point of the reference and stays there for 0.5 s. A phase
where that never happens counts as its full length (a lower bound) and is reported as censored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.evaluation.continual_loop import RunResult, RunTrace
from vnd_core.learner import to_segments
from vnd_core.recovery import moving_rmse, recovery
from vnd_core.scenario import Scenario
from vnd_core.vnd.components import recorded_components
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.metrics import latent_knn_accuracy, open_loop_errors

if TYPE_CHECKING:
    from vnd_core.vnd.model import VNDModel

# Table and plot order: the non-adaptive and offline baselines, the online learners, the oracle.
METHOD_ORDER = (
    "base",
    "dr",
    "dr_mismatched",
    "dob",
    "rma",
    "refit",
    "vnd",
    "vnd_observer",
    "oracle",
)
# Line colour and style per method in the error plot (dr_mismatched: dr's colour, dashed).
METHOD_STYLE = {
    "base": ("C7", "-"),
    "dr": ("C1", "-"),
    "dr_mismatched": ("C1", "--"),
    "dob": ("C4", "-"),
    "rma": ("C5", "-"),
    "refit": ("C2", "-"),
    "vnd": ("C0", "-"),
    "vnd_observer": ("C0", "--"),
    "oracle": ("C3", "-"),
}


def recovery_times(time_s: np.ndarray, error_m: np.ndarray, scenario: Scenario) -> list[dict]:
    """Recovery of every phase onset after t = 0 (see the module docstring), in order: dicts of
    phase, onset_s, steady_m (RMSE over the phase's second half), phase_rmse_m (RMSE over the
    whole phase), recovery_s (censored values are the phase length), censored."""
    period_s = scenario.reference.repeat_period_s()
    out = []
    for name, begin_s, end_s in scenario.phase_spans()[1:]:
        in_phase = (time_s > begin_s + 1e-9) & (time_s <= end_s + 1e-9)
        t, err = time_s[in_phase], error_m[in_phase]
        rec = recovery(t, err, begin_s, end_s, period_s)
        if rec is None:
            continue
        out.append(
            {
                "phase": name,
                "onset_s": float(begin_s),
                "steady_m": rec.steady_m,
                "phase_rmse_m": float(np.sqrt(np.mean(err**2))),
                "recovery_s": rec.recovery_s,
                "censored": rec.censored,
            }
        )
    return out


def run_metrics(run: RunResult, scenario: Scenario) -> dict:
    """Per-run figures: rmse_m, max_error_m, crashed, recoveries, update counts and times."""
    accepted = [u for u in run.updates if u.accepted]
    return {
        "rmse_m": float(np.sqrt(np.mean(run.error_m**2))),
        "max_error_m": float(np.max(run.error_m)),
        "crashed": run.crashed,
        "recoveries": recovery_times(run.time_s, run.error_m, scenario),
        "phase_updates": phase_updates(run, scenario),
        "updates": len(run.updates),
        "updates_accepted": len(accepted),
        "update_wall_s": [round(u.wall_s, 3) for u in run.updates],
        "rejections": [u.reason for u in run.updates if not u.accepted],
        "run_wall_s": round(run.wall_s, 1),
    }


def phase_updates(run: RunResult, scenario: Scenario) -> list[dict]:
    """Per phase: time from its start to the first new bundle flying in it (None: none did),
    and the model updates and policy improvements that took over in it."""
    out = []
    for name, begin_s, end_s in scenario.phase_spans():
        landed = [u for u in run.updates if u.accepted and begin_s < u.applied_s <= end_s]
        out.append(
            {
                "phase": name,
                "start_s": float(begin_s),
                "first_bundle_s": round(landed[0].applied_s - begin_s, 2) if landed else None,
                "model_updates": sum(u.kind == "model" for u in landed),
                "policy_improvements": sum(u.kind == "policy" for u in landed),
            }
        )
    return out


def latent_analysis(run: RunResult, holdout_after_s: float | None = None) -> dict | None:
    """Re-encode the whole run with the final bundle's model: latents (M, nz), labels,
    condition names, k-NN accuracy of the true condition, and open-loop errors of prior vs
    prior + residual(z) at 1/10/50 steps on the ticks flown after ``holdout_after_s`` (data
    the final model was not fitted on; None: all ticks). None when there is no model."""
    model = run.final_bundle.model
    if model is None:
        return None
    label_ids: dict[str, int] = {}
    segments = to_segments(run.records, CONTROL_PERIOD_S, 1.5, label_ids)
    dataset = model.new_dataset(segments)
    encoded = model.encode_all(dataset)
    names = {v: k for k, v in label_ids.items()}
    out: dict = {
        "z": encoded.z.numpy(),
        "labels": encoded.labels.numpy(),
        "label_names": [names[i] for i in range(len(names))],
        "knn_accuracy": None,
    }
    if len(np.unique(out["labels"])) >= 2 and len(out["labels"]) > 5:
        out["knn_accuracy"] = latent_knn_accuracy(encoded.z, encoded.labels)
    out["open_loop"] = _holdout_errors(model, run, holdout_after_s)
    return out


def _holdout_errors(model: VNDModel, run: RunResult, after_s: float | None) -> dict | None:
    """open_loop_errors on the run's ticks after ``after_s`` (one segment), or None if too few."""
    records = run.records
    if after_s is not None:
        records = records.take(records.stamp_ns >= round(after_s * 1e9))
    segments = to_segments(records, CONTROL_PERIOD_S, 1.5)
    dataset = TransitionDataset(model.prior, segments, model.config.action_delay_ticks)
    if dataset.num_segments == 0 or len(dataset.window_starts(model.context_len, 50)) == 0:
        return None
    # scored with the residual components the run's policy trained against
    errors = open_loop_errors(
        model, dataset, components=recorded_components(run.final_bundle.summary)
    )
    errors["ticks"] = dataset.num_transitions
    return errors


def aggregate(rows: Sequence[dict]) -> dict:
    """Mean and spread (population std) over seeds of the per-run figures of one method and
    scenario; recovery over every onset of every seed (censored ones at their phase length)."""
    rmse = np.array([r["rmse_m"] for r in rows])
    max_err = np.array([r["max_error_m"] for r in rows])
    recoveries = [rec for r in rows for rec in r["recoveries"]]
    rec_values = np.array([rec["recovery_s"] for rec in recoveries])
    out: dict[str, Any] = {
        "rmse_m": float(rmse.mean()),
        "rmse_m_std": float(rmse.std()),
        "max_error_m": float(max_err.mean()),
        "max_error_m_std": float(max_err.std()),
        "crash_rate": float(np.mean([r["crashed"] for r in rows])),
        "recovery_s": float(rec_values.mean()) if len(rec_values) else None,
        "recovery_s_std": float(rec_values.std()) if len(rec_values) else None,
        "recovery_censored": int(sum(rec["censored"] for rec in recoveries)),
        "recovery_onsets": len(recoveries),
        "seeds": len(rows),
        "updates": float(np.mean([r["updates"] for r in rows])),
        "updates_accepted": float(np.mean([r["updates_accepted"] for r in rows])),
    }
    out["phases"] = phase_figures(rows)
    walls = [w for r in rows for w in r["update_wall_s"]]
    out["update_wall_s_mean"] = float(np.mean(walls)) if walls else None
    last = [r["recoveries"][-1] for r in rows if r["recoveries"]]
    if last:
        out["recovery_last_onset_s"] = float(np.mean([rec["recovery_s"] for rec in last]))
        out["recovery_last_onset_phase"] = last[0]["phase"]
        out["recovery_last_onset_censored"] = int(sum(rec["censored"] for rec in last))
        out["last_phase_rmse_m"] = float(np.mean([rec["phase_rmse_m"] for rec in last]))
    return out


def phase_figures(rows: Sequence[dict]) -> list[dict]:
    """Per phase that starts after t = 0, in scenario order: the phase's RMSE (whole) and its
    second half's (settled: what the method flies once it has adapted), mean over seeds."""
    if not rows or any(len(r["recoveries"]) != len(rows[0]["recoveries"]) for r in rows):
        return []
    figures = []
    for i, first in enumerate(rows[0]["recoveries"]):
        figures.append(
            {
                "phase": first["phase"],
                "onset_s": first["onset_s"],
                "whole_m": float(np.mean([r["recoveries"][i]["phase_rmse_m"] for r in rows])),
                "settled_m": float(np.mean([r["recoveries"][i]["steady_m"] for r in rows])),
            }
        )
    return figures


def phases_markdown(results: list[dict]) -> list[str]:
    """The per-phase table (whole phase / settled RMSE) of every method and scenario."""
    lines = [
        "## Per phase",
        "",
        "Phase RMSE over the whole phase / over its second half (settled), mean over seeds, in m.",
        "",
        "| scenario | method | phases (whole / settled) |",
        "|---|---|---|",
    ]
    for r in results:
        cells = ", ".join(
            f"{p['phase']} {p['whole_m']:.3f} / {p['settled_m']:.3f}" for p in r.get("phases", [])
        )
        lines.append(f"| {r['scenario']} | {r['method']} | {cells} |")
    return [*lines, ""]


# ---------------------------------------------------------------------------------- writing
def _fmt(mean: float | None, std: float | None, digits: int = 3) -> str:
    if mean is None or not math.isfinite(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if std is not None else f"{mean:.{digits}f}"


def write_results(out_dir: Path, results: list[dict], extra: dict) -> None:
    """DIR/results.json (``{"results": [...], ...extra}``) and DIR/results.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {"results": results, **extra}
    (out_dir / "results.json").write_text(json.dumps(json_safe(payload), indent=2) + "\n")
    (out_dir / "results.md").write_text(results_markdown(results, extra))


def results_markdown(results: list[dict], extra: dict) -> str:
    """The results table and the definitions, as Markdown."""
    seeds = results[0]["seeds"] if results else 0
    lines = [
        "# vnd eval results",
        "",
        f"Mode: {extra.get('mode', '?')}; seeds: {seeds}; time scale: "
        f"{extra.get('config', {}).get('time_scale', 1.0)}; wall time: "
        f"{extra.get('wall_s', 0):.0f} s.",
        "",
        "| scenario | method | RMSE [m] | max error [m] | crash rate | recovery [s] "
        "| censored | updates (accepted) | update wall [s] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['scenario']} | {r['method']} | {_fmt(r['rmse_m'], r['rmse_m_std'])} "
            f"| {_fmt(r['max_error_m'], r['max_error_m_std'])} | {r['crash_rate']:.2f} "
            f"| {_fmt(r['recovery_s'], r['recovery_s_std'], 2)} "
            f"| {r['recovery_censored']}/{r['recovery_onsets']} "
            f"| {r['updates']:.1f} ({r['updates_accepted']:.1f}) "
            f"| {_fmt(r['update_wall_s_mean'], None, 1)} |"
        )
    lines += ["", "Values are mean ± standard deviation over seeds (recovery: over every phase "]
    lines += ["onset of every seed).", ""]
    lines += phases_markdown(results)
    for key, title in (("headline", "Headline comparisons"), ("latent", "Latents")):
        if extra.get(key):
            lines += [f"## {title}", "", "```json", json.dumps(json_safe(extra[key]), indent=2)]
            lines += ["```", ""]
    lines += ["## Definitions", ""]
    lines += [f"- {k}: {v}" for k, v in extra.get("definitions", {}).items()]
    return "\n".join(lines) + "\n"


def plot_errors(
    out_path: Path, runs: dict[tuple[str, str], RunTrace], scenarios: list[Scenario]
) -> None:
    """Moving (1 s) RMSE over time per scenario (one panel each), one line per method (first
    seed), update markers at the times new bundles took over (hollow: rejected)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(scenarios), 1, figsize=(11, 3.2 * len(scenarios)), squeeze=False)
    for ax, scenario in zip(axes[:, 0], scenarios, strict=True):
        for method in METHOD_ORDER:
            run = runs.get((method, scenario.name))
            if run is None:
                continue
            moving = moving_rmse(run.time_s, run.error_m)
            colour, style = METHOD_STYLE[method]
            ax.plot(run.time_s, moving * 100.0, color=colour, ls=style, lw=1.0, label=method)
            for u in run.updates:
                ax.plot(
                    [u.applied_s],
                    [0.0],
                    marker="^",
                    color=colour,
                    markerfacecolor=colour if u.accepted else "none",
                    ms=6,
                    clip_on=False,
                )
        ax.set(title=scenario.name, xlabel="time [s]", ylabel="1 s moving RMSE [cm]")
        ax.set_ylim(bottom=0.0)
        for name, begin_s, _ in scenario.phase_spans()[1:]:
            ax.axvline(begin_s, color="k", lw=0.6, alpha=0.4)
            ax.text(begin_s, ax.get_ylim()[1] * 0.85, f" {name}", fontsize=7, alpha=0.7)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=4, loc="upper right")
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=90)
    plt.close(fig)


def plot_latents(out_path: Path, analysis: dict, title: str) -> None:
    """2-D PCA projection of the latents, coloured by the true condition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    z, labels = analysis["z"], analysis["labels"]
    xy = pca_2d(z)
    fig, ax = plt.subplots(figsize=(6, 5))
    for i, name in enumerate(analysis["label_names"]):
        pick = labels == i
        ax.scatter(xy[pick, 0], xy[pick, 1], s=3, alpha=0.5, label=name)
    acc = analysis.get("knn_accuracy")
    ax.set(title=f"{title} (k-NN acc {acc:.3f})" if acc is not None else title)
    ax.set(xlabel="PC 1", ylabel="PC 2")
    ax.legend(markerscale=4, fontsize=8)
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=90)
    plt.close(fig)


def pca_2d(z: np.ndarray) -> np.ndarray:
    """Projection (M, 2) of ``z`` (M, nz) on its first two principal axes."""
    centred = z - z.mean(axis=0)
    if len(z) < 2:
        return np.zeros((len(z), 2))
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    basis = vt[:2].T
    if basis.shape[1] < 2:
        basis = np.pad(basis, ((0, 0), (0, 2 - basis.shape[1])))
    return centred @ basis


def json_safe(value: object) -> object:
    """Strict JSON: non-finite floats -> None, numpy/torch scalars and arrays -> Python."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray | torch.Tensor):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        return json_safe(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
