"""The reviewer's baselines of ``vnd eval`` are what they say: the mismatched DR really trains on
another disturbance model, the disturbance observer finds a constant force and its policy uses
it, RMA's adaptation module regresses the disturbance, refit is an ensemble on a 3-5 s cadence."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from vnd_core.bundle import Bundle, load_bundle, shipped_bundle_path
from vnd_core.dynamics import NominalModel
from vnd_core.evaluation.baselines import (
    DISTURBANCE_DIM,
    FORCE_SCALE_N,
    DisturbedPrior,
    ExternalForcePrior,
    RandomisationConfig,
    randomised_trainer,
    sample_disturbance,
    train_baseline_bundle,
)
from vnd_core.evaluation.dob import force_input_bundle
from vnd_core.evaluation.refit import RefitConfig, RefitMethod, ResidualEnsemble
from vnd_core.evaluation.rma import (
    RMAConfig,
    collect_rollouts,
    history_windows,
    train_adaptation_module,
)
from vnd_core.evaluation.suite import EvalConfig, prepare_methods
from vnd_core.force_observer import ForceObserver, ObserverConfig
from vnd_core.learner import LearnerConfig
from vnd_core.plant import TruePlant
from vnd_core.policy import PolicyConfig, PolicyNet, PolicyRunner
from vnd_core.reference import ReferenceSpec
from vnd_core.scenario import Scenario, load_scenario
from vnd_core.state import VEL, hover_state
from vnd_core.trainer import TrainerConfig
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd.model import VNDModel

VEHICLE = load_vehicle("agile")


@pytest.fixture(scope="module")
def base_bundle() -> Bundle:
    """The shipped base bundle (package data)."""
    return load_bundle(shipped_bundle_path())


def _hover_in_wind(duration_s: float, wind_at_s: float) -> Scenario:
    """hover_wind_large shortened: the 5 m/s wind from ``wind_at_s``."""
    scenario = load_scenario("hover_wind_large")
    return dataclasses.replace(
        scenario,
        duration_s=duration_s,
        events=tuple(dataclasses.replace(e, at_s=wind_at_s) for e in scenario.events),
    )


# ---- dr_mismatched ---------------------------------------------------------------------------
def test_mismatched_dr_trains_on_an_external_force_not_the_plant_drag_law():
    """The trainer of dr_mismatched flies ExternalForcePrior: its force does not depend on the
    vehicle's velocity (the plant's drag law vanishes when the vehicle moves with the air), and
    the strongest test wind's drag lies outside its force range."""
    config = RandomisationConfig.mismatched()
    policy_trainer = randomised_trainer(
        PolicyNet(VEHICLE),
        VEHICLE,
        TrainerConfig(num_envs=4, horizon_ticks=2, iterations=1),
        config,
        sees_disturbance=False,
    )
    dynamics = policy_trainer.dynamics
    assert isinstance(dynamics, ExternalForcePrior)
    # a disturbance vector as the sampler draws it: slot 0 read by both models
    z = torch.zeros(1, DISTURBANCE_DIM)
    z[0, 0] = 1.0
    hover = torch.tensor([[VEHICLE.hover_thrust_n, 0.0, 0.0, 0.0]])
    at_rest, moving = hover_state((1,)), hover_state((1,))
    moving[0, VEL.start] = 3.0  # moving with a 3 m/s wind along +x: no air-relative speed
    prior = NominalModel(VEHICLE)
    dv_rest = dynamics(at_rest, hover, z) - prior(at_rest, hover)
    dv_moving = dynamics(moving, hover, z) - prior(moving, hover)
    assert torch.allclose(dv_rest[0, VEL], dv_moving[0, VEL], atol=1e-6)
    expected = FORCE_SCALE_N / VEHICLE.mass_kg * 0.02
    assert float(dv_rest[0, VEL.start]) == pytest.approx(expected, rel=1e-4)
    plant_law = DisturbedPrior(VEHICLE)  # z slot 0 as a 3 m/s wind through the drag law
    drag_moving = plant_law(moving, hover, z) - prior(moving, hover)
    assert abs(float(drag_moving[0, VEL.start])) < 1e-6  # the plant's law: no force at all
    forces = sample_disturbance(4000, torch.Generator().manual_seed(0), VEHICLE, config)
    horizontal_n = forces[:, :2].norm(dim=1) * FORCE_SCALE_N
    drag_5mps_n = 5.0 * VEHICLE.drag_linear_nspm[0] + 25.0 * VEHICLE.drag_quadratic_ns2pm2[0]
    assert horizontal_n.max() < drag_5mps_n  # the test condition is outside the range
    assert torch.all(forces[:, 4:] == 0)  # no drag scale, no rotor terms


