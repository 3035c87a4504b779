"""Policy network and observation: limits, the fused observation map, the numpy twin."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from vnd_core import so3
from vnd_core.policy import PolicyConfig, PolicyNet, PolicyRunner, reference_numpy
from vnd_core.reference import KINDS, ReferenceSpec, Trajectory
from vnd_core.state import OMEGA, POS, QUAT, VEL
from vnd_core.vehicle import load_vehicle

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def policy() -> PolicyNet:
    torch.manual_seed(0)
    policy = PolicyNet(load_vehicle("agile"), PolicyConfig(out_gain=3.0)).eval()
    with torch.no_grad():  # a trained policy reads z: give the z inputs weights, so the
        # path-agreement tests below cover the latent block too
        policy.net[0].weight[:, -policy.latent_dim :].normal_(0.0, 0.2)
    return policy


def random_states(batch: int, generator: torch.Generator) -> torch.Tensor:
    state = torch.randn(batch, 13, generator=generator)
    state[:, QUAT] = so3.quat_normalize(state[:, QUAT])
    return state


def test_output_within_vehicle_limits_for_extreme_inputs(policy):
    vehicle = policy.vehicle
    obs = torch.cat([torch.full((4, policy.observation.dim), v) for v in (-1e6, 1e6)])
    obs[::2] *= -1
    action = policy(torch.cat([obs, torch.randn(64, policy.observation.dim) * 1e3]))
    assert torch.isfinite(action).all()
    assert (action[:, 0] >= vehicle.thrust_min_n).all()
    assert (action[:, 0] <= vehicle.thrust_max_n).all()
    rate_max = torch.tensor(vehicle.body_rate_max_radps)
    assert (action[:, 1:].abs() <= rate_max + 1e-5).all()
    assert action[:, 0].max() > vehicle.hover_thrust_n + 1.0  # saturation reaches both sides
    assert action[:, 0].min() < vehicle.hover_thrust_n - 1.0


def test_untrained_policy_starts_near_hover():
    policy = PolicyNet(load_vehicle("agile"))
    obs = policy.observation.build_from(
        random_states(8, torch.Generator().manual_seed(3)),
        Trajectory.from_spec(ReferenceSpec(), 8),
        torch.zeros(8),
        policy.action_offset.expand(8, 2, 4),
        torch.zeros(8, policy.latent_dim),
    )
    action = policy(obs)
    assert torch.allclose(action[:, 0], torch.full((8,), policy.vehicle.hover_thrust_n), atol=3.0)


def test_new_policy_ignores_z_until_trained_and_silence_latent_restores_that(policy):
    """z columns start at zero (a base policy trained with z = 0 must not read noise from z)."""
    fresh = PolicyNet(load_vehicle("agile"))
    gen = torch.Generator().manual_seed(5)
    for net in (fresh, policy):
        obs = torch.randn(16, net.observation.dim, generator=gen)
        shifted = obs.clone()
        shifted[:, -net.latent_dim :] += 3.0 * torch.randn(16, net.latent_dim, generator=gen)
        if net is policy:  # the fixture's z weights are non-zero: z matters until silenced
            assert not torch.allclose(net(obs), net(shifted))
            net = copy.deepcopy(net)
            no_z = obs.clone()
            no_z[:, -net.latent_dim :] = 0.0
            before = net(no_z)
            net.silence_latent()
            assert torch.allclose(net(obs), before, atol=1e-6)  # z = 0 behaviour kept
        assert torch.equal(net(obs), net(shifted))


def test_fused_observation_equals_the_blockwise_definition(policy):
    gen = torch.Generator().manual_seed(1)
    batch = 6
    trajectory = Trajectory.random(batch, generator=gen)
    t_s = 3.0 * torch.rand(batch, generator=gen)
    state = random_states(batch, gen)
    prev = policy.action_offset + torch.randn(batch, 2, 4, generator=gen)
    z = torch.randn(batch, policy.latent_dim, generator=gen)
    obs = policy.observation.build_from(state, trajectory, t_s, prev, z)
    ref = trajectory.sample(policy.observation.sample_times(t_s))
    p = state[:, POS]
    expected = torch.cat(
        [
            p - ref.position_m[:, 0],
            state[:, VEL] - ref.velocity_mps[:, 0],
            (ref.position_m[:, 1:] - p.unsqueeze(1)).flatten(1),
            ref.acceleration_mps2[:, 0],
            so3.rotmat_6d(state[:, QUAT]),
            state[:, OMEGA],
            policy.observation.normalise_action(prev).flatten(1),
            z,
        ],
        dim=-1,
    )
    assert obs.shape == (batch, policy.observation.dim)
    torch.testing.assert_close(obs, expected, atol=1e-5, rtol=1e-5)
    blocks = [name for name, _ in policy.observation.layout.blocks]
    assert blocks[0] == "pos_error" and blocks[-1] == "latent"


@pytest.mark.parametrize("kind", KINDS)
def test_numpy_reference_matches_torch(kind):
    spec = ReferenceSpec(kind=kind, center_m=(0.3, -0.2, 1.1), amplitude_m=0.9, phase_rad=0.7)
    times = np.linspace(0.0, 7.0, 23)
    ref = reference_numpy(spec, times)
    sample = Trajectory.from_spec(spec).sample(torch.tensor(times, dtype=torch.float32)[None])
    for i, field in enumerate(sample.stacked().split(3, dim=-1)):
        np.testing.assert_allclose(ref[i], field[0].numpy(), atol=1e-5)


def test_runner_matches_batched_path(policy):
    spec = ReferenceSpec(kind="figure8", phase_rad=0.3)
    runner = PolicyRunner(policy, spec)
    gen = torch.Generator().manual_seed(2)
    prev = torch.zeros(1, 2, 4) + policy.action_offset
    t_s = 0.0
    for _ in range(3):
        state = random_states(1, gen)
        z = torch.randn(1, policy.latent_dim, generator=gen)
        expected = policy(
            policy.observation.build_from(
                state, Trajectory.from_spec(spec), torch.tensor([t_s]), prev, z
            )
        )
        action = runner.act(state[0].double().numpy(), t_s, z[0].numpy())
        np.testing.assert_allclose(action, expected[0].detach().numpy(), atol=1e-4)
        prev = torch.cat([expected.detach().unsqueeze(1), prev[:, :-1]], dim=1)
        t_s += 0.02


def test_config_round_trip_and_validation():
    config = PolicyConfig(hidden=(32, 16), latent_dim=4, lookahead_s=(0.1, 0.4))
    assert PolicyConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="hidden"):
        PolicyConfig.from_dict({**config.to_dict(), "hidden": []})


@pytest.fixture(scope="module")
def force_policy() -> PolicyNet:
    torch.manual_seed(1)
    policy = PolicyNet(load_vehicle("agile"), PolicyConfig(out_gain=3.0, force_dim=3)).eval()
    with torch.no_grad():  # trained weights on both the force and the z inputs
        policy.net[0].weight[:, -policy.condition_dim :].normal_(0.0, 0.2)
    return policy


def test_force_input_sits_before_z_and_the_runner_reads_it(force_policy):
    """The force block precedes z in the layout; the numpy runner and the batched path agree
    with a force given, and a force moves the command (the input is wired, not padded)."""
    names = [name for name, _ in force_policy.observation.layout.blocks]
    assert names[-2:] == ["force", "latent"]
    assert force_policy.condition_dim == 3 + force_policy.latent_dim
    spec = ReferenceSpec(kind="hover")
    runner = PolicyRunner(force_policy, spec)
    state = random_states(1, torch.Generator().manual_seed(3))
    z = torch.randn(1, force_policy.latent_dim, generator=torch.Generator().manual_seed(4))
    force_n = torch.tensor([[1.2, -0.4, 0.3]])
    prev = torch.zeros(1, 2, 4) + force_policy.action_offset
    condition = force_policy.observation.condition(z, force_n)
    expected = force_policy(
        force_policy.observation.build_from(
            state, Trajectory.from_spec(spec), torch.zeros(1), prev, condition
        )
    )
    action = runner.act(state[0].double().numpy(), 0.0, z[0].numpy(), force_n[0].numpy())
    np.testing.assert_allclose(action, expected[0].detach().numpy(), atol=1e-4)
    runner.reset()
    without = runner.act(state[0].double().numpy(), 0.0, z[0].numpy())
    assert np.abs(without - action).max() > 1e-3


def test_new_policy_ignores_the_force_input_until_trained():
    policy = PolicyNet(load_vehicle("agile"), PolicyConfig(force_dim=3)).eval()
    runner = PolicyRunner(policy, ReferenceSpec(kind="hover"))
    state = np.array([0.1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], dtype=float)
    still = runner.act(state, 0.0)
    runner.reset()
    pushed = runner.act(state, 0.0, force_n=np.array([2.0, 0.0, 0.0]))
    np.testing.assert_allclose(pushed, still)


def test_config_without_force_input_describes_itself_as_before():
    """A policy without a force input writes no force_dim (bundles read by earlier versions
    stay readable); one with it round-trips."""
    assert "force_dim" not in PolicyConfig().to_dict()
    config = PolicyConfig(force_dim=3)
    assert PolicyConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="force_dim"):
        PolicyConfig(force_dim=2).validate()
