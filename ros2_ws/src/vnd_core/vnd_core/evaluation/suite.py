"""The evaluation behind ``vnd eval``: every adaptation method through the disturbance
scenarios, in simulated time, sized by :class:`EvalConfig`.

Methods (same plant, seeds, scenarios and update budgets for all):

- base: the base bundle, no adaptation;
- dr: the base policy fine-tuned with domain randomisation (wind, mass, drag; blind to them),
  *matched*: the plant's own drag law and coefficients, ranges containing every test condition;
- dr_mismatched: the same training on a practitioner's model (a constant external force up to
  1 N, no drag law; the 5 m/s test wind outside the range), blind to it;
- dob: a disturbance observer (prior prediction error, low-pass filtered, command delay and
  motor lag handled) feeding the estimated force to a force-conditioned policy (dr's policy
  fine-tuned further with the force as its z); no learning in flight (:mod:`dob`);
- rma: the oracle's policy as privileged teacher plus an adaptation module (1-D convolution
  over the last 0.5 s of state and command history) trained to regress the teacher's
  disturbance input in the randomised simulation; no learning in flight (:mod:`rma`);
- refit: LOTF-style re-fitting of an ensemble of latent-free residuals on a rolling window of
  recent data every 5 s, the policy fine-tuned on their mean (:mod:`refit`);
- vnd: the continual learner (replay of everything, latent from the encoder every tick),
  starting from dr's policy: the offline knowledge a lab has before it flies;
- vnd_observer: the same learner starting from dob's policy given a force input
  (:func:`~vnd_core.evaluation.dob.force_input_bundle`); in flight the policy reads the force
  observer beside the encoder's latent;
- oracle: the base policy fine-tuned with the true disturbance as its z input, which it also
  gets in flight.

dr (also vnd's start), dr_mismatched, dob's policy (also vnd_observer's) and the oracle (also
rma's teacher) are trained once per evaluation (training seed 0) with the same trainer budget
(``randomised_trainer``), warm-started from the base policy (dob's from dr's: the robustness
dr's randomisation gave carries into the force-conditioned policy), and shared by every cell
that flies them; rma's module is trained once with ``rma``'s budget. The seeds vary the plant
(noise, gusts) and the learners. See :mod:`continual_loop` for update timing and
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
from typing import Any

import torch

from vnd_core.bundle import Bundle, save_bundle
from vnd_core.evaluation.baselines import RandomisationConfig, train_baseline_bundle
from vnd_core.evaluation.continual_loop import (
    LATENT_ORACLE,
    LEARNER_CPU_SHARE,
    FlightFactory,
    Method,
    RunResult,
    RunTrace,
    VNDMethod,
    run_method,
    scale_scenario,
)
from vnd_core.evaluation.dob import dob_method, force_input_bundle
from vnd_core.evaluation.refit import REFIT_BUDGET_NOTE, RefitConfig, RefitMethod
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
from vnd_core.evaluation.rma import RMAConfig, RMAMethod, train_adaptation_module
from vnd_core.force_observer import ObserverConfig
from vnd_core.learner import LearnerConfig
from vnd_core.scenario import Scenario, load_scenario
from vnd_core.trainer import TrainerConfig

# Disturbance phases of 60-80 s (recurring_wind's are 40-80 s): a learner is judged on what it
# flies once it has learned, not mostly on its transient; hover_wind_strong is out of family
# (9 m/s, 1.5x the strongest wind dr trains on).
SCENARIOS = (
    "hover_wind_long",
    "figure8_wind_long",
    "recurring_wind",
    "payload",
    "prop_damage",
    "hover_wind_strong",
)
WINDY = ("hover_wind_long", "figure8_wind_long", "hover_wind_strong")
Log = Callable[[str], None]


@dataclass(frozen=True)
class EvalConfig:
    """Everything that sizes an evaluation; ``quick()`` and ``full()`` are the presets."""

    mode: str = "full"  # preset name, reported
    seeds: int = 3  # plant / learner seeds per method and scenario
    time_scale: float = 1.0  # scenario duration, phase and event times multiplied by this
    learner: LearnerConfig = field(default_factory=LearnerConfig.standard)  # vnd and refit budgets
    refit: RefitConfig = field(default_factory=RefitConfig.lotf)  # refit cadence and budget
    rma: RMAConfig = field(default_factory=RMAConfig)  # rma's adaptation-module budget
    randomised_trainer: TrainerConfig = field(  # dr and oracle fine-tuning budget
        default_factory=lambda: TrainerConfig(learning_rate=1e-3)
    )
    # simulated update delay [s]; None: the update's CPU time / learner_cpu_share
    update_delay_s: float | None = None
    learner_cpu_share: float = LEARNER_CPU_SHARE  # share of a core the learner gets in flight

    @classmethod
    def quick(cls, **overrides: Any) -> EvalConfig:
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
            "rma": RMAConfig(rollout_envs=48, rollout_ticks=200, rounds=2, epochs=10),
        }
        return cls(**{**base, **overrides})

    @classmethod
    def full(cls, **overrides: Any) -> EvalConfig:
        """The reported configuration: 3 seeds, full scenarios, the learner the flight stack
        runs (preset ``standard``, as in config/learner.yaml)."""
        return cls(**overrides)

    def describe(self) -> dict:
        """JSON-able summary for results.json."""
        return {
            "mode": self.mode,
            "seeds": self.seeds,
            "time_scale": self.time_scale,
            "refit": {**dataclasses.asdict(self.refit), "budget": REFIT_BUDGET_NOTE},
            "observer": dataclasses.asdict(ObserverConfig()),
            "rma": dataclasses.asdict(self.rma),
            "update_delay": f"CPU time / {self.learner_cpu_share} (the learner's core share)"
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
    """Build (and for the offline baselines, train) every requested method from the base
    bundle; each offline training runs once, shared by the methods that fly it (the oracle's
    policy is rma's teacher, dr's is where vnd starts, dob's where vnd_observer does)."""
    methods: dict[str, Method] = {}
    trained: dict[str, Bundle] = {}

    def trained_bundle(kind: str) -> Bundle:
        if kind not in trained:
            start_from = trained_bundle("dr") if kind == "dob" else base
            start = time.perf_counter()
            trained[kind] = train_baseline_bundle(start_from, kind, config.randomised_trainer)
            log(f"trained {kind} policy in {time.perf_counter() - start:.0f} s")
        return trained[kind]

    for name in names:
        if name == "base":
            methods[name] = Method("base", base)
        elif name in ("dr", "dr_mismatched"):
            methods[name] = Method(name, trained_bundle(name))
        elif name == "oracle":
            methods[name] = Method(name, trained_bundle(name), LATENT_ORACLE)
        elif name == "dob":
            methods[name] = dob_method(trained_bundle(name))
        elif name == "rma":
            teacher = trained_bundle("oracle")
            start = time.perf_counter()
            module, summary = train_adaptation_module(
                teacher.policy, base.vehicle, RandomisationConfig.oracle(), config.rma
            )
            methods[name] = RMAMethod(teacher, module, summary)
            log(f"trained rma adaptation module in {time.perf_counter() - start:.0f} s")
        elif name == "refit":
            methods[name] = RefitMethod(base, config.learner, config.refit)
        elif name == "vnd":
            # Learning on top of the blind randomised policy: a new condition flies at dr's
            # level until the learner lands what dr cannot know (docs/decisions.md).
            methods[name] = VNDMethod(trained_bundle("dr"), config.learner)
        elif name == "vnd_observer":
            # The same learner on top of the force-observer policy: a new force is answered
            # at once, the learner lands what the observer cannot see (docs/decisions.md).
            observer_start = force_input_bundle(trained_bundle("dob"))
            methods[name] = VNDMethod(observer_start, config.learner, name)
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
    *,
    fly: FlightFactory,
) -> dict:
    """Run every method on every scenario and seed (``jobs`` runs at a time, each in its own
    process), each on the flight side ``fly`` builds (``vnd eval``: the stack's flight
    runtime); write results and plots into ``out_dir``; return the results.json payload."""
    start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "runs.jsonl").write_text("")  # one line per finished run, written as it ends
    scenarios = [scale_scenario(load_scenario(n), config.time_scale) for n in scenario_names]
    methods = prepare_methods(method_names, base, config, log)
    save_offline_bundles(methods, out_dir / "bundles")
    cells = [
        _Cell(method, scenario, seed, config.update_delay_s, config.learner_cpu_share, out_dir, fly)
        for scenario in scenarios
        for method in methods.values()
        for seed in range(config.seeds)
    ]
    per_run: dict[tuple[str, str], list[dict]] = {}
    first_runs: dict[tuple[str, str], RunTrace] = {}
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


