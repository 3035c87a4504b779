"""The continual loop of ``vnd eval`` on the flight runtime: update timing, recovery metric and a
tiny full evaluation."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from vnd_core.bundle import Bundle, load_bundle, shipped_bundle_path
from vnd_core.evaluation.continual_loop import (
    LEARNER_CPU_SHARE,
    Method,
    UpdateOutcome,
    run_method,
    scale_scenario,
)
from vnd_core.evaluation.refit import RefitConfig, hover_deviation_on_model
from vnd_core.evaluation.report import METHOD_ORDER, phase_figures, recovery_times
from vnd_core.evaluation.rma import RMAConfig
from vnd_core.evaluation.suite import EvalConfig, evaluate
from vnd_core.learner import LearnerConfig, ValidationConfig
from vnd_core.learner.validation import hover_deviation_m
from vnd_core.scenario import Phase, Scenario, load_scenario
from vnd_core.trainer import TrainerConfig
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd.fit import FitConfig
from vnd_core.vnd.model import VNDModel
from vnd_flight.evaluation_flight import fly_runtime

VEHICLE = load_vehicle("agile")

TINY_SCENARIO = """
name: tiny_wind
description: hover; 4 m/s wind along +x from t = 1.5 s
duration_s: 3.5
reference: {kind: hover, center_m: [0.0, 0.0, 1.2]}
phases:
  - {name: calm, start_s: 0.0}
  - {name: wind, start_s: 1.5}
events:
  - {at_s: 1.5, type: wind, kind: constant, velocity_mps: [4.0, 0.0, 0.0]}
