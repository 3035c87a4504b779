"""One learner update cycle on synthetic flight data: versions, gates, rejection of NaN."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from vnd_core.bundle import Bundle, bundle_to_bytes, content_id, load_bundle, shipped_bundle_path
from vnd_core.dynamics import NominalModel
from vnd_core.evaluation.baselines import clone_policy
from vnd_core.learner.continual import ContinualLearner, LearnerConfig
from vnd_core.learner.novelty import (
    UnexplainedCounter,
    long_runs,
    ticks_in_long_runs,
    window_unexplained_accel,
)
from vnd_core.learner.records import TickRecords, records_from_arrays
from vnd_core.learner.segmenter import to_segments
from vnd_core.learner.validation import (
    EvalSet,
    ValidationConfig,
    action_limit_violation,
    calm_tracking_regression,
    hover_deviation_m,
    make_eval_set,
    non_finite_tensor,
    observed_force_regression,
    observer_reading,
)
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.reference import ReferenceSpec, Trajectory
from vnd_core.state import VEL, hover_state
from vnd_core.trainer import TrainerConfig
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.features import RES_VEL
from vnd_core.vnd.fit import FitConfig
from vnd_core.vnd.model import VNDModel, VNDModelConfig
from vnd_core.vnd.synthetic import simulate_with_forces

VEHICLE = load_vehicle("agile")
PERIOD_S = 0.02
CONTEXT_LEN = 20  # the window counts below are worked out for it
TINY = LearnerConfig.quick(
    model=VNDModelConfig(context_len=CONTEXT_LEN),
    min_new_ticks=100,
    min_interval_s=1.0,
    fit=FitConfig(steps=5, batch_size=16),
    trainer=TrainerConfig(num_envs=16, horizon_ticks=4, episode_ticks=40, iterations=2),
    # The active policy here is untrained (no base bundle needed), so it cannot hover within
    # 0.1 m; these tests exercise the mechanics, the hover gate has its own test below (the
    # behaviour gate: test_behaviour.py and the test below).
    validation=ValidationConfig(
        eval_rollouts=8, eval_ticks=20, hover_ticks=20, hover_max_dev_m=5.0, behaviour_check=False
    ),
)


def windy_records() -> TickRecords:
    prior = NominalModel(VEHICLE)
    generator = torch.Generator().manual_seed(0)
    forces = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    segments = simulate_with_forces(prior, forces, 150, generator)
    period_ns = round(PERIOD_S * 1e9)
    return TickRecords.concat(
        [
            records_from_arrays(s.states.numpy(), s.actions.numpy(), i * 200 * period_ns,
                                PERIOD_S, name)
            for i, (s, name) in enumerate(zip(segments, ["wind", "calm"], strict=True))
        ]
    )  # fmt: skip


def base_bundle() -> Bundle:
    torch.manual_seed(0)
    return Bundle(version=3, parent_version=2, policy=PolicyNet(VEHICLE), vehicle=VEHICLE)


def test_update_decision_needs_new_data_and_time():
    learner = ContinualLearner(VEHICLE, TINY, base_bundle())
    assert not learner.should_update(100.0)  # no data
    records = windy_records()
    assert learner.ingest(records) == len(records)
    assert learner.should_update(100.0)
    learner.update()
    assert not learner.should_update(100.5)  # no new data, too early
    assert learner.ingest(records) == 0  # nothing new either


def test_an_update_waits_for_flight_the_prior_does_not_explain():
    records = windy_records()
    config = dataclasses.replace(TINY, min_unexplained_ticks=100)
    learner = ContinualLearner(VEHICLE, config, base_bundle())
    learner.ingest(records.take(records.condition == "calm"))
    assert learner.ticks_stored == 150 and learner.unexplained_new_ticks() == 0
    assert not learner.should_update(100.0)  # data and time enough, but the prior explains it
    learner.ingest(records.take(records.condition == "wind"))  # 2 N the prior does not know
    # every window of the run is unexplained: 147 transitions (action delay 2), context 20
    assert learner.unexplained_new_ticks() == (150 - 1 - 2) - 20 + 1
    assert learner.should_update(100.0)
    learner.update()
    later = records.take(records.condition == "calm")
    later.stamp_ns = later.stamp_ns + 10 * 10**9
    assert learner.ingest(later) == 150
    assert learner.unexplained_new_ticks() == 0  # the wind is no longer new
    assert not learner.should_update(200.0)


def constant_force_model(records: TickRecords) -> VNDModel:
    """A model whose residual is the mean prior velocity error of ``records``, whatever z."""
    model = VNDModel(VEHICLE, VNDModelConfig(latent_dim=4, context_len=CONTEXT_LEN))
    dataset = TransitionDataset(model.prior, to_segments(records, PERIOD_S), 2)
    mean_error = dataset.tensors()["targets"].mean(dim=0)
    model.residual.set_constant(mean_error)
    return model


def bundle_with_model(model: VNDModel) -> Bundle:
    """A bundle flying an untrained policy with ``model`` (latent size 4)."""
    torch.manual_seed(0)
    return Bundle(
        version=3,
        parent_version=2,
        policy=PolicyNet(VEHICLE, PolicyConfig(latent_dim=4)),
        vehicle=VEHICLE,
        model=model,
    )


def judged(model: VNDModel | None, records: TickRecords, chunk_ticks: int) -> np.ndarray:
    """Unexplained flags of the windows of ``records``, fed to the counter ``chunk_ticks`` at a
    time (as a replay grows)."""
    counter = UnexplainedCounter(
        model, NominalModel(VEHICLE), -1, 20, 2, PERIOD_S, 1.5, threshold_mps2=0.5
    )
    for stop in range(chunk_ticks, len(records) + chunk_ticks, chunk_ticks):
        counter.update(records.take(np.arange(len(records)) < stop))
    return counter.flags


def test_windows_are_unexplained_against_the_active_model_not_the_prior():
    records = windy_records()
    wind = records.take(records.condition == "wind")
    calm = records.take(records.condition == "calm")
    windows = (150 - 1 - 2) - 20 + 1  # 147 transitions (action delay 2), context 20
    # the prior explains calm flight, not a 2 N force
    assert judged(None, calm, 150).sum() == 0
    assert judged(None, wind, 150).sum() == windows
    # a model that has learned the force explains the wind, and not calm flight any more
    learned = constant_force_model(wind)
    assert judged(learned, wind, 150).sum() == 0
    assert judged(learned, calm, 150).sum() == windows


def test_a_learned_condition_starts_an_update_again_when_its_data_has_doubled():
    records = windy_records()
    wind = records.take(records.condition == "wind")
    knows_wind = bundle_with_model(constant_force_model(wind))
    config = dataclasses.replace(TINY, min_unexplained_ticks=100, min_new_ticks=50)
    learner = ContinualLearner(VEHICLE, config, knows_wind)
    learner.ingest(wind)
    # the active model explains the wind; its 128 windows are still more wind data than the
    # updates so far started on (none)
    assert learner.unexplained_new_ticks() == 0 and learner.informative_new_ticks() == 128
    assert learner.should_update(100.0)
    learner.update()
    learner.set_active(knows_wind)

    def later(ticks: int, shift_s: float) -> TickRecords:
        part = wind.take(np.arange(len(wind)) < ticks)
        part.stamp_ns = part.stamp_ns + int(shift_s * 1e9)
        return part

    learner.ingest(later(120, 10.0))  # 98 windows: not yet twice the 128 learned from
    assert learner.informative_new_ticks() == 98 and not learner.should_update(200.0)
    learner.ingest(later(150, 20.0))  # 98 + 128 windows of new wind data
    assert learner.informative_new_ticks() == 98 + 128 and learner.should_update(200.0)


def test_an_update_with_nothing_new_fits_fewer_steps():
    records = windy_records()
    wind, calm = (records.take(records.condition == name) for name in ("wind", "calm"))
    knows_wind = bundle_with_model(constant_force_model(wind))
    config = dataclasses.replace(TINY, refine_fit_steps=2)  # TINY fits 5 steps
    learner = ContinualLearner(VEHICLE, config, knows_wind)
    learner.ingest(wind)
    result = learner.update()
    assert result.metrics["data"]["unexplained_windows"] == 0
    assert result.metrics["fit"]["steps"] == 2  # the active model explains all of it
    learner = ContinualLearner(VEHICLE, config, knows_wind)
    learner.ingest(calm)  # the model's force is not there: new to it
    result = learner.update()
    assert result.metrics["data"]["unexplained_windows"] > 0
    assert result.metrics["fit"]["steps"] == 5


def test_a_new_condition_preempts_a_refine_and_starts_the_next_update():
    records = windy_records()
    wind, calm = (records.take(records.condition == name) for name in ("wind", "calm"))
    calm.stamp_ns = calm.stamp_ns + 10 * 10**9  # flown after the wind
    knows_wind = bundle_with_model(constant_force_model(wind))
    config = dataclasses.replace(TINY, min_unexplained_ticks=100, min_new_ticks=50)
    learner = ContinualLearner(VEHICLE, config, knows_wind)
    learner.ingest(wind)  # nothing new to the active model: the update is a refine
    assert learner.should_update(100.0)
    polls: list[int] = []

    def poll() -> None:  # calm flight arrives while it runs: new to a model that has the force
        polls.append(learner.ingest(calm))

    result = learner.update(poll=poll)
    assert result.preempted and not result.accepted and result.bundle is None
    assert "preempted" in result.reason and polls[0] == 150
    assert learner.active is knows_wind  # nothing replaced
    assert learner.unexplained_new_ticks() == 128 and learner.should_update(200.0)
    result = learner.update(poll=poll)  # learns the calm flight: not a refine, never polls
    assert result.accepted and not result.preempted and polls == [150]
    assert result.metrics["data"]["unexplained_windows"] > 0


def shifted(records: TickRecords, shift_s: float) -> TickRecords:
    """A copy of ``records`` stamped ``shift_s`` later."""
    later = records.take(np.ones(len(records), dtype=bool))
    later.stamp_ns = later.stamp_ns + int(shift_s * 1e9)
    return later


def test_an_update_is_preempted_once_its_fitted_model_meets_flight_it_does_not_explain():
    records = windy_records()
    wind, calm = (records.take(records.condition == name) for name in ("wind", "calm"))
    knows_wind = bundle_with_model(constant_force_model(wind))
    config = dataclasses.replace(TINY, min_unexplained_ticks=100, min_new_ticks=50)
    stages: list[str] = []
    arriving: list[TickRecords] = []

    def run(learner: ContinualLearner):
        stages.clear()

        def poll() -> None:  # flight arrives once the policy trains
            if stages[-1] == "train" and arriving:
                learner.ingest(arriving.pop())

        return learner.update(progress=lambda stage, _: stages.append(stage), poll=poll)

    # the update learns calm flight (new to the active model: not a refine); its fitted model
    # explains calm flight, so more of it arriving while the policy trains does not preempt it
    learner = ContinualLearner(VEHICLE, config, knows_wind)
    learner.ingest(calm)
    arriving[:] = [shifted(calm, 10.0)]
    result = run(learner)
    assert not arriving and result.accepted and not result.preempted
    assert result.metrics["fit"]["steps"] == 5  # the full fit: it was no refine

    # a force the fitted model does not hold arrives while the policy trains: preempted there,
    # once there is preempt_unexplained_ticks of it (128 windows per arrival)
    config = dataclasses.replace(config, preempt_unexplained_ticks=200)
    learner = ContinualLearner(VEHICLE, config, knows_wind)
    learner.ingest(calm)
    arriving[:] = [shifted(wind, 30.0), shifted(wind, 20.0), shifted(wind, 10.0)]
    result = run(learner)
    assert result.preempted and stages[-1] == "train" and len(arriving) == 1
    assert "(train): 256 new ticks the fitted model does not explain" in result.reason
    assert learner.active is knows_wind and result.bundle is None

    # the next update starts its fit from the preempted one's fitted model, not the active one
    start = learner._start_model()
    active_weights = knows_wind.model.state_dict()
    changed = [k for k, v in start.state_dict().items() if not torch.equal(v, active_weights[k])]
    assert any(k.startswith("encoder.") for k in changed)
    learner._carried_model = (knows_wind.version, start)  # put back what the probe took

    # and it is never preempted, whatever arrives (it does not even look)
    result = run(learner)
    assert result.accepted and not result.preempted and len(arriving) == 1
    with pytest.raises(ValueError, match="preempt_unexplained_ticks"):
        dataclasses.replace(config, preempt_unexplained_ticks=0).validate()
    assert learner.active is result.bundle


def test_a_refine_polls_but_runs_to_the_end_when_nothing_new_arrives():
    records = windy_records()
    wind = records.take(records.condition == "wind")
    config = dataclasses.replace(TINY, min_unexplained_ticks=100, min_new_ticks=50)
    learner = ContinualLearner(VEHICLE, config, bundle_with_model(constant_force_model(wind)))
    learner.ingest(wind)
    polls: list[int] = []
    result = learner.update(poll=lambda: polls.append(1))
    assert result.accepted and not result.preempted and len(polls) >= 1  # while fitting


def test_unexplained_windows_are_judged_once_as_the_replay_grows():
    records = windy_records()  # wind, then 2 s later calm: two runs
    at_once = judged(None, records, len(records))
    assert len(at_once) == 2 * 128 and at_once[:128].all() and not at_once[128:].any()
    for chunk in (1, 7, 30, 149):
        np.testing.assert_array_equal(judged(None, records, chunk), at_once)


def test_a_weak_steady_force_under_velocity_noise_is_unexplained_and_noise_alone_is_not():
    """A lost rotor's lift (0.8 m/s^2 down) seen through noisy velocities: single windows fall
    below the threshold too often to form runs; averaged over windows the force is counted
    throughout and the same noise in calm air is not."""
    prior = NominalModel(VEHICLE)
    generator = torch.Generator().manual_seed(1)
    forces = torch.tensor([[0.0, 0.0, -0.8 * VEHICLE.mass_kg], [0.0, 0.0, 0.0]])
    segments = simulate_with_forces(prior, forces, 600, generator, thrust_noise_n=0.3)
    rng = np.random.default_rng(0)
    counts, single = {}, {}
    for segment, name in zip(segments, ["lift_lost", "calm"], strict=True):
        states = segment.states.numpy().copy()
        states[:, VEL] += rng.normal(0.0, 0.12, (len(states), 3))  # velocity noise, m/s
        records = records_from_arrays(states, segment.actions.numpy(), 0, PERIOD_S, name)
        counts[name] = ticks_in_long_runs(judged(None, records, 50), 50)
        dataset = TransitionDataset(prior, to_segments(records, PERIOD_S, 1.5), 2)
        context = dataset.context(dataset.window_starts(CONTEXT_LEN, 0), CONTEXT_LEN)
        accel = window_unexplained_accel(None, context, PERIOD_S).numpy()
        single[name] = ticks_in_long_runs(accel > 0.5, 50)
    windows = (600 - 1 - 2) - CONTEXT_LEN + 1
    assert single["lift_lost"] < 0.5 * windows  # the noise breaks runs of single windows
    assert counts["lift_lost"] > 0.9 * windows
    assert counts["calm"] == 0


def test_unexplained_windows_count_only_in_long_runs():
    flags = np.array([1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1], dtype=bool)
    assert ticks_in_long_runs(flags, 3) == 3 + 4
    assert ticks_in_long_runs(flags, 5) == 0
    assert ticks_in_long_runs(np.zeros(0, dtype=bool), 1) == 0
    np.testing.assert_array_equal(long_runs(flags, 3), [0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1])


def test_first_update_creates_the_model_and_emits_the_next_version():
    learner = ContinualLearner(VEHICLE, TINY, base_bundle())
    learner.ingest(windy_records())
    stages: list[tuple[str, float]] = []
    result = learner.update(lambda stage, fraction: stages.append((stage, fraction)))
    assert result.accepted, result.reason
    bundle = result.bundle
    assert (bundle.version, bundle.parent_version) == (4, 3)
    assert bundle.model is not None and bundle.model.latent_dim == bundle.policy.latent_dim
    assert learner.active is bundle
    assert result.metrics["data"]["new_model"] and result.metrics["data"]["ticks"] == 300
    assert {s for s, _ in stages} == {"fit", "train", "validate"}
    assert all(0.0 <= f <= 1.0 for _, f in stages) and stages[-1][1] == 1.0
    assert result.total_s >= result.fit_s + result.train_s
    reloaded = load_bundle(bundle_to_bytes(bundle))  # summary is strict JSON, weights finite
    assert reloaded.summary["data"]["segments"] == 2
    assert reloaded.model is not None


def test_emitted_bundles_name_their_parent_by_hash_and_keep_the_lineage():
    base = base_bundle()
    learner = ContinualLearner(VEHICLE, TINY, base)
    learner.ingest(windy_records())
    first = learner.update().bundle
    second = learner.update().bundle
    assert first.parent_sha256 == content_id(base) and len(first.lineage) == 32
    assert second.parent_sha256 == content_id(first) and second.lineage == first.lineage
    reloaded = load_bundle(bundle_to_bytes(second))
    assert (reloaded.parent_sha256, reloaded.lineage) == (second.parent_sha256, second.lineage)
    # a learner resuming from its own bundle continues the lineage; one from a base starts anew
    assert ContinualLearner(VEHICLE, TINY, reloaded).lineage == first.lineage
    assert ContinualLearner(VEHICLE, TINY, base_bundle()).lineage != first.lineage


def test_learner_rejects_a_policy_that_produces_nan():
    active = base_bundle()
    learner = ContinualLearner(VEHICLE, TINY, active)
    learner.ingest(windy_records())

    def corrupt(policy: PolicyNet) -> None:
        with torch.no_grad():
            policy.net[0].weight[0, 0] = float("nan")

    learner.candidate_hook = corrupt
    result = learner.update()
    assert not result.accepted and result.bundle is None
    assert "non-finite" in result.reason and "policy" in result.reason
    assert learner.active is active  # the active bundle stays in place


def test_behaviour_gate_keeps_a_candidate_the_policy_node_would_refuse():
    """Gate 7 runs the policy node's behavioural check: a candidate whose output layer has its
    sign flipped (finite, within limits) is rejected with the figure even with every other
    gate opened wide; an ordinary update from the shipped bundle passes it."""
    shipped = load_bundle(shipped_bundle_path())
    wide = dataclasses.replace(
        TINY.validation,
        behaviour_check=True,
        model_margin_frac=1e6,
        cost_margin_m=1e6,
        calm_margin_m=1e6,
        hover_max_dev_m=1e6,
    )
    config = dataclasses.replace(TINY, validation=wide)
    learner = ContinualLearner(VEHICLE, config, shipped)
    learner.ingest(windy_records())
    result = learner.update()
    assert result.accepted, result.reason
    figures = result.metrics["validation"]["behaviour"]
    assert 0.0 < figures["max_tilt_rad"] < 0.6 and figures["max_position_error_m"] < 1.0

    def flip(policy: PolicyNet) -> None:
        with torch.no_grad():
            policy.net[-1].weight.neg_()
            policy.net[-1].bias.neg_()

    learner.candidate_hook = flip
    active = learner.active
    rejected = learner.update()
    assert not rejected.accepted and rejected.bundle is None and learner.active is active
    assert rejected.reason.startswith("behaviour check: "), rejected.reason
    assert "from initial state" in rejected.reason


def test_validation_gates_on_nan_and_limits():
    policy = PolicyNet(VEHICLE, PolicyConfig(hidden=(16,)))
    assert non_finite_tensor(policy, "policy") is None
    assert action_limit_violation(policy, VEHICLE, 64, seed=0) is None
    assert hover_deviation_m(policy, VEHICLE, 20) < 0.1  # near-hover output at init
    with torch.no_grad():
        policy.net[-1].bias.fill_(float("nan"))
    assert "net.2.bias" in non_finite_tensor(policy, "policy")
    assert "non-finite" in action_limit_violation(policy, VEHICLE, 64, seed=0)
    assert math.isnan(hover_deviation_m(policy, VEHICLE, 5))


def test_latent_size_mismatch_is_refused():
    policy = PolicyNet(VEHICLE, PolicyConfig(hidden=(16,), latent_dim=4))
    with pytest.raises(ValueError, match="latent size 4"):
        ContinualLearner(VEHICLE, TINY, Bundle(1, 0, policy, VEHICLE))


def test_non_policy_and_non_finite_ticks_are_not_stored():
    learner = ContinualLearner(VEHICLE, TINY, base_bundle())
    records = windy_records()
    records.mode[:10] = 2  # fallback hold
    records.state[10, 0] = np.nan
    assert learner.ingest(records) == len(records) - 11
    assert learner.rejected_ticks["not_policy_mode"] == 10
    assert learner.rejected_ticks["non_finite"] == 1


def test_update_without_a_full_window_is_a_rejection_not_a_crash():
    learner = ContinualLearner(VEHICLE, TINY, base_bundle())
    learner.ingest(windy_records().take(slice(0, 20)))  # shorter than one context window
    result = learner.update()
    assert not result.accepted and "not enough data" in result.reason


def test_first_update_starts_from_the_base_policy_not_from_its_untrained_z_weights():
    """A base policy trained with z = 0 has random weights on its z inputs (as the shipped one
    does); the first update must zero them, so a candidate trained with step size 0 flies
    exactly like the active policy (which reads z = 0) on the learned-model rollouts."""
    active = base_bundle()
    with torch.no_grad():
        active.policy.net[0].weight[:, -active.policy.latent_dim :].normal_(0.0, 0.3)
    frozen = dataclasses.replace(TINY.trainer, learning_rate=0.0)
    learner = ContinualLearner(VEHICLE, dataclasses.replace(TINY, trainer=frozen), active)
    learner.ingest(windy_records())
    result = learner.update()
    cost = result.metrics["validation"]["cost_m"]
    assert cost["candidate"] == pytest.approx(cost["active"], rel=1e-6), cost
    assert result.accepted, result.reason
    first_layer = result.bundle.policy.net[0].weight
    assert torch.count_nonzero(first_layer[:, -active.policy.latent_dim :]) == 0


def test_calm_gate_rejects_a_policy_that_tracks_worse_on_the_prior():
    active = load_bundle(shipped_bundle_path()).policy  # a policy that does track on the prior
    candidate = clone_policy(active)
    with torch.no_grad():  # a thrust bias: it settles off every reference
        candidate.net[-1].bias[0] += 1.0
    rollouts = 8
    spec = ReferenceSpec(kind="figure8", center_m=(0.0, 0.0, 1.2))
    eval_set = EvalSet(
        z_model=torch.zeros(rollouts, 8),
        z_active=torch.zeros(rollouts, 8),
        trajectory=Trajectory.from_spec(spec, rollouts),
        initial=hover_state((rollouts,), position_m=spec.center_m),
        calm=torch.ones(rollouts, dtype=torch.bool),
        mean_error=torch.zeros(rollouts, 12),
        holds=torch.zeros(rollouts, dtype=torch.bool),
    )
    config = ValidationConfig(eval_ticks=100)
    reason, figures = calm_tracking_regression(candidate, active, VEHICLE, eval_set, config, 2)
    assert reason is not None and "calm tracking on the prior" in reason
    assert figures["candidate"] > figures["active"] + config.calm_margin_m
    same, _ = calm_tracking_regression(active, active, VEHICLE, eval_set, config, 2)
    assert same is None
    # without a calm replay window there is nothing the prior can judge: no check
    windy = dataclasses.replace(eval_set, calm=torch.zeros(rollouts, dtype=torch.bool))
    unjudged, figures = calm_tracking_regression(candidate, active, VEHICLE, windy, config, 2)
    assert unjudged is None and figures == {"calm_windows": 0}


def base_with_force_input() -> PolicyNet:
    """The shipped base policy with a force input that it ignores (its columns zero)."""
    base = load_bundle(shipped_bundle_path()).policy
    policy = PolicyNet(VEHICLE, dataclasses.replace(base.config, force_dim=3)).eval()
    state = policy.state_dict()
    for name, weight in base.state_dict().items():
        if name == "net.0.weight":  # the base policy's columns; the force and z ones stay 0
            state[name][:, : weight.shape[1] - base.latent_dim] = weight[:, : -base.latent_dim]
        elif name not in ("normalizer.mean", "normalizer.std"):
            state[name].copy_(weight)
    return policy


def test_observed_force_gate_flies_the_windows_force_and_rejects_worse_station_keeping():
    """Gate 5b: station keeping on the prior plus the force the replay window shows. The
    force is flown (a policy that ignores it drifts), the same policy passes, and one that
    holds worse beyond the margin is refused."""
    active = base_with_force_input()
    candidate = clone_policy(active)
    with torch.no_grad():  # a thrust bias: it holds off its point
        candidate.net[-1].bias[0] += 1.0
    rollouts = 4
    centre = (0.0, 0.0, 1.2)
    mean_error = torch.zeros(rollouts, 12)
    mean_error[:, RES_VEL] = PERIOD_S * torch.tensor([1.5, 0.0, 0.0]) / VEHICLE.mass_kg  # 1.5 N
    pushed = EvalSet(
        z_model=torch.zeros(rollouts, 8),
        z_active=torch.zeros(rollouts, 8),
        trajectory=Trajectory.from_spec(ReferenceSpec(kind="hover", center_m=centre), rollouts),
        initial=hover_state((rollouts,), position_m=centre),
        calm=torch.zeros(rollouts, dtype=torch.bool),
        mean_error=mean_error,
        holds=torch.ones(rollouts, dtype=torch.bool),
    )
    still = dataclasses.replace(pushed, mean_error=torch.zeros(rollouts, 12))
    config = ValidationConfig(eval_ticks=100)
    same, figures = observed_force_regression(active, active, VEHICLE, pushed, config, 2)
    assert same is None and figures["windows"] == rollouts
    _, calm_figures = observed_force_regression(active, active, VEHICLE, still, config, 2)
    assert figures["active"] > calm_figures["active"] + 0.05  # the force is flown
    # a torque's body-rate offset is not: the observer's rate compensation cancels it in flight
    rate_offset = torch.zeros(rollouts, 12)
    rate_offset[:, 9:] = torch.tensor([0.3, -0.3, 0.1])
    turned = dataclasses.replace(still, mean_error=rate_offset)
    _, turned_figures = observed_force_regression(active, active, VEHICLE, turned, config, 2)
    assert turned_figures["active"] == pytest.approx(calm_figures["active"])
    reason, figures = observed_force_regression(candidate, active, VEHICLE, pushed, config, 2)
    assert reason is not None and "station keeping on the prior" in reason, figures
    none_held = dataclasses.replace(pushed, holds=torch.zeros(rollouts, dtype=torch.bool))
    assert observed_force_regression(candidate, active, VEHICLE, none_held, config, 2)[0] is None


def test_the_observed_force_gate_reads_the_measured_force_whatever_the_model():
    """In flight the observer predicts with the prior alone, so it reads the window's measured
    force even where a model fitted on a wind flown at one tilt puts that force at a level
    hover elsewhere; gate 5b flies each policy with that reading."""
    rollouts = 3
    measured_n = torch.tensor([1.4, 0.0, 0.0])
    mean_error = torch.zeros(rollouts, 12)
    mean_error[:, RES_VEL] = PERIOD_S * measured_n / VEHICLE.mass_kg
    eval_set = EvalSet(
        z_model=torch.zeros(rollouts, 4),
        z_active=torch.zeros(rollouts, 4),
        trajectory=Trajectory.from_spec(ReferenceSpec(kind="hover"), rollouts),
        initial=hover_state((rollouts,)),
        calm=torch.zeros(rollouts, dtype=torch.bool),
        mean_error=mean_error,
        holds=torch.ones(rollouts, dtype=torch.bool),
    )
    read_n = observer_reading(VEHICLE, PERIOD_S, eval_set)
    torch.testing.assert_close(read_n, measured_n.expand(rollouts, 3))


def test_the_observed_force_gate_feeds_forward_a_weight_the_model_explains():
    """In flight the observer feeds forward the vertical force the prior misses, whatever the
    bundle's model explains; gate 5b flies the same. A policy that ignores its
    force input then holds its height under a 2 N payload its model learned; left to the
    policy, the weight sags it by centimetres (a mean error of 0.06 m over these 3 s)."""
    policy = base_with_force_input()
    rollouts = 3
    centre = (0.0, 0.0, 1.2)
    weight = torch.zeros(rollouts, 12)
    weight[:, RES_VEL] = PERIOD_S * torch.tensor([0.0, 0.0, -2.0]) / VEHICLE.mass_kg
    model = VNDModel(VEHICLE, VNDModelConfig())
    with torch.no_grad():
        model.residual.set_constant(weight[0])
    loaded = EvalSet(
        z_model=torch.zeros(rollouts, model.latent_dim),
        z_active=torch.zeros(rollouts, model.latent_dim),
        trajectory=Trajectory.from_spec(ReferenceSpec(kind="hover", center_m=centre), rollouts),
        initial=hover_state((rollouts,), position_m=centre),
        calm=torch.zeros(rollouts, dtype=torch.bool),
        mean_error=weight,
        holds=torch.ones(rollouts, dtype=torch.bool),
    )
    calm = dataclasses.replace(loaded, mean_error=torch.zeros(rollouts, 12))
    config = ValidationConfig(eval_ticks=150)
    _, held = observed_force_regression(policy, policy, VEHICLE, loaded, config, 2)
    _, still = observed_force_regression(policy, policy, VEHICLE, calm, config, 2)
    # what is left is the weight's first ticks, before the delayed commands carry the thrust
    assert held["active"] < still["active"] + 0.005, (held, still)


def test_eval_set_marks_the_windows_where_the_prior_was_right_as_calm():
    model = VNDModel(VEHICLE, VNDModelConfig(action_delay_ticks=0))
    segments = to_segments(windy_records(), PERIOD_S, 1.5, {})
    dataset = TransitionDataset(model.prior, segments, 0)
    config = ValidationConfig(eval_rollouts=64)
    eval_set = make_eval_set(model, None, model.latent_dim, dataset, config)
    starts = dataset.window_starts(model.context_len, 0)
    generator = torch.Generator().manual_seed(config.seed)  # the draw make_eval_set makes
    pick = starts[torch.randint(len(starts), (config.eval_rollouts,), generator=generator)]
    in_calm_segment = dataset.tensors()["labels"][pick] == 1  # label ids in order: wind, calm
    assert 0 < int(in_calm_segment.sum()) < config.eval_rollouts
    assert torch.equal(eval_set.calm, in_calm_segment)


def test_a_learner_of_a_force_input_policy_trains_without_the_body_rate_residual():
    """Such a policy flies with the observer's rate compensation: its learner trains, gates and
    records its bundles against the translational residual only."""
    base = load_bundle(shipped_bundle_path())
    policy = PolicyNet(VEHICLE, dataclasses.replace(base.policy.config, force_dim=3)).eval()
    forced = Bundle(base.version, 0, policy, VEHICLE)
    config = LearnerConfig()
    assert config.residual_components == "translational_rates"
    assert ContinualLearner(VEHICLE, config, forced).config.residual_components == "translational"
    plain = ContinualLearner(VEHICLE, config, base).config.residual_components
    assert plain == "translational_rates"
