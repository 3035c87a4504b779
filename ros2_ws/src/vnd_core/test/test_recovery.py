"""The shared recovery-time definition (:mod:`vnd_core.recovery`) on error traces whose answer
is known in closed form."""

from __future__ import annotations

import numpy as np
import pytest
from vnd_core.recovery import FACTOR, TOLERANCE_M, moving_rmse, recovery

DT_S = 0.02


def test_late_recovery_and_a_ramp():
    t = np.arange(0.0, 10.0, DT_S)
    err = np.where(t < 5.0, 1.0, 0.1)  # high through the first half, then settled
    rec = recovery(t, err, 0.0, 10.0)
    band = FACTOR * 0.1 + TOLERANCE_M
    # centre of the 1-s window where its share f on the 1 m level gives RMSE = band
    assert rec.recovery_s == pytest.approx(5.5 - (band**2 - 0.01) / 0.99, abs=0.021)
    assert (rec.steady_m, rec.peak_m, rec.censored) == (pytest.approx(0.1), 1.0, False)
    # 1 m for 1 s, then down 0.1 m/s to 0.1 m at 10 s: steady = RMS of 0.6 .. 0.1 m over the
    # second half; a linear error's centred RMSE is its value (to 1e-3)
    ramp = np.where(t < 1.0, 1.0, 1.0 - 0.1 * (t - 1.0))
    steady = np.sqrt((0.6**3 - 0.1**3) / (3 * 0.5))
    rec = recovery(t, ramp, 0.0, 10.0)
    assert rec.steady_m == pytest.approx(steady, abs=2e-3)
    band = FACTOR * steady + TOLERANCE_M
    assert rec.recovery_s == pytest.approx(1.0 + (1.0 - band) / 0.1, abs=0.05)


def test_periodic_steady_error_is_not_an_excursion():
    # Settled error swinging with a 6-s reference (0.05 .. 0.15 m), after a 1-s transient.
    t = np.arange(0.0, 40.0, DT_S)
    err = 0.1 + 0.05 * np.sin(2 * np.pi * t / 6.0)
    err[t < 1.0] = 0.3
    rec = recovery(t, err, 0.0, 40.0, period_s=6.0)
    assert 1.0 <= rec.recovery_s <= 1.5 and not rec.censored
    # Against one steady number a crest of the swing reads as "not recovered": the recovery
    # waits for the next trough.
    flat = recovery(t, err, 0.0, 40.0, period_s=None)
    assert flat.recovery_s > rec.recovery_s + 0.5


def test_spread_within_the_tolerance_is_no_excursion():
    t = np.arange(0.0, 20.0, DT_S)
    err = np.full_like(t, 0.005)
    err[(t > 3.0) & (t < 4.0)] = 0.013  # 8 mm above a 5 mm steady level
    assert recovery(t, err, 0.0, 20.0).recovery_s == 0.0
    err[(t > 3.0) & (t < 4.0)] = 0.03  # 25 mm above: an excursion
    band = FACTOR * 0.005 + TOLERANCE_M
    share = (band**2 - 0.005**2) / (0.03**2 - 0.005**2)  # of the window still on the blip
    assert recovery(t, err, 0.0, 20.0).recovery_s == pytest.approx(4.5 - share, abs=0.03)


def test_too_short_phase():
    t = np.arange(0.0, 0.4, DT_S)
    assert recovery(t, np.full_like(t, 0.1), 0.0, 0.4) is None


def test_moving_rmse_is_centred():
    t = np.arange(0.0, 4.0, DT_S)
    err = np.where(t < 2.0, 0.0, 1.0)
    m = moving_rmse(t, err, 1.0)
    assert m[np.searchsorted(t, 1.0)] == 0.0
    assert m[np.searchsorted(t, 2.0)] == pytest.approx(np.sqrt(26 / 51), abs=1e-9)
