"""The continual learner: replay in, validated bundle versions out (no middleware).

Loop: :meth:`ContinualLearner.ingest` stores POLICY-mode tick records
(deduplicated by stamp, bounded by the replay's eviction rule); :meth:`should_update` says when
enough new data and time have passed and the new flight is worth learning from (:mod:`novelty`);
:meth:`update` runs one cycle:

1. segment the whole replay (gaps, mode changes) and build the transition dataset;
2. fit the VND model (a share of each batch from what the active model does not explain),
   warm-started from the active bundle's model (the first update from a base
   bundle without a model creates one with the default architecture); the fit re-encodes the
   whole replay;
3. train the policy on prior ⊕ D(., ., z), z ~ N(0, I) per rollout, warm-started from the
   active policy (with z = 0 anchored on the prior, and the residual clipped to the observed
   range and faded out away from the data: :mod:`policy_update`);
4. validate (:mod:`validation`) and either emit bundle ``active.version + 1`` (which becomes
   the active one) or reject it with a reason, leaving the active bundle in place. An emitted
   bundle names its parent by content hash (``parent_sha256``) and carries the learner's
   ``lineage`` (the active bundle's, or a new id when the learner starts from a bundle without
   one), by which flight nodes order learner bundles (:mod:`vnd_flight.hotswap`).

A running update gives way to a new condition that begins while it runs; the model it fitted
carries into the next update (:meth:`ContinualLearner.update`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from vnd_core.bundle import Bundle, content_id
from vnd_core.dynamics import NominalModel
from vnd_core.learner.config import LearnerConfig
from vnd_core.learner.gates import run_gates
from vnd_core.learner.improvement import ImprovementBasis, PolicyImprover
from vnd_core.learner.novelty import (
    UnexplainedCounter,
    focus_weights,
    window_unexplained_accel,
)
from vnd_core.learner.policy_update import (
    TrustRegion,
    anchored_dynamics,
    residual_bound,
    train_policy_on_model,
)
from vnd_core.learner.records import MODE_POLICY, TickRecords
from vnd_core.learner.replay import EvictionReport, ReplayBuffer
from vnd_core.learner.segmenter import to_segments
from vnd_core.policy import PolicyNet
from vnd_core.trainer import Dynamics
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.components import SUMMARY_KEY
from vnd_core.vnd.data import NO_LABEL, TransitionDataset
from vnd_core.vnd.features import prior_error
from vnd_core.vnd.fit import fit_vnd
from vnd_core.vnd.metrics import latent_knn_accuracy
from vnd_core.vnd.model import EncodedLatents, VNDModel, VNDModelConfig

# Unexplained windows count only in runs this long (1 s): in the demo's calm figure-eight flight
# about 10 % of the windows (as the pose filter gives them) exceed the calm threshold, in runs of
# at most 7 ticks; under 4 m/s wind all of them do, in one run per phase.
UNEXPLAINED_RUN_TICKS = 50
# progress(stage, fraction of the whole cycle done in [0, 1])
UpdateProgress = Callable[[str, float], None]
# Share of the cycle each stage is reported over (progress only, not a time budget).
_STAGE_SPAN = {
    "fit": (0.0, 0.4),
    "train": (0.4, 0.9),
    "improve": (0.0, 0.9),  # an improvement round: training, then the gates
    "validate": (0.9, 1.0),
}


@dataclass
class UpdateResult:
    """Outcome of one update cycle."""

    accepted: bool  # True: ``bundle`` passed every gate and is now the active bundle
    bundle: Bundle | None  # the new version (None when the cycle failed before emitting one)
    reason: str  # why it was rejected ("" when accepted)
    fit_s: float  # wall time of the model fit (with dataset build and re-encoding)
    train_s: float  # wall time of the policy training
    validate_s: float  # wall time of the validation gates
    total_s: float  # wall time of the whole cycle
    metrics: dict  # losses, data counts, validation figures (JSON-able)
    preempted: bool = False  # abandoned for a new condition (not a rejection)
    kind: str = "model"  # "model": fit, train, validate; "policy": one improvement round


class _PreemptedError(Exception):
    """Raised at a progress point of an update when a new condition has begun."""


class ContinualLearner:
    """Replay, update decisions and update cycles around an active bundle."""

    def __init__(self, vehicle: VehicleParams, config: LearnerConfig, active: Bundle) -> None:
        config.validate()
        self.vehicle = vehicle
        self.config = config
        latent_dim = (
            active.model.latent_dim if active.model is not None else config.model.latent_dim
        )
        if active.policy.latent_dim != latent_dim:
            raise ValueError(
                f"bundle v{active.version}: policy latent size {active.policy.latent_dim} "
                f"differs from the model latent size {latent_dim}"
            )
        self._active = active
        # Lineage of the bundles this learner emits: the active bundle's when it has one (a
        # learner resuming its own run), else a new one (a run starting from a base bundle).
        self.lineage = active.lineage or uuid.uuid4().hex
        self.replay = ReplayBuffer(
            config.capacity_ticks,
            config.control_period_s,
            config.gap_factor,
            config.chunk_ticks,
            config.eviction_clusters,
            config.eviction_slack,
            config.seed,
        )
        self.label_ids: dict[str, int] = {}  # condition name -> label (evaluation only)
        self.new_ticks = 0  # ticks stored since the last update started
        self.rejected_ticks = {"not_policy_mode": 0, "non_finite": 0, "duplicate": 0}
        self.last_eviction: EvictionReport | None = None
        self._last_update_s = -math.inf
        self._now_s = 0.0
        self._new_since_ns = -1  # ticks stamped after this are new (set when an update starts)
        # per judge ("model": the active one, "prior"): (ticks stored when counted, count,
        # the counter judging the new ticks' windows)
        self._counts: dict[str, tuple[int, int, UnexplainedCounter]] = {}
        self._informative_learned = 0  # prior-unexplained ticks the updates so far started on
        # (active version it started from, model) fitted by an update preempted after its fit
        self._carried_model: tuple[int, VNDModel] | None = None
        self._preempted_last = False  # the last update was preempted: the next one may not be
        self.stored_total = 0  # ticks stored since the start (evictions do not lower it)
        self.improvement_rounds = 0  # improvement rounds run
        self.improvements_accepted = 0  # of which became a new version
        self._basis: ImprovementBasis | None = None  # what improvement rounds train against
        self._improver: PolicyImprover | None = None  # the candidate being trained further
        self._stale_rounds = 0  # improvement rounds since the last new version or basis
        # Fault-injection seam: called on the trained candidate policy before validation.
        self.candidate_hook: Callable[[PolicyNet], None] | None = None
        # The first optimiser built in a process imports torch's compiler stack (seconds);
        # pay that here, not inside the first timed update.
        torch.optim.Adam([torch.zeros(1, requires_grad=True)])

    # ------------------------------------------------------------------ state
    @property
    def active(self) -> Bundle:
        """The bundle new versions are trained from (the last accepted one)."""
        return self._active

    def set_active(self, bundle: Bundle) -> None:
        """Continue from ``bundle`` (e.g. after an operator rollback)."""
        self._active = bundle
        self._carried_model = None  # fitted from the bundle left behind
        self._basis, self._improver, self._stale_rounds = None, None, 0

    @property
    def ticks_stored(self) -> int:
        """Ticks in the replay."""
        return len(self.replay)

    def status(self) -> dict:
        """JSON-able counters for a status topic: replay size, new ticks, refusals, eviction."""
        eviction = self.last_eviction
        model = self._counts.get("model", (0, 0))[1]  # as last counted
        return {
            "active_version": self._active.version,
            "ticks_stored": self.ticks_stored,
            "capacity_ticks": self.config.capacity_ticks,
            "new_ticks": self.new_ticks,
            "unexplained_new_ticks": model,
            "informative_new_ticks": self._counts.get("prior", (0, model))[1],
            "rejected_ticks": dict(self.rejected_ticks),
            "last_eviction_ticks": eviction.evicted_ticks if eviction else 0,
            "improvement_rounds": self.improvement_rounds,
            "improvements_accepted": self.improvements_accepted,
        }

    # ------------------------------------------------------------------ data
    def ingest(self, records: TickRecords) -> int:
        """Store the POLICY-mode, finite ticks of ``records`` not stored yet; returns how many
        were stored. Evicts (see :mod:`replay`) when the capacity is exceeded."""
        policy = records.mode == MODE_POLICY
        finite = np.isfinite(records.state).all(axis=1) & np.isfinite(records.action).all(axis=1)
        self.rejected_ticks["not_policy_mode"] += int((~policy).sum())
        self.rejected_ticks["non_finite"] += int((policy & ~finite).sum())
        keep = policy & finite
        stored = self.replay.add(records.take(keep))
        self.rejected_ticks["duplicate"] += int(keep.sum()) - stored
        self.new_ticks += stored
        self.stored_total += stored
        if self.replay.over_capacity:
            self.last_eviction = self.replay.evict(self._descriptors, self._min_run_ticks())
        return stored

    def should_update(self, now_s: float) -> bool:
        """True when ``min_new_ticks`` arrived and ``min_interval_s`` passed since the last
        update, the replay holds enough windows, and (with ``min_unexplained_ticks``) either
        that much new flight is not explained by the active model, or the flight the prior
        does not explain has doubled since the last update (more data of a condition learned
        from its first seconds); ``now_s`` is any monotonic clock."""
        self._now_s = now_s
        c = self.config
        return (
            self.new_ticks >= c.min_new_ticks
            and now_s - self._last_update_s >= c.min_interval_s
            and self._window_count() >= c.min_windows
            and self._worth_learning()
        )

    def _worth_learning(self) -> bool:
        """The ``min_unexplained_ticks`` part of :meth:`should_update`."""
        needed = self.config.min_unexplained_ticks
        if needed == 0 or self.unexplained_new_ticks() >= needed:
            return True
        return self.informative_new_ticks() >= max(needed, self._informative_learned)

    def unexplained_new_ticks(self) -> int:
        """New ticks (stored since the last update started) whose window of ``context_len``
        transitions the active model does not explain (:mod:`novelty`: mean velocity error
        after its residual above the calm gate's ``calm_accel_mps2``), counted in runs of at
        least ``UNEXPLAINED_RUN_TICKS``. Judged incrementally, at most every 25 stored ticks
        (the worker asks five times a second); a new active bundle judges them all again.
        0 when ``min_unexplained_ticks`` is 0 (not counted)."""
        return self._count_new("model", self._active.model)

    def informative_new_ticks(self) -> int:
        """Like :meth:`unexplained_new_ticks`, judged by the prior alone: new flight in a
        condition the physics prior does not hold (learned already or not)."""
        if self._active.model is None:
            return self.unexplained_new_ticks()
        return self._count_new("prior", None)

    def _count_new(self, key: str, model: VNDModel | None) -> int:
        """Unexplained new ticks judged by ``model`` (None: the prior), cached under ``key``."""
        if self.config.min_unexplained_ticks == 0:
            return 0
        stored, count, counter = self._counts.get(key, (-1, 0, None))
        fresh = (
            counter is not None
            and counter.model is model
            and counter.since_ns == self._new_since_ns
        )
        if fresh and abs(len(self.replay) - stored) < 25:
            return count
        if not fresh:
            counter = UnexplainedCounter(
                model,
                NominalModel(self.vehicle),
                self._new_since_ns,
                self._model_config().context_len,
                self._model_config().action_delay_ticks,
                self.config.control_period_s,
                self.config.gap_factor,
                self.config.validation.calm_accel_mps2,
            )
        counter.update(self.replay.records)
        count = _ticks_in_long_runs(counter.flags, UNEXPLAINED_RUN_TICKS)
        self._counts[key] = (len(self.replay), count, counter)
        return count

    # ------------------------------------------------------------------ update cycle
    def update(
        self, progress: UpdateProgress | None = None, poll: Callable[[], None] | None = None
    ) -> UpdateResult:
        """Fit, train, validate; emit version ``active.version + 1`` or a rejection.

        An update calls ``poll`` at its progress points; ``poll`` may :meth:`ingest` the
        ticks that arrived meanwhile. When those hold ``preempt_unexplained_ticks`` of flight (in
        runs, as :meth:`unexplained_new_ticks` counts) that a new condition began, the update is
        abandoned (``preempted``, not a rejection) and the one that learns the new condition
        starts at once instead of a cycle later. Who judges "new":

        - while a refine (an update whose data hold nothing new to the active model) fits its
          model: the active model;
        - once any update's model is fitted (while its policy trains): that fitted model, so
          more flight of the condition the update is learning never preempts it.

        An update preempted after its fit hands its fitted model to the next update, which
        starts its fit from there instead of from the active model, so what it learned is not
        lost (measured in the demo: an update that learned wind B from the model that had only
        wind A's first 5 s flew the returning wind A at 0.072 m, against 0.035-0.040 m when the
        update that learned the rest of wind A had landed first). The update after a
        preemption is never preempted, so a stream of changes cannot starve the learner.
        """
        start = time.perf_counter()
        self._last_update_s, self.new_ticks = self._now_s, 0
        self._informative_learned += self.informative_new_ticks()
        if len(self.replay):
            self._new_since_ns = int(self.replay.records.stamp_ns.max())
        self._counts.clear()
        report = _Progress(progress)
        may_preempt, self._preempted_last = not self._preempted_last, False
        try:
            return self._cycle(report, poll, may_preempt)
        except _PreemptedError:
            self._preempted_last = True
            self._carried_model = report.fitted_model  # None when preempted while fitting
            elapsed = time.perf_counter() - start
            judge, count = report.preempted_by
            reason = (
                f"update preempted after {elapsed:.1f} s ({report.stage}): {count} new ticks "
                f"the {judge} model does not explain"
            )
            return UpdateResult(False, None, reason, 0.0, 0.0, 0.0, elapsed, {}, preempted=True)

    def _preempt_check(
        self,
        report: _Progress,
        poll: Callable[[], None],
        judge: str,
        model: VNDModel | None,
        needed: int | None = None,
    ) -> Callable[[], bool]:
        """A :attr:`_Progress.preempt_when`: ``poll`` (it ingests the ticks that arrived), then
        whether ``model`` (named ``judge``) leaves ``needed`` of them unexplained (default
        ``preempt_unexplained_ticks``; never when ``min_unexplained_ticks`` is 0: nothing is
        counted)."""
        c = self.config
        needed = needed or c.preempt_unexplained_ticks or c.min_unexplained_ticks

        def check() -> bool:
            poll()
            count = self._count_new(judge, model) if c.min_unexplained_ticks > 0 else 0
            report.preempted_by = (judge, count)
            return c.min_unexplained_ticks > 0 and count >= needed

        return check

    # ------------------------------------------------------------------ policy improvement
    def should_improve(self) -> bool:
        """True when an improvement round may run now: improvement on, a model to train
        against, enough data, and fewer than ``patience_rounds`` rounds without a new version
        since the basis last changed (or the replay has grown enough for a new one). Ask
        :meth:`should_update` first: a model update always goes before a round."""
        c = self.config
        if not c.improvement.enabled or self._active.model is None:
            return False
        if self._window_count() < c.min_windows:
            return False
        return self._stale_rounds < c.improvement.patience_rounds or self._basis_outdated()

    def improve(
        self, progress: UpdateProgress | None = None, poll: Callable[[], None] | None = None
    ) -> UpdateResult:
        """One improvement round (:mod:`improvement`): train the candidate further, run the
        gates, and emit version ``active.version + 1`` (same model, ``kind="policy"``) when it
        passes them and beats the active policy by ``min_gain_frac``. ``poll`` as in
        :meth:`update`: a new condition the active model does not explain preempts the round."""
        start = time.perf_counter()
        report = _Progress(progress)
        if poll is not None:
            # a round gives way as soon as a model update would start: at min_unexplained_ticks
            report.preempt_when = self._preempt_check(
                report, poll, "active", self._active.model, self.config.min_unexplained_ticks
            )
        try:
            return self._improve_round(report)
        except _PreemptedError:
            elapsed = time.perf_counter() - start
            judge, count = report.preempted_by
            reason = (
                f"policy improvement preempted after {elapsed:.1f} s: {count} new ticks the "
                f"{judge} model does not explain"
            )
            return UpdateResult(
                False, None, reason, 0.0, 0.0, 0.0, elapsed, {}, preempted=True, kind="policy"
            )

    def withdraw_improvement(self, bundle: Bundle, previous: Bundle) -> None:
        """Make ``previous`` active again if ``bundle`` (an improvement round's new version)
        still is: the round gave way before its bundle flew. The candidate keeps its training,
        as a round preempted in flight does."""
        if self._active is bundle:
            self._active = previous
            self.improvements_accepted -= 1

    def _basis_outdated(self) -> bool:
        """The basis is missing, of another model, or older than ``min_new_ticks`` of flight."""
        basis = self._basis
        return (
            basis is None
            or basis.model is not self._active.model
            or self.stored_total - basis.stored_total >= self.config.min_new_ticks
        )

    def _improver_now(self) -> PolicyImprover | None:
        """The improver of the current basis (a new basis and candidate when it changed)."""
        c = self.config
        if self._basis_outdated():
            model = self._active.model
            self._basis = ImprovementBasis.of_replay(
                model, self._dataset(model.prior), self.stored_total
            )
            self._improver, self._stale_rounds = None, 0
        if self._basis is None:
            return None
        if self._improver is None:
            version = self._active.version
            self._improver = PolicyImprover(
                self._active.policy,
                self._basis,
                self.vehicle,
                dataclasses.replace(c.trainer, seed=c.trainer.seed + c.seed + 7919 * version),
                c.improvement,
                anchor_fraction=c.anchor_fraction,
                pool_fraction=c.pool_fraction,
                components=c.residual_components,
            )
        return self._improver

    def _improve_round(self, report: _Progress) -> UpdateResult:
        """The body of :meth:`improve` (``report`` may raise :class:`_PreemptedError`)."""
        start, cpu_start = time.perf_counter(), time.process_time()
        active, c = self._active, self.config
        metrics: dict = {"kind": "policy", "version": active.version + 1}
        metrics[SUMMARY_KEY] = c.residual_components  # as a model update's bundle records it
        report("improve", 0.0)
        improver = self._improver_now()
        if improver is None:
            elapsed = time.perf_counter() - start
            reason = "no policy improvement: the replay holds no complete context window"
            return UpdateResult(False, None, reason, 0.0, 0.0, 0.0, elapsed, metrics, kind="policy")
        summary = improver.train_round(progress=lambda i, n, _: report("improve", i / n))
        self.improvement_rounds += 1
        metrics["train"] = {
            "round": improver.rounds,
            **{k: summary[k] for k in ("iterations", "first_loss", "final_loss")},
        }
        train_s = time.perf_counter() - start
        report("validate", 0.0)
        basis, candidate = improver.basis, improver.snapshot()
        dynamics = anchored_dynamics(
            basis.model, basis.bound, c.residual_components, trust_region=basis.region
        )
        reason, checks = self._validate(candidate, dynamics, basis.model, basis.dataset)
        metrics["validation"] = checks
        if reason is None:
            reason = _no_gain(checks["cost_m"], c.improvement.min_gain_frac)
        elif not reason.startswith("cost on learned-model rollouts"):
            self._improver = None  # a gate beyond cost failed: start again from the active policy
        validate_s = time.perf_counter() - start - train_s
        total_s = time.perf_counter() - start
        metrics["timing_s"] = {
            "train": round(train_s, 3),
            "validate": round(validate_s, 3),
            "total": round(total_s, 3),
            "cpu_total": round(time.process_time() - cpu_start, 3),
        }
        report("validate", 1.0)
        if reason is not None:
            self._stale_rounds += 1
            return UpdateResult(
                False, None, reason, 0.0, train_s, validate_s, total_s, metrics, kind="policy"
            )
        bundle = Bundle(
            version=active.version + 1,
            parent_version=active.version,
            policy=candidate,
            vehicle=self.vehicle,
            model=basis.model,
            summary=_json_safe(metrics),
            parent_sha256=content_id(active),
            lineage=self.lineage,
        )
        self._active, self._stale_rounds = bundle, 0
        self.improvements_accepted += 1
        return UpdateResult(
            True, bundle, "", 0.0, train_s, validate_s, total_s, metrics, kind="policy"
        )

    def _cycle(
        self, report: _Progress, poll: Callable[[], None] | None, may_preempt: bool
    ) -> UpdateResult:
        """The body of :meth:`update` (``report`` may raise :class:`_PreemptedError`)."""
        start, cpu_start = time.perf_counter(), time.process_time()
        active, c = self._active, self.config
        version = active.version + 1
        metrics: dict = {"kind": "model", "version": version, "parent_version": active.version}
        # the bundle records which residual parts its policy trained against (components.py)
        metrics[SUMMARY_KEY] = c.residual_components

        report("fit", 0.0)
        model = self._start_model()
        dataset = self._dataset(model.prior)
        metrics["data"] = {
            "ticks": self.ticks_stored,
            "segments": dataset.num_segments,
            "transitions": dataset.num_transitions,
            "new_model": active.model is None,
        }
        needed = model.context_len + c.fit.horizon
        if len(dataset.window_starts(model.context_len, c.fit.horizon)) == 0:
            reason = f"not enough data: no run of {needed + 1} POLICY ticks in the replay"
            elapsed = time.perf_counter() - start
            return UpdateResult(False, None, reason, elapsed, 0.0, 0.0, elapsed, metrics)
        unexplained = self._unexplained_windows(dataset, model.context_len)  # (W,)
        # the fit's windows (K targets after the context) are a subset of those
        context_starts = dataset.window_starts(model.context_len, 0)
        fit_starts = dataset.window_starts(model.context_len, c.fit.horizon)
        focus = unexplained[torch.searchsorted(context_starts, fit_starts)]
        metrics["data"]["unexplained_windows"] = int(unexplained.sum())
        steps = c.fit.steps
        refine = active.model is not None and not focus.any()  # nothing new to the model
        if refine and c.refine_fit_steps is not None:
            steps = c.refine_fit_steps
        if refine and poll is not None and may_preempt:
            report.preempt_when = self._preempt_check(report, poll, "active", active.model)
        fit_config = dataclasses.replace(c.fit, steps=steps, seed=c.fit.seed + c.seed + version)
        fit = fit_vnd(
            model,
            dataset,
            fit_config,
            warm_start=active.model is not None,
            progress=lambda i, n, _: report("fit", i / n),
            focus=focus,
            focus_fraction=c.focus_fraction,
        )
        report.fitted_model = (active.version, model)
        if poll is not None and may_preempt:
            report.preempt_when = self._preempt_check(report, poll, "fitted", model)
        metrics["fit"] = {"steps": fit.steps, "windows": fit.num_windows, **fit.final}
        metrics["latents"] = self._latent_metrics(fit.latents)
        fit_s = time.perf_counter() - start

        report("train", 0.0)
        policy = copy.deepcopy(active.policy)
        if active.model is None:
            # No encoder yet: the active policy never read a latent (z = 0 throughout its
            # training), so its z weights are untrained; start them at zero (PolicyNet docs).
            policy.silence_latent()
        bound = residual_bound(dataset)
        region = TrustRegion.of_dataset(dataset)
        trainer_config = dataclasses.replace(c.trainer, seed=c.trainer.seed + c.seed + version)
        summary = train_policy_on_model(
            policy,
            model,
            self.vehicle,
            trainer_config,
            progress=lambda i, n, _: report("train", i / n),
            anchor_fraction=c.anchor_fraction,
            residual_bound=bound,
            latent_pool=fit.latents.z if fit.latents is not None else None,
            pool_fraction=c.pool_fraction,
            pool_weights=(
                focus_weights(unexplained, c.focus_fraction) if fit.latents is not None else None
            ),
            trust_region=region,
            components=c.residual_components,
        )
        metrics["train"] = {
            k: summary[k] for k in ("iterations", "first_loss", "final_loss", "final_pos_error_m")
        }
        if self.candidate_hook is not None:
            self.candidate_hook(policy)
        train_s = time.perf_counter() - start - fit_s

        report("validate", 0.0)
        reason, checks = self._validate(
            policy,
            anchored_dynamics(model, bound, c.residual_components, trust_region=region),
            model,
            dataset,
        )
        metrics["validation"] = checks
        validate_s = time.perf_counter() - start - fit_s - train_s
        total_s = time.perf_counter() - start
        metrics["timing_s"] = {
            "fit": round(fit_s, 3),
            "train": round(train_s, 3),
            "validate": round(validate_s, 3),
            "total": round(total_s, 3),
            "cpu_total": round(time.process_time() - cpu_start, 3),  # wall on an idle core
        }
        report("validate", 1.0)
        if reason is not None:
            return UpdateResult(False, None, reason, fit_s, train_s, validate_s, total_s, metrics)
        bundle = Bundle(
            version=version,
            parent_version=active.version,
            policy=policy.eval(),
            vehicle=self.vehicle,
            model=model.eval(),
            summary=_json_safe(metrics),
            parent_sha256=content_id(active),
            lineage=self.lineage,
        )
        self._active = bundle
        self._basis = ImprovementBasis(
            model=model,
            dataset=dataset,
            bound=bound,
            region=region,
            latent_pool=fit.latents.z if fit.latents is not None else None,
            pool_weights=(
                focus_weights(unexplained, c.focus_fraction) if fit.latents is not None else None
            ),
            stored_total=self.stored_total,
        )
        self._improver, self._stale_rounds = None, 0
        return UpdateResult(True, bundle, "", fit_s, train_s, validate_s, total_s, metrics)

    # ------------------------------------------------------------------ internals
    def _start_model(self) -> VNDModel:
        """The model a preempted update fitted from the active bundle, else a copy of the active
        model (warm start), else a fresh default one, seeded."""
        carried, self._carried_model = self._carried_model, None
        if carried is not None and carried[0] == self._active.version:
            return carried[1]
        if self._active.model is not None:
            return copy.deepcopy(self._active.model)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.config.seed)
            return VNDModel(self.vehicle, self.config.model)

    def _dataset(self, prior: NominalModel) -> TransitionDataset:
        """Transition dataset of every learnable segment of the replay."""
        segments = to_segments(
            self.replay.records,
            self.config.control_period_s,
            self.config.gap_factor,
            self.label_ids,
            velocity_half_window=self.config.velocity_half_window,
        )
        delay = self._model_config().action_delay_ticks
        return TransitionDataset(prior, segments, delay)

    def _unexplained_windows(self, dataset: TransitionDataset, context_len: int) -> torch.Tensor:
        """Flag (W,) per context window (``dataset.window_starts(context_len, 0)``, the windows
        the fit re-encodes): the active model does not explain it
        (:func:`novelty.window_unexplained_accel` above the calm gate's threshold) and it lies
        in a run of at least ``UNEXPLAINED_RUN_TICKS`` such windows."""
        starts = dataset.window_starts(context_len, 0)
        if len(starts) == 0:
            return torch.zeros(0, dtype=torch.bool)
        model, dt_s = self._active.model, dataset.prior.config.dt_s
        accel = torch.cat(
            [
                window_unexplained_accel(model, dataset.context(part, context_len), dt_s)
                for part in starts.split(4096)
            ]
        )
        flags = (accel > self.config.validation.calm_accel_mps2).numpy()
        # runs as the trigger counts them: scattered windows (transitions, outliers of a
        # condition the model explains) are no new condition, and focusing on them costs wind A
        # tracking (one update flew it at 0.046 m with them, 0.034 m without)
        return torch.from_numpy(_long_runs(flags, UNEXPLAINED_RUN_TICKS))

    def _model_config(self) -> VNDModelConfig:
        """Architecture of the model the next update fits (the active one's, or the default)."""
        model = self._active.model
        return model.config if model is not None else self.config.model

    def _min_run_ticks(self) -> int:
        """Shortest run that yields a fit window: C context transitions, K targets, + 1 state,
        + the d states whose delayed action lies before the run."""
        model = self._model_config()
        return model.context_len + self.config.fit.horizon + 1 + model.action_delay_ticks

    def _window_count(self) -> int:
        """Fit windows the replay holds now (cheap: from stamps and modes only)."""
        chunks, _ = self.replay.chunks(self._min_run_ticks())
        if not chunks:
            return 0
        lengths, run_stop = [], -1
        for chunk in chunks:  # chunks of one run are adjacent: rebuild run lengths
            if chunk.start == run_stop:
                lengths[-1] += chunk.stop - chunk.start
            else:
                lengths.append(chunk.stop - chunk.start)
            run_stop = chunk.stop
        return sum(n - self._min_run_ticks() + 1 for n in lengths)

    def _descriptors(self, records: TickRecords, chunks: list[slice]) -> np.ndarray:
        """Condition descriptor (M, d) per chunk: the active encoder's latent of the chunk's
        last context window, or, with no model yet, the chunk's mean prior error."""
        model = self._active.model
        if model is not None:
            c, d = model.context_len, model.config.action_delay_ticks
            # transition t is paired with the action logged d ticks before it (data.py)
            states = torch.stack(
                [torch.as_tensor(records.state[s.stop - c - 1 : s.stop]) for s in chunks]
            ).float()
            actions = torch.stack(
                [
                    torch.as_tensor(records.action[s.stop - c - 1 - d : s.stop - 1 - d])
                    for s in chunks
                ]
            ).float()
            with torch.no_grad():
                return model.encode(states, actions).numpy()
        prior = NominalModel(self.vehicle)
        rows = []
        with torch.no_grad():
            for s in chunks:
                states = torch.as_tensor(records.state[s]).float()
                actions = torch.as_tensor(records.action[s]).float()
                rows.append(prior_error(prior, states[:-1], actions[:-1], states[1:]).mean(0))
        return torch.stack(rows).numpy()

    def _latent_metrics(self, latents: EncodedLatents | None) -> dict:
        """Spread of the re-encoded latents and, with condition labels, their k-NN accuracy."""
        if latents is None or len(latents.z) == 0:
            return {}
        out = {
            "windows": len(latents.z),
            "z_mean_norm": float(latents.z.mean(0).norm()),
            "z_std_mean": float(latents.z.std(0).mean()) if len(latents.z) > 1 else 0.0,
        }
        labelled = latents.labels[latents.labels != NO_LABEL]
        if len(labelled.unique()) >= 2 and len(labelled) > 5:
            out["knn_accuracy"] = latent_knn_accuracy(latents.z, latents.labels, max_points=1000)
        return out

    def _validate(
        self, policy: PolicyNet, dynamics: Dynamics, model: VNDModel, dataset: TransitionDataset
    ) -> tuple[str | None, dict]:
        """Run the gates (:func:`gates.run_gates`) against the active bundle."""
        return run_gates(
            policy,
            dynamics,
            model,
            dataset,
            active=self._active,
            vehicle=self.vehicle,
            validation=self.config.validation,
            components=self.config.residual_components,
        )


class _Progress:
    """Maps per-stage fractions to the whole cycle and forwards them (if a callback is set)."""

    def __init__(self, callback: UpdateProgress | None) -> None:
        self.callback = callback
        self.preempt_when: Callable[[], bool] | None = None  # checked until validation
        self.preempted_by: tuple[str, int] = ("", 0)  # (judge, unexplained count) last checked
        # (active version, model) once the fit is done: carried past a preemption
        self.fitted_model: tuple[int, VNDModel] | None = None
        self.stage = ""  # the stage of the last progress point

    def __call__(self, stage: str, fraction: float) -> None:
        self.stage = stage
        if self.callback is not None:
            low, high = _STAGE_SPAN[stage]
            self.callback(stage, low + (high - low) * min(max(fraction, 0.0), 1.0))
        if stage != "validate" and self.preempt_when is not None and self.preempt_when():
            raise _PreemptedError


def _ticks_in_long_runs(flags: np.ndarray, min_run: int) -> int:
    """Total length of the runs of True in ``flags`` (N,) that are at least ``min_run`` long."""
    return int(_long_runs(flags, min_run).sum())


def _long_runs(flags: np.ndarray, min_run: int) -> np.ndarray:
    """``flags`` (N,) bool with the runs of True shorter than ``min_run`` cleared."""
    flags = np.asarray(flags, dtype=bool)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(np.int8), [0]])))
    kept = np.zeros(len(flags) + 1, dtype=np.int64)
    for start, stop in zip(edges[::2], edges[1::2], strict=True):
        if stop - start >= min_run:
            kept[start] += 1
            kept[stop] -= 1
    return np.cumsum(kept)[:-1] > 0


def _no_gain(cost_m: dict, min_gain_frac: float) -> str | None:
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


def _json_safe(value: Any) -> Any:
    """``value`` with non-finite floats replaced by None (bundle metadata is strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value
