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
   range and held at the edge of the data beyond it: :mod:`policy_update`);
4. validate (:mod:`validation`) and either emit bundle ``active.version + 1`` (which becomes
   the active one) or reject it with a reason, leaving the active bundle in place. An emitted
   bundle names its parent by content hash (``parent_sha256``) and carries the learner's
   ``lineage`` (the active bundle's, or a new id when the learner starts from a bundle without
   one), by which flight nodes order learner bundles (:mod:`vnd_flight.hotswap`).

A running update gives way to a new condition that begins while it runs; the model it fitted
carries into the next update (:meth:`ContinualLearner.update`).
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Callable

import numpy as np
import torch

from vnd_core.bundle import Bundle
from vnd_core.dynamics import NominalModel
from vnd_core.learner.config import LearnerConfig
from vnd_core.learner.gates import Gates, gates_against, model_gates
from vnd_core.learner.model_update import (
    FittedModel,
    TrainedPolicy,
    check_latent_sizes,
    fit_focus,
    fit_model,
    gate_dynamics,
    improvement_basis,
    start_model,
    train_candidate,
)
from vnd_core.learner.novelty import (
    UNEXPLAINED_RUN_TICKS,
    NewFlightCounts,
    unexplained_windows,
)
from vnd_core.learner.outcome import (
    PreemptedError,
    Progress,
    StageClock,
    UpdateProgress,
    UpdateResult,
    child_bundle,
    preempted_result,
)
from vnd_core.learner.records import MODE_POLICY, TickRecords
from vnd_core.learner.replay import EvictionReport
from vnd_core.learner.replay_view import (
    chunk_descriptors,
    fit_window_count,
    latent_metrics,
    new_replay,
    replay_dataset,
)
from vnd_core.learner.rounds import ImprovementRounds
from vnd_core.learner.warmup import WarmUpReport, compile_policy_training
from vnd_core.policy import PolicyNet
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.components import SUMMARY_KEY, compensated_components
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.model import VNDModel, VNDModelConfig

# LearnerConfig, UpdateProgress and UpdateResult are imported from here by the learner's users.
__all__ = [
    "UNEXPLAINED_RUN_TICKS",
    "ContinualLearner",
    "LearnerConfig",
    "UpdateProgress",
    "UpdateResult",
]


