"""The continual loop of ``vnd eval`` in simulated time, one method at a time.

Every method flies the same true plant (:class:`~vnd_core.plant.TruePlant`, seeded) at 50 Hz
through the same scenario. Each tick: the plant is measured (noisy), the method's controller
acts (its policy, with z from the encoder for VND, z = 0 for base / dr / dr_mismatched /
refit, the true disturbance for the oracle, the method's own online estimate for dob / rma),
the command goes to the plant, and the tick record goes to the
method's learner once per second (in batches, as the replay topic delivers it).

Updates are asynchronous, as on the vehicle: when a learner asks for one, the simulated clock
stops, the update runs (fit + policy training + validation, or a policy improvement round) and
its CPU time is measured; then the plant flies on with the *old* bundle for a simulated compute
delay and the new bundle takes over at the first tick after it. The delay is, by default, the
update's CPU time divided by the learner's share of a core beside the flight stack
(:data:`LEARNER_CPU_SHARE`, ``update_delay_s=None``), so a method that computes more adapts
later, whatever else loads the evaluating machine; a fixed delay can be chosen for reproducible
runs. While an update is pending no new one starts (one learner process). The delay actually
used is recorded with every update marker.

Scenario time scale: :func:`scale_scenario` multiplies the duration, every phase start and
every event time by a factor (quick mode: 0.5). Disturbance physics (wind speeds, gust time
constants, sinusoid periods) and the reference trajectory are not scaled.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from vnd_core.bundle import Bundle
from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.evaluation.baselines import true_disturbance
from vnd_core.force_observer import ForceObserver, LearnedMotion
from vnd_core.latent_estimator import LatentEstimator
from vnd_core.learner import ContinualLearner, LearnerConfig, TickRecords
from vnd_core.learner.records import MODE_POLICY
from vnd_core.plant import TruePlant
from vnd_core.plant_parts import PlantConfig
from vnd_core.policy import PolicyRunner
from vnd_core.scenario import Phase, Scenario
from vnd_core.state import POS, QUAT

LATENT_NONE, LATENT_ENCODER, LATENT_ORACLE = "none", "encoder", "oracle"
# online: the method's own per-run estimator (Method.latent_source) gives z every tick from the
# measurements and commands so far (the disturbance observer, RMA's adaptation module)
LATENT_ONLINE = "online"
INGEST_EVERY_TICKS = 50  # the learner receives tick records once per second
KIND_MODEL, KIND_POLICY = "model", "policy"  # a model update; a policy improvement round
# Share of one core the learner's worker gets beside the flight stack on the 2-core machine
# (the demo's updates: CPU time / wall time 0.60-0.62): an update of c CPU seconds lands c / 0.6
# seconds after it starts.
LEARNER_CPU_SHARE = 0.6


def scale_scenario(scenario: Scenario, factor: float) -> Scenario:
    """``scenario`` with its duration, phase starts and event times multiplied by ``factor``."""
    if not factor > 0:
        raise ValueError(f"time scale must be > 0, got {factor}")
    if factor == 1.0:
        return scenario
    return dataclasses.replace(
        scenario,
        duration_s=scenario.duration_s * factor,
        phases=tuple(Phase(p.name, p.start_s * factor) for p in scenario.phases),
        events=tuple(dataclasses.replace(e, at_s=e.at_s * factor) for e in scenario.events),
    )


@dataclass
class UpdateOutcome:
    """What one learner update produced."""

    bundle: Bundle | None  # the new bundle to fly (None: rejected or failed)
    wall_s: float  # measured wall time of the update
    reason: str = ""  # rejection reason ("" when accepted)
    metrics: dict = field(default_factory=dict)  # method-specific figures (JSON-able)
    cpu_s: float | None = None  # CPU time the update used (this process); None: not measured
    kind: str = "model"  # KIND_MODEL: a model update; KIND_POLICY: a policy-only improvement


class Method:
    """A controller plus (optionally) a learner; subclasses add adaptation.

    ``latent_mode``: where the policy's z comes from each tick (none: z = 0, encoder: the
    active bundle's VND encoder on the last C ticks, oracle: the true disturbance vector).
    """

    def __init__(self, name: str, bundle: Bundle, latent_mode: str = LATENT_NONE) -> None:
        if latent_mode not in (LATENT_NONE, LATENT_ENCODER, LATENT_ORACLE, LATENT_ONLINE):
            raise ValueError(f"unknown latent mode {latent_mode!r}")
        self.name = name
        self.initial = bundle
        self.latent_mode = latent_mode

    def start(self, seed: int) -> Bundle:
        """Forget everything learned; return the bundle the run starts with."""
        return self.initial

    def latent_source(self) -> LatentSource:
        """A fresh per-run z estimator (latent mode online only)."""
        raise NotImplementedError(f"method {self.name} has no online latent source")

    def ingest(self, records: TickRecords) -> None:
        """Receive one batch of tick records (no-op for static methods)."""

    def should_update(self, now_s: float) -> bool:
        """True when the learner wants to run an update now (never for static methods)."""
        return False

    def preempts(self, now_s: float) -> bool:
        """True when the job whose bundle is pending would have given way by ``now_s`` in
        flight (the data ingested since it started hold a reason to run another job first)."""
        return False

    def abandon(self) -> None:
        """Forget the pending job's result (called after :meth:`preempts` said yes)."""

    def update(self) -> UpdateOutcome:
        """Run one update (only called after :meth:`should_update` said yes)."""
        raise NotImplementedError(f"method {self.name} does not adapt")


