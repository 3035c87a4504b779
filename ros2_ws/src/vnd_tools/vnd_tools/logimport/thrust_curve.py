"""The thrust curve that turns a logged normalised thrust command into newtons.

PX4's convention (``THR_MDL_FAC``): with ``u`` in [0, 1] the normalised collective thrust and
``k`` the vehicle's ``thrust_model_factor``,

    thrust_n = thrust_max_n * ((1 - k) * u + k * u**2)

``k = 0`` is linear (the fraction of ``thrust_max_n``), ``k = 1`` purely quadratic (thrust
proportional to the square of rotor speed, with the ESC command proportional to speed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from vnd_core.vehicle import VehicleParams


@dataclass(frozen=True)
class ThrustCurve:
    """Collective thrust as a function of the normalised command (module docstring)."""

    thrust_max_n: float  # thrust at u = 1 [N]
    factor: float  # share of the quadratic term, k in [0, 1]

    @classmethod
    def of(cls, vehicle: VehicleParams) -> ThrustCurve:
        """The curve of ``vehicle`` (``thrust_max_n``, ``thrust_model_factor``)."""
        return cls(thrust_max_n=vehicle.thrust_max_n, factor=vehicle.thrust_model_factor)

    def thrust_n(self, normalised: npt.ArrayLike) -> np.ndarray:
        """Thrust [N] of normalised commands ``normalised`` (any shape; NaN stays NaN)."""
        u = np.asarray(normalised, dtype=np.float64)
        return np.asarray(self.thrust_max_n * ((1.0 - self.factor) * u + self.factor * u * u))

    def normalised(self, thrust_n: npt.ArrayLike) -> np.ndarray:
        """The normalised commands giving ``thrust_n`` [N]: the inverse of :meth:`thrust_n` for
        thrusts of 0 and more (above ``thrust_max_n`` the same curve's root, above 1)."""
        thrust = np.asarray(thrust_n, dtype=np.float64) / self.thrust_max_n
        linear = 1.0 - self.factor
        if self.factor == 0.0:
            return thrust
        # root of k u^2 + (1 - k) u - t = 0 written without cancellation; valid for t >= 0
        root = np.sqrt(np.maximum(linear * linear + 4.0 * self.factor * thrust, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.where(thrust != 0.0, 2.0 * thrust / (linear + root), 0.0)
        return np.asarray(u)

    def as_dict(self) -> dict[str, float]:
        """Plain-JSON form (the import report's ``thrust_curve``)."""
        return {"thrust_max_n": self.thrust_max_n, "thrust_model_factor": self.factor}
