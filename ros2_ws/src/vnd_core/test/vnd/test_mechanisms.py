"""VND's defining mechanisms on the learner's default path (the quick preset, nothing switched on).

One continual update on a real simulated flight of two conditions (calm air, then a steady
4 m/s wind), flown by the shipped base bundle; the gates are relaxed so the candidate is kept
whatever its cost (they are not what these tests protect). On it:

- the policy is trained on latents re-encoded from the whole replay by the newly fitted
  encoder (not the latents of an older encoder, not a part of the replay);
- the fit's MMD term spreads those latents out towards N(0, I): without it the latent
  collapses to a point (measured: per-dimension std about 0.01 against 0.26);
- the trained policy acts on z: its commands differ between the two conditions' latents, and
  reading the true latent flies the learned model better than reading z = 0 (a policy trained
  blind to z has untouched, zero z weights and neither holds).

About 10 s of one core.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import pytest
import torch
from vnd_core.bundle import Bundle, load_bundle, shipped_bundle_path
from vnd_core.learner import ContinualLearner, LearnerConfig, SimulatedFlight
from vnd_core.learner import model_update as model_update_module
from vnd_core.learner.policy_update import TrustRegion, anchored_dynamics, residual_bound
from vnd_core.learner.segmenter import to_segments
from vnd_core.learner.validation import make_eval_set, rollout_errors
from vnd_core.reference import ReferenceSpec, Trajectory
from vnd_core.scenario import Phase, Scenario, WindEvent, load_scenario
from vnd_core.state import POS, VEL, hover_state
from vnd_core.vnd import EncodedLatents, TransitionDataset
from vnd_core.vnd.components import SUMMARY_KEY

WIND_AT_S = 8.0  # calm air before, a steady wind after
FLIGHT_S = 16.0


def calm_then_wind() -> Scenario:
    """recurring_wind's figure-eight: calm, then its wind A (4 m/s along +x)."""
    reference = load_scenario("recurring_wind").reference
    wind = WindEvent(type="wind", at_s=WIND_AT_S, kind="constant", velocity_mps=(4.0, 0.0, 0.0))
    phases = (Phase("calm", 0.0), Phase("wind_a", WIND_AT_S))
    return Scenario("calm_then_wind", 30.0, reference, phases, (wind,))


@dataclass
class QuickUpdate:
    bundle: Bundle  # the candidate (policy and model of the update)
    config: LearnerConfig
    dataset: TransitionDataset  # the replay, as the update's fit read it
    pool: torch.Tensor  # (M, nz) latents the policy training drew from
    encoded: EncodedLatents  # the candidate's encoder over every window of the replay
    label_ids: dict[str, int]


@pytest.fixture(scope="module")
def quick_update() -> QuickUpdate:
    path = shipped_bundle_path()
    if not path.exists():
        pytest.skip(f"shipped base bundle {path} is not built yet")
    torch.set_num_threads(1)
    base = load_bundle(path)
    chunk = SimulatedFlight(calm_then_wind(), base, seed=0).fly(FLIGHT_S)
    quick = LearnerConfig.quick()
    relaxed = dataclasses.replace(quick.validation, cost_margin_frac=10.0, calm_margin_m=10.0)
    config = dataclasses.replace(quick, validation=relaxed)
    learner = ContinualLearner(base.vehicle, config, base)
    learner.ingest(chunk.records)
    pools = []
    train = model_update_module.train_policy_on_model

    def recording(*args, **kwargs):  # the real training; only the pool it is given is kept
        pools.append(kwargs["latent_pool"].clone())
        return train(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_update_module, "train_policy_on_model", recording)
        result = learner.update()
    assert result.accepted, result.reason
    model = result.bundle.model
    label_ids = dict(learner.label_ids)
    segments = to_segments(
        learner.replay.records,
        config.control_period_s,
        config.gap_factor,
        label_ids,
        velocity_half_window=config.velocity_half_window,
    )
    dataset = TransitionDataset(model.prior, segments, model.config.action_delay_ticks)
    encoded = model.encode_all(dataset)
    return QuickUpdate(result.bundle, config, dataset, pools[0], encoded, label_ids)