def test_mismatched_dr_is_its_own_training_and_dr_keeps_the_plant_law(base_bundle):
    config = EvalConfig.quick(
        randomised_trainer=TrainerConfig(num_envs=4, horizon_ticks=2, iterations=1)
    )
    methods = prepare_methods(["dr", "dr_mismatched"], base_bundle, config, log=lambda _: None)
    dr, mismatched = methods["dr"].initial.summary, methods["dr_mismatched"].initial.summary
    assert dr["randomisation"]["family"] == "plant_drag"
    assert mismatched["randomisation"]["family"] == "external_force"
    assert methods["dr_mismatched"].latent_mode == "none"


def test_vnd_learns_on_top_of_drs_policy_trained_once(base_bundle):
    config = EvalConfig.quick(
        randomised_trainer=TrainerConfig(num_envs=4, horizon_ticks=2, iterations=1)
    )
    trained = []
    methods = prepare_methods(["dr", "vnd"], base_bundle, config, log=trained.append)
    assert len(trained) == 1  # one dr training, shared
    dr, vnd = methods["dr"].initial.policy, methods["vnd"].initial.policy
    assert methods["vnd"].latent_mode == "encoder"
    for name, weight in dr.state_dict().items():
        torch.testing.assert_close(vnd.state_dict()[name], weight, rtol=0, atol=0)
    changed = [
        name
        for name, weight in base_bundle.policy.state_dict().items()
        if not torch.equal(weight, dr.state_dict()[name])
    ]
    assert changed  # the dr training moved the base policy


def test_vnd_observer_starts_from_dobs_policy_reading_the_force_as_its_force_input(base_bundle):
    """One dob training, shared, warm-started from dr's; dob and vnd_observer's start fly it
    with a force input, which reads the observer's force exactly as dob's trained policy reads
    it through z, and its z inputs start silent."""
    config = EvalConfig.quick(
        randomised_trainer=TrainerConfig(num_envs=4, horizon_ticks=2, iterations=1)
    )
    trained = []
    methods = prepare_methods(["dob", "vnd_observer"], base_bundle, config, log=trained.append)
    assert [line.split()[1] for line in trained] == ["dr", "dob"]  # dob from dr, shared
    assert methods["dob"].initial.parent_version == base_bundle.version + 1  # dr's version
    flown, vnd = methods["dob"].initial.policy, methods["vnd_observer"].initial.policy
    assert methods["dob"].latent_mode == "none" and flown.force_dim == 3
    assert methods["vnd_observer"].latent_mode == "encoder" and vnd.force_dim == 3
    for name, weight in flown.state_dict().items():
        torch.testing.assert_close(vnd.state_dict()[name], weight, rtol=0, atol=0)
    trained_dob = train_baseline_bundle(base_bundle, "dob", config.randomised_trainer)
    dob, converted = trained_dob.policy, force_input_bundle(trained_dob).policy
    reference = ReferenceSpec(kind="figure8")
    state = np.array([0.2, -0.1, 1.1, 0.99, 0.05, -0.05, 0.0, 0.4, -0.3, 0.1, 0.2, -0.1, 0.05])
    force_n = np.array([1.1, -0.6, 0.3])
    dob_z = np.zeros(DISTURBANCE_DIM, dtype=np.float32)
    dob_z[:3] = force_n / FORCE_SCALE_N
    expected = PolicyRunner(dob, reference).act(state, 0.3, dob_z)
    z = np.ones(8, dtype=np.float32)
    got = PolicyRunner(converted, reference).act(state, 0.3, z, force_n)
    np.testing.assert_allclose(got, expected, atol=1e-6)


