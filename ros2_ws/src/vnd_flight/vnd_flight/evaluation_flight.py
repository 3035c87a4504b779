"""The flight side of ``vnd eval``: each method's run flown by the stack's flight runtime.

:func:`fly_runtime` is the :data:`~vnd_core.evaluation.continual_loop.FlightFactory` of
``vnd eval``. A run flies the loop of :mod:`vnd_flight.fault_flight` without a fault: the
simulated vehicle with its 100 Hz motion capture, the pose filter, the policy node's
controller (safety filter, force observer and rate compensation for a policy with a force
input) at the nodes' timing. Every method therefore measures the state as the stack does and
flies its commands as the stack sends them. A loop that measures white noise on the true
state misranks force-observer bundles against the stack (docs/decisions.md).

The policy's latent comes from the method's latent mode:

- encoder: the encoder node's logic on the active bundle's model
  (:class:`~vnd_flight.fault_flight.EncoderLatent`);
- oracle: the true disturbance of the plant at the tick (:class:`OracleLatent`);
- online: the method's own per-run estimator (:class:`OnlineLatent`, rma's module);
- none: z = 0.

The vehicle starts at the reference's start point and the policy node's controller takes over
as in flight, rejoining a moving reference (a figure-eight starts at full speed) within about
5 s. The trace the runs are scored on starts after that take-off (:data:`TAKE_OFF_S`, or at
the scenario's second phase if that is earlier): every method pays the same rejoin, which
would otherwise dominate the whole-run figures of the figure-eight scenarios (0.19 m RMSE in
their first 20 s). Every evaluation scenario flies calm for its first 10 s.

The records the learner gets are the policy node's tick records (the state the tick used, the
command sent, the mode, the versions), stamped in scenario time and labelled with the true
condition.
"""

from __future__ import annotations

import numpy as np
from vnd_core.bundle import Bundle
from vnd_core.evaluation.baselines import true_disturbance
from vnd_core.evaluation.continual_loop import (
    LATENT_ENCODER,
    LATENT_ONLINE,
    LATENT_ORACLE,
    FlownTrace,
    LatentSource,
    Method,
)
from vnd_core.learner import TickRecords
from vnd_core.plant_parts import PlantConfig
from vnd_core.scenario import Scenario
from vnd_core.simulation import SimulatedVehicle

from vnd_flight.controller import TickRecord
from vnd_flight.fault_flight import EncoderLatent, FaultFlight, LatentProvider, RuntimeLoop

TAKE_OFF_S = 5.0  # scenario time not scored: the controller's rejoin of a moving reference


class OracleLatent:
    """The true disturbance vector of the plant at the tick."""

    def __init__(self, sim: SimulatedVehicle, scenario: Scenario, bundle: Bundle) -> None:
        self.sim, self.scenario, self.vehicle = sim, scenario, bundle.vehicle

    def latent(self, now_ns: int, state: np.ndarray, stamp_ns: int) -> np.ndarray | None:
        """The vector for the plant's current wind and condition."""
        wind = self.sim.plant.wind_velocity_mps()[0].numpy()
        return true_disturbance(self.scenario, self.sim.time_s, wind, self.vehicle)

    def after_command(self, stamp_ns: int, state: np.ndarray, action: np.ndarray) -> None:
        """The oracle needs no history."""


class OnlineLatent:
    """A method's own estimator: it sees each tick's odometry and the command sent."""

    def __init__(self, source: LatentSource) -> None:
        self.source = source

    def latent(self, now_ns: int, state: np.ndarray, stamp_ns: int) -> np.ndarray | None:
        """The estimate after this tick's odometry."""
        return self.source.latent(stamp_ns, state)

    def after_command(self, stamp_ns: int, state: np.ndarray, action: np.ndarray) -> None:
        """Into the estimator's history."""
        self.source.command(stamp_ns, action)


class RuntimeSide:
    """One method's run on the flight runtime (a
    :class:`~vnd_core.evaluation.continual_loop.FlightSide`)."""

    def __init__(
        self,
        method: Method,
        scenario: Scenario,
        bundle: Bundle,
        seed: int,
        plant_config: PlantConfig | None = None,
    ) -> None:
        self.scenario = scenario
        self.loop = RuntimeLoop.on_scenario(
            bundle.vehicle,
            bundle,
            scenario,
            FaultFlight(fault="none", seed=seed),
            plant_config=plant_config,
        )
        self.encoder = EncoderLatent(bundle) if method.latent_mode == LATENT_ENCODER else None
        self.loop.latent = self._provider(method, bundle)
        self.loop.on_tick = self._record
        self._rows: list[tuple] = []

    def _provider(self, method: Method, bundle: Bundle) -> LatentProvider | None:
        if self.encoder is not None:
            return self.encoder
        if method.latent_mode == LATENT_ORACLE:
            return OracleLatent(self.loop.sim, self.scenario, bundle)
        if method.latent_mode == LATENT_ONLINE:
            return OnlineLatent(method.latent_source())
        return None

    def _record(self, record: TickRecord, stamp_ns: int) -> None:
        """Keep a tick flown after the start (the ticks on the stand carry no transition)."""
        sim = self.loop.sim
        if sim.start_ns is None:
            return
        self._rows.append(
            (
                stamp_ns - sim.start_ns,
                record.state,
                record.action,
                int(record.mode),
                record.policy_version,
                record.encoder_version if record.z_valid else 0,
                sim.condition,
            )
        )

    def fly_until(self, t_s: float) -> TickRecords:
        """Fly on to scenario time ``t_s``; the ticks flown since the last call."""
        self.loop.advance(t_s)
        rows, self._rows = self._rows, []
        if not rows:
            return TickRecords.empty(with_condition=True)
        stamp, state, action, mode, pv, ev, condition = zip(*rows, strict=True)
        return TickRecords(
            stamp_ns=np.array(stamp, dtype=np.int64),
            state=np.array(state),
            action=np.array(action),
            mode=np.array(mode, dtype=np.uint8),
            policy_version=np.array(pv, dtype=np.uint32),
            encoder_version=np.array(ev, dtype=np.uint32),
            condition=np.array(condition, dtype=np.str_),
        )

    def use(self, bundle: Bundle) -> None:
        """Fly ``bundle`` from the next tick on (its model encodes from then on)."""
        self.loop.use(bundle)
        if self.encoder is not None:
            self.encoder.use(bundle)

    def trace(self) -> FlownTrace:
        """The vehicle's samples after the take-off, against the scenario's reference."""
        phases = self.scenario.phases
        scored_from_s = min(TAKE_OFF_S, phases[1].start_s if len(phases) > 1 else TAKE_OFF_S)
        time_s, error_m = self.loop.tracking_error(self.scenario.reference)
        scored = time_s >= scored_from_s
        return FlownTrace(
            time_s=time_s[scored],
            error_m=error_m[scored],
            condition=np.array([self.scenario.phase_at(t) for t in time_s[scored]], dtype=np.str_),
            crashed=bool(self.loop.trace()["crashed"].any()),
        )


def fly_runtime(
    method: Method,
    scenario: Scenario,
    bundle: Bundle,
    seed: int,
    plant_config: PlantConfig | None = None,
) -> RuntimeSide:
    """The flight side of ``vnd eval`` for one run (a
    :data:`~vnd_core.evaluation.continual_loop.FlightFactory`)."""
    return RuntimeSide(method, scenario, bundle, seed, plant_config)