class LatentSource:
    """A per-run online z estimator of a method with latent mode online: it sees each
    measurement before the tick's command and each command after it, nothing else. One that
    runs a disturbance observer exposes it (``observer``): the run then sends every command
    through its rate compensation, as the flight stack does for a force-input policy."""

    observer: ForceObserver | None = None

    def latent(self, stamp_ns: int, measured: np.ndarray) -> np.ndarray:
        """z (latent_dim,) for the tick whose measurement ``measured`` (13,) is at
        ``stamp_ns``."""
        raise NotImplementedError

    def command(self, stamp_ns: int, action: np.ndarray) -> None:
        """The command (4,) sent in answer to the measurement at ``stamp_ns``."""
        raise NotImplementedError


class VNDMethod(Method):
    """VND: the :class:`ContinualLearner` (replay of everything, latent-conditioned model)."""

    def __init__(self, bundle: Bundle, config: LearnerConfig, name: str = "vnd") -> None:
        super().__init__(name, bundle, LATENT_ENCODER)
        self.config = config
        self.learner: ContinualLearner | None = None
        self.due: str | None = None  # the job should_update found due (KIND_*)
        self.previous: Bundle | None = None  # the active bundle before the last job
        self.emitted: Bundle | None = None  # the last job's new version (None: none)

    def start(self, seed: int) -> Bundle:
        """A fresh learner seeded with ``seed``."""
        config = dataclasses.replace(self.config, seed=seed)
        self.learner = ContinualLearner(self.initial.vehicle, config, self.initial)
        # before take-off, as the flight worker does: the compiled training is not charged
        self.learner.warm_up()
        return self.initial

    @property
    def running(self) -> ContinualLearner:
        """The learner of the current run (made by :meth:`start`)."""
        if self.learner is None:
            raise RuntimeError("the VND method has no learner: start() a run first")
        return self.learner

    def ingest(self, records: TickRecords) -> None:
        """Into the learner's replay."""
        self.running.ingest(records)

    def should_update(self, now_s: float) -> bool:
        """The learner's own rules: a model update when it wants one (new data and time since
        the last), else a policy improvement round when it may run one."""
        if self.running.should_update(now_s):
            self.due = KIND_MODEL
        elif self.running.should_improve():
            self.due = KIND_POLICY
        else:
            self.due = None
        return self.due is not None

    def preempts(self, now_s: float) -> bool:
        """A policy improvement round gives way to a model update, as in flight (where the
        round stops at its next progress point; here its result is withdrawn)."""
        return self.due == KIND_POLICY and self.running.should_update(now_s)

    def abandon(self) -> None:
        """Withdraw the pending round's new version, if it made one."""
        if self.emitted is not None and self.previous is not None:
            self.running.withdraw_improvement(self.emitted, self.previous)

    def update(self) -> UpdateOutcome:
        """The job :meth:`should_update` found due: one fit -> train -> validate cycle, or one
        policy improvement round."""
        job = self.running.update if self.due == KIND_MODEL else self.running.improve
        self.previous = self.running.active
        result = job()
        self.emitted = result.bundle if result.accepted else None
        bundle = result.bundle if result.accepted else None
        return UpdateOutcome(
            bundle, result.total_s, result.reason, result.metrics, kind=result.kind
        )


@dataclass
class UpdateMarker:
    """One update of a run, in simulated time."""

    requested_s: float  # when the learner started the update (data up to here)
    applied_s: float  # when its bundle took over (or would have, if rejected)
    wall_s: float  # measured wall time of the update
    accepted: bool  # a new bundle was flown
    version: int  # version of the new bundle (0 if rejected)
    reason: str  # rejection reason
    cpu_s: float = 0.0  # CPU time the update used
    kind: str = "model"  # KIND_MODEL or KIND_POLICY


