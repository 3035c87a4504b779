"""SO(3) helpers: exp/log, manifold difference/sum, rotation matrices against transforms3d, and
the plant's numpy rotation maps against the torch helpers."""

from __future__ import annotations

import math

import numpy as np
import torch
import transforms3d
from hypothesis import given, settings
from hypothesis import strategies as st
from vnd_core import so3
from vnd_core.plant_parts import cross_np, quat_exp_np, quat_mul_np, rotmat_np

finite = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False)
vec3 = st.tuples(finite, finite, finite)
quat_raw = st.tuples(finite, finite, finite, finite).filter(lambda q: sum(c * c for c in q) > 1e-2)


def _unit(q) -> torch.Tensor:
    return so3.quat_normalize(torch.tensor(q, dtype=torch.float64))


def _same_rotation(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-9) -> bool:
    """q and -q are the same rotation."""
    return bool(torch.allclose(a, b, atol=atol) or torch.allclose(a, -b, atol=atol))


@settings(max_examples=50, deadline=None)
@given(vec3)
def test_exp_log_round_trip(rotvec):
    r = torch.tensor(rotvec, dtype=torch.float64)
    if r.norm() > math.pi - 1e-3:  # log returns the shortest rotation, angle in [0, pi]
        r = r * ((math.pi - 1e-3) / r.norm())
    assert torch.allclose(so3.log_map(so3.exp_map(r)), r, atol=1e-9)


@settings(max_examples=50, deadline=None)
@given(quat_raw)
def test_log_exp_round_trip_of_quaternions(q):
    q = _unit(q)
    assert _same_rotation(so3.exp_map(so3.log_map(q)), q)


def test_exp_map_small_angles_are_unit_and_first_order():
    r = torch.tensor([[1e-9, -2e-9, 3e-9], [0.0, 0.0, 0.0], [1e-5, 0.0, 0.0]], dtype=torch.float64)
    q = so3.exp_map(r)
    assert torch.allclose(q.norm(dim=-1), torch.ones(3, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(q[:, 1:], 0.5 * r, rtol=1e-6, atol=1e-15)


@settings(max_examples=50, deadline=None)
@given(quat_raw, quat_raw)
def test_rotvec_add_inverts_rotvec_diff(qa, qb):
    q_a, q_b = _unit(qa), _unit(qb)
    assert _same_rotation(so3.rotvec_add(q_b, so3.rotvec_diff(q_a, q_b)), q_a)


@settings(max_examples=50, deadline=None)
@given(quat_raw, vec3)
def test_rotvec_diff_inverts_rotvec_add(q, delta):
    q = _unit(q)
    d = torch.tensor(delta, dtype=torch.float64)
    if d.norm() > math.pi - 1e-3:
        d = d * ((math.pi - 1e-3) / d.norm())
    assert torch.allclose(so3.rotvec_diff(so3.rotvec_add(q, d), q), d, atol=1e-8)


@settings(max_examples=40, deadline=None)
@given(quat_raw)
def test_quat_to_rotmat_matches_transforms3d(q):
    q = _unit(q)
    expected = transforms3d.quaternions.quat2mat(q.numpy())
    assert np.allclose(so3.quat_to_rotmat(q).numpy(), expected, atol=1e-12)
    assert np.allclose(so3.body_z_axis(q).numpy(), expected[:, 2], atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(quat_raw, quat_raw, vec3)
def test_quat_mul_and_rotate_match_transforms3d(qa, qb, v):
    q_a, q_b = _unit(qa), _unit(qb)
    vec = torch.tensor(v, dtype=torch.float64)
    product = transforms3d.quaternions.qmult(q_a.numpy(), q_b.numpy())
    assert np.allclose(so3.quat_mul(q_a, q_b).numpy(), product, atol=1e-12)
    rotated = transforms3d.quaternions.rotate_vector(vec.numpy(), q_a.numpy())
    assert np.allclose(so3.rotate(q_a, vec).numpy(), rotated, atol=1e-12)
    assert torch.allclose(so3.rotate_inverse(q_a, so3.rotate(q_a, vec)), vec, atol=1e-12)


def test_rotmat_6d_holds_the_first_two_columns():
    q = so3.quat_normalize(torch.randn(5, 4, dtype=torch.float64))
    rot = so3.quat_to_rotmat(q)
    six = so3.rotmat_6d(q)
    assert torch.allclose(six[:, :3], rot[:, :, 0]) and torch.allclose(six[:, 3:], rot[:, :, 1])


def test_helpers_batch_over_leading_dims():
    q = so3.quat_normalize(torch.randn(2, 3, 4))
    v = torch.randn(2, 3, 3)
    assert so3.quat_to_rotmat(q).shape == (2, 3, 3, 3)
    assert so3.rotate(q, v).shape == (2, 3, 3)
    assert so3.rotvec_diff(q, q).abs().max() < 1e-3


def test_plant_numpy_rotations_match_torch_helpers():
    gen = torch.Generator().manual_seed(3)
    q = so3.quat_normalize(torch.randn(64, 4, generator=gen, dtype=torch.float64))
    r = so3.quat_normalize(torch.randn(64, 4, generator=gen, dtype=torch.float64))
    a = torch.randn(64, 3, generator=gen, dtype=torch.float64)
    b = torch.randn(64, 3, generator=gen, dtype=torch.float64)
    a[0] = 0.0  # the zero rotation vector must map to the identity
    assert np.allclose(rotmat_np(q.numpy()), so3.quat_to_rotmat(q).numpy(), atol=1e-12)
    assert np.allclose(quat_mul_np(q.numpy(), r.numpy()), so3.quat_mul(q, r).numpy(), atol=1e-12)
    assert np.allclose(quat_exp_np(a.numpy()), so3.exp_map(a).numpy(), atol=1e-9)
    assert np.allclose(quat_exp_np(a.numpy())[0], [1.0, 0.0, 0.0, 0.0])
    assert np.allclose(cross_np(a.numpy(), b.numpy()), np.cross(a.numpy(), b.numpy()), atol=1e-12)
