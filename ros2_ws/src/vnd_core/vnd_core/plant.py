"""The true plant: the simulated "real vehicle" that differs from the prior like hardware does.

Unlike :class:`vnd_core.dynamics.NominalModel` it has four rotors with a first-order motor lag, an
onboard proportional body-rate controller and X-frame mixer with per-motor saturation, linear and
quadratic drag from the air-relative velocity, command latency, motion-capture noise, and the
disturbances of a :class:`~vnd_core.scenario.Scenario` (wind, payload, propeller damage).

The floor is solid: touching it slower than ``landing_speed_max_mps`` and with a tilt of at most
``landing_tilt_max_deg`` is a landing (the vehicle rests on its legs: level, heading kept, no
motion, until its thrust lifts it again); touching it faster or more tilted is a crash. Without
this a controlled touchdown would read as a crash, and the safety layer's landings could not be
judged from the ground truth.

It integrates with semi-implicit Euler at ``physics_rate_hz`` (velocities first, then positions;
the quaternion by the exact exponential of the new body rate), batched over B environments that
share the event timing but draw their own noise and gusts.

The public API takes and returns float32 torch tensors; inside, the physics runs in float64
outside every gradient graph. At the batch sizes the plant serves (1 in the real-time simulator
node, 16-64 in evaluation) a physics step is a hundred tiny array operations whose fixed call
overhead is the whole cost, several times lower in numpy than in torch, so the batch runs on numpy
arrays, and a batch of one on plain Python floats (:mod:`vnd_core.plant_single`, faster again).
The rotation formulas of both are checked against :mod:`vnd_core.so3` and against each other by
the tests.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import torch

from vnd_core.plant_parts import (
    ROTOR_COUNT,
    MassProperties,
    PlantConfig,
    Wind,
    allocation_matrix,
    cross_np,
    quat_exp_np,
    quat_mul_np,
    rotate_inverse_np,
    rotate_np,
    rotmat_np,
)
from vnd_core.plant_single import OneVehicle
from vnd_core.scenario import (
    Event,
    PayloadEvent,
    PayloadOffEvent,
    PropDamageEvent,
    PropRepairEvent,
    Scenario,
    WindEvent,
    WindOffEvent,
)
from vnd_core.state import ACTION_DIM, GRAVITY_MPS2, OMEGA, POS, QUAT, STATE_DIM, VEL
from vnd_core.vehicle import VehicleParams

CONTROL_TICK_S = 0.02  # one 50 Hz control tick, the period of :meth:`TruePlant.step`


class TruePlant:
    """Batched true-plant simulator; see the module docstring for what it models.

    Typical use, one 50 Hz control tick at a time::

        plant = TruePlant(vehicle, scenario, batch_size=16, seed=1)
        plant.reset(scenario.start_state(16))
        for _ in range(n):
            obs = plant.measure()           # (B, 13) noisy
            plant.step(policy(obs))         # (B, 4) CTBR; returns the true state (B, 13)
    """

    def __init__(
        self,
        vehicle: VehicleParams,
        scenario: Scenario | None = None,
        batch_size: int = 1,
        config: PlantConfig | None = None,
        seed: int = 0,
    ) -> None:
        self.vehicle = vehicle
        self.scenario = scenario
        self.batch_size = batch_size
        self.config = config or PlantConfig()
        self.config.validate()
        self._rng = np.random.default_rng(seed)
        self._h = self.config.physics_dt_s
        self._latency_steps = round(self.config.latency_s / self._h)
        self._motor_alpha = 1.0 - math.exp(-self._h / vehicle.motor_time_constant_s)
        # The onboard controller knows only the nominal vehicle.
        self._inertia_nom = np.array(vehicle.inertia_kgm2, dtype=float)
        self._inertia_gain = self._inertia_nom * np.array(vehicle.rate_gain_p)
        mixer_t = np.linalg.inv(allocation_matrix(vehicle)).T
        self._mixer_thrust, self._mixer_torque = mixer_t[0].copy(), mixer_t[1:].copy()
        self._drag_lin = np.array(vehicle.drag_linear_nspm, dtype=float)
        self._drag_quad = np.array(vehicle.drag_quadratic_ns2pm2, dtype=float)
        self._gravity = np.array([0.0, 0.0, -GRAVITY_MPS2])
        self._motor_max_n = vehicle.motor_thrust_max_n
        self._rate_max = np.array(vehicle.body_rate_max_radps, dtype=float)
        self._arena = np.array(self.config.arena_half_m, dtype=float)
        self._min_tilt_cos = math.cos(math.radians(self.config.max_tilt_deg))
        self._landing_tilt_cos = math.cos(math.radians(self.config.landing_tilt_max_deg))
        # Batch 1 runs on plain floats (vnd_core.plant_single); tests switch this off to compare.
        self.fast_single = True
        self._one_vehicle = OneVehicle(self)
        start = np.zeros((batch_size, STATE_DIM))
        start[:, 2], start[:, 3] = 1.0, 1.0
        self.reset(torch.from_numpy(start))

    # ----------------------------------------------------------------------------- public API

    def reset(self, state: torch.Tensor) -> None:
        """Start a flight at ``state`` (B, 13) (or (13,), broadcast): time 0, motors at hover,
        no disturbance yet, the latency pipeline filled with the hover command."""
        start = self._as_batch(state, STATE_DIM, "state").copy()
        start[:, QUAT] /= np.linalg.norm(start[:, QUAT], axis=1, keepdims=True)
        self._p, self._q = start[:, POS].copy(), start[:, QUAT].copy()
        self._v, self._w = start[:, VEL].copy(), start[:, OMEGA].copy()
        self._step = 0
        hover_n = self.vehicle.hover_thrust_n
        self._motor_n = np.full((self.batch_size, ROTOR_COUNT), hover_n / ROTOR_COUNT)
        self._thrust_cmd = np.full((self.batch_size, 1), hover_n)
        self._rates_cmd = np.zeros((self.batch_size, 3))
        self._pending: deque[tuple[int, np.ndarray]] = deque()
        self._wind: Wind | None = None
        self._mass = MassProperties(self.vehicle, None)
        self._efficiency = np.ones(ROTOR_COUNT)
        self._events = list(self.scenario.events) if self.scenario else []
        self._next_event = 0
        self._update_wrench_map()
        self._crashed = np.zeros(self.batch_size, dtype=bool)
        self._on_floor = np.zeros(self.batch_size, dtype=bool)
        self._frozen = start
        self._apply_due_events()

    def set_command(self, action: torch.Tensor) -> None:
        """Queue a CTBR command (B, 4) (or (4,)); the motors see it ``latency_s`` later."""
        command = self._as_batch(action, ACTION_DIM, "action").copy()
        # The onboard controller saturates what it is asked for, as a flight controller does.
        np.clip(command[:, 0], 0.0, self.vehicle.thrust_max_n, out=command[:, 0])
        np.clip(command[:, 1:], -self._rate_max, self._rate_max, out=command[:, 1:])
        self._pending.append((self._step + self._latency_steps, command))

    def advance(self, dt_s: float) -> torch.Tensor:
        """Integrate ``dt_s`` (a multiple of the physics period); returns the true state (B, 13)."""
        steps = round(dt_s / self._h)
        if steps < 0 or abs(steps * self._h - dt_s) > 1e-9:
            raise ValueError(
                f"dt_s={dt_s} must be a non-negative multiple of the physics period {self._h} s"
            )
        before = self._joined()
        one = self._one_vehicle if self.batch_size == 1 and self.fast_single else None
        if one is not None:
            one.load()
        for _ in range(steps):
            self._apply_due_events()
            self._apply_due_command()
            if one is not None:
                one.substep()
            else:
                self._substep()
            self._step += 1
        if one is not None:
            one.store()
        self._q /= np.linalg.norm(self._q, axis=1, keepdims=True)  # remove round-off drift
        self._check_crash(before)
        return self.state

    def step(self, action: torch.Tensor) -> torch.Tensor:
        """One 50 Hz control tick: :meth:`set_command` then :meth:`advance` (0.02 s)."""
        self.set_command(action)
        return self.advance(CONTROL_TICK_S)

    @property
    def time_s(self) -> float:
        """Scenario time since :meth:`reset`."""
        return self._step * self._h

    @property
    def state(self) -> torch.Tensor:
        """True state (B, 13), float32."""
        return torch.from_numpy(self._joined()).float()

    @property
    def crashed(self) -> torch.Tensor:
        """Sticky crash flags (B,), bool: hit the floor too fast or too tilted, over-tilted,
        out of the arena or non-finite. A crashed vehicle is held still where it crashed."""
        return torch.from_numpy(self._crashed.copy())

    @property
    def on_floor(self) -> torch.Tensor:
        """Flags (B,), bool: resting on the floor after a landing at the end of the last
        :meth:`advance` (not crashed)."""
        return torch.from_numpy(self._on_floor.copy())

    def measure(self) -> torch.Tensor:
        """Motion-capture-like measurement of the state (B, 13), float32, with fresh noise."""
        c, b = self.config, self.batch_size

        def noise(std: float) -> np.ndarray:
            return std * self._rng.standard_normal((b, 3))

        q = quat_mul_np(self._q, quat_exp_np(noise(c.attitude_noise_rad)))
        measured = np.concatenate(
            [
                self._p + noise(c.position_noise_m),
                q,
                self._v + noise(c.velocity_noise_mps),
                self._w + noise(c.rate_noise_radps),
            ],
            axis=1,
        )
        return torch.from_numpy(measured).float()

    def condition(self) -> str:
        """Name of the scenario phase active now ("calm" without a scenario)."""
        return self.scenario.phase_at(self.time_s) if self.scenario else "calm"

    def wind_velocity_mps(self) -> torch.Tensor:
        """Current air velocity (B, 3), world frame, float32 (zeros in still air)."""
        if self._wind is None:
            return torch.zeros(self.batch_size, 3)
        return torch.from_numpy(np.array(self._wind.velocity_mps(self.time_s))).float()

    def disturbance_force_n(self) -> torch.Tensor:
        """External world force (B, 3), float32: the drag change caused by the wind plus the
        payload's weight. Propeller damage is an actuator fault, not an external force."""
        force = np.broadcast_to(self._mass.payload_kg * self._gravity, (self.batch_size, 3))
        if self._wind is not None:
            rot = rotmat_np(self._q)
            windy = self._drag_world(rot, self._v - self._wind.velocity_mps(self.time_s))
            force = force + windy - self._drag_world(rot, self._v)
        return torch.from_numpy(np.array(force)).float()

    @property
    def motor_thrust_n(self) -> torch.Tensor:
        """Thrust each rotor produces now (B, 4), float32, after lag and damage."""
        return torch.from_numpy(self._motor_n * self._efficiency).float()

    # ------------------------------------------------------------------------------- physics

    def _substep(self) -> None:
        """One semi-implicit Euler step of length h for all environments."""
        h, w = self._h, self._w
        # Onboard P rate controller with the nominal inertia, X mixer, per-motor saturation.
        gyro = cross_np(w, w * self._inertia_nom)
        torque_cmd = self._inertia_gain * (self._rates_cmd - w) + gyro
        motor_cmd = self._thrust_cmd * self._mixer_thrust + torque_cmd @ self._mixer_torque
        np.minimum(np.maximum(motor_cmd, 0.0, out=motor_cmd), self._motor_max_n, out=motor_cmd)
        self._motor_n += self._motor_alpha * (motor_cmd - self._motor_n)
        # What the (possibly damaged, possibly loaded) airframe really gets.
        wrench = self._motor_n @ self._wrench_t
        rot = rotmat_np(self._q)
        air_w = self._v if self._wind is None else self._v - self._wind.velocity_mps(self.time_s)
        drag_b = self._drag_body(rotate_inverse_np(rot, air_w))
        force_b = drag_b.copy()
        force_b[:, 2] += wrench[:, 0]
        mass = self._mass
        accel = rotate_np(rot, force_b) / mass.mass_kg + self._gravity
        torque = wrench[:, 1:]
        if mass.offset:
            # Rigid body about the shifted centre of mass c; p tracks the body origin (the mocap
            # marker) whose acceleration is a_c - R (w_dot x c + w x (w x c)).
            com = np.broadcast_to(mass.com_m, w.shape)
            torque = torque - cross_np(com, drag_b)
            w_dot = (torque - cross_np(w, w @ mass.inertia.T)) @ mass.inertia_inv.T
            lever = cross_np(w_dot, com) + cross_np(w, cross_np(w, com))
            accel -= rotate_np(rot, lever)
        else:
            w_dot = (torque - gyro) / self._inertia_nom
        if self._wind is not None:
            self._wind.advance(h, self._rng)
        self._v += h * accel
        self._w += h * w_dot
        self._p += h * self._v
        self._q = quat_mul_np(self._q, quat_exp_np(h * self._w))

    def _drag_body(self, air_b: np.ndarray) -> np.ndarray:
        """Linear + quadratic drag force (B, 3) in the body frame from body air velocity."""
        return -(self._drag_lin + self._drag_quad * np.abs(air_b)) * air_b

    def _drag_world(self, rot: np.ndarray, air_w: np.ndarray) -> np.ndarray:
        """Drag force (B, 3) in the world frame from the world air-relative velocity."""
        drag_b = self._drag_body(rotate_inverse_np(rot, air_w))
        return rotate_np(rot, drag_b)

    # ---------------------------------------------------------------------- commands and events

    def _apply_due_command(self) -> None:
        """Make the newest command whose latency has elapsed the active one."""
        while self._pending and self._pending[0][0] <= self._step:
            command = self._pending.popleft()[1]
            self._thrust_cmd, self._rates_cmd = command[:, :1], command[:, 1:]

    def _apply_due_events(self) -> None:
        """Apply every scenario event whose time has come (events are ordered by at_s)."""
        while self._next_event < len(self._events):
            event = self._events[self._next_event]
            if event.at_s > self.time_s + 0.5 * self._h:
                return
            self._apply_event(event)
            self._next_event += 1

    def _apply_event(self, event: Event) -> None:
        """Change the plant's condition as ``event`` says."""
        if isinstance(event, WindEvent):
            self._wind = Wind(event, self.batch_size, self._rng)
        elif isinstance(event, WindOffEvent):
            self._wind = None
        elif isinstance(event, PayloadEvent):
            self._mass = MassProperties(self.vehicle, event)
        elif isinstance(event, PayloadOffEvent):
            self._mass = MassProperties(self.vehicle, None)
        elif isinstance(event, PropDamageEvent):
            self._efficiency[event.rotor] = event.efficiency
        elif isinstance(event, PropRepairEvent):
            self._efficiency[slice(None) if event.rotor is None else event.rotor] = 1.0
        else:
            raise TypeError(f"unknown scenario event {event!r}")
        self._update_wrench_map()

    def _update_wrench_map(self) -> None:
        """Rotor thrusts -> true wrench (B, 4) @ (4, 4), with damage and the current centre of
        mass (which the onboard mixer does not know about)."""
        com_x, com_y, com_z = (float(c) for c in self._mass.com_m)
        allocation = allocation_matrix(self.vehicle, (com_x, com_y, com_z))
        self._wrench_t = (allocation * self._efficiency).T.copy()

    # ---------------------------------------------------------------------------------- helpers

    def _as_batch(self, value: torch.Tensor, width: int, what: str) -> np.ndarray:
        """``value`` (B, width) or (width,) as a float64 (B, width) array."""
        array = np.asarray(torch.as_tensor(value).detach().cpu(), dtype=float)
        if array.shape not in ((width,), (1, width), (self.batch_size, width)):
            raise ValueError(
                f"{what} must have shape ({self.batch_size}, {width}) or ({width},), "
                f"got {tuple(array.shape)}"
            )
        return np.broadcast_to(array, (self.batch_size, width))

    def _joined(self) -> np.ndarray:
        """True state (B, 13) in float64."""
        return np.concatenate([self._p, self._q, self._v, self._w], axis=1)

    def _check_crash(self, before: np.ndarray) -> None:
        """Resolve floor contact (landing or crash), flag new crashes and hold crashed
        vehicles still where they crashed (sticky)."""
        state = self._joined()
        finite = np.isfinite(state).all(axis=1)
        q = self._q
        tilt_cos = 1.0 - 2.0 * (q[:, 1] ** 2 + q[:, 2] ** 2)  # world z of body z
        with np.errstate(invalid="ignore"):
            below = finite & (self._p[:, 2] < self.config.floor_m)
            # A vehicle already resting stays resting: it only sank while thrust was below its
            # weight during this advance, which the legs would have carried.
            gentle = self._on_floor | (
                (self._v[:, 2] >= -self.config.landing_speed_max_mps)
                & (tilt_cos >= self._landing_tilt_cos)
            )
            bad = (
                ~finite
                | (below & ~gentle)
                | (tilt_cos < self._min_tilt_cos)
                | (np.abs(self._p) > self._arena).any(axis=1)
            )
        self._on_floor = below & gentle & ~bad & ~self._crashed
        if self._on_floor.any():
            self._rest_on_floor(self._on_floor)
        new = bad & ~self._crashed
        if not new.any() and not self._crashed.any():
            return
        state = self._joined()
        # Keep the last finite state of a vehicle that blew up; a crashed vehicle stops moving.
        at_crash = np.where(finite[:, None], state, before)
        at_crash[:, VEL] = 0.0
        at_crash[:, OMEGA] = 0.0
        self._frozen = np.where(new[:, None], at_crash, self._frozen)
        self._crashed |= new
        held = np.where(self._crashed[:, None], self._frozen, state)
        self._p, self._q = held[:, POS].copy(), held[:, QUAT].copy()
        self._v, self._w = held[:, VEL].copy(), held[:, OMEGA].copy()

    def _rest_on_floor(self, rows: np.ndarray) -> None:
        """Put the vehicles of ``rows`` (B,) bool on the floor: at floor height, level with
        their heading kept, not moving (the legs and friction hold them)."""
        q = self._q[rows]
        half_yaw = 0.5 * np.arctan2(
            2.0 * (q[:, 0] * q[:, 3] + q[:, 1] * q[:, 2]), 1.0 - 2.0 * (q[:, 2] ** 2 + q[:, 3] ** 2)
        )
        level = np.zeros_like(q)
        level[:, 0], level[:, 3] = np.cos(half_yaw), np.sin(half_yaw)
        self._q[rows] = level
        self._p[rows, 2] = self.config.floor_m
        self._v[rows] = 0.0
        self._w[rows] = 0.0
