"""Flying without odometry: where the vehicle is, from the last good odometry and every command
sent since.

When odometry stops, the last good sample is already about one odometry timeout old, and the
vehicle has flown that long on the commands the tick sent meanwhile (a policy tilting into a turn
keeps tilting). :class:`BlindEstimator` restarts from the last good odometry at its stamp and
replays every command the filter actually sent since, each from the moment it reached the
vehicle (``command_delay_s`` after it was sent) to the next, through the vehicle's rigid-body
model (thrust along body z, gravity) with its onboard rate loop (angular acceleration
``rate_gain_p`` times the rate error, through the motor lag ``motor_time_constant_s``; thrust
through the same lag) plus the external force estimated while odometry was good
(:class:`DisturbanceEstimator`: steady wind through the vehicle's drag law, and a vertical bias
for mass or thrust-curve error). Each later blind tick continues the prediction to the tick's
time.

Why the rate loop and not the prior's first-order rate lag: in CTBR flight the attitude is the
integral of the rates, and without odometry nothing corrects it. Replaying a hovering policy's
rate commands through the first-order lag left the predicted attitude a few degrees off the
true one, enough for a level-looking prediction to drift the real vehicle several metres during
a blind descent; the rate-loop model keeps the attitude error within a fraction of a degree.

Everything runs on plain floats: a torch step of the nominal model costs milliseconds on the
target CPU, and numpy's per-call cost exceeds the arithmetic on 3-vectors; replaying the
odometry timeout's worth of commands at the first blind tick stays well under a millisecond.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from vnd_core.state import GRAVITY_MPS2, STATE_DIM
from vnd_core.units import NS_PER_S
from vnd_core.vehicle import VehicleParams

Floats = Sequence[float] | np.ndarray  # a short vector: list, tuple or numpy array

_MAX_SUBSTEP_NS = 5_000_000  # the rate loop (50 ms) and tilt change stay accurate at 5 ms steps
RATE_SETTLE_S = 0.3  # replayed rate-loop history before a prediction starts (6 time constants)


@dataclass(frozen=True)
class BlindConfig:
    """Settings of :class:`BlindEstimator` and :class:`DisturbanceEstimator`."""

    command_delay_s: float = 0.032  # time from sending a command to the vehicle acting on it
    history_s: float = 1.0  # commands kept for replay (must exceed the odometry timeout)
    disturbance_time_constant_s: float = 1.5  # averaging time of the external-force estimate
    min_disturbance_mps2: float = 0.3  # a horizontal residual below this is noise: no wind
    max_wind_mps: float = 10.0  # the wind estimate is bounded to this speed
    max_bias_mps2: float = 3.0  # the vertical acceleration bias is bounded to this

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        for name, value in vars(self).items():
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if not self.disturbance_time_constant_s > 0:
            raise ValueError(
                f"disturbance_time_constant_s must be > 0, got {self.disturbance_time_constant_s}"
            )
        if self.history_s <= RATE_SETTLE_S:
            raise ValueError(f"history_s must exceed {RATE_SETTLE_S} s, got {self.history_s}")


class CommandHistory:
    """The commands sent, with their send times, for the last ``history_s``."""

    def __init__(self, history_s: float) -> None:
        self._keep_ns = round(history_s * NS_PER_S)
        # A plain list (not a deque): the tick rehearsal snapshots and restores it by copying.
        self._items: list[tuple[int, tuple[float, ...]]] = []

    def add(self, sent_ns: int, action: Floats) -> None:
        """Record ``action`` (4,) sent at ``sent_ns``; forget what is older than the window."""
        a0, a1, a2, a3 = action
        self._items.append((int(sent_ns), (float(a0), float(a1), float(a2), float(a3))))
        cutoff = sent_ns - self._keep_ns
        drop = 0
        while self._items[drop][0] < cutoff:
            drop += 1
        if drop:
            del self._items[:drop]

    def acting_at(self, at_ns: int, delay_ns: int, default: Floats) -> tuple[float, ...]:
        """The command acting on the vehicle at ``at_ns`` (``default`` before any)."""
        for sent_ns, action in reversed(self._items):
            if sent_ns + delay_ns <= at_ns:
                return action
        return tuple(default)

    def clear(self) -> None:
        """Forget every command."""
        self._items.clear()

    def segments(
        self, start_ns: int, end_ns: int, delay_ns: int, default: Floats
    ) -> list[tuple[int, tuple[float, ...]]]:
        """[(duration ns, action)] acting on the vehicle from ``start_ns`` to ``end_ns``: each
        command acts from ``delay_ns`` after it was sent until the next one does; before the
        first known command ``default`` acts."""
        acting = tuple(default)
        changes = []
        for sent_ns, action in self._items:
            at_ns = sent_ns + delay_ns
            if at_ns <= start_ns:
                acting = action
            elif at_ns < end_ns:
                changes.append((at_ns, action))
        out, t_ns = [], start_ns
        for at_ns, action in changes:
            if at_ns > t_ns:
                out.append((at_ns - t_ns, acting))
                t_ns = at_ns
            acting = action
        if end_ns > t_ns:
            out.append((end_ns - t_ns, acting))
        return out


class DisturbanceEstimator:
    """External acceleration on the vehicle, learnt while odometry is good.

    Per odometry sample it compares the measured velocity change with what the commanded
    thrust explains, and averages the difference over ``disturbance_time_constant_s`` (the
    differences of a noisy velocity telescope, so the average is far less noisy than one
    sample). The horizontal part is turned into a wind velocity through the vehicle's drag law
    (air speed from the drag force), so the predicted force falls as the vehicle slows down in
    still air and stays in a steady wind; the vertical part is a constant bias.
    """

    def __init__(self, vehicle: VehicleParams, config: BlindConfig) -> None:
        self.vehicle = vehicle
        self.config = config
        self._c1 = float(vehicle.drag_linear_nspm[0])
        self._c2 = float(vehicle.drag_quadratic_ns2pm2[0])
        self._c1z = float(vehicle.drag_linear_nspm[2])
        self._c2z = float(vehicle.drag_quadratic_ns2pm2[2])
        self.reset()

    def reset(self) -> None:
        """Forget the estimate (no disturbance)."""
        self._residual = [0.0, 0.0, 0.0]  # averaged unexplained acceleration, world, m/s^2
        self._velocity = [0.0, 0.0, 0.0]  # velocity averaged over the same time, m/s
        self._previous: tuple[int, list[float]] | None = None  # (stamp ns, velocity)
        self.wind_mps = (0.0, 0.0)  # horizontal wind, world
        self.bias_mps2 = 0.0  # vertical acceleration bias

    def update(self, stamp_ns: int, state: np.ndarray, thrust_n: float) -> None:
        """Fold in odometry ``state`` (13,) at ``stamp_ns``, flown with ``thrust_n`` acting."""
        velocity = state[7:10].tolist()
        previous, self._previous = self._previous, (stamp_ns, velocity)
        if previous is None or stamp_ns <= previous[0]:
            return
        dt_s = (stamp_ns - previous[0]) / NS_PER_S
        if dt_s > 0.2:  # too far apart to difference: start over from this sample
            return
        bz = body_z(state[3:7])
        accel_n = thrust_n / self.vehicle.mass_kg
        explained = (accel_n * bz[0], accel_n * bz[1], accel_n * bz[2] - GRAVITY_MPS2)
        alpha = min(dt_s / self.config.disturbance_time_constant_s, 1.0)
        for i in range(3):
            measured = (velocity[i] - previous[1][i]) / dt_s
            self._residual[i] += alpha * (measured - explained[i] - self._residual[i])
            self._velocity[i] += alpha * (velocity[i] - self._velocity[i])
        self._fit()

    def accel_mps2(self, velocity_mps: Floats) -> tuple[float, float, float]:
        """Predicted external acceleration (3,) world at ``velocity_mps`` (3,)."""
        m = self.vehicle.mass_kg
        ax = self._drag(velocity_mps[0] - self.wind_mps[0], self._c1, self._c2) / m
        ay = self._drag(velocity_mps[1] - self.wind_mps[1], self._c1, self._c2) / m
        az = self._drag(velocity_mps[2], self._c1z, self._c2z) / m + self.bias_mps2
        return ax, ay, az

    # ------------------------------------------------------------------ internals
    def _fit(self) -> None:
        """Wind from the averaged horizontal residual, bias from the vertical one."""
        m = self.vehicle.mass_kg
        rx, ry, rz = self._residual
        force_n = m * math.hypot(rx, ry)
        if force_n < m * self.config.min_disturbance_mps2:
            force_n = 0.0
        air_mps = self._air_speed(force_n)
        if force_n > 1e-9:  # the air moves against the drag force's direction
            air_x, air_y = -rx * m / force_n * air_mps, -ry * m / force_n * air_mps
        else:
            air_x = air_y = 0.0
        wind = (self._velocity[0] - air_x, self._velocity[1] - air_y)
        speed = math.hypot(*wind)
        if speed > self.config.max_wind_mps:
            scale = self.config.max_wind_mps / speed
            wind = (wind[0] * scale, wind[1] * scale)
        self.wind_mps = wind
        vertical_drag = self._drag(self._velocity[2], self._c1z, self._c2z) / m
        bound = self.config.max_bias_mps2
        self.bias_mps2 = min(max(rz - vertical_drag, -bound), bound)

    def _air_speed(self, force_n: float) -> float:
        """Air speed (m/s) at which the drag law gives ``force_n``: c2 s^2 + c1 s = F."""
        if self._c2 > 1e-12:
            return (-self._c1 + math.sqrt(self._c1**2 + 4.0 * self._c2 * force_n)) / (2 * self._c2)
        return force_n / self._c1 if self._c1 > 1e-12 else 0.0

    @staticmethod
    def _drag(air_mps: float, c1: float, c2: float) -> float:
        """Drag force (N) along one axis for air-relative speed ``air_mps`` along it."""
        return -(c1 + c2 * abs(air_mps)) * air_mps


class BlindEstimator:
    """The dead-reckoned state while odometry is missing (see the module docstring)."""

    def __init__(self, vehicle: VehicleParams, config: BlindConfig | None = None) -> None:
        self.vehicle = vehicle
        self.config = config or BlindConfig()
        self.config.validate()
        self.history = CommandHistory(self.config.history_s)
        self.disturbance = DisturbanceEstimator(vehicle, self.config)
        self._delay_ns = round(self.config.command_delay_s * NS_PER_S)
        self._hover = (vehicle.hover_thrust_n, 0.0, 0.0, 0.0)
        self._gain = tuple(float(k) for k in vehicle.rate_gain_p)
        self._state = [0.0] * STATE_DIM
        self._state[3] = 1.0
        self._angular_accel = [0.0, 0.0, 0.0]  # rad/s^2, the rate loop's output through the motors
        self._thrust_n = vehicle.hover_thrust_n  # thrust the motors give, after their lag
        self._at_ns: int | None = None  # time the prediction is for (None: not started)

    @property
    def started(self) -> bool:
        """True while a prediction runs (between :meth:`start` and :meth:`stop`)."""
        return self._at_ns is not None

    @property
    def state(self) -> np.ndarray:
        """The predicted state (13,) (a copy)."""
        return np.array(self._state)

    def observe(self, stamp_ns: int, state: np.ndarray) -> None:
        """A good odometry sample: learn the disturbance from it (with the thrust acting at its
        stamp) and stop any prediction."""
        acting = self.history.acting_at(stamp_ns, self._delay_ns, self._hover)
        self.disturbance.update(stamp_ns, state, acting[0])
        self._at_ns = None

    def record(self, sent_ns: int, action: Floats) -> None:
        """The command (4,) sent at ``sent_ns``."""
        self.history.add(sent_ns, action)

    def start(self, state: np.ndarray, stamp_ns: int) -> None:
        """Predict from odometry ``state`` (13,) taken at ``stamp_ns``.

        Position, attitude and velocity are the odometry's. The body rates and the motors'
        response come from the rate loop replayed over the commands of the last
        ``RATE_SETTLE_S`` instead: a stable loop forgets its start within a few of its time
        constants, so the replay gives the rates more closely than a filter of motion-capture
        attitudes can (its rate error reaches 1 rad/s behind a policy that changes its rate
        commands every tick, which over the odometry timeout is two degrees of attitude).
        """
        self._state = [float(x) for x in state]
        rates, alpha, thrust_n = self._rate_loop_at(stamp_ns)
        self._state[10:13] = rates
        self._angular_accel = alpha
        self._thrust_n = thrust_n
        self._at_ns = stamp_ns

    def stop(self) -> None:
        """End the prediction (odometry is back)."""
        self._at_ns = None

    def predict(self, now_ns: int) -> np.ndarray:
        """The state (13,) at ``now_ns``, replaying every command acting since the last call
        (or since :meth:`start`)."""
        if self._at_ns is None:
            raise RuntimeError("predict() before start()")
        if now_ns > self._at_ns:
            segments = self.history.segments(self._at_ns, now_ns, self._delay_ns, self._hover)
            for duration_ns, action in segments:
                self._integrate(action, duration_ns)
            self._at_ns = now_ns
        return self.state

    def _rate_loop_at(self, at_ns: int) -> tuple[list[float], list[float], float]:
        """(body rates (3,), angular acceleration (3,), thrust N) of the rate loop and motors
        at ``at_ns``, replayed over the commands of the ``RATE_SETTLE_S`` before it."""
        start_ns = at_ns - round(RATE_SETTLE_S * NS_PER_S)
        segments = self.history.segments(start_ns, at_ns, self._delay_ns, self._hover)
        first = segments[0][1]
        rates, alpha, thrust_n = list(first[1:]), [0.0, 0.0, 0.0], first[0]
        for duration_ns, action in segments:
            steps = max(1, math.ceil(duration_ns / _MAX_SUBSTEP_NS))
            dt_s = duration_ns / steps / NS_PER_S
            motor = min(dt_s / self.vehicle.motor_time_constant_s, 1.0)
            for _ in range(steps):
                thrust_n += motor * (action[0] - thrust_n)
                for i in range(3):
                    alpha[i] += motor * (self._gain[i] * (action[1 + i] - rates[i]) - alpha[i])
                    rates[i] += alpha[i] * dt_s
        return rates, alpha, thrust_n

    def _integrate(self, action: Floats, duration_ns: int) -> None:
        """Explicit Euler through ``duration_ns`` under ``action`` in steps of at most 5 ms."""
        steps = max(1, math.ceil(duration_ns / _MAX_SUBSTEP_NS))
        dt_s = duration_ns / steps / NS_PER_S
        for _ in range(steps):
            self._step(action, dt_s)

    def _step(self, action: Floats, dt_s: float) -> None:
        s = self._state
        motor = min(dt_s / self.vehicle.motor_time_constant_s, 1.0)
        self._thrust_n += motor * (action[0] - self._thrust_n)
        bz = body_z(s[3:7])
        thrust_accel = self._thrust_n / self.vehicle.mass_kg
        ext = self.disturbance.accel_mps2(s[7:10])
        for i in range(3):
            accel = thrust_accel * bz[i] + ext[i] - (GRAVITY_MPS2 if i == 2 else 0.0)
            s[i] += s[7 + i] * dt_s + 0.5 * accel * dt_s * dt_s
            s[7 + i] += accel * dt_s
        alpha = self._angular_accel
        for i in range(3):
            demand = self._gain[i] * (action[1 + i] - s[10 + i])
            alpha[i] += motor * (demand - alpha[i])
            s[10 + i] += alpha[i] * dt_s
        w, x, y, z = s[3:7]
        hx, hy, hz = (0.5 * dt_s * r for r in s[10:13])  # q <- q * (1, omega dt / 2), then unit
        q = (
            w - x * hx - y * hy - z * hz,
            x + w * hx + y * hz - z * hy,
            y + w * hy + z * hx - x * hz,
            z + w * hz + x * hy - y * hx,
        )
        norm = math.sqrt(sum(c * c for c in q))
        s[3:7] = [c / norm for c in q]


def body_z(quaternion_wxyz: Floats) -> tuple[float, float, float]:
    """World direction (3,) of the body z axis of unit ``quaternion_wxyz`` (4,)."""
    if isinstance(quaternion_wxyz, np.ndarray):  # arithmetic on numpy scalars is slow
        quaternion_wxyz = quaternion_wxyz.tolist()
    w, x, y, z = quaternion_wxyz
    return (2.0 * (x * z + w * y), 2.0 * (y * z - w * x), 1.0 - 2.0 * (x * x + y * y))


def tilt_rad(quaternion_wxyz: Floats) -> float:
    """Angle (rad) between the body z axis of ``quaternion_wxyz`` (4,) and world up."""
    return math.acos(min(max(body_z(quaternion_wxyz)[2], -1.0), 1.0))
