"""The evaluation behind ``vnd eval``: every adaptation method through the disturbance
scenarios, in simulated time, sized by :class:`EvalConfig`.

Methods (same plant, seeds, scenarios and update budgets for all):

- base: the base bundle, no adaptation;
- dr: the base policy fine-tuned with domain randomisation (wind, mass, drag; blind to them);
- refit: LOTF-style re-fitting of a latent-free residual on a rolling window of recent data;
- vnd: the continual learner (replay of everything, latent from the encoder every tick);
- oracle: the base policy fine-tuned with the true disturbance as its z input, which it also
  gets in flight.

dr and oracle are trained once per evaluation (training seed 0) with the same trainer budget
(``randomised_trainer``), warm-started from the base policy; the seeds vary the plant (noise,
gusts) and the learners. See :mod:`continual_loop` for update timing and
:mod:`report` for the metrics.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from vnd_core.bundle import Bundle
from vnd_core.evaluation.baselines import (
    RandomisationConfig,
    clone_policy,
    train_randomised_policy,
)
from vnd_core.evaluation.continual_loop import (
    LATENT_ORACLE,
    Method,
    RunResult,
    VNDMethod,
    run_method,
    scale_scenario,
)
from vnd_core.evaluation.refit import RefitConfig, RefitMethod
from vnd_core.evaluation.report import (
    METHOD_ORDER,
    aggregate,
    json_safe,
    latent_analysis,
    plot_errors,
    plot_latents,
    run_metrics,
    write_results,
)
from vnd_core.learner import LearnerConfig
from vnd_core.scenario import Scenario, load_scenario
from vnd_core.trainer import TrainerConfig

SCENARIOS = ("hover_wind_large", "figure8_wind_mixed", "recurring_wind", "payload", "prop_damage")
WINDY = ("hover_wind_large", "figure8_wind_mixed")
Log = Callable[[str], None]


@dataclass(frozen=True)
class EvalConfig:
    """Everything that sizes an evaluation; ``quick()`` and ``full()`` are the presets."""

    mode: str = "full"  # preset name, reported
    seeds: int = 3  # plant / learner seeds per method and scenario
    time_scale: float = 1.0  # scenario duration, phase and event times multiplied by this
    learner: LearnerConfig = field(default_factory=LearnerConfig.standard)  # vnd and refit budgets
    refit_window_s: float = 8.0  # refit: seconds of recent data it fits on
    randomised_trainer: TrainerConfig = field(  # dr and oracle fine-tuning budget
        default_factory=lambda: TrainerConfig(learning_rate=1e-3)
    )
    update_delay_s: float | None = 5.0  # simulated update delay [s]; None: measured wall time

    @classmethod
    def quick(cls, **overrides) -> EvalConfig:
        """<= 15 min on a loaded 2-core machine: 1 seed, half-length scenarios, the flight
        learner updating every 15 s instead of every 8 s (the quick learner preset is too
        small to move the policy past the gates, so a smoke run would never swap a bundle)."""
        base = {
            "mode": "quick",
            "seeds": 1,
            "time_scale": 0.5,
            "learner": LearnerConfig.standard(min_interval_s=15.0),
            "randomised_trainer": TrainerConfig(
                num_envs=128, horizon_ticks=32, iterations=60, learning_rate=1e-3
            ),
        }
        return cls(**{**base, **overrides})

    @classmethod
    def full(cls, **overrides) -> EvalConfig:
        """The reported configuration: 3 seeds, full scenarios, the learner the flight stack
        runs (preset ``standard``, as in config/learner.yaml)."""
        return cls(**overrides)

    def describe(self) -> dict:
        """JSON-able summary for results.json."""
        return {
            "mode": self.mode,
            "seeds": self.seeds,
            "time_scale": self.time_scale,
            "refit_window_s": self.refit_window_s,
            "update_delay": "measured wall time"
            if self.update_delay_s is None
            else f"fixed {self.update_delay_s} s",
            "learner_fit_steps": self.learner.fit.steps,
            "learner_trainer": dataclasses.asdict(self.learner.trainer),
            "learner_min_interval_s": self.learner.min_interval_s,
            "randomised_trainer": dataclasses.asdict(self.randomised_trainer),
        }


def prepare_methods(
    names: Sequence[str], base: Bundle, config: EvalConfig, log: Log = print
) -> dict[str, Method]:
    """Build (and for dr / oracle, train) every requested method from the base bundle."""
    methods: dict[str, Method] = {}
    for name in names:
        if name == "base":
            methods[name] = Method("base", base)
        elif name in ("dr", "oracle"):
            start = time.perf_counter()
            policy = clone_policy(base.policy)
            oracle = name == "oracle"
            randomisation = (
                RandomisationConfig.oracle()
                if oracle
                else RandomisationConfig.domain_randomisation()
            )
            summary = train_randomised_policy(
                policy, base.vehicle, config.randomised_trainer, randomisation, oracle
            )
            bundle = Bundle(
                version=base.version + 1,
                parent_version=base.version,
                policy=policy,
                vehicle=base.vehicle,
                summary=summary,
            )
            methods[name] = Method(name, bundle, LATENT_ORACLE if oracle else "none")
            log(f"trained {name} policy in {time.perf_counter() - start:.0f} s")
        elif name == "refit":
            refit = RefitConfig.matching(config.learner, config.refit_window_s)
            methods[name] = RefitMethod(base, config.learner, refit)
        elif name == "vnd":
            methods[name] = VNDMethod(base, config.learner)
        else:
            raise ValueError(f"unknown method {name!r}; choose from {METHOD_ORDER}")
    return methods


def evaluate(
    config: EvalConfig,
    base: Bundle,
    out_dir: Path,
    method_names: Sequence[str] = METHOD_ORDER,
    scenario_names: Sequence[str] = SCENARIOS,
    log: Log = print,
    jobs: int = 1,
) -> dict:
    """Run every method on every scenario and seed (``jobs`` runs at a time, each in its own
    process); write results and plots into ``out_dir``; return the results.json payload."""
    start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "runs.jsonl").write_text("")  # one line per finished run, written as it ends
    scenarios = [scale_scenario(load_scenario(n), config.time_scale) for n in scenario_names]
    methods = prepare_methods(method_names, base, config, log)
    cells = [
        _Cell(method, scenario, seed, config.update_delay_s, out_dir)
        for scenario in scenarios
        for method in methods.values()
        for seed in range(config.seeds)
    ]
    per_run: dict[tuple[str, str], list[dict]] = {}
    first_runs: dict[tuple[str, str], RunResult] = {}
    latents: dict[str, list] = {}
    runs_log: list[dict] = []
    for done, (cell, metrics, run) in enumerate(_run_cells(cells, jobs), start=1):
        name, scenario = cell.method.name, cell.scenario.name
        per_run.setdefault((name, scenario), []).append(metrics)
        if metrics.get("latent") is not None:
            latents.setdefault(scenario, []).append(metrics["latent"])
        entry = {"method": name, "scenario": scenario, "seed": cell.seed, **metrics}
        runs_log.append(entry)
        _append_jsonl(out_dir / "runs.jsonl", entry)
        if run is not None:
            first_runs[(name, scenario)] = run
        log(
            f"[{done}/{len(cells)}] {name:6s} {scenario:18s} seed {cell.seed}: rmse "
            f"{metrics['rmse_m']:.3f} m, {metrics['updates']} updates "
            f"({metrics['updates_accepted']} accepted), {metrics['run_wall_s']:.0f} s"
        )
    order = [
        (s.name, m) for s in scenarios for m in methods
    ]  # the serial order, whatever ran first
    runs_log.sort(key=lambda e: (order.index((e["scenario"], e["method"])), e["seed"]))
    results = [
        {"method": m, "scenario": s.name, **aggregate(per_run[(m, s.name)])}
        for s in scenarios
        for m in methods
    ]
    plot_errors(out_dir / "error_over_time.png", first_runs, scenarios)
    payload = {
        "mode": config.mode,
        "config": {**config.describe(), "jobs": jobs},
        "wall_s": time.perf_counter() - start,
        "headline": headline(results, latents),
        "latent": latents,
        "definitions": definitions(config),
        "runs": runs_log,
    }
    write_results(out_dir, results, payload)
    return {"results": results, **payload}


@dataclass(frozen=True)
class _Cell:
    """One method flying one scenario with one seed."""

    method: Method
    scenario: Scenario
    seed: int
    update_delay_s: float | None
    out_dir: Path


# The cells of a parallel evaluation: set before the worker processes fork, so they inherit
# the methods (with the dr and oracle policies already trained) instead of receiving them.
_FORKED_CELLS: list[_Cell] = []


def _run_cells(cells: list[_Cell], jobs: int) -> Iterator[tuple[_Cell, dict, RunResult | None]]:
    """(cell, metrics, run) per cell as each finishes; ``run`` (the time series the plots
    need) for seed 0 only. ``jobs`` > 1: a pool of forked processes, one torch thread each."""
    if jobs <= 1:
        for index in range(len(cells)):
            yield cells[index], *_run_cell(cells[index])
        return
    _FORKED_CELLS[:] = cells
    try:
        with multiprocessing.get_context("fork").Pool(jobs, initializer=_one_thread) as pool:
            for index, metrics, run in pool.imap_unordered(_run_forked_cell, range(len(cells))):
                yield cells[index], metrics, run
    finally:
        _FORKED_CELLS.clear()


def _one_thread() -> None:
    torch.set_num_threads(1)


def _run_forked_cell(index: int) -> tuple[int, dict, RunResult | None]:
    return index, *_run_cell(_FORKED_CELLS[index])


def _run_cell(cell: _Cell) -> tuple[dict, RunResult | None]:
    """Fly one cell; its metrics (with the latent figures for vnd) and, for seed 0, the run
    reduced to what the plots read."""
    run = run_method(cell.method, cell.scenario, cell.seed, cell.update_delay_s)
    metrics = run_metrics(run, cell.scenario)
    if cell.method.name == "vnd":
        metrics["latent"] = _latent_figures(run, cell.scenario, cell.out_dir, cell.seed)
    if cell.seed != 0:
        return metrics, None
    return metrics, dataclasses.replace(run, records=None, final_bundle=None)


def _append_jsonl(path: Path, entry: dict) -> None:
    """Append ``entry`` as one JSON line (partial results survive an interrupted evaluation)."""
    with path.open("a") as stream:
        stream.write(json.dumps(json_safe(entry)) + "\n")


def _latent_figures(run: RunResult, scenario: Scenario, out_dir: Path, seed: int) -> dict | None:
    """k-NN accuracy and held-out prediction errors of a VND run; PCA plot for seed 0."""
    accepted = [u for u in run.updates if u.accepted]
    holdout_after = accepted[-1].requested_s if accepted else None
    analysis = latent_analysis(run, holdout_after)
    if analysis is None:
        return None
    figures = {
        "knn_accuracy": analysis["knn_accuracy"],
        "conditions": analysis["label_names"],
        "open_loop_holdout": analysis["open_loop"],
        "holdout_after_s": holdout_after,
    }
    if seed == 0:
        plot_latents(out_dir / f"latents_{scenario.name}.png", analysis, f"vnd {scenario.name}")
    return figures


def headline(results: list[dict], latents: dict) -> dict:
    """The headline figures: VND vs refit vs oracle RMSE under wind, recurring-wind recovery,
    50-step prediction improvement and latent k-NN accuracy."""
    table = {(r["method"], r["scenario"]): r for r in results}
    out: dict = {}
    for scenario in WINDY:
        vnd, refit, oracle = (table.get((m, scenario)) for m in ("vnd", "refit", "oracle"))
        row = {m: table[(m, scenario)]["rmse_m"] for m in METHOD_ORDER if (m, scenario) in table}
        if vnd and refit:
            row["vnd_reduction_vs_refit"] = 1.0 - vnd["rmse_m"] / refit["rmse_m"]
        if vnd and oracle:
            row["vnd_over_oracle"] = vnd["rmse_m"] / oracle["rmse_m"]
        if row:
            out[f"rmse_m_{scenario}"] = row
    recurring = {
        m: {
            "recovery_s": table[(m, "recurring_wind")].get("recovery_last_onset_s"),
            "censored": table[(m, "recurring_wind")].get("recovery_last_onset_censored"),
            "phase_rmse_m": table[(m, "recurring_wind")].get("last_phase_rmse_m"),
        }
        for m in METHOD_ORDER
        if (m, "recurring_wind") in table
    }
    if recurring:
        out["recurring_wind_return_of_a"] = recurring
    for scenario, runs in latents.items():
        knn = [r["knn_accuracy"] for r in runs if r["knn_accuracy"] is not None]
        entry: dict = {"knn_accuracy_mean": sum(knn) / len(knn) if knn else None}
        holdouts = [r["open_loop_holdout"] for r in runs if r["open_loop_holdout"]]
        if holdouts and "50" in holdouts[0]["prior_err_m"]:
            prior = sum(h["prior_err_m"]["50"] for h in holdouts) / len(holdouts)
            model = sum(h["model_err_m"]["50"] for h in holdouts) / len(holdouts)
            entry["prior_err_50_m"], entry["model_err_50_m"] = prior, model
            entry["improvement_50"] = 1.0 - model / prior if prior > 0 else None
        out[f"vnd_model_{scenario}"] = entry
    return out


def definitions(config: EvalConfig) -> dict:
    """How every figure is defined (written into results.md and results.json)."""
    from vnd_core.evaluation import report

    return {
        "rmse_m": "RMSE of the true position error over every tick of the run, mean over seeds",
        "max_error_m": "largest true position error of the run, mean over seeds",
        "crash_rate": "fraction of seeds in which the plant reported a crash",
        "recovery_s": " ".join(report.__doc__.split("\n\n")[1].split()),
        "recovery_last_onset_s": "recovery at the last phase onset (recurring_wind: A returns)",
        "time_scale": f"{config.time_scale}: scenario durations, phase and event times scaled",
        "update_delay": "a new bundle flies after the measured wall time of its update"
        if config.update_delay_s is None
        else f"a new bundle flies {config.update_delay_s} s (simulated) after its update starts",
        "dr": "base policy fine-tuned on prior + random wind (0-6 m/s), mass (-10..+40 %), drag "
        "(x0.7-1.5); z hidden from the policy",
        "oracle": "base policy fine-tuned on the same ranges plus rotor damage with the true "
        "disturbance vector as its z input, and given the true vector in flight",
        "refit": f"latent-free residual fitted on the last {config.refit_window_s} s every "
        f"{config.learner.min_interval_s} s, policy fine-tuned on it with VND's budgets",
        "knn_accuracy": "leave-one-out 5-NN accuracy of the true condition from the final VND "
        "model's re-encoded latents of the whole run",
        "open_loop_holdout": "prior vs prior + residual(z) position error after 1/10/50 open-loop "
        "steps on ticks flown after the final model's last fit started (unseen data)",
    }
