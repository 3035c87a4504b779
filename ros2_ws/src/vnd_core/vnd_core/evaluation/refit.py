"""The re-fitting baseline of ``vnd eval``: LOTF-style online re-fitting without a latent."""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch

from vnd_core.bundle import Bundle
from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.evaluation.continual_loop import LATENT_NONE, Method, UpdateOutcome
from vnd_core.learner import LearnerConfig, TickRecords, to_segments
from vnd_core.learner.policy_update import (
    TrustRegion,
    anchored_dynamics,
    on_model_environment,
    residual_bound,
)
from vnd_core.learner.records import MODE_POLICY
from vnd_core.learner.validation import action_limit_violation, non_finite_tensor
from vnd_core.policy import PolicyNet
from vnd_core.reference import ReferenceSpec, Trajectory
from vnd_core.state import POS, hover_state
from vnd_core.trainer import PolicyTrainer, zero_latent
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.fit import fit_vnd
from vnd_core.vnd.model import VNDModel


@dataclass(frozen=True)
class RefitConfig:
    """LOTF-style online re-fitting: a latent-free residual on a rolling window of recent data."""

    window_s: float = 8.0  # only the last this-many seconds of ticks are fitted (forgetting)
    min_interval_s: float = 5.0  # simulated time between two updates (VND's rule, for fairness)
    min_new_ticks: int = 250  # new ticks needed before an update (VND's rule)

    @classmethod
    def matching(cls, learner: LearnerConfig, window_s: float = 8.0) -> RefitConfig:
        """The same update cadence as ``learner`` (its fit and trainer budgets are reused)."""
        return cls(window_s, learner.min_interval_s, learner.min_new_ticks)