class ContinualLearner:
    """Replay, update decisions and update cycles around an active bundle."""

    def __init__(self, vehicle: VehicleParams, config: LearnerConfig, active: Bundle) -> None:
        config.validate()
        # a force-input policy flies rate-compensated: no body-rate residual (components.py)
        components = compensated_components(config.residual_components, active.policy.force_dim)
        config = dataclasses.replace(config, residual_components=components)
        self.vehicle = vehicle
        self.config = config
        check_latent_sizes(active, config)
        self._active = active
        # Lineage of the bundles this learner emits: the active bundle's when it has one (a
        # learner resuming its own run), else a new one (a run starting from a base bundle).
        self.lineage = active.lineage or uuid.uuid4().hex
        self.replay = new_replay(config)
        self.label_ids: dict[str, int] = {}  # condition name -> label (evaluation only)
        self.new_ticks = 0  # ticks stored since the last update started
        self.rejected_ticks = {"not_policy_mode": 0, "non_finite": 0, "duplicate": 0}
        self.last_eviction: EvictionReport | None = None
        self._last_update_s = -math.inf
        self._now_s = 0.0
        self._new_since_ns = -1  # ticks stamped after this are new (set when an update starts)
        # unexplained new ticks per judge ("model": the active one, "prior")
        self._counts = NewFlightCounts(
            vehicle, config.control_period_s, config.gap_factor, config.validation.calm_accel_mps2
        )
        self._informative_learned = 0  # prior-unexplained ticks the updates so far started on
        # (active version it started from, model) fitted by an update preempted after its fit
        self._carried_model: tuple[int, VNDModel] | None = None
        self._preempted_last = False  # the last update was preempted: the next one may not be
        self.stored_total = 0  # ticks stored since the start (evictions do not lower it)
        self._rounds = ImprovementRounds(vehicle, config, self.lineage)
        # Fault-injection seam: called on the trained candidate policy before validation.
        self.candidate_hook: Callable[[PolicyNet], None] | None = None
        # The first optimiser built in a process imports torch's compiler stack (seconds);
        # pay that here, not inside the first timed update.
        torch.optim.Adam([torch.zeros(1, requires_grad=True)])

    def warm_up(self) -> WarmUpReport:
        """Build the compiled policy training now (when the trainer compiles), so the first
        update does not pay it; call once before flight (:mod:`warmup`)."""
        return compile_policy_training(self._active, self.vehicle, self.config)

    # ------------------------------------------------------------------ state
    @property
    def active(self) -> Bundle:
        """The bundle new versions are trained from (the last accepted one)."""
        return self._active

    def set_active(self, bundle: Bundle) -> None:
        """Continue from ``bundle`` (e.g. after an operator rollback)."""
        self._active = bundle
        self._carried_model = None  # fitted from the bundle left behind
        self._rounds.restart()

    @property
    def improvement_rounds(self) -> int:
        """Improvement rounds run."""
        return self._rounds.rounds

    @property
    def improvements_accepted(self) -> int:
        """Improvement rounds that became a new version."""
        return self._rounds.accepted

    @property
    def ticks_stored(self) -> int:
        """Ticks in the replay."""
        return len(self.replay)

    def status(self) -> dict:
        """JSON-able counters for a status topic: replay size, new ticks, refusals, eviction."""
        eviction = self.last_eviction
        model = self._counts.last("model")
        return {
            "active_version": self._active.version,
            "ticks_stored": self.ticks_stored,
            "capacity_ticks": self.config.capacity_ticks,
            "new_ticks": self.new_ticks,
            "unexplained_new_ticks": model,
            "informative_new_ticks": self._counts.last("prior", default=model),
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
        after its residual, averaged over 0.5 s of windows, above the calm gate's
        ``calm_accel_mps2``), counted in runs of at least ``UNEXPLAINED_RUN_TICKS``. Judged
        incrementally, at most every 25 stored ticks (the worker asks five times a second); a
        new active bundle judges them all again. 0 when ``min_unexplained_ticks`` is 0 (not
        counted)."""
        return self._count_new("model", self._active.model)

    def informative_new_ticks(self) -> int:
        """Like :meth:`unexplained_new_ticks`, judged by the prior alone: new flight in a
        condition the physics prior does not hold (learned already or not)."""
        if self._active.model is None:
            return self.unexplained_new_ticks()
        return self._count_new("prior", None)

    def _count_new(self, judge: str, model: VNDModel | None) -> int:
        """Unexplained new ticks judged by ``model`` (None: the prior), cached as ``judge``."""
        if self.config.min_unexplained_ticks == 0:
            return 0
        records, config = self.replay.records, self._model_config()
        return self._counts.count(judge, model, records, self._new_since_ns, config)

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
        lost (a model that learned a new condition from one that had only seconds of the last
        one flies the last one worse when it returns). The update after a preemption is never
        preempted, so a stream of changes cannot starve the learner.
        """
        start = time.perf_counter()
        self._last_update_s, self.new_ticks = self._now_s, 0
        self._informative_learned += self.informative_new_ticks()
        if len(self.replay):
            self._new_since_ns = int(self.replay.records.stamp_ns.max())
        self._counts.clear()
        report = Progress(progress)
        may_preempt, self._preempted_last = not self._preempted_last, False
        try:
            return self._cycle(report, poll, may_preempt)
        except PreemptedError:
            self._preempted_last = True
            self._carried_model = report.fitted_model  # None when preempted while fitting
            elapsed = time.perf_counter() - start
            judge, count = report.preempted_by
            reason = (
                f"update preempted after {elapsed:.1f} s ({report.stage}): {count} new ticks "
                f"the {judge} model does not explain"
            )
            return preempted_result(reason, elapsed, kind="model")

    def _preempt_check(
        self,
        report: Progress,
        poll: Callable[[], None],
        judge: str,
        model: VNDModel | None,
        needed: int | None = None,
    ) -> Callable[[], bool]:
        """A :attr:`Progress.preempt_when`: ``poll`` (it ingests the ticks that arrived), then
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
        return self._rounds.patient(self._active.model, self.stored_total)

    def improve(
        self, progress: UpdateProgress | None = None, poll: Callable[[], None] | None = None
    ) -> UpdateResult:
        """One improvement round (:mod:`improvement`): train the candidate further, run the
        gates, and emit version ``active.version + 1`` (same model, ``kind="policy"``) when it
        passes them and beats the active policy by ``min_gain_frac``. ``poll`` as in
        :meth:`update`: a new condition the active model does not explain preempts the round."""
        start = time.perf_counter()
        report = Progress(progress)
        if poll is not None:
            # a round gives way as soon as a model update would start: at min_unexplained_ticks
            report.preempt_when = self._preempt_check(
                report, poll, "active", self._active.model, self.config.min_unexplained_ticks
            )
        try:
            result = self._rounds.run(
                report, self._active, self.stored_total, self._dataset, self._gates()
            )
        except PreemptedError:
            elapsed = time.perf_counter() - start
            judge, count = report.preempted_by
            reason = (
                f"policy improvement preempted after {elapsed:.1f} s: {count} new ticks the "
                f"{judge} model does not explain"
            )
            return preempted_result(reason, elapsed, kind="policy")
        if result.bundle is not None:
            self._active = result.bundle
        return result

    def withdraw_improvement(self, bundle: Bundle, previous: Bundle) -> None:
        """Make ``previous`` active again if ``bundle`` (an improvement round's new version)
        still is: the round gave way before its bundle flew. The candidate keeps its training,
        as a round preempted in flight does."""
        if self._active is bundle:
            self._active = previous
            self._rounds.accepted -= 1

    def _cycle(
        self, report: Progress, poll: Callable[[], None] | None, may_preempt: bool
    ) -> UpdateResult:
        """The body of :meth:`update`: fit, the model gates, train, the policy gates, emit
        (``report`` may raise :class:`PreemptedError`)."""
        clock, active, c = StageClock(), self._active, self.config
        # the bundle records which residual parts its policy trained against (components.py)
        metrics: dict = {"kind": "model", "version": active.version + 1}
        metrics |= {"parent_version": active.version, SUMMARY_KEY: c.residual_components}
        report("fit", 0.0)
        fitted = self._fit_stage(report, poll if may_preempt else None, metrics)
        clock.lap("fit")
        if fitted is None:
            needed = self._model_config().context_len + c.fit.horizon
            short = f"not enough data: no run of {needed + 1} POLICY ticks in the replay"
            return clock.result(bundle=None, reason=short, metrics=metrics)
        reason, metrics["validation"] = model_gates(
            fitted.model, fitted.dataset, c.validation, c.residual_components
        )
        clock.lap("validate")
        if reason is not None:  # refused before a policy is trained on it
            metrics["timing_s"] = clock.timing()
            return clock.result(bundle=None, reason=reason, metrics=metrics)
        report("train", 0.0)
        trained = self._train_stage(report, fitted, metrics)
        clock.lap("train")
        report("validate", 0.0)
        reason = self._validate_stage(fitted, trained, metrics)
        clock.lap("validate")
        metrics["timing_s"] = clock.timing()
        report("validate", 1.0)
        if reason is not None:
            return clock.result(bundle=None, reason=reason, metrics=metrics)
        return clock.result(
            bundle=self._accept(fitted, trained, metrics), reason="", metrics=metrics
        )

    def _fit_stage(
        self, report: Progress, poll: Callable[[], None] | None, metrics: dict
    ) -> FittedModel | None:
        """Stage 1: the dataset of the whole replay, the windows the active model does not
        explain, and the model fitted on them (None: no fit window). With ``poll`` the fit
        may be preempted (see :meth:`update` for who judges)."""
        active, c = self._active, self.config
        model = self._start_model()
        dataset = self._dataset(model.prior)
        metrics["data"] = {
            "ticks": self.ticks_stored,
            "segments": dataset.num_segments,
            "transitions": dataset.num_transitions,
            "new_model": active.model is None,
        }
        if len(dataset.window_starts(model.context_len, c.fit.horizon)) == 0:
            return None
        threshold = c.validation.calm_accel_mps2
        unexplained = unexplained_windows(active.model, dataset, model.context_len, threshold)
        focus = fit_focus(dataset, unexplained, model.context_len, c.fit.horizon)
        metrics["data"]["unexplained_windows"] = int(unexplained.sum())
        refine = active.model is not None and not focus.any()  # nothing new to the model
        if refine and poll is not None:
            report.preempt_when = self._preempt_check(report, poll, "active", active.model)
        fit = fit_model(
            model,
            dataset,
            focus,
            c,
            version=active.version + 1,
            refine=refine,
            warm_start=active.model is not None,
            report=report,
        )
        report.fitted_model = (active.version, model)
        if poll is not None:
            report.preempt_when = self._preempt_check(report, poll, "fitted", model)
        metrics["fit"] = {"steps": fit.steps, "windows": fit.num_windows, **fit.final}
        metrics["latents"] = latent_metrics(fit.latents)
        return FittedModel(
            model=model, dataset=dataset, unexplained=unexplained, latents=fit.latents
        )

    def _train_stage(self, report: Progress, fitted: FittedModel, metrics: dict) -> TrainedPolicy:
        """Stage 2: the candidate policy trained on the fitted model."""
        trained = train_candidate(self._active, fitted, self.vehicle, self.config, report)
        keys = ("iterations", "first_loss", "final_loss", "final_pos_error_m")
        metrics["train"] = {k: trained.summary[k] for k in keys}
        if self.candidate_hook is not None:
            self.candidate_hook(trained.policy)
        return trained

    def _validate_stage(
        self, fitted: FittedModel, trained: TrainedPolicy, metrics: dict
    ) -> str | None:
        """Stage 3: the policy gates on the candidate (the model passed its gates after the
        fit); why it is rejected (None: it passed)."""
        dynamics = gate_dynamics(fitted, trained, self.config.residual_components)
        reason, checks = self._gates()(trained.policy, dynamics, fitted.model, fitted.dataset)
        metrics["validation"] |= checks
        return reason

    def _accept(self, fitted: FittedModel, trained: TrainedPolicy, metrics: dict) -> Bundle:
        """Stage 4: the new version becomes the active bundle and the improvement basis."""
        bundle = child_bundle(
            self._active,
            policy=trained.policy.eval(),
            model=fitted.model.eval(),
            vehicle=self.vehicle,
            metrics=metrics,
            lineage=self.lineage,
        )
        self._active = bundle
        basis = improvement_basis(fitted, trained, self.config.focus_fraction, self.stored_total)
        self._rounds.restart(basis)
        return bundle

    # ------------------------------------------------------------------ internals
    def _start_model(self) -> VNDModel:
        """The model this update fits (:func:`model_update.start_model`)."""
        carried, self._carried_model = self._carried_model, None
        return start_model(carried, self._active, self.vehicle, self.config)

    def _dataset(self, prior: NominalModel) -> TransitionDataset:
        """Transition dataset of every learnable segment of the replay."""
        delay = self._model_config().action_delay_ticks
        return replay_dataset(self.replay, self.config, self.label_ids, prior, delay)

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
        return fit_window_count(self.replay, self._min_run_ticks())

    def _descriptors(self, records: TickRecords, chunks: list[slice]) -> np.ndarray:
        """Condition descriptor (M, d) per chunk, for the replay's eviction."""
        return chunk_descriptors(self._active.model, self.vehicle, records, chunks)

    def _gates(self) -> Gates:
        """The gates (:func:`gates.run_gates`) against the active bundle."""
        c = self.config
        return gates_against(self._active, self.vehicle, c.validation, c.residual_components)
