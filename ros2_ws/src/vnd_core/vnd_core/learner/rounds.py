"""Improvement rounds of the continual learner: what carries between rounds, and one round.

The policy-training side is :mod:`vnd_core.learner.improvement`; this module decides when a
basis is outdated, keeps the candidate across rounds, and turns a round into a result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from vnd_core.bundle import Bundle
from vnd_core.dynamics import NominalModel
from vnd_core.learner.config import LearnerConfig
from vnd_core.learner.gates import Gates
from vnd_core.learner.improvement import ImprovementBasis, PolicyImprover
from vnd_core.learner.outcome import Progress, StageClock, UpdateResult, child_bundle
from vnd_core.learner.policy_update import anchored_dynamics
from vnd_core.policy import PolicyNet
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.components import SUMMARY_KEY
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.model import VNDModel

# dataset(prior) -> transitions of the whole replay
ReplayDataset = Callable[[NominalModel], TransitionDataset]
# The one gate a candidate may fail and still keep its training for the next round.
_COST_GATE_PREFIX = "cost on learned-model rollouts"


class ImprovementRounds:
    """The improvement rounds' state: basis, candidate, patience and counts."""

    def __init__(self, vehicle: VehicleParams, config: LearnerConfig, lineage: str) -> None:
        self.vehicle = vehicle
        self.config = config
        self.lineage = lineage  # of the bundles a round emits
        self.basis: ImprovementBasis | None = None  # what the rounds train against
        self.improver: PolicyImprover | None = None  # the candidate being trained further
        self.stale_rounds = 0  # rounds since the last new version or basis
        self.rounds = 0  # rounds run
        self.accepted = 0  # of which became a new version

    def restart(self, basis: ImprovementBasis | None = None) -> None:
        """Train against ``basis`` from now on (None: build one at the next round), starting
        from the active policy with the patience renewed."""
        self.basis, self.improver, self.stale_rounds = basis, None, 0

    def outdated(self, active_model: VNDModel | None, stored_total: int) -> bool:
        """The basis is missing, of another model, or older than ``min_new_ticks`` of flight."""
        basis = self.basis
        return (
            basis is None
            or basis.model is not active_model
            or stored_total - basis.stored_total >= self.config.min_new_ticks
        )

    def patient(self, active_model: VNDModel | None, stored_total: int) -> bool:
        """Fewer than ``patience_rounds`` rounds without a new version, or a new basis due."""
        patience = self.config.improvement.patience_rounds
        return self.stale_rounds < patience or self.outdated(active_model, stored_total)

    def run(
        self,
        report: Progress,
        active: Bundle,
        stored_total: int,
        dataset: ReplayDataset,
        gates: Gates,
    ) -> UpdateResult:
        """One round against ``active`` (``report`` may raise the preemption): train, gate,
        and emit the next version when the candidate beats the active policy."""
        clock, c = StageClock(), self.config
        metrics: dict = {"kind": "policy", "version": active.version + 1}
        metrics[SUMMARY_KEY] = c.residual_components  # as a model update's bundle records it
        report("improve", 0.0)
        improver = self._improver_now(active, stored_total, dataset)
        if improver is None:
            empty = "no policy improvement: the replay holds no complete context window"
            return clock.result(bundle=None, reason=empty, metrics=metrics, kind="policy")
        summary = improver.train_round(progress=lambda i, n, _: report("improve", i / n))
        self.rounds += 1
        metrics["train"] = {
            "round": improver.rounds,
            **{k: summary[k] for k in ("iterations", "first_loss", "final_loss")},
        }
        clock.lap("train")
        report("validate", 0.0)
        candidate = improver.snapshot()
        refusal = self._judge(improver.basis, candidate, gates, metrics)
        clock.lap("validate")
        metrics["timing_s"] = clock.timing()
        report("validate", 1.0)
        if refusal is not None:
            self.stale_rounds += 1
            return clock.result(bundle=None, reason=refusal, metrics=metrics, kind="policy")
        basis = improver.basis
        bundle = child_bundle(
            active,
            policy=candidate,
            model=basis.model,
            vehicle=self.vehicle,
            metrics=metrics,
            lineage=self.lineage,
        )
        self.stale_rounds = 0
        self.accepted += 1
        return clock.result(bundle=bundle, reason="", metrics=metrics, kind="policy")

    def _judge(
        self, basis: ImprovementBasis, candidate: PolicyNet, gates: Gates, metrics: dict
    ) -> str | None:
        """Why ``candidate`` is no new version (None: it is); drops the candidate when a gate
        beyond cost failed, so the next round starts again from the active policy."""
        c = self.config
        dynamics = anchored_dynamics(
            basis.model,
            basis.bound,
            c.residual_components,
            trust_region=basis.region,
            vertical_fed_forward=bool(candidate.force_dim),
        )
        reason, checks = gates(candidate, dynamics, basis.model, basis.dataset)
        metrics["validation"] = checks
        if reason is None:
            return no_gain(checks["cost_m"], c.improvement.min_gain_frac)
        if not reason.startswith(_COST_GATE_PREFIX):
            self.improver = None
        return reason

    def _improver_now(
        self, active: Bundle, stored_total: int, dataset: ReplayDataset
    ) -> PolicyImprover | None:
        """The improver of the current basis (a new basis and candidate when it changed)."""
        c = self.config
        model = active.model
        if model is None:
            return None
        if self.outdated(model, stored_total):
            self.restart(ImprovementBasis.of_replay(model, dataset(model.prior), stored_total))
        if self.basis is None:
            return None
        if self.improver is None:
            self.improver = PolicyImprover(
                active.policy,
                self.basis,
                self.vehicle,
                dataclasses.replace(
                    c.trainer, seed=c.trainer.seed + c.seed + 7919 * active.version
                ),
                c.improvement,
                anchor_fraction=c.anchor_fraction,
                pool_fraction=c.pool_fraction,
                components=c.residual_components,
            )
        return self.improver


def no_gain(cost_m: dict, min_gain_frac: float) -> str | None:
    """Why an improvement candidate is not a new version (None: it beats the active policy's
    learned-model cost ``cost_m`` by at least ``min_gain_frac``)."""
    needed = cost_m["active"] * (1.0 - min_gain_frac)
    if cost_m["candidate"] < needed:
        return None
    return (
        f"no policy improvement: cost on learned-model rollouts {cost_m['candidate']:.4f} m "
        f"against the active policy's {cost_m['active']:.4f} m (a new version needs "
        f"< {needed:.4f} m)"
    )
