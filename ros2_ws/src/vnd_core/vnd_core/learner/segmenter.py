"""Cutting a stamp-ordered tick stream into the contiguous runs the model learns from.

A run ends where two consecutive ticks are more than ``gap_factor`` control periods apart (a
dropped odometry, a pause, an evicted chunk) or where the controller mode changes. Only runs in
POLICY mode are learned from: fallback and landing ticks follow another controller and may touch
the ground (contact dynamics the flight model must not absorb), and idle or disarmed ticks carry
no meaningful command.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from vnd_core.learner.records import MODE_POLICY, TickRecords
from vnd_core.state import POS, VEL
from vnd_core.vnd.data import NO_LABEL, Segment


def split_runs(
    stamp_ns: np.ndarray,
    mode: np.ndarray,
    period_s: float,
    gap_factor: float = 1.5,
    learn_mode: int = MODE_POLICY,
) -> list[slice]:
    """Slices of contiguous ``learn_mode`` ticks in stamp-ordered ``stamp_ns`` (N,), ``mode`` (N,).

    A run breaks where the stamp step exceeds ``gap_factor * period_s`` or is not positive, or
    where the mode changes; runs in another mode are dropped.
    """
    n = len(stamp_ns)
    if n == 0:
        return []
    step_ns = np.diff(stamp_ns.astype(np.int64))
    max_step_ns = math.floor(gap_factor * period_s * 1e9)  # integer steps: same comparison
    breaks = (step_ns > max_step_ns) | (step_ns <= 0) | (np.diff(mode.astype(np.int64)) != 0)
    edges = np.concatenate([[0], np.flatnonzero(breaks) + 1, [n]])
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges) if mode[a] == learn_mode]


def to_segments(
    records: TickRecords,
    period_s: float,
    gap_factor: float = 1.5,
    label_ids: dict[str, int] | None = None,
    min_ticks: int = 2,
    velocity_half_window: int = 0,
) -> list[Segment]:
    """Learnable :class:`Segment` s of stamp-ordered ``records`` (runs of >= ``min_ticks``).

    ``label_ids`` maps condition names to integer labels (unknown names get new ids, added to
    the dict); without condition data, labels are NO_LABEL. ``velocity_half_window`` > 0
    replaces each run's velocities by :func:`position_slope_velocity` (0: as recorded); the
    recorded states stay the segment's ``context_states``, what the encoder reads in flight.
    """
    segments = []
    for run in split_runs(records.stamp_ns, records.mode, period_s, gap_factor):
        if run.stop - run.start < max(min_ticks, 2):
            continue
        labels = None
        if records.condition is not None and label_ids is not None:
            labels = np.array([_label_id(str(c), label_ids) for c in records.condition[run]])
        elif records.condition is not None:
            labels = np.full(run.stop - run.start, NO_LABEL)
        recorded = records.state[run]
        if velocity_half_window > 0:
            state = recorded.copy()
            state[:, VEL] = position_slope_velocity(
                records.stamp_ns[run], state[:, POS], state[:, VEL], velocity_half_window
            )
            segments.append(Segment(state, records.action[run], labels, recorded))
        else:
            segments.append(Segment(recorded, records.action[run], labels))
    return segments


def position_slope_velocity(
    stamp_ns: np.ndarray, position_m: np.ndarray, velocity_mps: np.ndarray, half_window: int
) -> np.ndarray:
    """Velocity (N, 3) [m/s] of one contiguous run for learning: at every tick with
    ``half_window`` ticks on both sides, the derivative at that tick of the least-squares
    quadratic through the position over those 2 h + 1 ticks (at their stamps, so stamp jitter
    does not bias it); the other ticks keep ``velocity_mps``.

    Why: the model learns per-tick velocity changes, and the pose filter's velocity is too noisy
    for that (0.035-0.045 m/s RMS against the simulator's truth in ``make demo``, while wind A
    changes the velocity by 0.028 m/s per tick). With noise in both input and target the
    residual learns to damp it, and policies trained on such a model lose calm tracking
    (simulated-time data with that much velocity noise added reproduce the calm gate's
    rejections). The learner is not in the control loop, so it can look ahead: the centred fit
    over 9 ticks of 1-mm positions has about 7 mm/s of noise and no lag, and is exact for
    constant acceleration.
    """
    n, h = len(stamp_ns), half_window
    out = np.array(velocity_mps, dtype=np.float64, copy=True)
    if h < 1 or n < 2 * h + 1:
        return out
    t = (stamp_ns - stamp_ns[0]).astype(np.float64) * 1e-9
    windows_t = np.lib.stride_tricks.sliding_window_view(t, 2 * h + 1)  # (M, 2h + 1)
    windows_p = np.lib.stride_tricks.sliding_window_view(position_m, 2 * h + 1, axis=0)
    tau = windows_t - windows_t[:, h : h + 1]  # time from the centre tick
    basis = np.stack([np.ones_like(tau), tau, tau**2], axis=-1)  # (M, 2h + 1, 3)
    normal = basis.transpose(0, 2, 1) @ basis  # (M, 3, 3)
    rhs = basis.transpose(0, 2, 1) @ windows_p.transpose(0, 2, 1)  # (M, 3, 3 axes)
    coefficients = np.linalg.solve(normal, rhs)  # (M, [c0, c1, c2], 3 axes)
    out[h : n - h] = coefficients[:, 1, :]
    return out


def _label_id(name: str, label_ids: dict[str, int]) -> int:
    """Integer id of condition ``name`` (a new id for a new name; NO_LABEL for "")."""
    if not name:
        return NO_LABEL
    return label_ids.setdefault(name, len(label_ids))
