"""Disturbance observer: the force the prior does not explain and the body-rate offset a
torque leaves under the onboard rate loop, estimated every tick.

Every tick the observer compares the measured velocity change with the one the prior
(:class:`~vnd_core.dynamics.NominalModel`) predicts for the command the motors were actually
producing, and low-pass filters the difference into an external acceleration estimate (world
frame, m/s^2). The command delay is handled explicitly: the command that acts during a tick is
the one sent ``latency_s`` earlier (interpolated between ticks), passed through the vehicle's
first-order motor lag on thrust (its ``motor_time_constant_s``).

Everything the prior does not model (wind drag, the vehicle's own drag, a payload, a weak
rotor's lost thrust) lands in the estimate, lumped into one force. Two users:

- the disturbance-observer baseline of ``vnd eval``;
- a VND policy with a force input (``PolicyConfig.force_dim``): the force answers at once
  whatever the vehicle meets, a condition the model has not learned yet included, and z tells
  the policy which condition it is (how the force will change as the vehicle flies).

Such a policy trains reading what this observer reads: in its training roll-outs the force
the prior does not explain, tick by tick, filtered with the same time constant
(:class:`~vnd_core.rollout.ForceReading`), while z tells it which condition it flies. The
observer therefore predicts with the prior alone, a bundle with a learned model included: the
force it reads carries the swing of a wind's drag with the vehicle's velocity, which a policy
reading only the model's force at hover has to infer from z and does not (measured in
docs/decisions.md).

A torque (an offset centre of mass, a weak rotor) is not a force: under the vehicle's
proportional rate loop it leaves a steady body-rate offset, the vehicle turning at the command
plus the torque's angular acceleration over the loop's gain. The observer models that loop as
the vehicle describes it (``rate_gain_p`` per axis, driving the motors' first-order lag) and
filters what the measured body rates do beyond it into that offset (:attr:`rate_offset_radps`,
body frame). :meth:`compensate` subtracts it from a command's body rates before the command is
sent, so the vehicle turns at the rates the policy asked for: the moment half of an L1-style
augmentation, the integral action a proportional rate loop lacks. The estimate compares the
measured rates with the commands actually sent, so compensating does not feed back into it. A
flight controller whose rate loop integrates leaves no offset, and the estimate stays near
zero. The loop model is deliberately not the prior's single rate time constant: that lag
misses the motors' and turns every manoeuvre into a transient offset, and compensating that
noise costs tracking.

:meth:`compensate` also answers the vertical part of the estimate, measured where the vehicle
flies (:meth:`feedforward_force_n`): it adds the thrust whose vertical share cancels it
(:func:`thrust_feedforward_n`), the force half of the augmentation. A payload's weight or a
weak rotor's lost lift is then held exactly, as integral action holds it, where a policy
reading the force answers a weight beyond the forces it trained on short of fully and sags. A
policy flown this way reads only the horizontal part of the estimate (:meth:`policy_force_n`),
which it answers by tilting. The vertical force is
measured at the operating point rather than taken from a learned model: the model's force at a
level hover is a reference point off the attitudes a wind is flown at (its vertical part there
is not the vertical force the vehicle meets), and a policy left to answer a learned weight
through z holds it no better than a policy without integral action. Its training applies the
same feed-forward to its roll-outs: the vertical force the residual adds at each state is
cancelled by thrust along body z (:func:`with_vertical_fed_forward`), an external force's by
:func:`with_thrust_feedforward`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from vnd_core.dynamics import NominalModel
from vnd_core.so3 import body_z_axis
from vnd_core.state import OMEGA, RATES, THRUST, VEL, hover_state
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.features import RES_OMEGA, RES_POS, RES_ROT, RES_VEL

if TYPE_CHECKING:
    from vnd_core.vnd.model import VNDModel


@dataclass(frozen=True)
class ObserverConfig:
    """Settings of the force observer."""

    time_constant_s: float = 0.3  # first-order low-pass filter of the raw estimate
    latency_s: float = 0.03  # command to motors (the flight stack's measured latency)
    accel_limit_mps2: float = 4.0  # the estimate is clipped to this norm (m/s^2)
    warmup_ticks: int = 5  # ticks before the first estimate (zero until then)
    motor_time_constant_s: float | None = None  # thrust lag assumed; None: the vehicle's
    rate_time_constant_s: float = 0.3  # first-order low-pass filter of the raw rate offset
    rate_offset_limit_radps: float = 2.0  # the rate offset is clipped to this norm (rad/s)
    rate_substeps: int = 8  # integration steps of the rate-loop model per tick

    def validate(self) -> None:
        """Raise ValueError naming the first impossible field."""
        if not self.time_constant_s > 0:
            raise ValueError(f"time_constant_s must be > 0, got {self.time_constant_s}")
        if not 0 <= self.latency_s <= 0.2:
            raise ValueError(f"latency_s must be within [0, 0.2] s, got {self.latency_s}")
        if not self.accel_limit_mps2 > 0:
            raise ValueError(f"accel_limit_mps2 must be > 0, got {self.accel_limit_mps2}")
        if not self.rate_time_constant_s > 0:
            raise ValueError(f"rate_time_constant_s must be > 0, got {self.rate_time_constant_s}")
        if not self.rate_offset_limit_radps >= 0:
            raise ValueError(
                f"rate_offset_limit_radps must be >= 0, got {self.rate_offset_limit_radps}"
            )
        if not self.rate_substeps >= 1:
            raise ValueError(f"rate_substeps must be >= 1, got {self.rate_substeps}")
        if self.motor_time_constant_s is not None and not self.motor_time_constant_s >= 0:
            raise ValueError(
                f"motor_time_constant_s must be >= 0 or None, got {self.motor_time_constant_s}"
            )


class ForceObserver:
    """Per-flight disturbance estimator (see the module docstring).

    Call :meth:`observe` with each measurement (13,) and :meth:`command` with each command (4,)
    sent after it; :attr:`estimate_mps2` (3,) is the filtered external acceleration (world),
    :meth:`force_n` the force (nominal mass times it) and :attr:`rate_offset_radps` (3,) the
    body-rate offset a torque leaves (body frame), which :meth:`compensate` removes from a
    command.
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
        self._estimate_mps2 = np.zeros(3)  # filtered and clipped
        self._rate_loop = RateLoopModel(vehicle, tau_s, self.dt_s, self.config.rate_substeps)
        self._rate_alpha = 1.0 - math.exp(-self.dt_s / self.config.rate_time_constant_s)
        self.rate_offset_radps = np.zeros(3)  # filtered and clipped, body frame

    @property
    def estimate_mps2(self) -> np.ndarray:
        """The external acceleration (3,) in m/s^2, world frame, clipped to the limit."""
        return self._estimate_mps2

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
        previous, action = self._previous or (None, None)
        if previous is not None and action is not None:
            with torch.no_grad():
                predicted = self.prior(
                    torch.from_numpy(previous)[None], torch.from_numpy(action)[None]
                )[0, VEL].numpy()
            raw = (measured[VEL] - predicted) / self.dt_s
            self._ticks += 1
            self._observe_rates(previous, action, measured)
            if self._ticks >= self.config.warmup_ticks and np.isfinite(raw).all():
                self._estimate_mps2 = self._filtered(self._estimate_mps2, raw)
        self._previous = (measured, None)
        return self.estimate_mps2

    def _filtered(self, filtered: np.ndarray, raw: np.ndarray) -> np.ndarray:
        """``filtered`` (3,) one low-pass step towards ``raw`` (3,), clipped to the limit."""
        updated = filtered + self._alpha * (raw - filtered)
        norm = float(np.linalg.norm(updated))
        limit = self.config.accel_limit_mps2
        return updated * (limit / norm) if norm > limit else updated

    def _observe_rates(
        self, previous: np.ndarray, action: np.ndarray, measured: np.ndarray
    ) -> None:
        """Filter the body-rate offset of the tick from ``previous`` (13,) under the acting
        ``action`` (4,) to ``measured`` (13,) (module docstring)."""
        raw = self._rate_loop.offset_radps(previous[OMEGA], action[RATES], measured[OMEGA])
        if self._ticks < self.config.warmup_ticks or not np.isfinite(raw).all():
            return
        offset = self.rate_offset_radps + self._rate_alpha * (raw - self.rate_offset_radps)
        norm = float(np.linalg.norm(offset))
        limit = self.config.rate_offset_limit_radps
        self.rate_offset_radps = offset * (limit / norm) if norm > limit else offset

    def compensate(self, action: np.ndarray, quat: np.ndarray) -> np.ndarray:
        """The command to send (4,), float64, for the policy's ``action`` (4,) at attitude
        ``quat`` (4, w x y z, the state the policy read): its thrust plus the feed-forward of
        the vertical force the prior does not explain (:meth:`feedforward_force_n`,
        :func:`thrust_feedforward_n`) within the vehicle's thrust range, its body rates less
        the rate offset (module docstring). Feed the result to :meth:`command`."""
        sent = np.array(action, dtype=np.float64)
        # thrust_feedforward_n in scalar arithmetic: this runs in every control tick, where
        # the torch version's small-tensor overhead costs more than the policy's inference
        _, qx, qy, _ = (float(q) for q in quat)
        upright = max(1.0 - 2.0 * (qx * qx + qy * qy), FEEDFORWARD_MIN_UPRIGHT)
        feedforward_n = -float(self.feedforward_force_n()[2]) / upright
        low, high = self.vehicle.thrust_min_n, self.vehicle.thrust_max_n
        sent[THRUST] = np.clip(sent[THRUST] + feedforward_n, low, high)
        sent[RATES] -= self.rate_offset_radps
        return sent

    def command(self, action: np.ndarray) -> None:
        """The command (4,) sent in answer to the last measurement (or, after
        :meth:`interrupt`, without one: it only joins the command history)."""
        self._commands = [np.asarray(action, dtype=np.float64), *self._commands[:-1]]
        acting = self._acting_command()
        if self._previous is not None:
            self._previous = (self._previous[0], acting)

    def interrupt(self) -> None:
        """The measurement stream skipped a tick (a command went out without a new
        measurement): the next measurement starts a new pair instead of being compared across
        two ticks. The estimate is kept."""
        self._previous = None

    def force_n(self) -> np.ndarray:
        """The estimated external force (3,) in newtons: nominal mass times the estimate."""
        return self.vehicle.mass_kg * self.estimate_mps2

    def feedforward_force_n(self) -> np.ndarray:
        """The force (3,) in newtons :meth:`compensate` feeds the vertical part of forward: the
        estimate's (:meth:`force_n`)."""
        return self.force_n()

    def policy_force_n(self) -> np.ndarray:
        """The force (3,) in newtons a policy flown with :meth:`compensate` reads: the
        estimate's horizontal part (:func:`left_to_policy_n`)."""
        return self.force_n() * np.array(HORIZONTAL)


