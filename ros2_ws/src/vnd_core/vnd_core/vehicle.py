"""Vehicle parameters, loaded from ``config/vehicles/<name>.yaml``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vnd_core.config_io import load_dataclass, resolve_named
from vnd_core.state import GRAVITY_MPS2

Vec3 = tuple[float, float, float]


@dataclass(frozen=True)
class VehicleParams:
    """Physical parameters of one quadrotor (FLU body frame, X motor layout)."""

    name: str  # identifier used in bundles and reports
    mass_kg: float  # take-off mass
    inertia_kgm2: Vec3  # diagonal of the body inertia tensor (x, y, z)
    arm_length_m: float  # centre to motor axis distance
    thrust_min_n: float  # lowest collective thrust the policy may command
    thrust_max_n: float  # highest collective thrust (all four motors at full)
    body_rate_max_radps: Vec3  # body-rate command limits (roll, pitch, yaw), symmetric
    motor_time_constant_s: float  # first-order lag of each motor's thrust
    body_rate_time_constant_s: float  # first-order lag of body rates in the nominal model
    torque_coefficient_m: float  # yaw torque per newton of rotor thrust
    drag_linear_nspm: Vec3  # linear drag per body axis, N per m/s of air-relative speed
    drag_quadratic_ns2pm2: Vec3  # quadratic drag per body axis, N per (m/s)^2
    rate_gain_p: Vec3  # onboard body-rate controller gain, angular accel per rad/s error (1/s)
    # thrust curve of normalised commands u in [0, 1] (PX4's THR_MDL_FAC convention):
    # thrust = thrust_max_n ((1 - k) u + k u^2); 0 is linear, 1 purely quadratic
    thrust_model_factor: float = 0.0

    def validate(self) -> None:
        """Raise ValueError naming the first physically impossible field."""
        positive = {
            "mass_kg": self.mass_kg,
            "arm_length_m": self.arm_length_m,
            "thrust_max_n": self.thrust_max_n,
            "motor_time_constant_s": self.motor_time_constant_s,
            "body_rate_time_constant_s": self.body_rate_time_constant_s,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        for name in ("inertia_kgm2", "body_rate_max_radps", "rate_gain_p"):
            if any(not v > 0 for v in getattr(self, name)):
                raise ValueError(f"{name} must be > 0 on every axis, got {getattr(self, name)}")
        if not 0.0 <= self.thrust_model_factor <= 1.0:
            raise ValueError(
                f"thrust_model_factor must be in [0, 1], got {self.thrust_model_factor}"
            )
        if not 0 <= self.thrust_min_n < self.hover_thrust_n < self.thrust_max_n:
            raise ValueError(
                "need 0 <= thrust_min_n < hover thrust < thrust_max_n, got "
                f"{self.thrust_min_n} / {self.hover_thrust_n:.2f} / {self.thrust_max_n}"
            )

    @property
    def hover_thrust_n(self) -> float:
        """Collective thrust that balances gravity."""
        return self.mass_kg * GRAVITY_MPS2

    @property
    def motor_thrust_max_n(self) -> float:
        """Full thrust of one rotor."""
        return self.thrust_max_n / 4.0

    @property
    def thrust_to_weight(self) -> float:
        """Ratio of full collective thrust to weight."""
        return self.thrust_max_n / self.hover_thrust_n


def load_vehicle(name_or_path: str | Path = "agile") -> VehicleParams:
    """Load a vehicle by name (``config/vehicles/<name>.yaml``) or by file path."""
    return load_dataclass(VehicleParams, resolve_named("vehicles", name_or_path))