# ---- dob -------------------------------------------------------------------------------------
def test_dob_trains_with_the_thrust_feedforward_reading_the_horizontal_force():
    """dob flies with the observer's thrust feed-forward, so its training does too: a payload's
    weight on a level vehicle at hover thrust moves it no more than the prior does, a push
    does, and the policy reads the push but not the weight (else it answers it twice)."""
    policy = PolicyNet(VEHICLE, PolicyConfig(latent_dim=DISTURBANCE_DIM))
    config = TrainerConfig(num_envs=4, horizon_ticks=2, iterations=1)
    dob = RandomisationConfig.observer_feedforward()
    trainer = randomised_trainer(policy, VEHICLE, config, dob, sees_disturbance=True)
    z = torch.zeros(1, DISTURBANCE_DIM)
    z[0, :3] = torch.tensor([0.6, 0.0, -1.5]) / FORCE_SCALE_N
    hover = torch.tensor([[VEHICLE.hover_thrust_n, 0.0, 0.0, 0.0]])
    at_rest = hover_state((1,))
    force_n = (
        VEHICLE.mass_kg
        * (trainer.dynamics(at_rest, hover, z) - NominalModel(VEHICLE)(at_rest, hover))[0, VEL]
        / 0.02
    )
    np.testing.assert_allclose(force_n.numpy(), [0.6, 0.0, 0.0], atol=1e-3)
    seen = trainer.builder.seen_condition(z)
    torch.testing.assert_close(seen[0, :3], torch.tensor([0.6, 0.0, 0.0]) / FORCE_SCALE_N)
    torch.testing.assert_close(seen[0, 3:], z[0, 3:])
    blind = randomised_trainer(
        PolicyNet(VEHICLE),
        VEHICLE,
        config,
        RandomisationConfig.mismatched(),
        sees_disturbance=False,
    )
    weight_n = (
        VEHICLE.mass_kg
        * (blind.dynamics(at_rest, hover, z) - NominalModel(VEHICLE)(at_rest, hover))[0, VEL]
        / 0.02
    )
    assert float(weight_n[2]) == pytest.approx(-1.5, abs=1e-3)  # dr_mismatched has no feed-forward
    with pytest.raises(ValueError, match="thrust_feedforward"):
        dataclasses.replace(dob, family="plant_drag").validate()


def test_observer_converges_to_a_constant_external_force_on_the_prior_plant(tracking_controller):
    """The prior plus a constant world force, commands applied as sent: the estimate settles
    on force / mass within 3 %."""
    force_n = torch.tensor([0.8, -0.5, 0.3])
    plant = ExternalForcePrior(VEHICLE)
    z = torch.zeros(1, DISTURBANCE_DIM)
    z[0, :3] = force_n / FORCE_SCALE_N
    # this plant has neither latency nor motor lag, and the observer is told so
    observer = ForceObserver(VEHICLE, ObserverConfig(latency_s=0.0, motor_time_constant_s=0))
    state = hover_state((1,), position_m=(0.0, 0.0, 1.0))
    target = (torch.tensor([[0.0, 0.0, 1.0]]), torch.zeros(1, 3), torch.zeros(1, 3))
    for _ in range(150):  # 3 s, ten filter time constants
        observer.observe(state[0].double().numpy())
        action = tracking_controller(state, target, VEHICLE)
        observer.command(action[0].double().numpy())
        state = plant(state, action, z)
    expected = (force_n / VEHICLE.mass_kg).numpy()
    assert np.allclose(observer.estimate_mps2, expected, rtol=0.03, atol=0.02)
    # dob reads the horizontal part; the vertical one goes out as the thrust feed-forward
    horizontal = force_n.numpy() * np.array([1.0, 1.0, 0.0])
    assert np.allclose(observer.policy_force_n(), horizontal, rtol=0.03, atol=0.02)


def test_observer_finds_the_wind_force_on_the_true_plant(base_bundle):
    """On the true plant (30 ms latency, motor lag, measurement noise) in a steady 5 m/s wind,
    the estimate of a hovering vehicle settles near the wind's drag / mass."""
    scenario = _hover_in_wind(6.0, 0.0)
    plant = TruePlant(VEHICLE, scenario, 1, seed=0)
    plant.reset(scenario.start_state(1))
    observer = ForceObserver(VEHICLE)
    runner = PolicyRunner(base_bundle.policy, scenario.reference)
    estimates = []
    for _ in range(300):
        measured = plant.measure()[0].double().numpy()
        observer.observe(measured)
        action = runner.act(measured, plant.time_s)
        observer.command(action)
        plant.step(torch.from_numpy(action).float()[None])
        estimates.append(observer.estimate_mps2.copy())
    settled = np.mean(estimates[-100:], axis=0)
    drag_n = 5.0 * VEHICLE.drag_linear_nspm[0] + 25.0 * VEHICLE.drag_quadratic_ns2pm2[0]
    assert settled[0] == pytest.approx(drag_n / VEHICLE.mass_kg, rel=0.15)
    assert abs(settled[1]) < 0.2 and abs(settled[2]) < 0.3