@dataclass
class RunResult:
    """One method flying one scenario with one seed."""

    method: str
    scenario: str
    seed: int
    time_s: np.ndarray  # (T,) scenario time after each tick
    error_m: np.ndarray  # (T,) true position error after each tick
    condition: np.ndarray  # (T,) str, true condition (phase name) during each tick
    crashed: bool  # the plant reported a crash
    updates: list[UpdateMarker]  # every update, in order
    records: TickRecords  # every tick as the learner received it (with condition labels)
    final_bundle: Bundle  # the bundle flying at the end
    wall_s: float  # wall time of the whole run (flight + updates)

    def trace(self) -> RunTrace:
        """The time series of this run that the plots read (without records and bundle)."""
        return RunTrace(time_s=self.time_s, error_m=self.error_m, updates=list(self.updates))


@dataclass
class RunTrace:
    """What the error plot reads of one run: errors over time and the updates."""

    time_s: np.ndarray  # (T,) scenario time after each tick
    error_m: np.ndarray  # (T,) true position error after each tick
    updates: list[UpdateMarker]  # every update, in order


def run_method(
    method: Method,
    scenario: Scenario,
    seed: int,
    update_delay_s: float | None = None,
    plant_config: PlantConfig | None = None,
    progress: Callable[[float], None] | None = None,
    cpu_share: float = LEARNER_CPU_SHARE,
) -> RunResult:
    """Fly ``scenario`` with ``method`` on a plant seeded with ``seed`` (see the module
    docstring for the update timing; ``update_delay_s=None`` charges each update its CPU
    time divided by ``cpu_share``)."""
    if not 0.0 < cpu_share <= 1.0:
        raise ValueError(f"cpu_share must be within (0, 1], got {cpu_share}")
    start = time.perf_counter()
    bundle = method.start(seed)
    plant = TruePlant(bundle.vehicle, scenario, 1, plant_config, seed=seed)
    plant.reset(scenario.start_state(1))
    trajectory = scenario.trajectory(1)
    flight = _Flight(method, scenario, bundle)
    n_ticks = round(scenario.duration_s / CONTROL_PERIOD_S)
    rows: dict[str, list] = {k: [] for k in ("stamp", "state", "action", "pv", "ev", "cond")}
    time_s, error_m = np.zeros(n_ticks), np.zeros(n_ticks)
    updates: list[UpdateMarker] = []
    pending: tuple[float, Bundle | None] | None = None  # (flies from, bundle or rejected)
    ingested = 0
    for tick in range(n_ticks):
        t_s = plant.time_s
        stamp_ns = round(t_s * 1e9)
        measured = plant.measure()[0].double().numpy()
        condition = plant.condition()
        action, z_used = flight.act(measured, t_s, stamp_ns, plant)
        state = plant.step(torch.from_numpy(action).float()[None])
        flight.after_command(stamp_ns, action)
        reference = trajectory.sample(torch.full((1,), plant.time_s)).position_m[0]
        time_s[tick] = plant.time_s
        error_m[tick] = float((state[0, POS] - reference).norm())
        for key, value in (
            ("stamp", stamp_ns),
            ("state", measured),
            ("action", action),
            ("pv", flight.bundle.version),
            ("ev", flight.bundle.version if z_used else 0),
            ("cond", condition),
        ):
            rows[key].append(value)
        now_s = plant.time_s
        if pending is not None and now_s >= pending[0] - 1e-9:
            if pending[1] is not None:
                flight.use(pending[1])
            pending = None
        if (tick + 1) % INGEST_EVERY_TICKS == 0:
            method.ingest(_records(rows, ingested, len(rows["stamp"])))
            ingested = len(rows["stamp"])
            last_tick = tick == n_ticks - 1  # an update started now could never fly
            if pending is not None and method.preempts(now_s):
                method.abandon()
                updates[-1] = dataclasses.replace(
                    updates[-1],
                    applied_s=now_s,
                    accepted=False,
                    version=0,
                    reason=f"preempted at {now_s:.1f} s",
                )
                pending = None
            if pending is None and not last_tick and method.should_update(now_s):
                marker, new_bundle = _run_update(method, now_s, update_delay_s, cpu_share)
                updates.append(marker)
                pending = (marker.applied_s, new_bundle)
            if progress is not None:
                progress(now_s / scenario.duration_s)
    records = _records(rows, 0, len(rows["stamp"]))
    return RunResult(
        method=method.name,
        scenario=scenario.name,
        seed=seed,
        time_s=time_s,
        error_m=error_m,
        condition=np.array(rows["cond"], dtype=np.str_),
        crashed=bool(plant.crashed.any()),
        updates=updates,
        records=records,
        final_bundle=flight.bundle,
        wall_s=time.perf_counter() - start,
    )


