"""Collective thrust in newtons <-> the normalised thrust an autopilot expects, per vehicle.

Autopilots take a normalised collective thrust u in [0, 1] (PX4 ``thrust_body``, MAVLink
SET_ATTITUDE_TARGET ``thrust``). How many newtons a given u produces depends on the vehicle
(motors, propellers, battery, and PX4's own THR_MDL_FAC linearisation), so it is measured on a
thrust stand or from hover throttle and given as the fit

    thrust_n(u) = quadratic_n * u**2 + linear_n * u,    u in [0, 1]

A linear model (quadratic_n = 0, linear_n = thrust_max_n) suits PX4 with THR_MDL_FAC tuned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ThrustModel:
    """Collective thrust of a vehicle as a function of the normalised thrust command u."""

    quadratic_n: float  # coefficient of u^2 [N]
    linear_n: float  # coefficient of u [N]

    def __post_init__(self) -> None:
        for name in ("quadratic_n", "linear_n"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"thrust model {name} must be finite, got {getattr(self, name)}")
        # d thrust / du = 2 a u + b is linear in u: non-negative on [0, 1] iff it is at both ends.
        if self.linear_n < 0 or 2.0 * self.quadratic_n + self.linear_n < 0:
            raise ValueError(
                f"thrust model {self.quadratic_n} u^2 + {self.linear_n} u is not increasing on "
                "[0, 1]: need linear_n >= 0 and 2 * quadratic_n + linear_n >= 0"
            )
        if not self.thrust_max_n > 0:
            raise ValueError(f"thrust model gives no thrust at u = 1 ({self.thrust_max_n} N)")

    @classmethod
    def linear(cls, thrust_max_n: float) -> ThrustModel:
        """Thrust proportional to u, ``thrust_max_n`` at u = 1."""
        return cls(quadratic_n=0.0, linear_n=thrust_max_n)

    @property
    def thrust_max_n(self) -> float:
        """Collective thrust at u = 1 [N]."""
        return self.quadratic_n + self.linear_n

    def thrust_n(self, normalized: float) -> float:
        """Collective thrust [N] produced by the normalised command ``normalized`` in [0, 1]."""
        return self.quadratic_n * normalized**2 + self.linear_n * normalized

    def normalized(self, thrust_n: float) -> float:
        """Normalised command in [0, 1] producing ``thrust_n`` [N], clamped to what u in [0, 1]
        can produce. Raises ValueError for a non-finite thrust."""
        if not math.isfinite(thrust_n):
            raise ValueError(f"thrust_n must be finite, got {thrust_n}")
        thrust = min(max(thrust_n, 0.0), self.thrust_max_n)
        if thrust == 0.0:
            return 0.0
        # Root of a u^2 + b u - T = 0 in the form without cancellation; also valid for a = 0.
        discriminant = self.linear_n**2 + 4.0 * self.quadratic_n * thrust
        u = 2.0 * thrust / (self.linear_n + math.sqrt(max(discriminant, 0.0)))
        return min(max(u, 0.0), 1.0)
