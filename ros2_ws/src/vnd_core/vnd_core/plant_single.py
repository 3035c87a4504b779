"""The true plant's batch-of-one path: the same physics as :class:`vnd_core.plant.TruePlant`
on plain Python floats.

The simulator node steps a single vehicle in real time; there every numpy call works on
3-element arrays and its fixed overhead is the whole cost, so :class:`OneVehicle` copies the
plant's (1, n) arrays into floats for an :meth:`~vnd_core.plant.TruePlant.advance`, integrates
them and writes them back.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from vnd_core.plant_parts import MassProperties, Wind, cross3, matvec3, quat_mul_exp


class PlantArrays(Protocol):
    """The TruePlant state and constants the single-vehicle path reads and writes."""

    @property
    def time_s(self) -> float:
        """Scenario time [s]."""
        ...

    _h: float  # physics period [s]
    _rng: np.random.Generator
    _motor_alpha: float  # first-order motor lag per physics step
    _motor_max_n: float
    _inertia_nom: np.ndarray  # (3,) nominal inertia diagonal [kg m^2] (the onboard controller's)
    _inertia_gain: np.ndarray  # (3,) rate controller gain times the nominal inertia
    _mixer_thrust: np.ndarray  # (4,) collective thrust -> motor thrusts
    _mixer_torque: np.ndarray  # (3, 4) body torque -> motor thrusts
    _drag_lin: np.ndarray  # (3,) body-frame linear drag [N s/m]
    _drag_quad: np.ndarray  # (3,) body-frame quadratic drag [N s^2/m^2]
    _gravity: np.ndarray  # (3,) world gravity [m/s^2]
    _p: np.ndarray  # (1, 3) position [m]
    _q: np.ndarray  # (1, 4) attitude quaternion w x y z
    _v: np.ndarray  # (1, 3) world velocity [m/s]
    _w: np.ndarray  # (1, 3) body rates [rad/s]
    _motor_n: np.ndarray  # (1, 4) motor thrusts [N]
    _thrust_cmd: np.ndarray  # (1, 1) active collective thrust command [N]
    _rates_cmd: np.ndarray  # (1, 3) active body-rate command [rad/s]
    _wrench_t: np.ndarray  # (4, 4) motor thrusts -> true wrench (transposed)
    _mass: MassProperties
    _wind: Wind | None


class OneVehicle:
    """Plain-float twin of :meth:`vnd_core.plant.TruePlant._substep` for a batch of one.

    The simulator node steps a single vehicle in real time. There every numpy call works on
    3-element arrays and its fixed overhead (about a microsecond) is the whole cost; the same
    arithmetic on Python floats is several times faster. The tests fly both paths through every
    kind of disturbance and require agreement to round-off.
    """

    def __init__(self, plant: PlantArrays) -> None:
        self.plant = plant
        self._sources: tuple = ()
        h = plant._h
        self.h, self.alpha, self.motor_max = h, plant._motor_alpha, plant._motor_max_n
        self.inertia_nom = plant._inertia_nom.tolist()
        self.inertia_gain = plant._inertia_gain.tolist()
        self.mixer_thrust = plant._mixer_thrust.tolist()
        self.mixer_torque = plant._mixer_torque.tolist()
        self.drag_lin = plant._drag_lin.tolist()
        self.drag_quad = plant._drag_quad.tolist()
        self.gravity_z = float(plant._gravity[2])

    def load(self) -> None:
        """Copy the plant's (1, n) arrays into floats."""
        pl = self.plant
        self.p, self.q = pl._p[0].tolist(), pl._q[0].tolist()
        self.v, self.w = pl._v[0].tolist(), pl._w[0].tolist()
        self.motor = pl._motor_n[0].tolist()

    def store(self) -> None:
        """Write the floats back into the plant's arrays."""
        pl = self.plant
        pl._p[0], pl._q[0], pl._v[0], pl._w[0] = self.p, self.q, self.v, self.w
        pl._motor_n[0] = self.motor

    def _refresh(self) -> None:
        """Re-read what commands and events replace (the plant swaps whole objects)."""
        pl = self.plant
        sources = (pl._thrust_cmd, pl._wrench_t, pl._mass)  # rates change with the thrust
        if self._sources and all(a is b for a, b in zip(sources, self._sources, strict=True)):
            return
        self._sources = sources
        self.thrust_cmd = float(pl._thrust_cmd[0, 0])
        self.rates_cmd = pl._rates_cmd[0].tolist()
        self.wrench_t = pl._wrench_t.tolist()
        mass = pl._mass
        self.mass_kg, self.offset = mass.mass_kg, mass.offset
        self.com, self.inertia = mass.com_m.tolist(), mass.inertia.tolist()
        self.inertia_inv = mass.inertia_inv.tolist()

    def substep(self) -> None:
        """One semi-implicit Euler step: the equations of the batched
        :meth:`vnd_core.plant.TruePlant._substep`."""
        self._refresh()
        pl, h, w, q = self.plant, self.h, self.w, self.q
        jn, jg = self.inertia_nom, self.inertia_gain
        gyro = cross3(w, [w[0] * jn[0], w[1] * jn[1], w[2] * jn[2]])
        rc = self.rates_cmd
        torque_cmd = [jg[i] * (rc[i] - w[i]) + gyro[i] for i in range(3)]
        mt, mq, motor = self.mixer_thrust, self.mixer_torque, self.motor
        for i in range(4):
            f = self.thrust_cmd * mt[i] + torque_cmd[0] * mq[0][i] + torque_cmd[1] * mq[1][i]
            f += torque_cmd[2] * mq[2][i]
            f = 0.0 if f < 0.0 else min(f, self.motor_max)
            motor[i] += self.alpha * (f - motor[i])
        wt = self.wrench_t
        m0, m1, m2, m3 = motor
        wrench = [m0 * wt[0][c] + m1 * wt[1][c] + m2 * wt[2][c] + m3 * wt[3][c] for c in range(4)]
        qw, qx, qy, qz = q
        rot = [
            [
                qw * qw + qx * qx - qy * qy - qz * qz,
                2 * (qx * qy - qw * qz),
                2 * (qx * qz + qw * qy),
            ],
            [
                2 * (qx * qy + qw * qz),
                qw * qw - qx * qx + qy * qy - qz * qz,
                2 * (qy * qz - qw * qx),
            ],
            [
                2 * (qx * qz - qw * qy),
                2 * (qy * qz + qw * qx),
                qw * qw - qx * qx - qy * qy + qz * qz,
            ],
        ]
        v = self.v
        air = v if pl._wind is None else [
            a - b for a, b in zip(v, pl._wind.velocity_mps(pl.time_s)[0].tolist(), strict=True)
        ]  # fmt: skip
        air_b = [rot[0][j] * air[0] + rot[1][j] * air[1] + rot[2][j] * air[2] for j in range(3)]
        drag_b = [-(self.drag_lin[j] + self.drag_quad[j] * abs(a)) * a for j, a in enumerate(air_b)]
        force_b = [drag_b[0], drag_b[1], drag_b[2] + wrench[0]]
        accel = [f / self.mass_kg for f in matvec3(rot, force_b)]
        accel[2] += self.gravity_z
        torque = wrench[1:]
        if self.offset:
            com = self.com
            torque = [t - c for t, c in zip(torque, cross3(com, drag_b), strict=True)]
            gyro_true = cross3(w, matvec3(self.inertia, w))
            w_dot = matvec3(
                self.inertia_inv, [t - g for t, g in zip(torque, gyro_true, strict=True)]
            )
            lever = [
                a + b for a, b in zip(cross3(w_dot, com), cross3(w, cross3(w, com)), strict=True)
            ]
            accel = [a - b for a, b in zip(accel, matvec3(rot, lever), strict=True)]
        else:
            w_dot = [(torque[i] - gyro[i]) / jn[i] for i in range(3)]
        if pl._wind is not None:
            pl._wind.advance(h, pl._rng)
        self.v = v = [v[i] + h * accel[i] for i in range(3)]
        self.w = w = [w[i] + h * w_dot[i] for i in range(3)]
        self.p = [self.p[i] + h * v[i] for i in range(3)]
        self.q = quat_mul_exp(q, [h * c for c in w])
