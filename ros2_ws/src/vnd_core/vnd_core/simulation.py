"""The true plant stepped in (scaled) real time: what the simulated-vehicle node wraps.

:class:`SimulatedVehicle` owns one :class:`~vnd_core.plant.TruePlant` and maps simulated time onto
a clock the caller supplies in nanoseconds (the node clock), so it stays middleware-free:

- Until it starts, the vehicle sits "on a stand" at the scenario's start point: nothing is
  integrated, scenario time is 0, and motion-capture samples of the resting vehicle still come
  out at the pose rate, so the estimator and controllers can spin up before anything moves.
- It starts at the first valid command (or, with ``start_on_command`` off, at the first
  :meth:`SimulatedVehicle.advance_to`). From then on, clock time ``t`` corresponds to simulated
  time ``(t - start) * real_time_factor``. Every advance integrates up to that absolute target,
  so timer jitter never accumulates into drift. A stall longer than ``max_catch_up_s`` (of
  simulated time) is not caught up in one burst: the mapping slips by the excess (counted in
  ``slipped_s``), as a real-time simulator on a loaded machine must.
- Motion-capture samples are taken on an exact grid of simulated time (``pose_rate_hz``); each
  carries its stamp on the caller's clock, ``start + time / real_time_factor``.
- After ``scenario.duration_s`` the vehicle keeps flying with the last condition (no further
  events exist) and :attr:`SimulatedVehicle.condition` reads :data:`CONDITION_DONE`.

Commands go through :meth:`TruePlant.set_command`, so the plant's own latency applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from vnd_core.plant import TruePlant
from vnd_core.plant_parts import PlantConfig
from vnd_core.scenario import Scenario
from vnd_core.state import ACTION_DIM
from vnd_core.units import NS_PER_S
from vnd_core.vehicle import VehicleParams

CONDITION_WAITING = "waiting"  # condition name before scenario time starts
CONDITION_DONE = "done"  # condition name once the scenario's duration is over


@dataclass(frozen=True)
class SimulationConfig:
    """How simulated time is paced and sampled (the plant itself is a PlantConfig)."""

    pose_rate_hz: float = 100.0  # mocap sample rate in simulated time; divides physics_rate_hz
    real_time_factor: float = 1.0  # simulated seconds per clock second (> 1: faster than real)
    start_on_command: bool = True  # scenario time starts at the first valid command, else at once
    match_start_velocity: bool = False  # start moving with the reference, not at rest
    max_catch_up_s: float = 0.25  # most simulated time one advance integrates; more slips

    def validate(self, physics_rate_hz: float) -> None:
        """Raise ValueError naming the first invalid field."""
        if not self.real_time_factor > 0:
            raise ValueError(f"real_time_factor must be > 0, got {self.real_time_factor}")
        if not 0 < self.pose_rate_hz <= physics_rate_hz:
            raise ValueError(
                f"pose_rate_hz must be within (0, physics_rate_hz={physics_rate_hz}], "
                f"got {self.pose_rate_hz}"
            )
        ratio = physics_rate_hz / self.pose_rate_hz
        if abs(ratio - round(ratio)) > 1e-9:
            raise ValueError(
                f"pose_rate_hz={self.pose_rate_hz} must divide physics_rate_hz={physics_rate_hz}"
            )
        if not self.max_catch_up_s > 0:
            raise ValueError(f"max_catch_up_s must be > 0, got {self.max_catch_up_s}")


@dataclass(frozen=True)
class SimSample:
    """One motion-capture sample of the simulated vehicle, with the ground truth behind it."""

    stamp_ns: int  # measurement time on the caller's clock [ns]
    time_s: float  # scenario time of the measurement (0 before the start) [s]
    measured: np.ndarray  # (13,) noisy state as motion capture sees it (pose part is used)
    truth: np.ndarray  # (13,) true state (p, q wxyz, v world, omega body)
    disturbance_n: np.ndarray  # (3,) true external force, world frame [N]
    condition: str  # waiting, the scenario phase name, or done
    crashed: bool  # the plant flagged a crash (sticky; the vehicle is held where it crashed)


class SimulatedVehicle:
    """One true-plant vehicle paced by an external clock; see the module docstring."""

    def __init__(
        self,
        vehicle: VehicleParams,
        scenario: Scenario,
        config: SimulationConfig | None = None,
        plant_config: PlantConfig | None = None,
        seed: int = 0,
    ) -> None:
        self.scenario = scenario
        self.config = config or SimulationConfig()
        self.plant = TruePlant(vehicle, scenario, batch_size=1, config=plant_config, seed=seed)
        physics_rate_hz = self.plant.config.physics_rate_hz
        self.config.validate(physics_rate_hz)
        self.plant.reset(scenario.start_state(1, match_velocity=self.config.match_start_velocity))
        self._physics_rate_hz = physics_rate_hz
        self._steps_per_sample = round(physics_rate_hz / self.config.pose_rate_hz)
        self._max_catch_up_steps = max(1, round(self.config.max_catch_up_s * physics_rate_hz))
        self._start_ns: int | None = None  # clock time of scenario time 0
        self._step = 0  # physics steps integrated since the start
        self._next_sample_step = 0  # physics step of the next mocap sample after the start
        self._next_stand_ns: int | None = None  # clock time of the next sample before the start
        self._last_stamp_ns = -1  # stamps strictly increase
        self.slipped_s = 0.0  # clock time the mapping slipped after stalls [s]
        self.commands_applied = 0  # valid commands handed to the plant

    # ------------------------------------------------------------------------------ state

    @property
    def started(self) -> bool:
        """True once scenario time runs."""
        return self._start_ns is not None

    @property
    def start_ns(self) -> int | None:
        """Clock time [ns] of scenario time 0 (None before the start)."""
        return self._start_ns

    @property
    def time_s(self) -> float:
        """Scenario time integrated so far [s] (0 before the start)."""
        return self._step / self._physics_rate_hz

    @property
    def done(self) -> bool:
        """True once the scenario's duration is over (the vehicle keeps flying)."""
        return self.started and self.time_s >= self.scenario.duration_s - 1e-9

    @property
    def condition(self) -> str:
        """``waiting`` before the start, the active scenario phase, then ``done``."""
        if not self.started:
            return CONDITION_WAITING
        return CONDITION_DONE if self.done else self.plant.condition()

    def next_sample_ns(self, now_ns: int) -> int:
        """Clock time [ns] at which :meth:`advance_to` returns the next mocap sample: a pacing
        node sleeps until then instead of polling (``now_ns`` when one is already due, and
        before the first stand sample)."""
        if not self.started and self.config.start_on_command:
            due = self._next_stand_ns
        elif self.started:
            due = self._stamp_of_step(self._next_sample_step)
        else:  # starts at the next advance_to
            due = None
        return now_ns if due is None else max(due, now_ns)

    # ---------------------------------------------------------------------------- inputs

    def start(self, now_ns: int) -> None:
        """Start scenario time at clock time ``now_ns`` (no effect when already started)."""
        if self.started:
            return
        self._start_ns = now_ns
        # The first sample at time 0 would repeat a stand sample's stamp; skip to the next one.
        self._next_sample_step = 0 if self._last_stamp_ns < now_ns else self._steps_per_sample

    def command(self, action: np.ndarray, now_ns: int) -> bool:
        """Hand a CTBR command (4,) [N, rad/s FLU] to the plant at clock time ``now_ns``.

        Call :meth:`advance_to` with ``now_ns`` first so the command takes effect at the right
        simulated moment. Starts scenario time if it has not started. Returns False (and
        changes nothing) for a non-finite or malformed command.
        """
        action = np.asarray(action, dtype=float)
        if action.shape != (ACTION_DIM,) or not np.isfinite(action).all():
            return False
        self.start(now_ns)
        self.plant.set_command(torch.from_numpy(action))
        self.commands_applied += 1
        return True

    def advance_to(self, now_ns: int) -> list[SimSample]:
        """Integrate up to clock time ``now_ns``; returns the mocap samples due by then.

        Before the start (and with ``start_on_command``) nothing moves and at most one sample
        of the resting vehicle is returned per pose period.
        """
        if not self.started and not self.config.start_on_command:
            self.start(now_ns)
        if not self.started:
            return self._stand_samples(now_ns)
        samples = []
        target_step = self._target_step(now_ns)
        while self._next_sample_step <= target_step:
            self._advance_steps(self._next_sample_step - self._step)
            samples.append(self._sample(self._stamp_of_step(self._step)))
            self._next_sample_step += self._steps_per_sample
        self._advance_steps(target_step - self._step)
        return samples

    # --------------------------------------------------------------------------- helpers

    def _target_step(self, now_ns: int) -> int:
        """Physics step that clock time ``now_ns`` corresponds to, after slipping a stall."""
        assert self._start_ns is not None
        elapsed_sim_s = (now_ns - self._start_ns) / NS_PER_S * self.config.real_time_factor
        target = math.floor(elapsed_sim_s * self._physics_rate_hz + 1e-6)
        excess = target - self._step - self._max_catch_up_steps
        if excess > 0:
            slip_s = excess / self._physics_rate_hz / self.config.real_time_factor
            self._start_ns += round(slip_s * NS_PER_S)
            self.slipped_s += slip_s
            target -= excess
        return max(target, self._step)

    def _stamp_of_step(self, step: int) -> int:
        """Clock time [ns] of physics step ``step`` after the start."""
        assert self._start_ns is not None
        sim_s = step / self._physics_rate_hz
        return self._start_ns + round(sim_s / self.config.real_time_factor * NS_PER_S)

    def _advance_steps(self, steps: int) -> None:
        if steps > 0:
            self.plant.advance(steps / self._physics_rate_hz)
            self._step += steps

    def _stand_samples(self, now_ns: int) -> list[SimSample]:
        """At most one sample of the vehicle at rest on its stand, on a clock-time grid."""
        period_ns = round(NS_PER_S / self.config.pose_rate_hz / self.config.real_time_factor)
        if self._next_stand_ns is None:
            self._next_stand_ns = now_ns
        if now_ns < self._next_stand_ns:
            return []
        stamp_ns = self._next_stand_ns
        missed = (now_ns - stamp_ns) // period_ns  # after a stall, skip rather than burst
        self._next_stand_ns = stamp_ns + (missed + 1) * period_ns
        return [self._sample(stamp_ns + missed * period_ns)]

    def _sample(self, stamp_ns: int) -> SimSample:
        self._last_stamp_ns = stamp_ns
        return SimSample(
            stamp_ns=stamp_ns,
            time_s=self.time_s,
            measured=self.plant.measure()[0].double().numpy(),
            truth=self.plant.state[0].double().numpy(),
            disturbance_n=self.plant.disturbance_force_n()[0].double().numpy(),
            condition=self.condition,
            crashed=bool(self.plant.crashed[0]),
        )
