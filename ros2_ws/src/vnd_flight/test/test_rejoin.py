"""The reference a policy rejoins after a fallback starts at the vehicle and converges onto the
scheduled reference."""

from __future__ import annotations

import numpy as np
import pytest
from vnd_flight.rejoin import SETTLED_TIME_CONSTANTS, ReferenceRejoin


def rejoin(tau_s: float = 1.0) -> ReferenceRejoin:
    reference = np.array([[0.0, 0.0, 1.2], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    state = np.zeros(13)
    state[0:3] = (1.0, -0.5, 1.0)  # a metre off, at rest while the reference moves at 2 m/s
    state[3] = 1.0
    return ReferenceRejoin.between(
        start_s=10.0, reference=reference, state=state, time_constant_s=tau_s
    )


def test_the_rejoined_reference_starts_at_the_vehicles_position_and_velocity():
    r = rejoin()
    at_start = r.offsets(np.array([10.0]))[:, 0, :]
    np.testing.assert_allclose(at_start[0], [1.0, -0.5, -0.2])  # vehicle minus reference
    np.testing.assert_allclose(at_start[1], [-2.0, 0.0, 0.0])


def test_the_offset_is_smooth_and_its_derivatives_match():
    r = rejoin(0.7)
    t = 10.0 + np.linspace(0.0, 3.0, 3001)
    off = r.offsets(t)
    dt = t[1] - t[0]
    np.testing.assert_allclose(np.gradient(off[0], dt, axis=0)[1:-1], off[1][1:-1], atol=1e-4)
    np.testing.assert_allclose(np.gradient(off[1], dt, axis=0)[1:-1], off[2][1:-1], atol=1e-3)


@pytest.mark.parametrize("tau_s", [0.5, 1.0, 2.0])
def test_the_offset_settles_within_its_time_constants(tau_s):
    r = rejoin(tau_s)
    end = 10.0 + SETTLED_TIME_CONSTANTS * tau_s
    assert np.abs(r.offsets(np.array([end]))).max() < 0.01
    assert not r.settled(end - 0.01) and r.settled(end + 0.01)


def test_a_non_positive_time_constant_is_refused():
    with pytest.raises(ValueError, match="time_constant_s"):
        rejoin(0.0)
