"""Policy training on the learned model: z = 0 anchors on the prior, clipped residual, frozen
model, warm start."""

from __future__ import annotations

import copy

import pytest
import torch
from vnd_core.force_observer import (
    observer_limit_n,
    with_thrust_feedforward,
)
from vnd_core.learner.novelty import focus_weights
from vnd_core.learner.policy_update import (
    ForceTraining,
    HoverForce,
    TrustRegion,
    anchored_dynamics,
    anchored_latent,
    data_inputs,
    forced_dynamics,
    on_model_trainer,
    train_policy_on_model,
    with_force,
)
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.so3 import body_z_axis, exp_map
from vnd_core.state import QUAT, hover_state
from vnd_core.trainer import TrainerConfig
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd.components import DEFAULT_COMPONENTS
from vnd_core.vnd.data import Segment, TransitionDataset
from vnd_core.vnd.features import RES_POS, RES_VEL, apply_residual, dynamics_input
from vnd_core.vnd.model import VNDModel, VNDModelConfig

VEHICLE = load_vehicle("agile")


HOVER_INPUT = dynamics_input(hover_state(), torch.tensor([9.0, 0.0, 0.0, 0.0]))
# data centred on hover with unit std: hover-like inputs count as inside the data
HOVER = TrustRegion(HOVER_INPUT, torch.ones(16))


def loud_model() -> VNDModel:
    """A model whose residual is far from zero (large output gain), seeded, with input
    statistics centred on hover (as if first fitted on :data:`HOVER`'s data)."""
    torch.manual_seed(0)
    model = VNDModel(VEHICLE, VNDModelConfig(residual_out_gain=5.0))
    model.residual.input_normalizer.set_stats(HOVER_INPUT, torch.ones(16))
    return model