class RateLoopModel:
    """The vehicle's onboard body-rate loop as the observer models it: a proportional loop of
    gain ``rate_gain_p`` (1/s, angular acceleration per rad/s of error) whose angular
    acceleration reaches the airframe through the motors' first-order lag.

    :meth:`offset_radps` predicts one tick from a measured rate and reads how far the next
    measured rate is beyond the prediction as a constant disturbing angular acceleration,
    returned as the steady rate offset it leaves (it over the gain). Within a tick the loop
    already answers a disturbance, so a constant one moves the rate by less than its
    acceleration times the tick (``sensitivity_s``, per axis). The lagged acceleration is the
    model's own state, carried from tick to tick along the measured rates."""

    def __init__(
        self, vehicle: VehicleParams, motor_tau_s: float, dt_s: float, substeps: int
    ) -> None:
        self.gain = np.array(vehicle.rate_gain_p, dtype=np.float64)  # (3,) 1/s
        self.h_s = dt_s / substeps
        self.substeps = substeps
        self._lag = self.h_s / motor_tau_s if motor_tau_s > 0 else 1.0
        # the rate change (s, per axis) one tick of a unit disturbance makes from rest
        self.sensitivity_s, _ = self._tick(np.zeros(3), np.zeros(3), np.zeros(3), np.ones(3))
        self.accel_radps2 = np.zeros(3)  # what the motors produce now

    def _tick(
        self, rates: np.ndarray, accel: np.ndarray, command: np.ndarray, disturbance: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rates, motor acceleration) (3,) each after one tick."""
        for _ in range(self.substeps):
            accel = accel + self._lag * (self.gain * (command - rates) - accel)
            rates = rates + self.h_s * (accel + disturbance)
        return rates, accel

    def offset_radps(
        self, rates_radps: np.ndarray, command_radps: np.ndarray, measured_radps: np.ndarray
    ) -> np.ndarray:
        """The raw offset (3,): ``measured_radps`` (3,) against the model's prediction from
        ``rates_radps`` (3,) one tick earlier under ``command_radps`` (3,) (class docstring)."""
        predicted, _ = self._tick(rates_radps, self.accel_radps2, command_radps, np.zeros(3))
        self._follow(rates_radps, measured_radps, command_radps)
        return (measured_radps - predicted) / (self.sensitivity_s * self.gain)

    def _follow(self, start: np.ndarray, end: np.ndarray, command: np.ndarray) -> None:
        """Carry the motor acceleration over the tick along the rates measured (from ``start``
        to ``end``, (3,) each, linearly): the motors answered the rates the vehicle had, not
        the prediction, and a state carried along the prediction settles short of the loop's
        true output under a steady offset."""
        accel = self.accel_radps2
        for k in range(1, self.substeps + 1):
            rates = start + (k / self.substeps) * (end - start)
            accel = accel + self._lag * (self.gain * (command - rates) - accel)
        self.accel_radps2 = accel


def observer_limit_n(vehicle: VehicleParams, config: ObserverConfig | None = None) -> float:
    """The largest force (N) the observer reports: its acceleration clip times the nominal
    mass (what a policy with a force input can read)."""
    return (config or ObserverConfig()).accel_limit_mps2 * vehicle.mass_kg


def clip_to_observer(force_n: torch.Tensor, limit_n: float) -> torch.Tensor:
    """Forces (..., 3) in newtons as the observer reports them: scaled down to a norm of at
    most ``limit_n``, direction kept."""
    norm = force_n.norm(dim=-1, keepdim=True).clamp_min(1e-9)
    return force_n * (limit_n / norm).clamp(max=1.0)


FEEDFORWARD_MIN_UPRIGHT = 0.5  # body z's vertical share below which the feed-forward stops growing


def thrust_feedforward_n(force_n: torch.Tensor, quat: torch.Tensor) -> torch.Tensor:
    """The collective thrust (..., 1) in newtons whose vertical component cancels the vertical
    component of an external force ``force_n`` (..., 3, world frame) at attitude ``quat``
    (..., 4): what :meth:`ForceObserver.compensate` adds to a command, and what a training
    roll-out of a policy flown with that compensation adds to its actions. Only the vertical
    part is fed forward: a payload's weight or a weak rotor's lost lift is answered exactly,
    while a horizontal push stays the policy's to answer by tilting, as it trained to."""
    upright = body_z_axis(quat)[..., 2:3].clamp_min(FEEDFORWARD_MIN_UPRIGHT)
    return -force_n[..., 2:3] / upright


