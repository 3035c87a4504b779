"""The continual loop of ``vnd eval`` in simulated time, one method at a time.

Every method flies the same true plant (seeded) through the same scenario, on the flight
side a :data:`FlightFactory` builds: ``vnd eval`` flies the stack's flight runtime
(``vnd_flight.evaluation_flight``: motion capture through the pose filter, the policy node's
controller with its safety filter and force observer, the nodes' timing), so what it measures
is what the stack flies. The policy's z comes from the method's latent mode (the encoder of the
active bundle for VND, z = 0 for base / dr / dr_mismatched / refit / dob, the true disturbance
for the oracle, the method's own online estimate for rma). Every tick's record goes to the
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
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from vnd_core.bundle import Bundle
from vnd_core.learner import ContinualLearner, LearnerConfig, TickRecords
from vnd_core.plant_parts import PlantConfig
from vnd_core.scenario import Phase, Scenario

LATENT_NONE, LATENT_ENCODER, LATENT_ORACLE = "none", "encoder", "oracle"
# online: the method's own per-run estimator (Method.latent_source) gives z every tick from the
# measurements and commands so far (the disturbance observer, RMA's adaptation module)
LATENT_ONLINE = "online"
INGEST_PERIOD_S = 1.0  # the learner receives tick records once per second
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
    measurement before the tick's command and each command after it, nothing else."""

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
    time_s: np.ndarray  # (T,) scenario time of each sample of the vehicle
    error_m: np.ndarray  # (T,) true position error at it
    condition: np.ndarray  # (T,) str, true condition (phase name) at it
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

    time_s: np.ndarray  # (T,) scenario time of each sample of the vehicle
    error_m: np.ndarray  # (T,) true position error at it
    updates: list[UpdateMarker]  # every update, in order


@dataclass
class FlownTrace:
    """What the vehicle did, sampled by the flight side (ground truth)."""

    time_s: np.ndarray  # (T,) scenario time of each sample
    error_m: np.ndarray  # (T,) true position error at it
    condition: np.ndarray  # (T,) str, true condition (phase name) at it
    crashed: bool  # the plant reported a crash


class FlightSide(Protocol):
    """The flying side of one run: flies on in scenario time, swaps bundles between ticks,
    hands back the ticks it flew as the learner receives them."""

    def fly_until(self, t_s: float) -> TickRecords:
        """Fly on to scenario time ``t_s``; the ticks flown since the last call (stamps in
        scenario time, condition labels set)."""
        ...

    def use(self, bundle: Bundle) -> None:
        """Fly ``bundle`` from the next tick on."""
        ...

    def trace(self) -> FlownTrace:
        """Everything flown so far."""
        ...


# (method, scenario, the bundle the run starts with, seed, plant config) -> the flight side
FlightFactory = Callable[[Method, Scenario, Bundle, int, PlantConfig | None], FlightSide]


def run_method(
    method: Method,
    scenario: Scenario,
    seed: int,
    fly: FlightFactory,
    update_delay_s: float | None = None,
    plant_config: PlantConfig | None = None,
    progress: Callable[[float], None] | None = None,
    cpu_share: float = LEARNER_CPU_SHARE,
) -> RunResult:
    """Fly ``scenario`` with ``method`` on a plant seeded with ``seed``, on the flight side
    ``fly`` builds (see the module docstring for the update timing; ``update_delay_s=None``
    charges each update its CPU time divided by ``cpu_share``)."""
    if not 0.0 < cpu_share <= 1.0:
        raise ValueError(f"cpu_share must be within (0, 1], got {cpu_share}")
    start = time.perf_counter()
    bundle = method.start(seed)
    flight = fly(method, scenario, bundle, seed, plant_config)
    n_batches = math.ceil(scenario.duration_s / INGEST_PERIOD_S - 1e-9)
    batches: list[TickRecords] = []
    updates: list[UpdateMarker] = []
    pending: tuple[float, Bundle | None] | None = None  # (flies from, bundle or rejected)
    final = bundle
    for batch in range(1, n_batches + 1):
        now_s = min(batch * INGEST_PERIOD_S, scenario.duration_s)
        flown = []
        if pending is not None and pending[0] < now_s - 1e-9:
            flown.append(flight.fly_until(pending[0]))
            if pending[1] is not None:
                flight.use(pending[1])
                final = pending[1]
            pending = None
        flown.append(flight.fly_until(now_s))
        records = TickRecords.concat(flown)
        batches.append(records)
        method.ingest(records)
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
        last_batch = batch == n_batches  # an update started now could never fly
        if pending is None and not last_batch and method.should_update(now_s):
            marker, new_bundle = _run_update(method, now_s, update_delay_s, cpu_share)
            updates.append(marker)
            pending = (marker.applied_s, new_bundle)
        if progress is not None:
            progress(now_s / scenario.duration_s)
    trace = flight.trace()
    return RunResult(
        method=method.name,
        scenario=scenario.name,
        seed=seed,
        time_s=trace.time_s,
        error_m=trace.error_m,
        condition=trace.condition,
        crashed=trace.crashed,
        updates=updates,
        records=TickRecords.concat(batches),
        final_bundle=final,
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
