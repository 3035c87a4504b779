"""Differentiable-simulation trainer: it learns, it is deterministic, it takes any dynamics."""

from __future__ import annotations

import dataclasses
import math
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


def test_condition_switch_lags_the_observed_latent():
    """After an episode's switch the dynamics run on the new latent at once while the policy
    sees a first-order approach to it; before it both are the old one."""
    prior = NominalModel(VEHICLE)
    dynamics_z: list[torch.Tensor] = []

    def recording(state: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        dynamics_z.append(z.clone())
        return prior(state, action)

    config = dataclasses.replace(TINY, switch_fraction=1.0, switch_lag_min_s=0.1)
    trainer = make_trainer(config, recording, normal_latent(8))
    env, batch = trainer.env, config.num_envs
    env.tick = torch.zeros(batch, dtype=torch.long)
    env.switch_tick = torch.full((batch,), 10, dtype=torch.long)
    env.z = torch.ones(batch, 8)
    env.z_seen = env.z.clone()
    env.z_next = -torch.ones(batch, 8)
    env.seen_alpha = torch.full((batch, 1), 1.0 - math.exp(-0.02 / 0.1))  # tau 0.1 s
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
    assert all(torch.equal(z, torch.ones(batch, 8)) for z in dynamics_z[:10])
    assert all(torch.equal(z, -torch.ones(batch, 8)) for z in dynamics_z[10:])
    assert all(torch.equal(z, torch.ones(batch, 8)) for z in observed[:10])
    seen = torch.stack([z[0, 0] for z in observed[10:]])
    expected = -1.0 + 2.0 * math.exp(-0.02 / 0.1) ** torch.arange(1, 23, dtype=torch.float32)
    assert torch.allclose(seen, expected, atol=1e-5)  # 1 -> -1 with tau 0.1 s
    assert seen[0] > 0.0 and seen[-1] < -0.95  # moved part of the way at once, nearly all later


def test_condition_switch_draws():
    """Fresh episodes: the configured share switches, inside the episode's middle, with lags
    in the configured range; with a share of 0 none does and the draws are unchanged."""
    config = dataclasses.replace(
        TINY, num_envs=2000, switch_fraction=0.5, switch_lag_min_s=0.2, switch_lag_max_s=0.4
    )
    env = make_trainer(config, z_sampler=normal_latent(2)).env
    switching = env.switch_tick <= config.episode_ticks
    assert 0.45 < float(switching.float().mean()) < 0.55
    ticks = env.switch_tick[switching]
    assert int(ticks.min()) >= round(0.2 * config.episode_ticks)
    assert int(ticks.max()) < round(0.8 * config.episode_ticks)
    tau_s = -config.dt_s / torch.log(1.0 - env.seen_alpha)
    assert float(tau_s.min()) >= 0.2 - 1e-4 and float(tau_s.max()) <= 0.4 + 1e-4
    assert not torch.equal(env.z_next, env.z) and torch.equal(env.z_seen, env.z)
    off = make_trainer(dataclasses.replace(config, switch_fraction=0.0), z_sampler=normal_latent(2))
    assert bool((off.env.switch_tick > config.episode_ticks).all())
    assert torch.equal(off.env.z_next, off.env.z)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"switch_fraction": 1.5}, "switch_fraction"),
        ({"switch_lag_min_s": 0.5, "switch_lag_max_s": 0.2}, "switch_lag_min_s"),
        ({"switch_lag_min_s": -0.1}, "switch_lag_min_s"),
    ],
)
def test_condition_switch_settings_are_checked(change, message):
    with pytest.raises(ValueError, match=message):
        make_trainer(dataclasses.replace(TINY, **change))