HORIZONTAL = (1.0, 1.0, 0.0)  # the force components a feed-forward policy reads (world x, y)


def left_to_policy_n(force_n: torch.Tensor) -> torch.Tensor:
    """The part of external forces (..., 3) in newtons left for a policy flown with the thrust
    feed-forward to answer, as it reads it: the horizontal part, vertical zeroed (the
    feed-forward answers the vertical one, :func:`thrust_feedforward_n`)."""
    return force_n * force_n.new_tensor(HORIZONTAL)


def with_thrust_feedforward(
    action: torch.Tensor, force_n: torch.Tensor, quat: torch.Tensor, vehicle: VehicleParams
) -> torch.Tensor:
    """``action`` (B, 4) with :func:`thrust_feedforward_n` of ``force_n`` (B, 3) at ``quat``
    (B, 4) added to its thrust, within the vehicle's thrust range (the training side of
    :meth:`ForceObserver.compensate`; the rate offset has no counterpart in training)."""
    thrust = action[:, THRUST] + thrust_feedforward_n(force_n, quat)
    thrust = thrust.clamp(vehicle.thrust_min_n, vehicle.thrust_max_n)
    return torch.cat([thrust, action[:, RATES]], dim=1)


def with_vertical_fed_forward(residual: torch.Tensor, quat: torch.Tensor) -> torch.Tensor:
    """A learned residual (..., 12) as a training roll-out of a policy flown with
    :meth:`ForceObserver.compensate` meets it at attitude ``quat`` (..., 4): its position and
    velocity changes plus those of the thrust feed-forward that cancels their vertical part
    (:func:`thrust_feedforward_n`) acting along body z. The vertical part is cancelled while
    body z is at least ``FEEDFORWARD_MIN_UPRIGHT`` upright, and the thrust's horizontal share
    is added. Rotation and body rates pass unchanged. The observer's filter, the thrust range
    and the motor lag are not modelled: the cancellation is the feed-forward settled."""
    axis = body_z_axis(quat)
    along = axis / axis[..., 2:3].clamp_min(FEEDFORWARD_MIN_UPRIGHT)  # thrust per unit lift
    position = residual[..., RES_POS]
    velocity = residual[..., RES_VEL]
    return torch.cat(
        [
            position - position[..., 2:3] * along,
            residual[..., RES_ROT],
            velocity - velocity[..., 2:3] * along,
            residual[..., RES_OMEGA],
        ],
        dim=-1,
    )


@torch.no_grad()
def model_hover_force_n(model: VNDModel, z: torch.Tensor) -> torch.Tensor:
    """The force (B, 3) in newtons the learned ``model`` adds at hover (level, at rest, hover
    thrust) under latents ``z`` (B, nz): the residual as the bundle stores it, without the
    band of the replay that training holds the residual's inputs to. What an observer settled
    at hover in the condition reads of the model's part."""
    batch = z.shape[0]
    state = hover_state((batch,))
    action = torch.tensor([model.vehicle.hover_thrust_n, 0.0, 0.0, 0.0]).expand(batch, -1)
    dv = model.residual_correction(state, action, z)[:, RES_VEL]
    return model.vehicle.mass_kg * dv / model.prior.config.dt_s
