"""Differentiable-simulation trainer: it learns, it is deterministic, it takes any dynamics."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from vnd_core.dynamics import NominalModel
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.reference import ReferenceSpec, Trajectory
from vnd_core.state import POS, VEL, hover_state
from vnd_core.trainer import PolicyTrainer, TrainerConfig, normal_latent, prior_dynamics
from vnd_core.vehicle import load_vehicle

VEHICLE = load_vehicle("agile")
TINY = TrainerConfig(
    num_envs=64,
    horizon_ticks=32,
    episode_ticks=96,
    iterations=30,
    learning_rate=5e-3,
    reference_kind_probs=(1.0, 0.0, 0.0),  # hover only: learns in a few seconds
)


def make_trainer(config: TrainerConfig = TINY, dynamics=None, z_sampler=None) -> PolicyTrainer:
    torch.manual_seed(config.seed)
    policy = PolicyNet(VEHICLE, PolicyConfig(hidden=(32, 32)))
    dynamics = dynamics or prior_dynamics(NominalModel(VEHICLE))
    return PolicyTrainer(policy, dynamics, VEHICLE, config, z_sampler)


def hover_error_m(policy: PolicyNet, ticks: int = 75) -> float:
    """Mean position error of a noise-free prior roll-out from fixed 0.3 m offsets."""
    model = NominalModel(VEHICLE)
    batch = 8
    gen = torch.Generator().manual_seed(7)
    trajectory = Trajectory.from_spec(ReferenceSpec(center_m=(0.0, 0.0, 1.0)), batch)
    state = hover_state((batch,))
    state[:, POS] += 0.3 * torch.nn.functional.normalize(torch.randn(batch, 3, generator=gen))
    prev = policy.action_offset.expand(batch, policy.config.n_prev_actions, 4)
    z = torch.zeros(batch, policy.latent_dim)
    errors = []
    with torch.no_grad():
        for k in range(ticks):
            t_s = torch.full((batch,), 0.02 * k)
            action = policy(policy.observation.build_from(state, trajectory, t_s, prev, z))
            prev = torch.cat([action.unsqueeze(1), prev[:, :-1]], dim=1)
            state = model(state, action)
            errors.append((state[:, POS] - torch.tensor([0.0, 0.0, 1.0])).norm(dim=-1).mean())
    return float(torch.stack(errors).mean())


def test_training_reduces_tracking_error():
    trainer = make_trainer()
    before = hover_error_m(trainer.policy)
    summary = trainer.train()
    after = hover_error_m(trainer.policy)
    assert after < 0.7 * before, (before, after)
    assert summary["final_loss"] < summary["first_loss"]
    assert summary["env_steps"] == TINY.iterations * TINY.num_envs * TINY.horizon_ticks


def test_seeded_runs_are_identical():
    config = dataclasses.replace(TINY, iterations=3)
    a, b = make_trainer(config), make_trainer(config)
    losses_a = [a.train_iteration()["loss"] for _ in range(3)]
    losses_b = [b.train_iteration()["loss"] for _ in range(3)]
    assert losses_a == losses_b
    other = make_trainer(dataclasses.replace(config, seed=1))
    assert [other.train_iteration()["loss"] for _ in range(3)] != losses_a


def test_any_dynamics_with_latent_and_progress():
    """A z-dependent dynamics gets the sampled z; gradients reach the policy through it."""
    prior = NominalModel(VEHICLE)
    seen: list[torch.Tensor] = []

    def windy(state: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        seen.append(z)
        push = torch.zeros_like(state)
        push[:, VEL] = 0.02 * z[:, :3]  # z acts as a wind acceleration (m/s^2)
        return prior(state, action) + push

    config = dataclasses.replace(TINY, iterations=2)
    trainer = make_trainer(config, windy, normal_latent(8))
    calls = []
    trainer.train(progress=lambda i, n, m: calls.append((i, n, m["loss"])))
    assert [c[:2] for c in calls] == [(1, 2), (2, 2)]
    assert seen[0].shape == (config.num_envs, 8) and seen[0].abs().sum() > 0
    assert torch.equal(seen[0], seen[1])  # z is held fixed through an episode
    grads = [p.grad for p in trainer.policy.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_state_is_detached_between_windows():
    trainer = make_trainer(dataclasses.replace(TINY, iterations=1))
    trainer.train_iteration()
    trainer._cut_bptt()
    assert not trainer.env.state.requires_grad and not trainer.env.history.requires_grad


def test_the_policy_observes_the_latent_its_episode_runs_on():
    """Every tick the latent in the policy's observation is the one the dynamics run on: the
    episode's draw from the sampler."""
    prior = NominalModel(VEHICLE)
    dynamics_z: list[torch.Tensor] = []

    def recording(state: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        dynamics_z.append(z.clone())
        return prior(state, action)

    trainer = make_trainer(TINY, recording, normal_latent(8))
    observed: list[torch.Tensor] = []
    builder = trainer.builder

    def recording_build(*args):
        observed.append(args[-1].clone())
        return builder.build(*args)

    trainer.builder = SimpleNamespace(
        build=recording_build,
        sample_times=builder.sample_times,
        reference_features=builder.reference_features,
    )
    trainer.train_iteration()
    assert len(observed) == len(dynamics_z) == TINY.horizon_ticks
    assert all(torch.equal(seen, run) for seen, run in zip(observed, dynamics_z, strict=True))
    assert float(dynamics_z[0].abs().sum()) > 0.0  # a real draw, not the z = 0 of no sampler


@pytest.mark.parametrize(
    "change, message",
    [
        ({"num_envs": 0}, "num_envs"),
        ({"horizon_ticks": 0}, "horizon_ticks"),
        ({"delay_ticks_min": 3, "delay_ticks_max": 1}, "delay_ticks_min"),
    ],
)
def test_impossible_settings_are_refused_naming_the_field(change, message):
    with pytest.raises(ValueError, match=message):
        make_trainer(dataclasses.replace(TINY, **change))
