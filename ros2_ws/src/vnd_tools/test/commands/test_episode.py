"""Closed-loop episodes on the true plant with the shipped base bundle, and the metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from vnd_core.bundle import load_bundle, shipped_bundle_path
from vnd_core.episode import episode_metrics, run_episode
from vnd_core.policy import with_force_input
from vnd_core.scenario import load_scenario
from vnd_tools.commands import sim


@pytest.fixture(scope="module")
def policy():
    torch.set_num_threads(1)
    return load_bundle(shipped_bundle_path()).policy


# (scenario, max error bound, RMSE target) for the shipped bundle on the true plant
CASES = [("hover_calm", 0.05, 0.03), ("figure8_calm", 0.15, 0.10)]


@pytest.mark.parametrize(("scenario", "bound_m", "rmse_target_m"), CASES)
def test_twenty_second_episode_stays_within_bounds(policy, scenario, bound_m, rmse_target_m):
    result = run_episode(policy, load_scenario(scenario), duration_s=20.0, seed=1)
    assert result.error_m.shape == (1000, 1)
    assert not result.metrics["crashed"]
    assert result.metrics["max_error_m"] < bound_m, result.metrics
    assert result.metrics["rmse_m"] <= rmse_target_m, result.metrics
    assert len(result.metrics["per_second_error_m"]) == 20
    low, high = policy.action_bounds()
    assert (torch.from_numpy(result.actions) >= low - 1e-4).all()
    assert (torch.from_numpy(result.actions) <= high + 1e-4).all()


def test_strong_wind_visibly_degrades_the_base_policy(policy):
    """The base policy has no integral action: a 5 m/s wind (from t = 3 s) pushes it off."""
    result = run_episode(policy, load_scenario("hover_wind_large"), duration_s=7.0, seed=2)
    per_second = result.metrics["per_second_error_m"]
    assert not result.metrics["crashed"]
    assert max(per_second[:3]) < 0.03  # calm before the wind
    assert min(per_second[-2:]) > 0.08  # a steady offset downwind after it
    assert result.condition[0] == "calm" and result.condition[-1] == "wind_large"


def test_a_force_input_policy_flies_with_its_observer_and_the_rate_compensation(policy):
    """A force-input policy flies as the policy node flies it. The base policy given a silent
    force input, through a rotor at 75 % from 10 s: the compensation takes the torque off its
    commands, so it holds the damage phase far better than the same policy without a force
    input (ground truth: the plant's position error)."""
    forced = with_force_input(policy).eval()
    scenario = load_scenario("prop_damage")
    plain = run_episode(policy, scenario, duration_s=30.0, seed=1).error_m[1000:, 0]
    observed = run_episode(forced, scenario, duration_s=30.0, seed=1).error_m[1000:, 0]
    rms = [float(np.sqrt((e**2).mean())) for e in (plain, observed)]
    assert rms[1] < 0.6 * rms[0], rms
    with pytest.raises(ValueError, match="one environment"):
        run_episode(forced, scenario, duration_s=1.0, batch_size=2)


def test_metrics_of_known_errors():
    error = np.zeros((100, 2))
    error[:50, 0] = 0.1
    metrics = episode_metrics(error, np.array([False, True]), dt_s=0.02)
    assert metrics["per_second_error_m"] == pytest.approx([0.05, 0.0])
    assert metrics["rmse_m"] == pytest.approx(np.sqrt(0.01 * 50 / 200))
    assert metrics["max_error_m"] == pytest.approx(0.1)
    assert metrics["crashed"] and metrics["crash_count"] == 1


def test_sim_command_writes_json_and_plot(tmp_path):
    args = [
        "--scenario", "hover_calm", "--duration", "2", "--json", str(tmp_path / "m.json"),
        "--plot", str(tmp_path / "p.png"), "--seed", "3",
    ]  # fmt: skip
    parser = __import__("argparse").ArgumentParser()
    sim.add_arguments(parser)
    assert sim.run(parser.parse_args(args)) == 0
    report = json.loads((tmp_path / "m.json").read_text())
    assert {"rmse_m", "max_error_m", "crashed", "per_second_error_m"} <= set(report)
    assert len(report["per_second_error_m"]) == 2 and not report["crashed"]
    assert (tmp_path / "p.png").stat().st_size > 10_000
