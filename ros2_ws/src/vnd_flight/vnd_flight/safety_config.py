"""Settings and outputs of the safety filter: :class:`SafetyConfig`, the mode changes and
outputs it reports, and the at-rest test used before arming.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from vnd_core.state import VEL
from vnd_core.wire import Mode

from vnd_flight.blind import BlindConfig
from vnd_flight.envelope import (
    FAULT_GEOFENCE as FAULT_GEOFENCE,  # re-exported: one of the filter's faults
)
from vnd_flight.envelope import (
    EnvelopeConfig,
)
from vnd_flight.fallback import (
    FallbackConfig,
)

Vec3 = tuple[float, float, float]


@dataclass(frozen=True)
class SafetyConfig:
    """Thresholds and limits of :class:`SafetyFilter`."""

    period_s: float = 0.02  # control tick period
    odom_timeout_s: float = 0.1  # odometry older than this is stale
    max_thrust_step_n: float = 4.0  # slew limit: largest change of thrust per tick
    max_rate_step_radps: float = 3.0  # slew limit: largest change of each body rate per tick
    geofence_min_m: Vec3 = (-3.0, -3.0, -0.2)  # lower corner of the allowed box, ENU world
    geofence_max_m: Vec3 = (3.0, 3.0, 3.0)  # upper corner of the allowed box
    geofence_margin_m: float = 0.3  # a geofence hold point lies this far inside the box
    hold_timeout_s: float = 5.0  # FALLBACK_HOLD this long without recovery -> FALLBACK_LAND
    recovery_s: float = 0.5  # faults must stay clear this long before POLICY resumes
    rejoin_time_constant_s: float = 1.0  # a resumed policy converges onto the reference this fast
    floor_z_m: float = 0.0  # height of the landing surface
    touchdown_height_m: float = 0.05  # landed when at most this far above the floor ...
    touchdown_speed_mps: float = 0.1  # ... moving slower than this ...
    touchdown_time_s: float = 0.5  # ... for this long
    blind_descent_mps: float = 0.5  # descent speed flown on dead reckoning without odometry
    blind_land_margin_s: float = 3.0  # blind landing disarms this long after predicted floor
    blind_level_s: float = 0.5  # blind flight levels and brakes this long before descending
    blind_max_tilt_rad: float = 0.35  # tilt limit of blind flight
    blind_max_rate_radps: float = 2.5  # body-rate limit of blind flight
    fallback: FallbackConfig = field(default_factory=FallbackConfig)  # fallback gains
    envelope: EnvelopeConfig = field(default_factory=EnvelopeConfig)  # policy and odometry limits
    dead_reckoning: BlindConfig = field(default_factory=BlindConfig)  # blind prediction

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        for name in (
            "period_s",
            "odom_timeout_s",
            "max_thrust_step_n",
            "max_rate_step_radps",
            "hold_timeout_s",
            "touchdown_height_m",
            "touchdown_speed_mps",
            "blind_descent_mps",
            "blind_max_tilt_rad",
            "blind_max_rate_radps",
            "rejoin_time_constant_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in (
            "geofence_margin_m",
            "recovery_s",
            "touchdown_time_s",
            "blind_land_margin_s",
            "blind_level_s",
        ):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        inner = np.subtract(self.geofence_max_m, self.geofence_min_m) - 2 * self.geofence_margin_m
        if np.any(inner <= 0):
            raise ValueError(
                "geofence_max_m - geofence_min_m must exceed 2 * geofence_margin_m on every "
                f"axis, got {self.geofence_min_m} .. {self.geofence_max_m}"
            )
        self.fallback.validate()
        self.envelope.validate()
        self.dead_reckoning.validate()
        if self.dead_reckoning.history_s <= self.odom_timeout_s + self.period_s:
            raise ValueError(
                f"dead_reckoning.history_s ({self.dead_reckoning.history_s} s) must exceed "
                f"odom_timeout_s + period_s ({self.odom_timeout_s + self.period_s} s)"
            )


@dataclass(frozen=True)
class ModeChange:
    """One mode change of the filter, for the operator's log."""

    at_ns: int  # tick time of the change
    previous: Mode  # mode before
    mode: Mode  # mode after
    reason: str  # why, with the figure that decided it


@dataclass(frozen=True)
class SafetyOutput:
    """What the filter sends this tick."""

    action: np.ndarray  # (4,) thrust N, body rates rad/s FLU; within limits, finite
    mode: Mode  # controller mode that produced it
    reasons: tuple[str, ...]  # faults present and limits applied this tick (empty = clean)


def not_resting_reason(state: np.ndarray, config: SafetyConfig) -> str | None:
    """Why ``state`` (13,) is not resting on the floor, or None when it is: at most
    ``touchdown_height_m`` above ``floor_z_m`` and slower than ``touchdown_speed_mps``
    vertically (the touchdown test of a landing, also the arming test)."""
    if state[2] > config.floor_z_m + config.touchdown_height_m:
        return (
            f"{state[2] - config.floor_z_m:.2f} m above the floor "
            f"(touchdown height {config.touchdown_height_m:.2f} m)"
        )
    climb_mps = abs(state[VEL][2])
    if climb_mps >= config.touchdown_speed_mps:
        return (
            f"vertical speed {climb_mps:.2f} m/s "
            f"(touchdown speed {config.touchdown_speed_mps:.2f} m/s)"
        )
    return None
