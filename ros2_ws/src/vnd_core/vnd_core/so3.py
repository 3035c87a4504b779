"""Differentiable SO(3) helpers on quaternions (w, x, y, z), batched over leading dims.

These live inside the torch graph (dynamics, residual targets, training). Conversions
outside the graph (pose filter, bridges, reports) use transforms3d instead.
"""

from __future__ import annotations

import torch

_SMALL_ANGLE = 1e-6


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product a * b of quaternions (..., 4) -> (..., 4)."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        dim=-1,
    )


def quat_conj(q: torch.Tensor) -> torch.Tensor:
    """Conjugate (inverse for unit quaternions), (..., 4)."""
    return q * q.new_tensor([1.0, -1.0, -1.0, -1.0])


def quat_normalize(q: torch.Tensor) -> torch.Tensor:
    """Project (..., 4) back onto the unit sphere."""
    return q / q.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def quat_to_rotmat(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrix (..., 3, 3) of unit quaternion q (..., 4); maps body to world."""
    w, x, y, z = q.unbind(-1)
    row0 = torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1)
    row1 = torch.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1)
    row2 = torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)
    return torch.stack([row0, row1, row2], dim=-2)


def body_z_axis(q: torch.Tensor) -> torch.Tensor:
    """Third column of the rotation matrix: body z in world, (..., 3). Cheaper than the matrix."""
    w, x, y, z = q.unbind(-1)
    return torch.stack([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)], -1)


def rotate(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors v (..., 3) from body to world by unit quaternion q (..., 4)."""
    qv = q[..., 1:]
    t = 2.0 * torch.cross(qv, v, dim=-1)
    return v + q[..., :1] * t + torch.cross(qv, t, dim=-1)


def rotate_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors v (..., 3) from world to body by unit quaternion q (..., 4)."""
    return rotate(quat_conj(q), v)


def exp_map(rotvec: torch.Tensor) -> torch.Tensor:
    """Unit quaternion (..., 4) of rotation vector (..., 3) in rad; smooth through zero."""
    angle_sq = (rotvec * rotvec).sum(-1, keepdim=True)
    angle = torch.sqrt(angle_sq + _SMALL_ANGLE**2)
    half = 0.5 * angle
    # sin(half)/angle with its Taylor series near zero keeps gradients finite.
    small = angle_sq < 1e-8
    scale = torch.where(small, 0.5 - angle_sq / 48.0, torch.sin(half) / angle)
    w = torch.where(small, 1.0 - angle_sq / 8.0, torch.cos(half))
    return torch.cat([w, rotvec * scale], dim=-1)


def log_map(q: torch.Tensor) -> torch.Tensor:
    """Rotation vector (..., 3) in rad of unit quaternion (..., 4), angle in [0, pi]."""
    q = torch.where(q[..., :1] < 0, -q, q)  # shortest rotation
    w = q[..., :1].clamp(-1.0, 1.0)
    xyz = q[..., 1:]
    s = xyz.norm(dim=-1, keepdim=True)
    angle = 2.0 * torch.atan2(s, w)
    small = s < 1e-6
    scale = torch.where(small, 2.0 / w.clamp_min(1e-6), angle / s.clamp_min(1e-12))
    return xyz * scale


def rotvec_diff(q_a: torch.Tensor, q_b: torch.Tensor) -> torch.Tensor:
    """Manifold difference q_a ⊖ q_b = log(q_b^-1 * q_a), body frame of q_b, (..., 3) rad.

    It is the body-frame rotation that takes q_b to q_a: ``q_a = q_b * exp(result)``.
    """
    return log_map(quat_mul(quat_conj(q_b), q_a))


def rotvec_add(q: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """Manifold sum q ⊕ delta = q * exp(delta), the inverse of :func:`rotvec_diff`."""
    return quat_normalize(quat_mul(q, exp_map(delta)))


def rotmat_6d(q: torch.Tensor) -> torch.Tensor:
    """First two columns of the rotation matrix, flattened: a continuous 6-D attitude (..., 6).

    Every entry is a quadratic form of q (the same ones as :func:`quat_to_rotmat`), so the six
    come from one product of the outer product q q^T with a constant map: a handful of ops
    instead of some forty, which matters in the per-tick training graph.
    """
    key = (q.dtype, q.device)
    if key not in _ROT6_CACHE:
        _ROT6_CACHE[key] = (_ROT6_MAP.to(*key[::-1]), _ROT6_OFFSET.to(*key[::-1]))
    rot6_map, rot6_offset = _ROT6_CACHE[key]
    outer = (q.unsqueeze(-1) * q.unsqueeze(-2)).flatten(-2)  # (..., 16), q_i q_j row-major
    return torch.matmul(outer, rot6_map) + rot6_offset


def _rot6_map() -> tuple[torch.Tensor, torch.Tensor]:
    """Map (16, 6) and offset (6,) with rotmat_6d(q) = flatten(q q^T) @ map + offset."""
    w, x, y, z = range(4)
    columns = [  # R00, R10, R20, R01, R11, R21 (offset 1 on the diagonal entries)
        {(y, y): -2.0, (z, z): -2.0},
        {(x, y): 2.0, (w, z): 2.0},
        {(x, z): 2.0, (w, y): -2.0},
        {(x, y): 2.0, (w, z): -2.0},
        {(x, x): -2.0, (z, z): -2.0},
        {(y, z): 2.0, (w, x): 2.0},
    ]
    rot6_map = torch.zeros(16, 6, dtype=torch.float64)
    for col, terms in enumerate(columns):
        for (i, j), coef in terms.items():
            rot6_map[4 * i + j, col] = coef
    return rot6_map, torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64)


_ROT6_MAP, _ROT6_OFFSET = _rot6_map()
# The float32 CPU maps exist from import on: a compiled graph that reads them then does not
# depend on whether anything called rotmat_6d before it was built (dynamo guards on that).
_ROT6_CACHE: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, torch.Tensor]] = {
    (torch.float32, torch.device("cpu")): (_ROT6_MAP.float(), _ROT6_OFFSET.float())
}
