"""Continuous policy improvement: policy-only versions between model updates."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from vnd_core.bundle import Bundle, content_id
from vnd_core.compiled_rollout import compiled_graphs
from vnd_core.dynamics import NominalModel
from vnd_core.learner.continual import ContinualLearner, LearnerConfig
from vnd_core.learner.improvement import ImprovementConfig
from vnd_core.learner.records import TickRecords, records_from_arrays
from vnd_core.learner.validation import ValidationConfig
from vnd_core.policy import PolicyNet
from vnd_core.trainer import TrainerConfig
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd.fit import FitConfig
from vnd_core.vnd.model import VNDModelConfig
from vnd_core.vnd.synthetic import simulate_with_forces

VEHICLE = load_vehicle("agile")
# Small budgets: these tests exercise the mechanics of the rounds on an untrained policy (so
# the hover and behaviour gates, which it cannot pass, are loosened or off).
TINY = LearnerConfig.quick(
    model=VNDModelConfig(context_len=20),
    min_new_ticks=100,
    min_interval_s=1.0,
    fit=FitConfig(steps=5, batch_size=16),
    trainer=TrainerConfig(num_envs=16, horizon_ticks=4, episode_ticks=40, iterations=2),
    validation=ValidationConfig(
        eval_rollouts=8, eval_ticks=20, hover_ticks=20, hover_max_dev_m=5.0, behaviour_check=False
    ),
)


def base_bundle() -> Bundle:
    torch.manual_seed(0)
    return Bundle(version=3, parent_version=2, policy=PolicyNet(VEHICLE), vehicle=VEHICLE)


def windy_records() -> TickRecords:
    """150 ticks under a 2 N x force, then 150 calm ones."""
    return TickRecords.concat([later_flight(2.0, 0.0), later_flight(0.0, 4.0)])


def improving(**fields) -> LearnerConfig:
    """TINY with improvement rounds on (``fields`` replace ImprovementConfig's)."""
    improvement = ImprovementConfig(enabled=True, round_iterations=10, learning_rate=1e-3, **fields)
    return dataclasses.replace(TINY, improvement=improvement)


def learner_after_one_update(config: LearnerConfig) -> ContinualLearner:
    learner = ContinualLearner(VEHICLE, config, base_bundle())
    learner.ingest(windy_records())
    assert learner.should_update(100.0)
    assert learner.update().accepted
    return learner


def later_flight(force_n: float, start_s: float, ticks: int = 150) -> TickRecords:
    """A flight under a constant x force, stamped from ``start_s``."""
    generator = torch.Generator().manual_seed(round(start_s))
    (segment,) = simulate_with_forces(
        NominalModel(VEHICLE), torch.tensor([[force_n, 0.0, 0.0]]), ticks, generator
    )
    return records_from_arrays(
        segment.states.numpy(), segment.actions.numpy(), round(start_s * 1e9), 0.02, "later"
    )


def test_rounds_train_the_active_policy_further_into_policy_only_versions():
    learner = learner_after_one_update(improving(min_gain_frac=0.0))
    model_version = learner.active
    assert learner.should_improve()
    results = [learner.improve() for _ in range(3)]
    accepted = [r for r in results if r.accepted]
    assert accepted, [r.reason for r in results]
    assert all(r.kind == "policy" for r in results)
    parent = model_version
    for result in accepted:
        bundle = result.bundle
        assert bundle.version == parent.version + 1 and bundle.parent_version == parent.version
        assert bundle.parent_sha256 == content_id(parent) and bundle.lineage == parent.lineage
        assert bundle.model is model_version.model  # the model is the model update's
        cost = result.metrics["validation"]["cost_m"]
        assert cost["candidate"] < cost["active"]  # better on learned-model rollouts
        assert bundle.summary["kind"] == "policy"
        parent = bundle
    assert learner.active is parent
    # the candidate's weights moved away from the model update's policy
    moved = [
        float((a - b).detach().abs().max())
        for a, b in zip(parent.policy.parameters(), model_version.policy.parameters(), strict=True)
    ]
    assert max(moved) > 0
    status = learner.status()
    assert status["improvement_rounds"] == 3
    assert status["improvements_accepted"] == len(accepted)


def test_rounds_without_gain_pause_until_the_replay_grows():
    learner = learner_after_one_update(improving(min_gain_frac=0.99, patience_rounds=2))
    for _ in range(2):
        result = learner.improve()
        assert not result.accepted and not result.preempted
        assert result.reason.startswith("no policy improvement")
    assert not learner.should_improve()  # paused: the policy has converged on this basis
    learner.ingest(later_flight(0.0, start_s=100.0, ticks=TINY.min_new_ticks + 10))
    assert learner.should_improve()  # a new basis holds the newer flight


def test_no_rounds_without_a_model_or_when_off():
    learner = ContinualLearner(VEHICLE, improving(), base_bundle())
    learner.ingest(windy_records())
    assert not learner.should_improve()  # no model yet: the first update creates one
    assert not learner_after_one_update(TINY).should_improve()  # TINY keeps improvement off


def test_a_new_condition_preempts_a_round():
    config = dataclasses.replace(
        improving(min_gain_frac=0.0), min_unexplained_ticks=50, preempt_unexplained_ticks=50
    )
    learner = learner_after_one_update(config)
    strong_wind = later_flight(12.0, start_s=100.0, ticks=200)
    polls = []

    def poll() -> None:
        if not polls:
            learner.ingest(strong_wind)  # arrives while the round trains
        polls.append(1)

    result = learner.improve(poll=poll)
    assert result.preempted and not result.accepted and result.kind == "policy"
    assert "does not explain" in result.reason
    assert learner.active.version == 4  # nothing emitted


def test_a_withdrawn_round_leaves_the_previous_version_active():
    learner = learner_after_one_update(improving(min_gain_frac=0.0))
    previous = learner.active
    result = learner.improve()
    assert result.accepted and learner.active is result.bundle, result.reason
    learner.withdraw_improvement(result.bundle, previous)
    assert learner.active is previous and learner.status()["improvements_accepted"] == 0


# ---- compiled training: built before flight, never rebuilt by an update or a round -------
# A recompilation inside an update costs it tens of seconds on a cold machine, on the update that
# learns the first new condition. Dynamo rebuilds a graph when a guard it took no longer holds
# (a constant cache empty at warm-up and filled by the first fit; a policy compiled in eval mode
# and trained in train mode); the test below fails on any of those.
COMPILED = dataclasses.replace(
    TINY,
    trainer=dataclasses.replace(TINY.trainer, compile=True),
    improvement=ImprovementConfig(enabled=True, round_iterations=2, min_gain_frac=0.0),
)


@pytest.mark.slow
def test_updates_and_rounds_after_the_warm_up_compile_nothing():
    torch.manual_seed(0)
    learner = ContinualLearner(VEHICLE, COMPILED, base_bundle())
    active_policy = {k: v.clone() for k, v in learner.active.policy.state_dict().items()}
    rng_before = torch.random.get_rng_state()
    report = learner.warm_up()
    assert report.compiled
    # the warm-up trains a copy on a scratch model: the active bundle and the seeded draws stay
    assert all(
        torch.equal(v, active_policy[k]) for k, v in learner.active.policy.state_dict().items()
    )
    assert torch.equal(torch.random.get_rng_state(), rng_before)
    graphs = compiled_graphs()
    learner.ingest(windy_records())
    assert learner.should_update(100.0)
    result = learner.update()
    assert result.metrics, result.reason  # the update trained and was judged
    if learner.should_improve():
        learner.improve()
    assert compiled_graphs() == graphs, "an update or round compiled again after the warm-up"


def test_warm_up_does_nothing_when_the_trainer_runs_eager():
    learner = ContinualLearner(VEHICLE, TINY, base_bundle())
    report = learner.warm_up()
    assert not report.compiled and report.graphs_built == 0
