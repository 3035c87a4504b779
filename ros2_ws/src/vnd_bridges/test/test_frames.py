"""FLU/ENU <-> FRD/NED conversions: round trips, consistency and known rotations."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from transforms3d import euler, quaternions
from vnd_flight.bridges import frames

finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False)
vectors = st.tuples(finite, finite, finite).map(np.array)
angles = st.floats(min_value=-math.pi, max_value=math.pi, allow_nan=False)


@st.composite
def unit_quaternions(draw):
    """Uniform-ish unit quaternions (w, x, y, z) from four bounded components."""
    q = np.array([draw(st.floats(-1, 1, allow_nan=False)) for _ in range(4)])
    norm = np.linalg.norm(q)
    if norm < 1e-3:
        q, norm = np.array([1.0, 0.0, 0.0, 0.0]), 1.0
    return q / norm


def same_rotation(q1, q2, atol=1e-9):
    return np.allclose(q1, q2, atol=atol) or np.allclose(q1, -q2, atol=atol)


@given(vectors)
def test_vector_round_trips(v):
    np.testing.assert_allclose(frames.frd_to_flu(frames.flu_to_frd(v)), v, atol=1e-12)
    np.testing.assert_allclose(frames.ned_to_enu(frames.enu_to_ned(v)), v, atol=1e-12)


@given(vectors)
def test_vector_maps_preserve_length(v):
    assert np.linalg.norm(frames.flu_to_frd(v)) == pytest.approx(np.linalg.norm(v))
    assert np.linalg.norm(frames.enu_to_ned(v)) == pytest.approx(np.linalg.norm(v))


@given(unit_quaternions())
def test_quaternion_round_trip(q):
    q_ned_frd = frames.enu_flu_to_ned_frd_quaternion(q)
    assert np.linalg.norm(q_ned_frd) == pytest.approx(1.0)
    assert q_ned_frd[0] >= 0
    assert same_rotation(frames.ned_frd_to_enu_flu_quaternion(q_ned_frd), q)


@given(unit_quaternions(), vectors)
def test_quaternion_conversion_rotates_the_same_physical_vector(q, v_flu):
    # A body vector expressed in FLU, rotated to ENU, must equal the same vector in FRD rotated
    # with the converted attitude to NED, then expressed in ENU.
    v_enu = quaternions.quat2mat(q) @ v_flu
    q_ned_frd = frames.enu_flu_to_ned_frd_quaternion(q)
    v_ned = quaternions.quat2mat(q_ned_frd) @ frames.flu_to_frd(v_flu)
    np.testing.assert_allclose(frames.ned_to_enu(v_ned), v_enu, atol=1e-9)


def test_known_vectors():
    np.testing.assert_array_equal(frames.flu_to_frd([1.0, 2.0, 3.0]), [1.0, -2.0, -3.0])
    # ENU east (x) is NED east (y); ENU up is NED down negated.
    np.testing.assert_array_equal(frames.enu_to_ned([1.0, 2.0, 3.0]), [2.0, 1.0, -3.0])
    batch = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    np.testing.assert_array_equal(frames.enu_to_ned(batch), [[0.0, 1.0, 0.0], [0.0, 0.0, -1.0]])


def test_level_facing_east_in_enu_is_yaw_90_deg_in_ned():
    q_ned_frd = frames.enu_flu_to_ned_frd_quaternion([1.0, 0.0, 0.0, 0.0])
    yaw, pitch, roll = euler.quat2euler(q_ned_frd, "rzyx")
    assert math.degrees(yaw) == pytest.approx(90.0)
    assert pitch == pytest.approx(0.0, abs=1e-12)
    assert roll == pytest.approx(0.0, abs=1e-12)


def test_facing_north_in_enu_is_yaw_0_in_ned():
    q_enu = euler.euler2quat(math.pi / 2, 0.0, 0.0, "rzyx")
    yaw, _, _ = euler.quat2euler(frames.enu_flu_to_ned_frd_quaternion(q_enu), "rzyx")
    assert yaw == pytest.approx(0.0, abs=1e-12)


def test_roll_keeps_its_sign_and_pitch_flips_from_flu_to_frd():
    # +30 deg about the forward axis lowers the right side in both frames; +20 deg about FLU's
    # left axis lowers the nose, which is -20 deg about FRD's right axis.
    q_enu = euler.euler2quat(0.0, math.radians(20.0), math.radians(30.0), "rzyx")
    yaw, pitch, roll = euler.quat2euler(frames.enu_flu_to_ned_frd_quaternion(q_enu), "rzyx")
    assert math.degrees(yaw) == pytest.approx(90.0)
    assert math.degrees(pitch) == pytest.approx(-20.0)
    assert math.degrees(roll) == pytest.approx(30.0)


@given(angles)
def test_yaw_conversion_matches_quaternion_conversion(yaw_enu):
    q_enu = euler.euler2quat(yaw_enu, 0.0, 0.0, "rzyx")
    yaw_ned, _, _ = euler.quat2euler(frames.enu_flu_to_ned_frd_quaternion(q_enu), "rzyx")
    diff = frames.wrap_angle_rad(frames.enu_to_ned_yaw(yaw_enu) - yaw_ned)
    assert diff == pytest.approx(0.0, abs=1e-9)
    back = frames.wrap_angle_rad(frames.ned_to_enu_yaw(frames.enu_to_ned_yaw(yaw_enu)) - yaw_enu)
    assert back == pytest.approx(0.0, abs=1e-9)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="shape"):
        frames.flu_to_frd([1.0, 2.0])
    with pytest.raises(ValueError, match="not unit length"):
        frames.enu_flu_to_ned_frd_quaternion([2.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="not unit length"):
        frames.enu_flu_to_ned_frd_quaternion([math.nan, 0.0, 0.0, 0.0])
