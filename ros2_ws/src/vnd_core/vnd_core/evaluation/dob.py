"""The disturbance-observer baseline of ``vnd eval`` (dob): L1-style augmentation of the base
policy with an online estimate of the external force, no learning in flight.

Observer (:class:`DisturbanceObserver`): every tick it compares the measured velocity change
with the one the prior (:class:`~vnd_core.dynamics.NominalModel`) predicts for the command the
motors were actually producing, and low-pass filters the difference into an external
acceleration estimate (world frame, m/s^2). The command delay is handled explicitly: the
command that acts during a tick is the one sent ``latency_s`` earlier (interpolated between
ticks), passed through the vehicle's first-order motor lag on thrust (its
``motor_time_constant_s``). Everything the prior does not model (wind drag, the vehicle's own
drag, a payload, a weak rotor's lost thrust) lands in the estimate, lumped into one force.

Feed-forward: what a practitioner does with a learned CTBR policy is to give it the force as
an input. The dob policy is the base policy fine-tuned (dr's trainer budget, warm start) in
the external-force simulation (:class:`~vnd_core.evaluation.baselines.ExternalForcePrior`,
:meth:`RandomisationConfig.observer_feedforward`) with the true episode force as its z
(slots 0-2, newtons / ``FORCE_SCALE_N``); in flight the observer's estimate times the nominal
mass takes that place. Nothing is learned in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from vnd_core.bundle import Bundle
from vnd_core.dynamics import NominalModel
from vnd_core.evaluation.baselines import DISTURBANCE_DIM, FORCE, FORCE_SCALE_N
from vnd_core.evaluation.continual_loop import LATENT_ONLINE, LatentSource, Method
from vnd_core.state import VEL
from vnd_core.vehicle import VehicleParams


@dataclass(frozen=True)
class ObserverConfig:
    """Settings of the disturbance observer."""

    time_constant_s: float = 0.3  # first-order low-pass filter of the raw estimate
    latency_s: float = 0.03  # command to motors (the flight stack's measured latency)
    accel_limit_mps2: float = 4.0  # the estimate is clipped to this norm (m/s^2)
    warmup_ticks: int = 5  # ticks before the first estimate (z = 0 until then)
    motor_time_constant_s: float | None = None  # thrust lag assumed; None: the vehicle's

    def validate(self) -> None:
        """Raise ValueError naming the first impossible field."""
        if not self.time_constant_s > 0:
            raise ValueError(f"time_constant_s must be > 0, got {self.time_constant_s}")
        if not 0 <= self.latency_s <= 0.2:
            raise ValueError(f"latency_s must be within [0, 0.2] s, got {self.latency_s}")
        if not self.accel_limit_mps2 > 0:
            raise ValueError(f"accel_limit_mps2 must be > 0, got {self.accel_limit_mps2}")
        if self.motor_time_constant_s is not None and not self.motor_time_constant_s >= 0:
            raise ValueError(
                f"motor_time_constant_s must be >= 0 or None, got {self.motor_time_constant_s}"
            )


class DisturbanceObserver:
    """Per-run external-acceleration estimator (see the module docstring).

    Call :meth:`observe` with each measurement (13,) and :meth:`command` with each command (4,)
    sent after it; :attr:`estimate_mps2` (3,) is the filtered external acceleration (world).
    """

    def __init__(self, vehicle: VehicleParams, config: ObserverConfig | None = None) -> None:
        self.config = config or ObserverConfig()
        self.config.validate()
        self.vehicle = vehicle
        self.prior = NominalModel(vehicle)
        self.dt_s = self.prior.config.dt_s
        self._alpha = 1.0 - math.exp(-self.dt_s / self.config.time_constant_s)
        tau_s = self.config.motor_time_constant_s
        tau_s = vehicle.motor_time_constant_s if tau_s is None else tau_s
        self._motor_alpha = 1.0 - math.exp(-self.dt_s / tau_s) if tau_s > 0 else 1.0
        delay_ticks = self.config.latency_s / self.dt_s
        self._delay_whole = math.floor(delay_ticks)
        self._delay_frac = delay_ticks - self._delay_whole
        hover = np.array([vehicle.hover_thrust_n, 0.0, 0.0, 0.0])
        self._commands = [hover.copy() for _ in range(self._delay_whole + 2)]  # newest first
        self._thrust_n = vehicle.hover_thrust_n
        # the last measurement and the command acting after it (None until it is sent)
        self._previous: tuple[np.ndarray, np.ndarray | None] | None = None
        self._ticks = 0
        self.estimate_mps2 = np.zeros(3)

    def _acting_command(self) -> np.ndarray:
        """Command (4,) the motors produce during the tick that starts now: the command sent
        ``latency_s`` ago (interpolated), thrust through the motor lag."""
        whole, frac = self._delay_whole, self._delay_frac
        # the newest entry is the command sent at this tick; delayed by whole + frac ticks
        delayed = (1.0 - frac) * self._commands[whole] + frac * self._commands[whole + 1]
        self._thrust_n += self._motor_alpha * (delayed[0] - self._thrust_n)
        return np.array([self._thrust_n, *delayed[1:]])

    def observe(self, measured: np.ndarray) -> np.ndarray:
        """Update with the measurement ``measured`` (13,) taken now; the estimate (3,)."""
        measured = np.asarray(measured, dtype=np.float64)
        if self._previous is not None and self._previous[1] is not None:
            previous, action = self._previous
            with torch.no_grad():
                predicted = self.prior(
                    torch.from_numpy(previous)[None], torch.from_numpy(action)[None]
                )[0, VEL].numpy()
            raw = (measured[VEL] - predicted) / self.dt_s
            self._ticks += 1
            if self._ticks >= self.config.warmup_ticks:
                self.estimate_mps2 = self.estimate_mps2 + self._alpha * (raw - self.estimate_mps2)
                norm = float(np.linalg.norm(self.estimate_mps2))
                if norm > self.config.accel_limit_mps2:
                    self.estimate_mps2 = self.estimate_mps2 * (self.config.accel_limit_mps2 / norm)
        self._previous = (measured, None)
        return self.estimate_mps2

    def command(self, action: np.ndarray) -> None:
        """The command (4,) sent in answer to the last measurement."""
        if self._previous is None:
            raise RuntimeError("command() before the first observe()")
        self._commands = [np.asarray(action, dtype=np.float64), *self._commands[:-1]]
        self._previous = (self._previous[0], self._acting_command())

    def latent(self) -> np.ndarray:
        """The dob policy's z (8,): the estimated external force (nominal mass times the
        acceleration estimate) in units of ``FORCE_SCALE_N`` in slots 0-2, zeros elsewhere."""
        z = np.zeros(DISTURBANCE_DIM, dtype=np.float32)
        z[FORCE] = self.vehicle.mass_kg * self.estimate_mps2 / FORCE_SCALE_N
        return z


class _ObserverSource(LatentSource):
    """The observer as a per-run latent source of the continual loop."""

    def __init__(self, vehicle: VehicleParams, config: ObserverConfig) -> None:
        self.observer = DisturbanceObserver(vehicle, config)

    def latent(self, stamp_ns: int, measured: np.ndarray) -> np.ndarray:
        """z of the force estimate after this measurement."""
        self.observer.observe(measured)
        return self.observer.latent()

    def command(self, stamp_ns: int, action: np.ndarray) -> None:
        """Into the observer's command history."""
        self.observer.command(action)


class DOBMethod(Method):
    """dob: the force-conditioned policy of ``bundle`` fed by a fresh
    :class:`DisturbanceObserver` in every run; no learner."""

    def __init__(self, bundle: Bundle, config: ObserverConfig | None = None) -> None:
        super().__init__("dob", bundle, LATENT_ONLINE)
        self.config = config or ObserverConfig()
        self.config.validate()

    def latent_source(self) -> LatentSource:
        """A fresh observer (no estimate carried over between runs)."""
        return _ObserverSource(self.initial.vehicle, self.config)