"""


@pytest.fixture(scope="module")
def base_bundle() -> Bundle:
    """The shipped base bundle (package data)."""
    return load_bundle(shipped_bundle_path())


class _SwapOnce(Method):
    """Asks for one update at t >= 1 s and returns a fixed bundle (tests the loop's timing)."""

    def __init__(self, bundle: Bundle, new: Bundle):
        super().__init__("swap", bundle)
        self.new = new

    def start(self, seed: int) -> Bundle:
        self.asked = False
        return self.initial

    def should_update(self, now_s: float) -> bool:
        return now_s >= 1.0 and not self.asked

    def update(self) -> UpdateOutcome:
        self.asked = True
        return UpdateOutcome(self.new, wall_s=123.0, cpu_s=0.9)


class _BurnOnce(_SwapOnce):
    """Computes for about 0.3 s of CPU time and reports none of it: the loop measures it."""

    def update(self) -> UpdateOutcome:
        self.asked = True
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        return UpdateOutcome(self.new, wall_s=0.0)


def test_new_bundle_flies_after_the_simulated_delay(base_bundle):
    new = Bundle(version=7, parent_version=1, policy=base_bundle.policy, vehicle=VEHICLE)
    scenario = Scenario(name="calm", duration_s=3.0)
    run = run_method(
        _SwapOnce(base_bundle, new), scenario, seed=0, fly=fly_runtime, update_delay_s=0.5
    )
    (marker,) = run.updates
    assert marker.requested_s == pytest.approx(1.0) and marker.applied_s == pytest.approx(1.5)
    assert marker.wall_s == 123.0 and marker.accepted
    versions = run.records.policy_version
    first_new = int(np.argmax(versions == 7))
    # the swap happens at the first tick after 1.5 s (stamps: the ticks' odometry, scenario time)
    stamps_s = run.records.stamp_ns / 1e9
    assert stamps_s[first_new - 1] < 1.5 <= stamps_s[first_new] + 0.02
    assert np.all(versions[first_new:] == 7)
    # charged mode: the update's CPU time over the learner's core share, not its wall time
    run = run_method(_SwapOnce(base_bundle, new), scenario, seed=0, fly=fly_runtime, cpu_share=0.5)
    assert run.updates[0].applied_s == pytest.approx(1.0 + 0.9 / 0.5)
    assert run.updates[0].cpu_s == pytest.approx(0.9)
    run = run_method(_SwapOnce(base_bundle, new), scenario, seed=0, fly=fly_runtime, cpu_share=0.25)
    assert run.updates[0].applied_s == pytest.approx(4.6)  # beyond the end: never flies
    assert np.all(run.records.policy_version == 1)


class _PreemptedRound(_SwapOnce):
    """A slow first job that gives way at 2 s to a second job, whose bundle then flies."""

    def start(self, seed: int) -> Bundle:
        self.jobs, self.abandoned = 0, 0
        return self.initial

    def should_update(self, now_s: float) -> bool:
        return now_s >= 1.0 and self.jobs < 2 and (self.jobs == 0 or now_s >= 2.0)

    def preempts(self, now_s: float) -> bool:
        return self.jobs == 1 and now_s >= 2.0

    def abandon(self) -> None:
        self.abandoned += 1

    def update(self) -> UpdateOutcome:
        self.jobs += 1
        delay_s = 0.9 if self.jobs == 1 else 0.15  # x 1 / cpu_share 0.3: 3 s, then 0.5 s
        bundle = Bundle(self.jobs + 10, 1, self.initial.policy, VEHICLE)
        return UpdateOutcome(bundle, wall_s=0.0, cpu_s=delay_s, kind="policy")


def test_a_pending_job_that_gives_way_never_flies_and_the_next_starts_at_once(base_bundle):
    method = _PreemptedRound(base_bundle, base_bundle)
    run = run_method(
        method, Scenario(name="calm", duration_s=4.0), seed=0, fly=fly_runtime, cpu_share=0.3
    )
    first, second = run.updates
    assert method.abandoned == 1 and not first.accepted and first.reason == "preempted at 2.0 s"
    assert first.applied_s == pytest.approx(2.0)
    assert second.requested_s == pytest.approx(2.0) and second.applied_s == pytest.approx(2.5)
    versions = set(run.records.policy_version.tolist())
    assert 11 not in versions and 12 in versions  # the withdrawn version never flew


def test_an_update_that_reports_no_cpu_time_is_charged_what_it_used(base_bundle):
    new = Bundle(version=7, parent_version=1, policy=base_bundle.policy, vehicle=VEHICLE)
    run = run_method(
        _BurnOnce(base_bundle, new), Scenario(name="calm", duration_s=3.0), seed=0, fly=fly_runtime
    )
    (marker,) = run.updates
    assert 0.3 <= marker.cpu_s < 0.6
    assert marker.applied_s == pytest.approx(1.0 + marker.cpu_s / LEARNER_CPU_SHARE)


def test_same_seed_same_flight(base_bundle):
    scenario = scale_scenario(load_scenario("hover_wind_large"), 0.1)
    a = run_method(Method("base", base_bundle), scenario, seed=4, fly=fly_runtime)
    b = run_method(Method("base", base_bundle), scenario, seed=4, fly=fly_runtime)
    c = run_method(Method("base", base_bundle), scenario, seed=5, fly=fly_runtime)
    assert np.array_equal(a.error_m, b.error_m) and not np.array_equal(a.error_m, c.error_m)


def test_scale_scenario_scales_every_time():
    scenario = load_scenario("recurring_wind")
    half = scale_scenario(scenario, 0.5)
    assert half.duration_s == scenario.duration_s / 2
    assert [p.start_s for p in half.phases] == [p.start_s / 2 for p in scenario.phases]
    assert [e.at_s for e in half.events] == [e.at_s / 2 for e in scenario.events]
    assert half.events[0].velocity_mps == scenario.events[0].velocity_mps  # physics unchanged


def test_recovery_time_of_a_known_error_trace():
    scenario = Scenario(
        name="step", duration_s=20.0, phases=(Phase("calm", 0.0), Phase("wind", 10.0))
    )
    time_s = np.arange(1, 1001) * 0.02
    error = np.full(1000, 0.02)
    burst = (time_s > 10.0) & (time_s <= 13.0)
    error[burst] = 0.5  # 3 s of large error, then back to the 0.02 m steady level
    (rec,) = recovery_times(time_s, error, scenario)
    assert rec["phase"] == "wind" and rec["steady_m"] == pytest.approx(0.02)
    assert rec["phase_rmse_m"] == pytest.approx(np.sqrt((150 * 0.5**2 + 350 * 0.02**2) / 500))
    # band 1.2 x 0.02 + 0.01 m: the centred 1-s window may hold 0.3 % of the burst
    assert rec["recovery_s"] == pytest.approx(3.5, abs=0.03) and not rec["censored"]
    error[:] = 0.02
    error[time_s <= 10.0] = 0.5  # a bad previous phase must not leak into the next one
    (clean,) = recovery_times(time_s, error, scenario)
    assert clean["recovery_s"] == 0.0 and not clean["censored"]


def test_phase_figures_average_each_phase_over_seeds():
    def run(whole_m: float, settled_m: float) -> dict:
        recovery = {
            "phase": "wind",
            "onset_s": 10.0,
            "phase_rmse_m": whole_m,
            "steady_m": settled_m,
        }
        return {"recoveries": [recovery]}

    (wind,) = phase_figures([run(0.04, 0.01), run(0.06, 0.03)])
    assert wind == {"phase": "wind", "onset_s": 10.0, "whole_m": 0.05, "settled_m": 0.02}


def tiny_learner() -> LearnerConfig:
    """A learner that updates every second on a few windows with one-step budgets."""
    return LearnerConfig.quick(
        min_new_ticks=50,
        min_interval_s=1.0,
        min_windows=8,
        fit=FitConfig.quick(steps=4, batch_size=16),
        trainer=TrainerConfig(num_envs=8, horizon_ticks=4, episode_ticks=40, iterations=1),
        validation=ValidationConfig(
            probe_observations=12, eval_rollouts=4, eval_ticks=10, hover_ticks=10
        ),
    )


def test_tiny_evaluation_writes_results_and_plots(base_bundle, tmp_path):
    scenario_path = tmp_path / "tiny_wind.yaml"
    scenario_path.write_text(TINY_SCENARIO)
    learner = tiny_learner()
    config = EvalConfig.quick(
        seeds=1,
        time_scale=1.0,
        learner=learner,
        randomised_trainer=TrainerConfig(num_envs=8, horizon_ticks=4, iterations=1),
        refit=RefitConfig(min_interval_s=3.0, min_new_ticks=50, fit_steps=2, policy_iterations=1),
        rma=RMAConfig(history_ticks=10, rollout_envs=4, rollout_ticks=20, rounds=1, epochs=1),
        update_delay_s=0.2,
    )
    payload = evaluate(
        config, base_bundle, tmp_path / "out", scenario_names=[str(scenario_path)], fly=fly_runtime
    )
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = {r["method"]: r for r in saved["results"]}
    assert list(rows) == list(METHOD_ORDER)
    for row in rows.values():
        assert row["scenario"] == "tiny_wind"
        assert row["rmse_m"] > 0 and row["rmse_m_std"] == 0.0 and 0 <= row["crash_rate"] <= 1
        assert row["recovery_s"] is not None and row["recovery_onsets"] == 1
        (phase,) = row["phases"]  # the wind phase: whole and settled, from the same trace
        assert phase["phase"] == "wind" and phase["settled_m"] > 0 and phase["whole_m"] > 0
    assert rows["base"]["updates"] == 0 and rows["vnd"]["updates"] >= 2
    assert rows["vnd_observer"]["updates"] >= 2
    assert rows["refit"]["updates"] >= 1  # every 3 s at the most: LOTF's cadence
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| tiny_wind | vnd |" in md and "recovery_s" in md and "## Per phase" in md
    assert (tmp_path / "out" / "error_over_time.png").stat().st_size > 1000
    if rows["vnd"]["updates_accepted"]:
        assert (tmp_path / "out" / "latents_tiny_wind.png").exists()
        assert saved["latent"]["tiny_wind"][0]["conditions"] == ["calm", "wind"]
    assert payload["results"] == saved["results"]
    dr = load_bundle(tmp_path / "out" / "bundles" / "dr.safetensors")  # vnd fly --bundle
    assert dr.summary["kind"] == "dr" and dr.summary["sees_disturbance"] is False
    start = load_bundle(tmp_path / "out" / "bundles" / "vnd_observer_start.safetensors")
    assert start.summary["kind"] == "dob" and start.policy.force_dim == 3
    assert (
        load_bundle(tmp_path / "out" / "bundles" / "dr_mismatched.safetensors").summary[
            "randomisation"
        ]["family"]
        == "external_force"
    )
    lines = (tmp_path / "out" / "runs.jsonl").read_text().splitlines()
    assert [json.loads(line)["method"] for line in lines] == list(rows)


def test_refit_hover_gate_flies_the_refit_model(base_bundle):
    model = VNDModel(VEHICLE)
    with torch.no_grad():
        for parameter in model.residual.parameters():
            parameter.zero_()  # D = 0: the model is the prior
    on_model = hover_deviation_on_model(base_bundle.policy, model, 50)
    assert on_model == pytest.approx(hover_deviation_m(base_bundle.policy, VEHICLE, 50), abs=1e-5)
    with torch.no_grad():
        for parameter in model.residual.parameters():
            parameter.fill_(float("nan"))
    assert np.isnan(hover_deviation_on_model(base_bundle.policy, model, 5))


def test_parallel_runs_give_the_serial_figures(base_bundle, tmp_path):
    """--jobs: each run in a forked process; every run's figures equal the serial ones."""
    scenario_path = tmp_path / "tiny_wind.yaml"
    scenario_path.write_text(TINY_SCENARIO)
    learner = tiny_learner()
    config = EvalConfig.quick(
        seeds=2,
        time_scale=1.0,
        learner=learner,
        randomised_trainer=TrainerConfig(num_envs=8, horizon_ticks=4, iterations=1),
        update_delay_s=0.2,
    )
    figures = {}
    for jobs in (1, 2):
        payload = evaluate(
            config,
            base_bundle,
            tmp_path / f"jobs{jobs}",
            method_names=("base", "vnd"),
            scenario_names=[str(scenario_path)],
            jobs=jobs,
            fly=fly_runtime,
        )
        figures[jobs] = {
            (r["method"], r["seed"]): (r["rmse_m"], r["updates"], r["updates_accepted"])
            for r in payload["runs"]
        }
        assert payload["config"]["jobs"] == jobs
    assert len(figures[1]) == 4 and figures[2] == figures[1]
    assert (tmp_path / "jobs2" / "error_over_time.png").stat().st_size > 1000


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("modle.latent_dim=4", "LearnerConfig has no section 'modle'"),
        ("model.short_context_len=8", "LearnerConfig has no field 'model.short_context_len'"),
        ("fit.batch_size=1", "batch_size must be >= 2"),
        ("trainer.num_envs=0", "num_envs must be >= 1"),
        ("trainer.iterations=many", "trainer: iterations: expected an integer, got 'many'"),
        ("trainer.iterations", "expected NAME=VALUE"),
    ],
)
def test_learner_params_are_checked_before_anything_runs(param, message, tmp_path, capsys):
    import argparse

    from vnd_tools.commands import eval as eval_command

    parser = argparse.ArgumentParser()
    eval_command.add_arguments(parser)
    args = parser.parse_args(["--out", str(tmp_path / "out"), "--learner-param", param])
    assert eval_command.run(args) == 2
    assert message in capsys.readouterr().out
    assert not (tmp_path / "out").exists()
