"""Cutting a stamp-ordered tick stream into the contiguous runs the model learns from.

A run ends where two consecutive ticks are more than ``gap_factor`` control periods apart (a
dropped odometry, a pause, an evicted chunk) or where the controller mode changes. Only runs in
POLICY mode are learned from: fallback and landing ticks follow another controller and may touch
the ground (contact dynamics the flight model must not absorb), and idle or disarmed ticks carry
no meaningful command.
"""

from __future__ import annotations

import itertools

import numpy as np

from vnd_core.learner.records import MODE_POLICY, TickRecords
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
    max_step_ns = gap_factor * period_s * 1e9
    breaks = (step_ns > max_step_ns) | (step_ns <= 0) | (np.diff(mode.astype(np.int64)) != 0)
    edges = np.concatenate([[0], np.flatnonzero(breaks) + 1, [n]])
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges) if mode[a] == learn_mode]


def to_segments(
    records: TickRecords,
    period_s: float,
    gap_factor: float = 1.5,
    label_ids: dict[str, int] | None = None,
    min_ticks: int = 2,
) -> list[Segment]:
    """Learnable :class:`Segment` s of stamp-ordered ``records`` (runs of >= ``min_ticks``).

    ``label_ids`` maps condition names to integer labels (unknown names get new ids, added to
    the dict); without condition data, labels are NO_LABEL.
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
        segments.append(Segment(records.state[run], records.action[run], labels))
    return segments


def _label_id(name: str, label_ids: dict[str, int]) -> int:
    """Integer id of condition ``name`` (a new id for a new name; NO_LABEL for "")."""
    if not name:
        return NO_LABEL
    return label_ids.setdefault(name, len(label_ids))
