"""The reference a policy rejoins after a fallback.

When the policy takes over again after a fallback (odometry back after a re-origin, a hold
that drifted, the figure-eight that went on while the vehicle held still), the vehicle can be a
metre or more away from the reference and at a different velocity. Handing the policy that
step makes it fly a step response at the edge of its envelope. Instead, the reference the
policy tracks starts at the vehicle's own position and velocity and converges onto the
scheduled reference along a critically damped path: the offset

    e(s) = (e0 + (de0 + e0 / tau) s) exp(-s / tau),   s = time since the takeover,

is continuous in position and velocity at the takeover and decays with time constant ``tau``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SETTLED_TIME_CONSTANTS = 8.0  # after this many time constants the offset is dropped


@dataclass(frozen=True)
class ReferenceRejoin:
    """Offset added to the reference from ``start_s`` (reference time) on."""

    start_s: float  # reference time of the takeover [s]
    offset_m: np.ndarray  # (3,) vehicle position minus reference position at the takeover
    offset_rate_mps: np.ndarray  # (3,) vehicle velocity minus reference velocity at it
    time_constant_s: float  # tau of the convergence [s]

    @classmethod
    def between(
        cls, start_s: float, reference: np.ndarray, state: np.ndarray, time_constant_s: float
    ) -> ReferenceRejoin:
        """The rejoin from ``state`` (13,) onto ``reference`` (3, 3: position, velocity,
        acceleration) at reference time ``start_s``."""
        if not time_constant_s > 0:
            raise ValueError(f"time_constant_s must be > 0, got {time_constant_s}")
        return cls(
            start_s=start_s,
            offset_m=np.asarray(state[0:3], dtype=float) - reference[0],
            offset_rate_mps=np.asarray(state[7:10], dtype=float) - reference[1],
            time_constant_s=time_constant_s,
        )

    def settled(self, t_s: float) -> bool:
        """Whether the offset is negligible from reference time ``t_s`` on."""
        return t_s - self.start_s > SETTLED_TIME_CONSTANTS * self.time_constant_s

    def offsets(self, times_s: np.ndarray) -> np.ndarray:
        """Offset (3, K, 3) of position, velocity and acceleration at reference times
        ``times_s`` (K,); times before the takeover get the offset at the takeover."""
        tau = self.time_constant_s
        s = np.maximum(np.asarray(times_s, dtype=float) - self.start_s, 0.0)[:, None]  # (K, 1)
        a = self.offset_m[None, :]
        b = self.offset_rate_mps[None, :] + a / tau
        decay = np.exp(-s / tau)
        poly = a + b * s
        out = np.empty((3, s.shape[0], 3))
        out[0] = poly * decay
        out[1] = (b - poly / tau) * decay
        out[2] = (poly / tau - 2.0 * b) / tau * decay
        return out