def save_offline_bundles(methods: dict[str, Method], bundle_dir: Path) -> list[Path]:
    """Write the offline-trained policies ``vnd fly --bundle`` can fly (z hidden, from the
    encoder or with the force observer) as ``bundle_dir/<name>.safetensors``: dr (where vnd
    starts), dr_mismatched and vnd_observer_start (where vnd_observer starts)."""
    flyable = {
        "dr": methods["dr"] if "dr" in methods else methods.get("vnd"),
        "dr_mismatched": methods.get("dr_mismatched"),
        "vnd_observer_start": methods.get("vnd_observer"),
    }
    return [
        save_bundle(method.initial, bundle_dir / f"{name}.safetensors")
        for name, method in flyable.items()
        if method is not None
    ]


@dataclass(frozen=True)
class _Cell:
    """One method flying one scenario with one seed."""

    method: Method
    scenario: Scenario
    seed: int
    update_delay_s: float | None
    cpu_share: float
    out_dir: Path
    fly: FlightFactory  # the flight side of the run


# The cells of a parallel evaluation: set before the worker processes fork, so they inherit
# the methods (with the dr and oracle policies already trained) instead of receiving them.
_FORKED_CELLS: list[_Cell] = []


def _run_cells(cells: list[_Cell], jobs: int) -> Iterator[tuple[_Cell, dict, RunTrace | None]]:
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