# ---- rma -------------------------------------------------------------------------------------
def test_rma_module_regresses_the_disturbance_on_held_out_episodes(base_bundle):
    """Trained on two rounds of randomised rollouts, the module's error on fresh episodes is
    well below the spread of the wind, mass and rotor-torque entries it estimates."""
    randomisation = RandomisationConfig.oracle()
    config = RMAConfig(rollout_envs=32, rollout_ticks=150, rounds=2, epochs=8)
    module, summary = train_adaptation_module(base_bundle.policy, VEHICLE, randomisation, config)
    assert summary["windows"] > 0 and summary["rma"]["rounds"] == 2
    held_out = RMAConfig(rollout_envs=48, rollout_ticks=150, seed=99)
    rollout = collect_rollouts(
        base_bundle.policy, VEHICLE, randomisation, held_out, torch.Generator().manual_seed(99)
    )
    history, target = history_windows(*rollout, config.history_ticks)
    with torch.no_grad():
        rmse = (module(history) - target).square().mean(dim=0).sqrt()
    spread = target.std(dim=0)
    for slot in (0, 1, 3, 6, 7):  # wind x, wind y, mass, roll and pitch torque per thrust
        assert rmse[slot] < 0.6 * spread[slot], (slot, float(rmse[slot]), float(spread[slot]))


# ---- refit -----------------------------------------------------------------------------------
def test_refit_is_an_ensemble_on_a_lotf_cadence(base_bundle):
    config = RefitConfig.lotf()
    assert 3.0 <= config.min_interval_s <= 5.0 and 3 <= config.ensemble_size <= 5
    method = RefitMethod(base_bundle, LearnerConfig.standard(), config)
    assert isinstance(method.ensemble, ResidualEnsemble)
    assert len(method.ensemble) == config.ensemble_size
    weights = [next(m.residual.parameters()).detach() for m in method.ensemble.members]
    assert not torch.equal(weights[0], weights[1])  # members start from their own seeds
    with pytest.raises(ValueError, match="min_interval_s must be within"):
        RefitMethod(base_bundle, LearnerConfig.standard(), RefitConfig(min_interval_s=8.0))
    method.start(0)
    method.new_ticks = config.min_new_ticks
    assert method.should_update(config.min_interval_s)
    method.last_update_s = 10.0
    assert not method.should_update(10.0 + config.min_interval_s - 1.0)
    assert method.should_update(10.0 + config.min_interval_s)


def test_refit_ensemble_predicts_the_mean_of_its_members():
    members = [VNDModel(VEHICLE) for _ in range(3)]
    with torch.no_grad():
        for k, member in enumerate(members):
            for parameter in member.residual.parameters():
                parameter.normal_(0.0, 0.05 * (k + 1))
    ensemble = ResidualEnsemble(members)
    state = hover_state((2,))
    action = torch.tensor([[VEHICLE.hover_thrust_n, 0.1, 0.0, 0.0]] * 2)
    z = torch.zeros(2, members[0].latent_dim)
    predictions = torch.stack([m.predict(state, action, z) for m in members])
    mean = ensemble.predict(state, action, z)
    assert torch.allclose(mean[:, VEL], predictions[:, :, VEL].mean(dim=0), atol=1e-6)
    assert not torch.allclose(predictions[0, :, VEL], predictions[1, :, VEL])


# ---- the command line ------------------------------------------------------------------------
def test_eval_methods_take_comma_and_space_separated_names(tmp_path, capsys):
    import argparse

    from vnd_tools.commands import eval as eval_command

    parser = argparse.ArgumentParser()
    eval_command.add_arguments(parser)
    args = parser.parse_args(["--out", str(tmp_path), "--methods", "base,dr_mismatched", "rma"])
    assert args.methods == [["base", "dr_mismatched"], ["rma"]]
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", str(tmp_path), "--methods", "base,dr_matched"])
    assert "unknown method dr_matched" in capsys.readouterr().err
