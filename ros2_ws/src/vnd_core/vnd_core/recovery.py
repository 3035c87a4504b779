"""Recovery time after a condition starts: one definition for ``vnd fly`` reports and ``vnd eval``.

The question is how long after the onset the vehicle flies as well as it will for the rest of
the phase. On a periodic reference (figure-eight, circle) "as well as it will" is not one
number: under wind the steady error swings with the point of the figure (0.05 to 0.15 m on the
figure-eight under 4 m/s wind). Compared against one steady level, that swing reads as "not yet
recovered" whenever the vehicle is at a bad point of the figure, and the smaller the steady
error the larger the swing is relative to it: measured that way, the privileged oracle takes
1.8 s and the non-adapting base policy 0.2 s for the return of wind A. So the steady level is
a profile over the reference period:

- steady profile ``s(phi)``: RMS of the error over the second half of the phase, per bin of the
  reference phase ``phi = t mod T`` (``BIN_S`` wide); a constant (the RMS of the second half)
  when the reference is not periodic (hover).
- ``m(t)``: RMSE over the window of ``WINDOW_S`` centred on t (ticks of the phase only);
  ``l(t)``: the steady profile's RMS over the same ticks; the band is
  ``FACTOR * l(t) + TOLERANCE_M`` (the tolerance keeps the cycle-to-cycle spread of a settled
  figure-eight, about 8 mm on calm flight, from reading as an excursion).
- recovery: 0 when ``m`` never leaves the band in the first half of the phase; otherwise the
  first time after that half's largest excess ``m / band`` at which ``m`` stays within the band
  for ``HOLD_S``, measured from the onset. Never: censored, reported as the phase length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WINDOW_S = 1.0  # width of the centred moving-RMSE window [s]
FACTOR = 1.2  # "recovered": moving RMSE within this factor of the steady level there
TOLERANCE_M = 0.01  # absolute allowance on top of FACTOR times the steady level [m]
HOLD_S = 0.5  # the moving RMSE must stay within the band this long [s]
BIN_S = 0.2  # width of a reference-phase bin of the steady profile [s]


@dataclass(frozen=True)
class Recovery:
    """Recovery of one phase (see the module docstring)."""

    recovery_s: float  # time from the onset to recovery [s] (phase length when censored)
    steady_m: float  # RMS of the error over the second half of the phase [m]
    peak_m: float  # largest moving RMSE in the first half [m]
    censored: bool  # never recovered within the phase


def moving_rmse(t_s: np.ndarray, err_m: np.ndarray, window_s: float = WINDOW_S) -> np.ndarray:
    """RMSE over the centred window ``[t - w/2, t + w/2]`` at every sample (t sorted)."""
    cumulative = np.concatenate([[0.0], np.cumsum(np.square(err_m))])
    lo = np.searchsorted(t_s, t_s - window_s / 2, side="left")
    hi = np.searchsorted(t_s, t_s + window_s / 2, side="right")
    return np.sqrt((cumulative[hi] - cumulative[lo]) / np.maximum(hi - lo, 1))


def steady_profile(
    t_s: np.ndarray, err_m: np.ndarray, steady: np.ndarray, period_s: float | None
) -> np.ndarray:
    """Steady level [m] at every sample: the RMS of the ``steady`` samples (bool mask) in the
    same reference-phase bin (``period_s`` None: of all of them)."""
    overall = float(np.sqrt(np.mean(np.square(err_m[steady]))))
    if period_s is None or period_s <= 0:
        return np.full(len(t_s), overall)
    bins = max(1, round(period_s / BIN_S))
    index = np.floor(np.mod(t_s, period_s) / period_s * bins).astype(int) % bins
    total = np.bincount(index[steady], np.square(err_m[steady]), minlength=bins)
    count = np.bincount(index[steady], minlength=bins)
    level = np.where(count > 0, np.sqrt(total / np.maximum(count, 1)), overall)
    return level[index]


def recovery(
    t_s: np.ndarray,
    err_m: np.ndarray,
    start_s: float,
    end_s: float,
    period_s: float | None = None,
) -> Recovery | None:
    """Recovery of the phase ``[start_s, end_s)`` from its samples ``t_s`` (sorted scenario
    times [s]) and ``err_m`` (position errors [m]); ``period_s`` is the reference's period (None
    for a hover point). None when its samples span less than one window."""
    t_s, err_m = np.asarray(t_s, dtype=float), np.asarray(err_m, dtype=float)
    if len(t_s) < 4 or t_s[-1] - t_s[0] < WINDOW_S:
        return None
    middle = start_s + (end_s - start_s) / 2
    second_half = t_s >= middle
    level = steady_profile(t_s, err_m, second_half, period_s)
    m = moving_rmse(t_s, err_m)
    ratio = m / (FACTOR * moving_rmse(t_s, level) + TOLERANCE_M)  # <= 1: within the band
    first = np.flatnonzero(~second_half)
    steady_m = float(np.sqrt(np.mean(np.square(err_m[second_half]))))
    peak_m = float(m[first].max()) if len(first) else 0.0
    if len(first) == 0 or ratio[first].max() <= 1.0:
        return Recovery(0.0, steady_m, peak_m, False)
    peak = first[np.argmax(ratio[first])]
    inside = ratio <= 1.0
    hold_until = np.searchsorted(t_s, t_s + HOLD_S, side="right")
    # inside[k:hold_until[k]] all True <=> no outside sample in that span
    outside_before = np.concatenate([[0], np.cumsum(~inside)])
    held = (outside_before[hold_until] - outside_before[np.arange(len(t_s))]) == 0
    after = np.flatnonzero(held & (np.arange(len(t_s)) > peak))
    if len(after) == 0:
        return Recovery(float(end_s - start_s), steady_m, peak_m, True)
    return Recovery(float(t_s[after[0]] - start_s), steady_m, peak_m, False)
