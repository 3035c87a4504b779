"""Tick records, segmentation on gaps and mode changes, and deduplication by stamp."""

from __future__ import annotations

import numpy as np
import pytest
from vnd_core.learner.records import (
    MODE_FALLBACK_HOLD,
    MODE_POLICY,
    TickRecords,
    records_from_arrays,
)
from vnd_core.learner.replay import ReplayBuffer
from vnd_core.learner.segmenter import position_slope_velocity, split_runs, to_segments
from vnd_core.state import POS, VEL, hover_state

PERIOD_S = 0.02
PERIOD_NS = 20_000_000


def hover_records(n: int, start_ns: int = 0, condition: str | None = "calm") -> TickRecords:
    states = hover_state((n,)).double().numpy()
    states[:, 0] = np.arange(n) * 1e-3  # distinguishable rows
    actions = np.tile([9.81, 0.0, 0.0, 0.0], (n, 1))
    return records_from_arrays(states, actions, start_ns, PERIOD_S, condition)


def test_round_trip_through_plain_arrays():
    records = hover_records(5)
    arrays = records.to_arrays()
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in arrays.values())
    back = TickRecords.from_arrays(arrays)
    for name, value in arrays.items():
        np.testing.assert_array_equal(getattr(back, name), value)
    with pytest.raises(ValueError, match="missing"):
        TickRecords.from_arrays({k: v for k, v in arrays.items() if k != "mode"})


def test_shapes_are_checked_with_the_field_name():
    arrays = hover_records(4).to_arrays()
    arrays["action"] = arrays["action"][:, :3]
    with pytest.raises(ValueError, match="action"):
        TickRecords.from_arrays(arrays)
    arrays = hover_records(4).to_arrays()
    arrays["mode"] = arrays["mode"][:3]
    with pytest.raises(ValueError, match="mode"):
        TickRecords.from_arrays(arrays)


def test_concat_keeps_labels_only_when_all_batches_have_them():
    labelled = TickRecords.concat([hover_records(3), hover_records(2, 10 * PERIOD_NS)])
    assert len(labelled) == 5 and list(labelled.condition) == ["calm"] * 5
    mixed = TickRecords.concat([hover_records(3), hover_records(2, 10 * PERIOD_NS, None)])
    assert mixed.condition is None


def test_runs_break_on_gaps_and_mode_changes_and_keep_policy_only():
    stamps = np.arange(12, dtype=np.int64) * PERIOD_NS
    stamps[5:] += PERIOD_NS  # a 2-period step between ticks 4 and 5: a gap (> 1.5 periods)
    stamps[9:] += PERIOD_NS // 4  # a 1.25-period step: jitter, not a gap
    mode = np.full(12, MODE_POLICY, dtype=np.uint8)
    mode[7] = MODE_FALLBACK_HOLD  # one fallback tick inside the second run
    runs = split_runs(stamps, mode, PERIOD_S, 1.5)
    assert [(r.start, r.stop) for r in runs] == [(0, 5), (5, 7), (8, 12)]


def test_segments_carry_condition_labels():
    records = TickRecords.concat([hover_records(6), hover_records(4, 20 * PERIOD_NS, "wind")])
    label_ids: dict[str, int] = {}
    segments = to_segments(records, PERIOD_S, 1.5, label_ids)
    assert [len(s.states) for s in segments] == [6, 4]
    assert label_ids == {"calm": 0, "wind": 1}
    assert list(segments[1].labels) == [1] * 4


def test_position_slope_velocity_is_exact_for_constant_acceleration_and_cuts_noise():
    rng = np.random.default_rng(0)
    stamps = np.arange(200) * PERIOD_NS + rng.integers(-3_000_000, 3_000_000, 200)  # jitter
    t = stamps * 1e-9
    accel = np.array([1.3, -0.7, 0.2])
    position = 0.5 * t[:, None] ** 2 * accel + np.array([0.4, 0.0, -0.2]) * t[:, None]
    truth = t[:, None] * accel + np.array([0.4, 0.0, -0.2])
    recorded = truth + 0.04 * rng.standard_normal((200, 3))  # a pose filter's noisy velocity
    slope = position_slope_velocity(stamps, position, recorded, 4)
    assert np.abs(slope[4:-4] - truth[4:-4]).max() < 1e-9  # centred: no lag, no bias
    assert np.array_equal(slope[:4], recorded[:4]) and np.array_equal(slope[-4:], recorded[-4:])
    noisy = position + 0.001 * rng.standard_normal((200, 3))  # 1 mm position noise
    error = position_slope_velocity(stamps, noisy, recorded, 4)[4:-4] - truth[4:-4]
    assert 0.003 < np.sqrt(np.mean(error**2)) < 0.012  # about 7 mm/s, against 40 mm/s
    assert np.array_equal(position_slope_velocity(stamps[:8], position[:8], recorded[:8], 4),
                          recorded[:8])  # fmt: skip


def test_segments_can_carry_position_slope_velocities():
    records = hover_records(30)
    records.state[:, POS.start] = 0.3 * records.stamp_ns * 1e-9  # 0.3 m/s along x
    (plain,) = to_segments(records, PERIOD_S, 1.5)
    (sloped,) = to_segments(records, PERIOD_S, 1.5, velocity_half_window=4)
    assert np.allclose(plain.states[:, VEL], 0.0)  # as recorded
    assert np.allclose(sloped.states[4:-4, VEL.start], 0.3)
    assert np.allclose(records.state[:, VEL], 0.0)  # the records themselves are unchanged
    assert np.array_equal(sloped.context_states, records.state)  # what the encoder reads
    assert plain.context_states is None


def test_replay_deduplicates_by_stamp_and_sorts():
    buffer = ReplayBuffer(capacity_ticks=1000, period_s=PERIOD_S)
    late = hover_records(5, 5 * PERIOD_NS)
    assert buffer.add(late) == 5
    assert buffer.add(late) == 0  # re-delivered batch
    early = hover_records(8)  # overlaps ticks 5..7 of the stored ones
    assert buffer.add(early) == 5
    doubled = TickRecords.concat([hover_records(2, 40 * PERIOD_NS)] * 2)  # repeats in a batch
    assert buffer.add(doubled) == 2
    assert len(buffer) == 12
    assert np.all(np.diff(buffer.records.stamp_ns) > 0)