class RefitMethod(Method):
    """LOTF-style baseline: every few seconds fit a residual *without* latent (same network,
    loss and optimiser budget as VND's, ``use_latent=False``) on the last ``window_s`` seconds
    only, then fine-tune the policy on prior + residual (z = 0) with VND's trainer budget,
    training dynamics (residual components, bound, trust band) and environment, warm-started
    from the current policy. Older conditions are forgotten by construction.

    The residual is re-fitted from scratch on the window at every update (weights and
    normalisation statistics: statistics frozen on an old window would misscale a new
    condition). Candidate gates: finite weights, commands within limits, and hover sanity on
    the refit's own model (prior + residual): the VND learner's hover gate flies the calm prior
    with z = 0, which a latent-free policy adapted to a steady wind fails by design. VND's other
    gates (model quality, learned-model cost) can only make VND reject more, never less.
    """

    def __init__(self, bundle: Bundle, learner: LearnerConfig, config: RefitConfig):
        super().__init__("refit", bundle, LATENT_NONE)
        self.learner_config = learner
        self.config = config
        self.start(0)

    def start(self, seed: int) -> Bundle:
        """Empty window, fresh residual (seeded), base policy."""
        self.seed = seed
        self.records: list[TickRecords] = []
        self.new_ticks = 0
        self.last_update_s = -np.inf
        self.now_s = 0.0
        self.version = self.initial.version
        self.policy = self.initial.policy
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = VNDModel(self.initial.vehicle, self.learner_config.model)
        return self.initial

    def ingest(self, records: TickRecords) -> None:
        """Append, then drop ticks older than the window."""
        self.records.append(records.take(records.mode == MODE_POLICY))
        self.new_ticks += len(records)
        newest = self.records[-1].stamp_ns[-1] if len(self.records[-1]) else 0
        cutoff = newest - round(self.config.window_s * 1e9)
        while self.records and (len(self.records[0]) == 0 or self.records[0].stamp_ns[-1] < cutoff):
            self.records.pop(0)
        if self.records:
            self.records[0] = self.records[0].take(self.records[0].stamp_ns >= cutoff)

    def should_update(self, now_s: float) -> bool:
        """Enough new ticks and time since the last update."""
        self.now_s = now_s
        return (
            self.new_ticks >= self.config.min_new_ticks
            and now_s - self.last_update_s >= self.config.min_interval_s
        )

    def update(self) -> UpdateOutcome:
        """Fit the latent-free residual on the window, fine-tune the policy, gate it."""
        start = time.perf_counter()
        self.last_update_s, self.new_ticks = self.now_s, 0
        self.version += 1
        c = self.learner_config
        segments = to_segments(
            TickRecords.concat(self.records),
            c.control_period_s,
            c.gap_factor,
            velocity_half_window=c.velocity_half_window,  # the same data path as the learner
        )
        dataset = TransitionDataset(
            self.model.prior, segments, self.model.config.action_delay_ticks
        )
        fit_config = dataclasses.replace(
            c.fit, use_latent=False, encode_after=False, seed=c.fit.seed + self.seed + self.version
        )
        fit = fit_vnd(self.model, dataset, fit_config, warm_start=False)
        policy = copy.deepcopy(self.policy)
        policy.train()
        trainer_config = dataclasses.replace(
            c.trainer, seed=c.trainer.seed + self.seed + self.version
        )
        # VND's training dynamics and environment, without the latent: the same residual
        # components, bound and data trust band, on the same lag- and drag-free environment
        bound = residual_bound(dataset)
        dynamics = anchored_dynamics(
            self.model,
            bound,
            c.residual_components,
            prior_at_zero=False,
            trust_region=TrustRegion.of_dataset(dataset),
        )
        trainer = PolicyTrainer(
            policy,
            dynamics,
            self.initial.vehicle,
            on_model_environment(trainer_config),
            zero_latent(policy.latent_dim),
        )
        summary = trainer.train()
        policy.eval()
        metrics = {
            "window_ticks": dataset.num_transitions,
            "fit": fit.final,
            "train_final_loss": summary["final_loss"],
        }
        reason = self._gate(policy)
        wall_s = time.perf_counter() - start
        if reason:
            return UpdateOutcome(None, wall_s, reason, metrics)
        self.policy = policy
        bundle = Bundle(
            version=self.version,
            parent_version=self.version - 1,
            policy=policy,
            vehicle=self.initial.vehicle,
            summary={"kind": "refit baseline"},
        )
        return UpdateOutcome(bundle, wall_s, "", metrics)

    def _gate(self, policy) -> str:
        """First failing gate of the candidate ("" when it passes)."""
        v = self.learner_config.validation
        reason = non_finite_tensor(policy, "policy") or action_limit_violation(
            policy, self.initial.vehicle, v.probe_observations, v.seed
        )
        if reason:
            return reason
        deviation = hover_deviation_on_model(policy, self.model, v.hover_ticks)
        if not deviation <= v.hover_max_dev_m:
            return (
                f"hover sanity on prior + residual: deviation {deviation:.3f} m exceeds "
                f"{v.hover_max_dev_m} m"
            )
        return ""


@torch.no_grad()
def hover_deviation_on_model(policy: PolicyNet, model: VNDModel, ticks: int) -> float:
    """Largest distance (m) from the hover point over ``ticks`` ticks of hovering from rest on
    ``model`` (prior + residual, z = 0), no noise; NaN if the rollout goes non-finite. The
    refit baseline's analog of the VND learner's hover gate (which flies the calm prior with
    z = 0, the condition a z = 0 policy is meant for): a refit policy is meant for its model."""
    spec = ReferenceSpec(kind="hover", center_m=(0.0, 0.0, 1.0))
    trajectory = Trajectory.from_spec(spec, 1)
    state = hover_state((1,), position_m=spec.center_m)
    n_prev = policy.config.n_prev_actions
    prev = policy.action_offset.expand(1, max(n_prev, 1), 4).clone()
    z = torch.zeros(1, model.latent_dim)
    z_policy = torch.zeros(1, policy.latent_dim)
    worst = 0.0
    for k in range(ticks):
        t_s = torch.full((1,), k * CONTROL_PERIOD_S)
        obs = policy.observation.build_from(state, trajectory, t_s, prev[:, :n_prev], z_policy)
        action = policy(obs)
        prev = torch.cat([action.unsqueeze(1), prev[:, :-1]], dim=1)
        state = model.predict(state, action, z)
        deviation = float((state[0, POS] - torch.tensor(spec.center_m)).norm())
        if not np.isfinite(deviation):
            return float("nan")
        worst = max(worst, deviation)
    return worst
