"""Baselines of ``vnd eval``: the disturbed prior, the oracle's true disturbance, blind DR."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vnd_core.dynamics import NominalModel
from vnd_core.evaluation.baselines import (
    DISTURBANCE_DIM,
    DISTURBANCE_SCALE,
    BlindLatentObservation,
    DisturbedPrior,
    RandomisationConfig,
    clone_policy,
    sample_disturbance,
    train_randomised_policy,
    true_disturbance,
)
from vnd_core.plant import TruePlant
from vnd_core.policy import PolicyNet
from vnd_core.scenario import load_scenario
from vnd_core.state import VEL, hover_state
from vnd_core.trainer import TrainerConfig
from vnd_core.vehicle import load_vehicle

VEHICLE = load_vehicle("agile")


def _normalised(raw: list[float]) -> torch.Tensor:
    return torch.tensor([raw]) / torch.tensor(DISTURBANCE_SCALE)


def test_disturbed_prior_without_disturbance_at_rest_is_the_prior():
    state = hover_state((1,))
    action = torch.tensor([[VEHICLE.hover_thrust_n, 0.1, -0.2, 0.0]])
    expected = NominalModel(VEHICLE)(state, action)
    got = DisturbedPrior(VEHICLE)(state, action, torch.zeros(1, DISTURBANCE_DIM))
    assert torch.allclose(got, expected, atol=1e-6)


def test_wind_pushes_downwind_and_mass_pulls_down():
    model = DisturbedPrior(VEHICLE)
    state = hover_state((1,))
    hover = torch.tensor([[VEHICLE.hover_thrust_n, 0.0, 0.0, 0.0]])
    windy = model(state, hover, _normalised([5.0, 0, 0, 0, 0, 0, 0, 0]))
    assert windy[0, VEL.start] > 0.01  # drag of a 5 m/s wind accelerates along +x
    heavy = model(state, hover, _normalised([0, 0, 0, 0.3, 0, 0, 0, 0]))
    assert heavy[0, VEL.start + 2] < -0.01  # hover thrust no longer holds the heavier vehicle


def test_true_disturbance_follows_the_scenario_events():
    payload = load_scenario("payload")
    before = true_disturbance(payload, 5.0, np.zeros(3), VEHICLE)
    during = true_disturbance(payload, 15.0, np.zeros(3), VEHICLE)
    after = true_disturbance(payload, payload.events[-1].at_s + 5.0, np.zeros(3), VEHICLE)
    assert np.allclose(before, 0.0) and np.allclose(after, 0.0)
    mass_fraction = during[3] * DISTURBANCE_SCALE[3]
    assert mass_fraction == pytest.approx(0.2 / VEHICLE.mass_kg, rel=1e-5)
    damage = load_scenario("prop_damage")
    z = true_disturbance(damage, 20.0, np.array([1.0, 2.0, 0.0]), VEHICLE)
    assert z[5] * DISTURBANCE_SCALE[5] == pytest.approx(0.25 / 4.0)  # a quarter of one rotor
    assert np.allclose(z[:3] * np.array(DISTURBANCE_SCALE[:3]), [1.0, 2.0, 0.0])
    assert abs(z[6]) > 0.1 and abs(z[7]) > 0.1  # front-left rotor weak: roll and pitch torque


def test_oracle_model_predicts_the_windy_plant_better_than_the_prior(tracking_controller):
    """One-step velocity prediction on the true plant in a 5 m/s wind: the prior with the true
    disturbance beats the prior alone (the oracle is trained on a model that knows the wind)."""
    scenario = load_scenario("hover_wind_large")
    plant = TruePlant(VEHICLE, scenario, batch_size=1, seed=3)
    plant.reset(scenario.start_state(1))
    trajectory = scenario.trajectory(1)
    prior, disturbed = NominalModel(VEHICLE), DisturbedPrior(VEHICLE)
    prior_err, model_err = [], []
    for _ in range(400):
        t = plant.time_s
        state = plant.state
        ref = trajectory.sample(torch.full((1,), t))
        action = tracking_controller(
            state, (ref.position_m, ref.velocity_mps, ref.acceleration_mps2), VEHICLE
        )
        z = torch.from_numpy(
            true_disturbance(scenario, t, plant.wind_velocity_mps()[0].numpy(), VEHICLE)
        )
        nxt = plant.step(action)
        if t > 4.0:  # steady wind, past the start transient
            prior_err.append(float((prior(state, action) - nxt)[0, VEL].norm()))
            model_err.append(float((disturbed(state, action, z[None]) - nxt)[0, VEL].norm()))
    assert np.mean(model_err) < 0.5 * np.mean(prior_err)


def test_blind_observation_hides_the_latent():
    policy = PolicyNet(VEHICLE)
    builder = policy.observation
    blind = BlindLatentObservation(builder)
    state = hover_state((2,))
    ref_state, ref_head = torch.zeros(2, 13), torch.zeros(2, builder.head_dim)
    prev = torch.zeros(2, 4 * policy.config.n_prev_actions)
    z = torch.ones(2, policy.latent_dim)
    seen = builder.build(state, ref_state, ref_head, prev, z)
    hidden = blind.build(state, ref_state, ref_head, prev, z)
    assert torch.equal(seen[:, : -policy.latent_dim], hidden[:, : -policy.latent_dim])
    assert torch.all(hidden[:, -policy.latent_dim :] == 0) and blind.dim == builder.dim


def test_randomised_draws_stay_in_their_ranges():
    generator = torch.Generator().manual_seed(0)
    config = RandomisationConfig.oracle()
    raw = sample_disturbance(4000, generator, VEHICLE, config) * torch.tensor(DISTURBANCE_SCALE)
    speed = raw[:, :2].norm(dim=1)
    assert speed.max() <= config.wind_speed_max_mps + 1e-5 and speed.mean() > 2.0
    assert raw[:, 3].min() >= config.mass_fraction_range[0] - 1e-6
    assert raw[:, 3].max() <= config.mass_fraction_range[1] + 1e-6
    damaged = (raw[:, 5] > 0).float().mean()
    assert 0.3 < damaged < 0.5  # damage_probability 0.4
    dr = sample_disturbance(500, generator, VEHICLE, RandomisationConfig.domain_randomisation())
    assert torch.all(dr[:, 5:] == 0)  # domain randomisation has no actuator damage


def test_training_changes_a_copy_only():
    base = PolicyNet(VEHICLE)
    policy = clone_policy(base)
    config = TrainerConfig(num_envs=8, horizon_ticks=4, iterations=2, seed=1)
    summary = train_randomised_policy(
        policy, VEHICLE, config, RandomisationConfig.domain_randomisation(), False
    )
    assert summary["iterations"] == 2 and summary["sees_disturbance"] is False
    changed = any(
        not torch.equal(a, b) for a, b in zip(base.parameters(), policy.parameters(), strict=True)
    )
    assert changed
