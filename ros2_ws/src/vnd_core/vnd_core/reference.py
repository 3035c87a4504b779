"""Reference trajectories (hover, figure-eight, circle) with velocity and acceleration
feed-forward, batched so every environment of a training run can follow its own reference.

All positions are ENU world metres; a trajectory is a closed-form function of time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

KINDS = ("hover", "figure8", "circle")

Vec3 = tuple[float, float, float]


@dataclass(frozen=True)
class ReferenceSpec:
    """One reference trajectory as configured in scenarios, launch files and parameters."""

    kind: str = "hover"  # hover | figure8 | circle
    center_m: Vec3 = (0.0, 0.0, 1.0)  # hover point, or centre of the figure-eight / circle
    amplitude_m: float = 1.2  # figure-eight half-width along x (y: half of it); circle radius
    period_s: float = 6.0  # time for one full figure-eight or circle
    phase_rad: float = 0.0  # start phase along the curve

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.amplitude_m < 0:
            raise ValueError(f"amplitude_m must be >= 0, got {self.amplitude_m}")
        if not self.period_s > 0:
            raise ValueError(f"period_s must be > 0, got {self.period_s}")

    def repeat_period_s(self) -> float | None:
        """Time after which the reference repeats itself (None: a fixed hover point)."""
        return None if self.kind == "hover" else self.period_s

    def peak_speed_mps(self) -> float:
        """Highest speed along the trajectory."""
        omega = 2.0 * math.pi / self.period_s
        return {"hover": 0.0, "figure8": math.sqrt(2.0), "circle": 1.0}[self.kind] * (
            self.amplitude_m * omega
        )


@dataclass
class ReferenceSample:
    """Reference at some times: each field (..., 3) in m, m/s, m/s^2."""

    position_m: torch.Tensor
    velocity_mps: torch.Tensor
    acceleration_mps2: torch.Tensor

    def stacked(self) -> torch.Tensor:
        """Concatenate to (..., 9): position, velocity, acceleration."""
        return torch.cat([self.position_m, self.velocity_mps, self.acceleration_mps2], dim=-1)


class Trajectory:
    """A batch of B references; ``sample(t_s)`` evaluates them at times ``t_s`` (B,) or (B, L)."""

    def __init__(
        self,
        kind: torch.Tensor,
        center_m: torch.Tensor,
        amplitude_m: torch.Tensor,
        period_s: torch.Tensor,
        phase_rad: torch.Tensor,
    ) -> None:
        """``kind`` (B,) index into KINDS, ``center_m`` (B, 3), the others (B,)."""
        self.kind = kind
        self.center_m = center_m
        self.amplitude_m = amplitude_m
        self.omega_radps = 2.0 * math.pi / period_s
        self.phase_rad = phase_rad

    @property
    def batch_size(self) -> int:
        """Number of references B."""
        return int(self.kind.shape[0])

    @classmethod
    def from_spec(cls, spec: ReferenceSpec, batch_size: int = 1) -> Trajectory:
        """The same reference ``spec`` for each of ``batch_size`` environments."""
        spec.validate()
        full = lambda value: torch.full((batch_size,), float(value))  # noqa: E731
        return cls(
            kind=torch.full((batch_size,), KINDS.index(spec.kind), dtype=torch.long),
            center_m=torch.tensor(spec.center_m, dtype=torch.float32).expand(batch_size, 3).clone(),
            amplitude_m=full(spec.amplitude_m),
            period_s=full(spec.period_s),
            phase_rad=full(spec.phase_rad),
        )

    @classmethod
    def random(
        cls,
        batch_size: int,
        generator: torch.Generator | None = None,
        kind_probs: tuple[float, float, float] = (0.3, 0.4, 0.3),
        amplitude_range_m: tuple[float, float] = (0.3, 1.5),
        period_range_s: tuple[float, float] = (4.0, 10.0),
        center_box_m: tuple[Vec3, Vec3] = ((-0.5, -0.5, 0.8), (0.5, 0.5, 1.5)),
    ) -> Trajectory:
        """Random references for training: kinds drawn with ``kind_probs``, uniform params."""

        def uniform(low: float, high: float, *shape: int) -> torch.Tensor:
            return low + (high - low) * torch.rand(*shape, generator=generator)

        low, high = (torch.tensor(c) for c in center_box_m)
        kind = torch.multinomial(
            torch.tensor(kind_probs), batch_size, replacement=True, generator=generator
        )
        return cls(
            kind=kind,
            center_m=low + (high - low) * torch.rand(batch_size, 3, generator=generator),
            amplitude_m=uniform(*amplitude_range_m, batch_size),
            period_s=uniform(*period_range_s, batch_size),
            phase_rad=uniform(0.0, 2.0 * math.pi, batch_size),
        )

    def sample(self, t_s: torch.Tensor) -> ReferenceSample:
        """Evaluate at ``t_s`` of shape (B,) or (B, L); fields come out (B, 3) or (B, L, 3)."""
        extra = t_s.dim() - 1
        view = lambda x: x.reshape(x.shape[0], *([1] * extra))  # noqa: E731
        amp, omega, kind = view(self.amplitude_m), view(self.omega_radps), view(self.kind)
        phi = omega * t_s + view(self.phase_rad)
        s1, c1 = torch.sin(phi), torch.cos(phi)
        s2, c2 = torch.sin(2.0 * phi), torch.cos(2.0 * phi)
        zero = torch.zeros_like(phi)
        is8 = (kind == 1).to(phi.dtype)
        isc = (kind == 2).to(phi.dtype)
        w, w2 = omega, omega * omega
        # figure-eight (lemniscate of Gerono): x = A sin(phi), y = A/2 sin(2 phi)
        # circle: x = A cos(phi), y = A sin(phi); hover: both weights zero.
        x = amp * (is8 * s1 + isc * c1)
        y = amp * (is8 * 0.5 * s2 + isc * s1)
        vx = amp * w * (is8 * c1 - isc * s1)
        vy = amp * w * (is8 * c2 + isc * c1)
        ax = -amp * w2 * (is8 * s1 + isc * c1)
        ay = -amp * w2 * (is8 * 2.0 * s2 + isc * s1)
        center = self.center_m.reshape(self.center_m.shape[0], *([1] * extra), 3)
        return ReferenceSample(
            position_m=center + torch.stack([x, y, zero], dim=-1),
            velocity_mps=torch.stack([vx, vy, zero], dim=-1),
            acceleration_mps2=torch.stack([ax, ay, zero], dim=-1),
        )

    def lookahead(self, t_s: torch.Tensor, offsets_s: torch.Tensor) -> ReferenceSample:
        """Samples at ``t_s[:, None] + offsets_s[None, :]``: fields (B, L, 3) for L offsets."""
        return self.sample(t_s.unsqueeze(-1) + offsets_s)
