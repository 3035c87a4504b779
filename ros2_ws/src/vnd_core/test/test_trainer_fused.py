"""The trainer's fused window against a plain per-tick reference, and its compiled form.

The trainer rolls a window with the cost evaluated once over the stacked ticks, the dynamics'
latent terms bound once per window, and no lag or drag ops when they are off; the learner's
dynamics compute FiLM once per window. The plain reference here is the per-tick formulation
those replace: both must train the same policy to float tolerance. The compiled roll-out must
match the eager one, and a second trainer (a new update of the learner's process) must reuse
the compiled graph instead of compiling again.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from vnd_core.dynamics import NominalModel
from vnd_core.learner.policy_update import (
    TrustRegion,
    anchored_dynamics,
    anchored_latent,
    on_model_environment,
    train_policy_on_model,
)
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.so3 import quat_to_rotmat
from vnd_core.state import QUAT, hover_state
from vnd_core.trainer import (
    PolicyTrainer,
    TrainerConfig,
    compiled_graphs,
    normal_latent,
    prior_dynamics,
)
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd.features import apply_residual
from vnd_core.vnd.model import VNDModel, VNDModelConfig

VEHICLE = load_vehicle("agile")
SMALL = TrainerConfig(num_envs=48, horizon_ticks=16, episode_ticks=40, iterations=4, seed=3)
HOVER_INPUT = torch.tensor([0.0] * 3 + [1.0, 0.0, 0.0, 0.0, 1.0, 0.0] + [0.0] * 3 + [9.0, 0, 0, 0])
REGION = TrustRegion(HOVER_INPUT, torch.full((16,), 2.0))  # wide: most ticks use the residual


def loud_model() -> VNDModel:
    """A seeded model whose residual is far from zero, statistics centred on hover."""
    torch.manual_seed(0)
    model = VNDModel(VEHICLE, VNDModelConfig(residual_out_gain=2.0))
    model.residual.input_normalizer.set_stats(HOVER_INPUT, torch.ones(16))
    return model


def plain_dynamics_input(state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """The 16 dynamics inputs written out through the full rotation matrix."""
    rot = quat_to_rotmat(state[..., QUAT])
    return torch.cat(
        [state[..., 7:10], rot[..., :, 0], rot[..., :, 1], state[..., 10:13], action], dim=-1
    )


def plain_residual(model: VNDModel, inputs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """FiLM residual written out per call: (1 + gamma) * (W h + b) + beta, FiLM from z."""
    res = model.residual
    h = (inputs - res.input_normalizer.mean) / res.input_normalizer.std
    film = res.film(z)
    offset = 0
    for layer, size in zip(res.layers, res.hidden_sizes, strict=True):
        gamma, beta = film[:, offset : offset + size], film[:, offset + size : offset + 2 * size]
        offset += 2 * size
        h = torch.nn.functional.elu((1.0 + gamma) * layer(h) + beta)
    out = res.head(h)
    if res.latent_head is not None:  # the body-rate offset, of z alone
        out = torch.cat([out, res.latent_head(z)], dim=-1)
    return out * res.target_std


def plain_anchored(model: VNDModel, bound: torch.Tensor, region: TrustRegion):
    """prior ⊕ mask · clip(D(clamp(s, a), z)) with the bare prior for z = 0, all per call; the
    mask keeps position, velocity and body rates (the learner's default components)."""
    mask = torch.tensor([1.0] * 3 + [0.0] * 3 + [1.0] * 3 + [1.0] * 3)
    model.requires_grad_(False)

    def dynamics(state: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        prior_next = model.prior(state, action)
        inputs = plain_dynamics_input(state, action)
        inputs = torch.clamp(inputs, region.mean - 3.0 * region.std, region.mean + 3.0 * region.std)
        residual = torch.maximum(torch.minimum(plain_residual(model, inputs, z), bound), -bound)
        corrected = apply_residual(prior_next, residual * mask)
        return torch.where((z == 0).all(dim=-1, keepdim=True), prior_next, corrected)

    return dynamics


class PlainTrainer(PolicyTrainer):
    """The trainer with its window rolled one tick at a time: observation, command, delay,
    lag, dynamics, drag and cost every tick, in that order."""

    def _window_cost(self, ref_state, ref_head, noise, delay_index):
        env, c = self.env, self.config
        k = self.history_len
        total = torch.zeros(env.state.shape[0])
        for h in range(c.horizon_ticks):
            noisy = torch.addcmul(env.state, self.noise_std, noise[h])
            prev_obs = env.history[:, : self.n_prev_cols]
            obs = self.builder.build(noisy, ref_state[h], ref_head[h], prev_obs, env.z)
            u = self.policy.forward_normalised(obs)
            commands = torch.cat([u, env.history], dim=1)
            delayed = torch.einsum(
                "bik,bk->bi", commands.view(-1, k + 1, 4).transpose(1, 2), env.delay_weights[:, 0]
            )
            target = self.policy.to_physical(delayed)
            applied = env.applied + env.lag_alpha * (target - env.applied)
            nxt = self.dynamics(env.state, applied, env.z) - env.drag * env.state
            error = nxt - ref_state[h + 1]
            q = nxt[:, QUAT]
            heading_sin = 2.0 * (q[:, 1] * q[:, 2] + q[:, 0] * q[:, 3])
            total = total + (
                error.square() @ self.cost_weights
                + c.w_pos_abs * torch.sqrt(error[:, 0:3].square().sum(-1) + 1e-6)
                + c.w_smooth * (u - env.history[:, :4]).square().sum(-1)
                + c.w_yaw * heading_sin.square()
            )
            env.state, env.applied, env.history = nxt, applied, commands[:, : 4 * k]
        return total


def run(trainer_cls, config: TrainerConfig, dynamics, sampler, iterations: int):
    """Losses of ``iterations`` windows and the trained policy's parameters."""
    torch.manual_seed(config.seed)
    policy = PolicyNet(VEHICLE, PolicyConfig(hidden=(32, 32)))
    trainer = trainer_cls(policy, dynamics, VEHICLE, config, sampler)
    losses = [trainer.train_iteration()["loss"] for _ in range(iterations)]
    return losses, torch.cat([p.detach().flatten() for p in policy.parameters()]), trainer


def test_fused_window_trains_like_the_plain_reference_on_the_prior_with_lag_and_drag():
    """Prior dynamics, the full training environment (delays, lags, drag, noise)."""
    dynamics = prior_dynamics(NominalModel(VEHICLE))
    fused = run(PolicyTrainer, SMALL, dynamics, normal_latent(8), 4)
    plain = run(PlainTrainer, SMALL, dynamics, normal_latent(8), 4)
    assert fused[2].has_lag and fused[2].has_drag
    torch.testing.assert_close(fused[0], plain[0], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(fused[1], plain[1], rtol=1e-3, atol=1e-5)
    assert fused[0][-1] != fused[0][0]  # it trained


def test_fused_window_trains_like_the_plain_reference_on_the_learned_model():
    """The learner's path: FiLM residual bound once per window, anchors, clip, trust, forces
    and rate offsets; lags and drag off (the on-model environment)."""
    model = loud_model()
    bound = torch.full((12,), 0.05)
    config = on_model_environment(SMALL)
    sampler = anchored_latent(8, 0.25, torch.randn(20, 8), 0.5)
    fused_dyn = anchored_dynamics(model, bound, "translational_rates", trust_region=REGION)
    fused = run(PolicyTrainer, config, fused_dyn, sampler, 4)
    plain = run(PlainTrainer, config, plain_anchored(model, bound, REGION), sampler, 4)
    assert not fused[2].has_lag and not fused[2].has_drag
    torch.testing.assert_close(fused[0], plain[0], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(fused[1], plain[1], rtol=1e-3, atol=1e-5)
    # the residual acted: the same run on the bare prior trains another policy
    prior_only = run(PolicyTrainer, config, prior_dynamics(model.prior), sampler, 4)
    assert not torch.allclose(prior_only[1], fused[1], rtol=1e-4, atol=1e-6)


def test_residual_with_precomputed_modulation_equals_the_plain_film():
    model = loud_model()
    state = hover_state((5,))
    state[:, 7:10] = torch.randn(5, 3)
    action = torch.tensor([[9.0, 0.2, -0.1, 0.3]]).expand(5, 4)
    z = torch.randn(5, 8)
    inputs = plain_dynamics_input(state, action)
    with torch.no_grad():
        expected = plain_residual(model, inputs, z)
        torch.testing.assert_close(model.residual(inputs, z), expected)
        modulation = model.residual.modulation(z)
        torch.testing.assert_close(model.residual(inputs, modulation=modulation), expected)
        torch.testing.assert_close(model.residual_correction(state, action, z), expected)
    with pytest.raises(ValueError, match="latent z or its FiLM modulation"):
        model.residual(inputs)


@pytest.mark.slow  # a cold compilation takes one to a few minutes of a core
def test_compiled_window_matches_eager_and_a_second_update_reuses_the_graph():
    """One compilation per process: the learner's second update (new policy, new model, new
    trainer, same shapes) runs the graph the first compiled."""
    config = on_model_environment(dataclasses.replace(SMALL, iterations=3))
    compiled_config = dataclasses.replace(config, compile=True)
    bound = torch.full((12,), 0.05)
    sampler = anchored_latent(8, 0.25, torch.randn(20, 8), 0.5)
    model = loud_model()
    dynamics = anchored_dynamics(model, bound, "translational_rates", trust_region=REGION)
    eager = run(PolicyTrainer, config, dynamics, sampler, 3)
    graphs_before = compiled_graphs()
    compiled = run(PolicyTrainer, compiled_config, dynamics, sampler, 3)
    first_update_graphs = compiled_graphs() - graphs_before
    assert first_update_graphs >= 1
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-3, atol=1e-5)

    # a second update as the learner runs it: a fresh model and a copy of the trained policy
    second_model = copy.deepcopy(model)
    with torch.no_grad():
        for p in second_model.residual.parameters():
            p.add_(0.01 * torch.randn_like(p))
    policy = copy.deepcopy(compiled[2].policy)
    before = [p.detach().clone() for p in policy.parameters()]
    summary = train_policy_on_model(
        policy,
        second_model,
        VEHICLE,
        dataclasses.replace(compiled_config, seed=11),
        residual_bound=bound,
        latent_pool=torch.randn(20, 8),
        trust_region=REGION,
    )
    assert compiled_graphs() - graphs_before == first_update_graphs  # nothing recompiled
    assert summary["iterations"] == 3
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