def _run_update(
    method: Method, now_s: float, update_delay_s: float | None, cpu_share: float
) -> tuple[UpdateMarker, Bundle | None]:
    """Run one update of ``method`` requested at ``now_s``; its marker and its new bundle.

    The update lands after the compute it took: its CPU time divided by ``cpu_share``, the
    share of a core the learner gets beside the flight stack (``update_delay_s=None``), or
    after a fixed ``update_delay_s``."""
    cpu_start = time.process_time()
    outcome = method.update()
    cpu_s = outcome.cpu_s if outcome.cpu_s is not None else time.process_time() - cpu_start
    delay_s = cpu_s / cpu_share if update_delay_s is None else update_delay_s
    marker = UpdateMarker(
        requested_s=now_s,
        applied_s=now_s + delay_s,
        wall_s=outcome.wall_s,
        accepted=outcome.bundle is not None,
        version=outcome.bundle.version if outcome.bundle is not None else 0,
        reason=outcome.reason,
        cpu_s=cpu_s,
        kind=outcome.kind,
    )
    return marker, outcome.bundle


class _Flight:
    """The flying side of a method: policy runner and latent source of the active bundle."""

    def __init__(self, method: Method, scenario: Scenario, bundle: Bundle) -> None:
        self.method = method
        self.scenario = scenario
        self.estimator = LatentEstimator()
        self.runner = PolicyRunner(bundle.policy, scenario.reference)
        self.source = method.latent_source() if method.latent_mode == LATENT_ONLINE else None
        # a policy with a force input reads the force the prior does not explain (and, once
        # its bundle has a model, the model's motion does not: force_observer's docstring),
        # and its commands go out with the observer's body-rate compensation
        self.observer = ForceObserver(bundle.vehicle) if bundle.policy.force_dim else None
        source_observer = self.source.observer if self.source is not None else None
        self.compensator = self.observer or source_observer  # the rate compensation, if any
        self.motion: LearnedMotion | None = None
        self.z: np.ndarray | None = None  # the latent of the last command
        self.use(bundle)

    def use(self, bundle: Bundle) -> None:
        """Fly ``bundle`` from the next tick on (previous commands and context carry over)."""
        runner = PolicyRunner(bundle.policy, self.scenario.reference)
        if len(runner.prev_actions) == len(self.runner.prev_actions):
            runner.prev_actions = list(self.runner.prev_actions)
        self.runner, self.bundle = runner, bundle
        if self.method.latent_mode == LATENT_ENCODER:
            self.estimator.set_model(bundle.model)
        learned = bundle.model is not None and bundle.policy.force_dim
        self.motion = LearnedMotion(bundle.model) if learned else None

    def act(
        self, measured: np.ndarray, t_s: float, stamp_ns: int, plant: TruePlant
    ) -> tuple[np.ndarray, bool]:
        """Command (4,) for ``measured`` (13,) and whether a non-zero-by-design z was used."""
        z, force_n = None, None
        if self.observer is not None:
            self.observer.observe(measured)
            force_n = self.observer.policy_force_n()
        if self.method.latent_mode == LATENT_ENCODER:
            self.estimator.add_odometry(stamp_ns, measured)
            z = self.estimator.latent() if self.bundle.model is not None else None
        elif self.method.latent_mode == LATENT_ORACLE:
            wind = plant.wind_velocity_mps()[0].numpy()
            z = true_disturbance(self.scenario, t_s, wind, self.bundle.vehicle)
        elif self.source is not None:
            z = self.source.latent(stamp_ns, measured)
        self.z = z
        action = self.runner.act(measured, t_s, z, force_n)
        if self.compensator is not None:  # the policy's history keeps what it asked for
            action = self.compensator.compensate(action, measured[QUAT])
        return action, z is not None

    def after_command(self, stamp_ns: int, action: np.ndarray) -> None:
        """Tell the encoder's context (and the force observer) which command answered the
        odometry at ``stamp_ns``."""
        if self.observer is not None:
            motion, z = self.motion, self.z
            self.observer.command(action, None if motion is None or z is None else motion.bind(z))
        if self.method.latent_mode == LATENT_ENCODER:
            self.estimator.add_command(stamp_ns, action)
        elif self.source is not None:
            self.source.command(stamp_ns, action)


def _records(rows: dict[str, list], begin: int, end: int) -> TickRecords:
    """Tick records of rows ``begin:end``."""
    n = end - begin
    return TickRecords(
        stamp_ns=np.array(rows["stamp"][begin:end], dtype=np.int64),
        state=np.array(rows["state"][begin:end]).reshape(n, 13),
        action=np.array(rows["action"][begin:end]).reshape(n, 4),
        mode=np.full(n, MODE_POLICY, dtype=np.uint8),
        policy_version=np.array(rows["pv"][begin:end], dtype=np.uint32),
        encoder_version=np.array(rows["ev"][begin:end], dtype=np.uint32),
        condition=np.array(rows["cond"][begin:end], dtype=np.str_),
    )