def near_hover(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    state = hover_state((batch,))
    state[:, 7:10] = 0.5 * torch.randn(batch, 3)  # within a few std of the data
    return state, torch.tensor([[9.0, 0.1, -0.2, 0.0]]).expand(batch, 4)


def test_zero_latent_rows_fly_the_prior_and_others_the_model():
    model = loud_model()
    state, action = near_hover(3)
    z = torch.randn(3, model.latent_dim)
    z[1] = 0.0
    with torch.no_grad():
        out = anchored_dynamics(model, trust_region=HOVER)(state, action, z)
        torch.testing.assert_close(out[1], model.prior(state, action)[1])
        torch.testing.assert_close(out[0], model.predict(state, action, z)[0])
        assert not torch.allclose(out[0], model.prior(state, action)[0])


def test_residual_is_clipped_to_the_bound():
    model = loud_model()
    state, action = near_hover(4)
    z = torch.randn(4, model.latent_dim)
    with torch.no_grad():
        clipped = anchored_dynamics(model, torch.zeros(12), trust_region=HOVER)(state, action, z)
        torch.testing.assert_close(clipped, model.prior(state, action))


def test_far_from_the_data_the_residual_holds_its_correction_at_the_edge():
    # a steady force (wind) must act wherever training rollouts fly, also where the replay
    # never went; the residual is not extrapolated there but read at the data's edge
    model = loud_model()
    state, action = near_hover(2)
    state[1, 7:10] = torch.tensor([20.0, 0.0, 0.0])  # 20 std away in velocity
    edge = state.clone()
    edge[1, 7] = 3.0  # the edge of the region (3 std) along the same axis
    z = torch.randn(1, model.latent_dim).expand(2, -1)
    with torch.no_grad():
        seen = data_inputs(HOVER, state, action)
        torch.testing.assert_close(seen[0], dynamics_input(state, action)[0])  # inside: as is
        torch.testing.assert_close(seen[1], dynamics_input(edge, action)[1])
        out = anchored_dynamics(model, trust_region=HOVER)(state, action, z)
        correction = out[1, 7:10] - model.prior(state, action)[1, 7:10]
        at_edge = model.residual_correction(edge, action, z)[1, 6:9]
        torch.testing.assert_close(correction, at_edge)
        assert float(at_edge.norm()) > 1e-3  # the loud residual is not zero there


def drifting_dataset(model: VNDModel, velocity_mps: float) -> TransitionDataset:
    """Level flight at ``velocity_mps`` along x (plus noise): far outside the loud model's
    first-fit statistics, which are centred on hover with unit std."""
    g = torch.Generator().manual_seed(3)
    states = hover_state((60,))
    states[:, 7] = velocity_mps + 0.05 * torch.randn(60, generator=g)
    actions = torch.tensor([9.0, 0.0, 0.0, 0.0]).expand(60, 4)
    return TransitionDataset(model.prior, [Segment(states, actions)])


def test_trust_region_of_the_dataset_trusts_the_data_the_model_was_fitted_on():
    model = loud_model()
    dataset = drifting_dataset(model, 8.0)
    region = TrustRegion.of_dataset(dataset)
    state, action = dataset.tensors()["state"][:5], dataset.tensors()["action"][:5]
    inputs = dynamics_input(state, action)
    torch.testing.assert_close(data_inputs(region, state, action), inputs)
    # the first-fit statistics would read 8 m/s as 3 m/s
    assert bool((data_inputs(HOVER, state, action)[:, 0] == 3.0).all())
    z = torch.randn(5, model.latent_dim)
    with torch.no_grad():
        out = anchored_dynamics(model, trust_region=region)(state, action, z)
        torch.testing.assert_close(out, model.predict(state, action, z))
        assert not torch.allclose(
            anchored_dynamics(model, trust_region=HOVER)(state, action, z), out
        )
    hovering = hover_state((1,))
    assert float(data_inputs(region, hovering, action[:1])[0, 0]) > 7.0  # 8 m/s data: held
    one = TransitionDataset(model.prior, [Segment(hover_state((2,)), action[:1])])
    with pytest.raises(ValueError, match=">= 2 transitions"):
        TrustRegion.of_dataset(one)


def test_translational_components_equal_the_masked_full_composition():
    model = loud_model()
    state, action = near_hover(5)
    z = torch.randn(5, model.latent_dim)
    with torch.no_grad():
        fast = anchored_dynamics(model, components="translational", trust_region=HOVER)(
            state, action, z
        )
        residual = model.residual(data_inputs(HOVER, state, action), z)
        residual[:, 3:6] = 0.0  # rotation
        residual[:, 9:12] = 0.0  # body rates
        full = apply_residual(model.prior(state, action), residual)
        torch.testing.assert_close(fast, full)
        assert not torch.allclose(fast, model.prior(state, action))


def test_anchored_latent_draws_zero_for_the_requested_fraction():
    z = anchored_latent(8, 0.25)(4000, torch.Generator().manual_seed(0))
    zero_rows = (z == 0).all(dim=1).float().mean()
    assert 0.2 < float(zero_rows) < 0.3
    assert float(z[(z != 0).any(dim=1)].std()) > 0.9  # the rest is N(0, I)


def test_training_changes_the_policy_not_the_model():
    model = loud_model()
    model_before = copy.deepcopy(model.state_dict())
    torch.manual_seed(1)
    policy = PolicyNet(VEHICLE, PolicyConfig(hidden=(16,)))
    policy_before = copy.deepcopy(policy.state_dict())
    config = TrainerConfig(num_envs=8, horizon_ticks=4, episode_ticks=20, iterations=2)
    summary = train_policy_on_model(policy, model, VEHICLE, config, trust_region=HOVER)
    assert summary["iterations"] == 2
    assert not torch.equal(policy.state_dict()["net.0.weight"], policy_before["net.0.weight"])
    for name, value in model.state_dict().items():
        assert torch.equal(value, model_before[name]), name


def test_pool_weights_steer_which_replay_latents_are_drawn():
    pool = torch.cat([torch.zeros(90, 2), torch.full((10, 2), 5.0)])  # rare condition: z = 5
    weights = focus_weights(torch.arange(100) >= 90, 0.5)
    assert float(weights.sum()) == pytest.approx(1.0)
    z = anchored_latent(2, 0.0, pool, 1.0, weights)(4000, torch.Generator().manual_seed(0))
    rare = float((z[:, 0] > 2.5).float().mean())
    assert 0.45 < rare < 0.55  # half the draws, though a tenth of the pool
    uniform = anchored_latent(2, 0.0, pool, 1.0)(4000, torch.Generator().manual_seed(0))
    assert float((uniform[:, 0] > 2.5).float().mean()) < 0.15
    assert torch.equal(focus_weights(torch.zeros(4, dtype=torch.bool), 0.5), torch.full((4,), 0.25))
    with pytest.raises(ValueError, match="one weight per pool row"):
        anchored_latent(2, 0.0, pool, 1.0, torch.ones(3))


def constant_force_model(accel_mps2: torch.Tensor) -> VNDModel:
    """A model whose residual adds ``accel_mps2`` (3,) world acceleration every tick."""
    model = VNDModel(VEHICLE, VNDModelConfig())
    model.residual.input_normalizer.set_stats(HOVER_INPUT, torch.ones(16))
    dt_s = model.prior.config.dt_s
    value = torch.zeros(12)
    value[RES_POS] = 0.5 * dt_s * dt_s * accel_mps2
    value[RES_VEL] = dt_s * accel_mps2
    with torch.no_grad():
        model.residual.set_constant(value)
    return model


def force_policy_trainer(policy: PolicyNet, model: VNDModel):
    """The learner's trainer of force-input ``policy`` on ``model`` (16 episodes, no anchors,
    no pool), built but not run."""
    config = TrainerConfig(num_envs=16, horizon_ticks=8, episode_ticks=40, iterations=1)
    return on_model_trainer(
        policy,
        model,
        VEHICLE,
        config,
        anchor_fraction=0.0,
        residual_bound=None,
        latent_pool=None,
        pool_fraction=0.0,
        pool_weights=None,
        components=DEFAULT_COMPONENTS,
        trust_region=HOVER,
    )


def test_force_input_reads_the_models_force_plus_the_external_one_the_dynamics_add():
    """A policy with a force input trains reading what an observer would: the residual's force
    at hover under the episode's z plus an external force, and only the external force is
    added to prior ⊕ D (the residual's own is not counted twice)."""
    accel = torch.tensor([0.8, -0.4, 0.2])
    model = constant_force_model(accel)
    dynamics = anchored_dynamics(model, trust_region=HOVER)
    hover = HoverForce(model)
    z = torch.randn(64, model.latent_dim, generator=torch.Generator().manual_seed(0))
    sample = with_force(lambda b, g: z[:b], ForceTraining(fraction=0.5), hover)
    condition = sample(64, torch.Generator().manual_seed(1))
    model_force = VEHICLE.mass_kg * accel
    external = condition[:, :3] - model_force
    forced = external.norm(dim=1) > 1e-4
    assert 0.3 < forced.float().mean() < 0.7  # about the requested share has an external force
    assert external.norm(dim=1).max() <= ForceTraining().max_n + 4 * ForceTraining().vertical_std_n
    torch.testing.assert_close(condition[:, 3:], z)
    state, action = near_hover(64)
    sent = with_thrust_feedforward(action, external, state[:, QUAT], VEHICLE)
    with torch.no_grad():
        got = forced_dynamics(dynamics, hover)(state, action, condition)
        plain = dynamics(state, sent, z)
    dt_s = model.prior.config.dt_s
    torch.testing.assert_close(
        (got - plain)[:, 7:10], dt_s * external / VEHICLE.mass_kg, atol=1e-5, rtol=1e-4
    )
    # the actions reach the vehicle as flight sends them: thrust plus the vertical part of the
    # external force, answered along the tilted body z; rates as commanded
    upright = body_z_axis(state[:, QUAT])[:, 2]
    torch.testing.assert_close(sent[:, 0], action[:, 0] - external[:, 2] / upright)
    torch.testing.assert_close(sent[:, 1:], action[:, 1:])


def test_a_force_policy_reads_the_force_as_its_observer_reports_it_clipped():
    """In flight the observer reports at most its clip (4 m/s^2 times the nominal mass); a
    policy trained reading more would take a clipped reading for a weaker push. Training clips
    what the policy reads, and the roll-out still applies the whole force."""
    accel = torch.tensor([6.0, 0.0, 0.0])  # 4.5 N, beyond the observer's 3.0 N
    model = constant_force_model(accel)
    policy = PolicyNet(VEHICLE, PolicyConfig(force_dim=3))
    trainer = force_policy_trainer(policy, model)
    limit_n = observer_limit_n(VEHICLE)
    assert limit_n == pytest.approx(4.0 * VEHICLE.mass_kg)
    condition = trainer.env.z
    full = condition[:, :3].norm(dim=1)
    assert (full > limit_n + 0.5).all()  # every episode's force is beyond the clip
    state = trainer.env.state
    ref_state, ref_head = torch.zeros_like(state), torch.zeros(16, trainer.builder.head_dim)
    prev = torch.zeros(16, trainer.n_prev_cols)
    obs = trainer.builder.build(state, ref_state, ref_head, prev, condition)
    read = obs[:, -policy.condition_dim : -policy.latent_dim]
    clipped = condition[:, :3] * (limit_n / full[:, None])  # the direction kept, at the clip
    torch.testing.assert_close(read[:, :2], clipped[:, :2])
    torch.testing.assert_close(read[:, 2], torch.zeros(16))  # the feed-forward's share
    torch.testing.assert_close(obs[:, -policy.latent_dim :], condition[:, 3:])
    # the roll-out applies the model's whole force (the trainer's dynamics are not clipped)
    step = trainer.dynamics.bind_latent(condition)
    with torch.no_grad():
        hover = hover_state((16,))
        action = torch.tensor([VEHICLE.hover_thrust_n, 0.0, 0.0, 0.0]).expand(16, -1)
        dv = step(hover, action)[:, 7:10] - model.prior(hover, action)[:, 7:10]
    dt_s = model.prior.config.dt_s
    # less its vertical part, which the feed-forward answers
    expected_n = condition[:, :3] * torch.tensor([1.0, 1.0, 0.0])
    torch.testing.assert_close(dv * VEHICLE.mass_kg / dt_s, expected_n, atol=1e-3, rtol=1e-3)


def test_a_force_policy_reads_the_horizontal_force_and_its_roll_out_feeds_the_vertical_forward():
    """The policy reads only the horizontal part of the force. The vertical part, what the
    model explains (a payload's weight it learned) and an external push alike, is answered by
    the observer's thrust feed-forward along body z, as in flight: at any tilt the vehicle
    meets no vertical force, and the thrust's horizontal share adds to the horizontal one."""
    accel = torch.tensor([1.0, 0.0, -2.5])  # a push and a payload's weight, within the clip
    model = constant_force_model(accel)
    policy = PolicyNet(VEHICLE, PolicyConfig(force_dim=3))
    trainer = force_policy_trainer(policy, model)
    condition = trainer.env.z
    model_n = VEHICLE.mass_kg * accel
    external_vertical = condition[:, 2] - model_n[2]
    assert external_vertical.abs().max() > 0.1  # some episodes carry a vertical push too
    state = trainer.env.state
    ref_state, ref_head = torch.zeros_like(state), torch.zeros(16, trainer.builder.head_dim)
    prev = torch.zeros(16, trainer.n_prev_cols)
    obs = trainer.builder.build(state, ref_state, ref_head, prev, condition)
    read = obs[:, -policy.condition_dim : -policy.latent_dim]
    torch.testing.assert_close(read[:, :2], condition[:, :2])
    torch.testing.assert_close(read[:, 2], torch.zeros(16))
    step = trainer.dynamics.bind_latent(condition)
    tilt = torch.zeros(16, 3)
    tilt[:, 0] = torch.linspace(-0.4, 0.4, 16)  # roll from -23 to 23 degrees
    state = hover_state((16,))
    state[:, QUAT] = exp_map(tilt)
    action = torch.tensor([VEHICLE.hover_thrust_n, 0.0, 0.0, 0.0]).expand(16, -1)
    with torch.no_grad():
        dv = step(state, action)[:, 7:10] - model.prior(state, action)[:, 7:10]
    force_n = dv * VEHICLE.mass_kg / model.prior.config.dt_s
    along = body_z_axis(state[:, QUAT])
    along = along / along[:, 2:]  # thrust per newton of lift
    expected_n = condition[:, :3] - condition[:, 2:3] * along
    torch.testing.assert_close(force_n[:, 2], torch.zeros(16), atol=1e-3, rtol=0)
    torch.testing.assert_close(force_n, expected_n, atol=1e-3, rtol=1e-3)


def test_a_force_policy_trains_on_the_condition_with_its_force():
    """The trainer of a force-input policy samples conditions of force + z and trains."""
    model = constant_force_model(torch.tensor([0.5, 0.0, 0.0]))
    policy = PolicyNet(VEHICLE, PolicyConfig(force_dim=3))
    before = copy.deepcopy(policy.state_dict())
    config = TrainerConfig(num_envs=16, horizon_ticks=8, episode_ticks=40, iterations=2)
    summary = train_policy_on_model(policy, model, VEHICLE, config, trust_region=HOVER)
    assert summary["iterations"] == 2
    first = policy.state_dict()["net.0.weight"]
    assert not torch.equal(first[:, -policy.condition_dim :], before["net.0.weight"][:, -11:])


def test_a_force_policy_reads_the_force_its_roll_out_meets_tick_by_tick():
    """In flight the observer reads the force the prior does not explain, low-pass filtered;
    the roll-outs read the same: an episode starts settled on its force, and a reading set
    off it follows the roll-out's force at the observer's filter rate."""
    accel = torch.tensor([1.0, -0.5, 0.0])
    model = constant_force_model(accel)
    policy = PolicyNet(VEHICLE, PolicyConfig(force_dim=3))
    trainer = force_policy_trainer(policy, model)
    assert trainer.force_reading is not None
    torch.testing.assert_close(trainer.env.reading, trainer.env.z[:, :3])
    trainer.env.reading = torch.zeros_like(trainer.env.reading)
    condition = trainer.env.z.clone()
    trainer.train_iteration()
    kept = trainer.env.tick > 0  # episodes the iteration did not restart
    assert kept.any()
    ticks = trainer.config.horizon_ticks
    share = 1.0 - (1.0 - trainer.force_reading.alpha) ** ticks
    expected = share * condition[kept, :2]
    assert float(expected.abs().max()) > 0.2  # the reading has moved off zero
    # the thrust feed-forward's horizontal share at a random policy's tilts moves a few
    miss_n = (trainer.env.reading[kept, :2] - expected).abs()
    assert float(miss_n.median()) < 0.02 and float(miss_n.max()) < 0.2, miss_n