def test_policy_training_draws_latents_re_encoded_from_the_whole_replay(quick_update):
    run = quick_update
    model = run.bundle.model
    windows = run.dataset.window_starts(model.context_len, 0)
    assert len(run.pool) == len(windows) == len(run.encoded.z)  # every window of the replay
    assert set(run.encoded.labels.tolist()) == set(run.label_ids.values())  # both conditions
    # by the encoder fitted in this update: the latents it gives now, window for window
    torch.testing.assert_close(run.pool, run.encoded.z, atol=1e-5, rtol=1e-5)


def test_the_bundle_records_the_residual_components_its_policy_trained_against(quick_update):
    summary = quick_update.bundle.summary
    assert summary[SUMMARY_KEY] == quick_update.config.residual_components
    assert summary[SUMMARY_KEY] == "translational_rates"
    # the rate offset moves the attitude: the rotation gate scored the candidate in calm flight
    assert summary["validation"]["rotation_check"]["horizon"] == 50


def test_the_default_fit_spreads_the_latents_out_towards_the_prior(quick_update):
    z = quick_update.pool
    # the MMD to N(0, I) keeps the aggregate spread; the latent-consistency term alone
    # collapses it (measured: 0.26 with the MMD term, about 0.01 without)
    assert float(z.std(dim=0).mean()) > 0.1, z.std(dim=0)
    assert float(z.mean(dim=0).norm()) < 0.5, z.mean(dim=0)


def _condition_latents(run: QuickUpdate) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean latent (nz,) of the calm and of the windy windows."""
    labels = run.encoded.labels
    calm = run.encoded.z[labels == run.label_ids["calm"]].mean(dim=0)
    windy = run.encoded.z[labels == run.label_ids["wind_a"]].mean(dim=0)
    return calm, windy


def test_the_trained_policy_commands_differently_per_condition(quick_update):
    policy = quick_update.bundle.policy
    calm, windy = _condition_latents(quick_update)
    assert float((windy - calm).norm()) > 0.5  # the encoder tells the conditions apart
    generator = torch.Generator().manual_seed(0)
    count = 64
    state = hover_state((count,), position_m=(0.0, 0.0, 1.0))
    state[:, POS] += 0.2 * torch.randn(count, 3, generator=generator)
    state[:, VEL] += 0.2 * torch.randn(count, 3, generator=generator)
    trajectory = Trajectory.from_spec(ReferenceSpec(kind="hover", center_m=(0.0, 0.0, 1.0)), count)
    t_s = torch.zeros(count)
    prev = policy.action_offset.expand(count, policy.config.n_prev_actions, 4)
    with torch.no_grad():
        commands = [
            policy(policy.observation.build_from(state, trajectory, t_s, prev, z.expand(count, -1)))
            for z in (calm, windy)
        ]
    change = (commands[1] - commands[0]).abs().mean(dim=0)  # (4,) thrust N, rates rad/s
    assert float(change.max()) > 1e-3, change


def test_reading_the_latent_flies_the_learned_model_better_than_reading_zero(quick_update):
    run = quick_update
    model, policy, v = run.bundle.model, run.bundle.policy, run.config.validation
    eval_set = make_eval_set(model, None, policy.latent_dim, run.dataset, v)
    dynamics = anchored_dynamics(
        copy.deepcopy(model),
        residual_bound(run.dataset),
        run.config.residual_components,
        trust_region=TrustRegion.of_dataset(run.dataset),
    )
    delay = model.config.action_delay_ticks

    def cost(z: torch.Tensor) -> float:
        errors = rollout_errors(
            policy, z, dynamics, eval_set, v.eval_ticks, v.crash_distance_m, 0.02, delay
        )
        return float(errors.mean())

    # the dynamics always follow the window's own latent; only what the policy reads changes
    reading, blind = cost(eval_set.z_model), cost(torch.zeros_like(eval_set.z_model))
    assert reading < blind, (reading, blind)
