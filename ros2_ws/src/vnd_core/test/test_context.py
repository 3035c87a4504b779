"""ContextBuffer layout, validity, gaps and breaks; CommandLatch pairing by answered stamp."""

from __future__ import annotations

import math

import numpy as np
import pytest
from vnd_core.context import (
    BREAK_GAP,
    BREAK_NO_ACTION,
    BREAK_NON_FINITE,
    SKIP_STALE_STAMP,
    CommandLatch,
    ContextBuffer,
    ContextConfig,
)

TICK_NS = 20_000_000


def entry(k: int) -> tuple[int, np.ndarray, np.ndarray]:
    """Tick k: stamp, a state whose every value is k, an action whose every value is k."""
    return k * TICK_NS, np.full(13, float(k)), np.full(4, float(k))


def filled(context_len: int = 4, ticks: int = 5) -> ContextBuffer:
    buf = ContextBuffer(ContextConfig(context_len=context_len))
    for k in range(ticks):
        assert buf.push(*entry(k))
    return buf


def test_window_layout_pairs_each_action_with_the_state_it_leads_to() -> None:
    buf = filled(context_len=4, ticks=9)
    states, actions = buf.window()
    assert states.shape == (5, 13) and actions.shape == (4, 4)
    assert states[:, 0].tolist() == [4, 5, 6, 7, 8]  # the last C + 1 states, oldest first
    assert actions[:, 0].tolist() == [5, 6, 7, 8]  # actions[i] drove states[i] -> states[i+1]
    assert buf.last_stamp_ns == 8 * TICK_NS


def test_invalid_until_full() -> None:
    buf = ContextBuffer(ContextConfig(context_len=4))
    for k in range(5):
        assert not buf.valid and buf.window() is None
        buf.push(*entry(k))
    assert buf.valid and buf.window() is not None


def test_gap_invalidates_until_refilled() -> None:
    buf = filled(context_len=4, ticks=5)
    assert buf.valid
    stamp, state, action = entry(8)  # 60 ms after the previous entry
    assert buf.push(stamp, state, action)
    assert not buf.valid and len(buf) == 1 and buf.counters.totals == {BREAK_GAP: 1}
    for k in range(9, 13):
        assert not buf.valid
        buf.push(*entry(k))
    states, _ = buf.window()
    assert states[:, 0].tolist() == [8, 9, 10, 11, 12]


def test_jittery_odometry_stamps_within_the_gap_limit_stay_contiguous() -> None:
    buf = ContextBuffer(ContextConfig(context_len=3, max_gap_ms=45.0))
    stamp = 0
    for step_ms in (10, 30, 20, 40, 15):
        stamp += step_ms * 1_000_000
        buf.push(stamp, np.zeros(13), np.zeros(4))
    assert buf.valid and buf.counters.total() == 0


@pytest.mark.parametrize("bad", ["state", "action", "none"])
def test_non_finite_or_missing_action_breaks_the_context(bad: str) -> None:
    buf = filled(context_len=4, ticks=5)
    stamp, state, action = entry(5)
    if bad == "state":
        state[7] = math.nan
    elif bad == "action":
        action[0] = math.inf
    else:
        action = None
    assert not buf.push(stamp, state, action)
    assert len(buf) == 0 and not buf.valid
    expected = BREAK_NO_ACTION if bad == "none" else BREAK_NON_FINITE
    assert buf.counters.totals == {expected: 1}


def test_repeated_odometry_stamp_is_skipped_not_duplicated() -> None:
    buf = filled(context_len=4, ticks=5)
    assert not buf.push(*entry(4))
    assert buf.valid and buf.counters.totals == {SKIP_STALE_STAMP: 1}
    assert buf.window()[0][:, 0].tolist() == [0, 1, 2, 3, 4]


def test_window_is_a_copy() -> None:
    buf = filled(context_len=2, ticks=3)
    states, actions = buf.window()
    states[:] = -1.0
    actions[:] = -1.0
    assert buf.window()[0][0, 0] == 0.0 and buf.window()[1][0, 0] == 1.0


def test_command_latch_picks_the_command_answering_an_earlier_state() -> None:
    latch = CommandLatch()
    assert latch.action_before(100) is None
    latch.add(100, np.full(4, 1.0))
    latch.add(120, np.full(4, 2.0))
    assert latch.action_before(120)[0] == 1.0  # the answer to 120 acts after 120
    assert latch.action_before(121)[0] == 2.0
    latch.add(110, np.full(4, 9.0))  # late delivery of an older answer is ignored
    assert latch.action_before(200)[0] == 2.0


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="context_len"):
        ContextBuffer(ContextConfig(context_len=0))