def _run_forked_cell(index: int) -> tuple[int, dict, RunTrace | None]:
    return index, *_run_cell(_FORKED_CELLS[index])


def _run_cell(cell: _Cell) -> tuple[dict, RunTrace | None]:
    """Fly one cell; its metrics (with the latent figures for vnd) and, for seed 0, the run
    reduced to what the plots read."""
    run = run_method(
        cell.method,
        cell.scenario,
        cell.seed,
        cell.fly,
        cell.update_delay_s,
        cpu_share=cell.cpu_share,
    )
    metrics = run_metrics(run, cell.scenario)
    if cell.method.name == "vnd":  # the latent figures and plots are the plain learner's
        metrics["latent"] = _latent_figures(run, cell.scenario, cell.out_dir, cell.seed)
    if cell.seed != 0:
        return metrics, None
    return metrics, run.trace()


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
        "update_delay": (
            "a new bundle flies after the CPU time of its update divided by "
            f"{config.learner_cpu_share}, the share of a core the learner gets beside the "
            "flight stack"
        )
        if config.update_delay_s is None
        else f"a new bundle flies {config.update_delay_s} s (simulated) after its update starts",
        **method_definitions(config),
        "knn_accuracy": "leave-one-out 5-NN accuracy of the true condition from the final VND "
        "model's re-encoded latents of the whole run",
        "open_loop_holdout": "prior vs prior + residual(z) position error after 1/10/50 open-loop "
        "steps on ticks flown after the final model's last fit started (unseen data)",
    }


def method_definitions(config: EvalConfig) -> dict:
    """What every method is and the budget it gets (results.json's definitions and
    results.md)."""
    t, r, m, o = config.randomised_trainer, config.refit, config.rma, ObserverConfig()
    offline = (
        f"{t.iterations} trainer iterations x {t.num_envs} rollouts x {t.horizon_ticks} ticks, "
        "warm start from the base policy, trained once"
    )
    return {
        "base": "the base bundle, no adaptation",
        "dr": "matched domain randomisation: base policy fine-tuned on prior + random wind "
        "(0-6 m/s) through the plant's own drag law and coefficients, mass (-10..+40 %), drag "
        f"(x0.7-1.5), ranges containing every test condition; z hidden; budget {offline}",
        "dr_mismatched": "domain randomisation on a practitioner's model: a constant world "
        "external force (horizontal 0-1 N, vertical 0.1 N std; no drag law, the 5 m/s test "
        f"wind's 1.4 N outside it), mass (-5..+25 %); z hidden; budget {offline}",
        "dob": "disturbance observer: external acceleration from the prior's one-tick velocity "
        f"prediction error, low-pass {o.time_constant_s} s, command latency {o.latency_s} s and "
        "the motor lag handled, fed as a force to dr's policy fine-tuned further with that "
        "force (0-1.5 N horizontal, 0.5 N std vertical) as its z; no learning in flight; "
        f"policy budget {offline} on top of dr's",
        "rma": "oracle policy as privileged teacher + adaptation module (1-D convolution over "
        f"the last {m.history_ticks} ticks of velocity, attitude, rates and command) regressing "
        f"the teacher's disturbance input: {m.rounds} rounds of {m.rollout_envs} x "
        f"{m.rollout_ticks}-tick rollouts in the oracle's randomised simulation (the first with "
        f"the true z, later ones with the module's), {m.epochs} epochs per round; teacher "
        f"budget {offline}; no learning in flight",
        "refit": f"LOTF-style: every {r.min_interval_s} s an ensemble of {r.ensemble_size} "
        f"latent-free residuals fitted ({r.fit_steps} steps each) on the last {r.window_s} s, "
        f"the policy fine-tuned on their mean ({r.policy_iterations} iterations x "
        f"{r.policy_envs} rollouts); {REFIT_BUDGET_NOTE}",
        "vnd": "continual learner starting from dr's policy (the same offline training, "
        f"shared): fit {config.learner.fit.steps} steps, trainer "
        f"{config.learner.trainer.iterations} iterations x {config.learner.trainer.num_envs} "
        f"rollouts per update, at least {config.learner.min_interval_s} s apart",
        "vnd_observer": "the vnd learner starting from dob's policy (the same offline training, "
        "shared) given a force input: in flight the policy reads dob's force observer beside "
        "the encoder's latent; its training adds a force input (what an observer reads at "
        "hover, plus an external force in half the episodes) and a gate on station keeping on "
        "the prior plus the replay's mean error",
        "oracle": "base policy fine-tuned on dr's ranges plus rotor damage with the true "
        "disturbance vector as its z input, and given the true vector in flight; budget "
        f"{offline} (no upper bound: the same budget as dr)",
    }
