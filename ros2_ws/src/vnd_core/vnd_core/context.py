"""Context of recent (state, action) pairs that the latent encoder reads at each control tick.

Layout (the encoder's contract). One entry is pushed per 50 Hz encoder tick ``k``:
``(stamp_ns_k, state_k, action_k)`` where ``state_k`` (13,) is the latest odometry at the tick
and ``action_k`` (4,) is the command in effect when that state was measured, i.e. the latest
command answering an *earlier* odometry stamp (:class:`CommandLatch` picks it). So ``action_k``
drove the vehicle from ``state_{k-1}`` to ``state_k``. With ``C = context_len`` and the buffer
holding entries ``k-C .. k``, :meth:`ContextBuffer.window` returns

    states  (C+1, 13) = state_{k-C}, ..., state_k
    actions (C,   4)  = action_{k-C+1}, ..., action_k

so that ``actions[i]`` is the action applied between ``states[i]`` and ``states[i+1]``: C
transitions and the state that follows the last action, oldest first.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from vnd_core.counters import ReasonCounter
from vnd_core.state import ACTION_DIM, STATE_DIM

# Reasons the buffer was cleared or an entry refused, as counted in ``ContextBuffer.counters``.
BREAK_GAP = "gap"
BREAK_NON_FINITE = "non_finite"
BREAK_NO_ACTION = "no_action"
SKIP_STALE_STAMP = "stale_stamp"


@dataclass(frozen=True)
class ContextConfig:
    """Settings of :class:`ContextBuffer`."""

    context_len: int = 25  # C: number of (state, action) transitions the encoder reads
    max_gap_ms: float = 45.0  # a longer time between two entries' stamps breaks the context

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if self.context_len < 1:
            raise ValueError(f"context_len must be >= 1, got {self.context_len}")
        if not self.max_gap_ms > 0:
            raise ValueError(f"max_gap_ms must be > 0, got {self.max_gap_ms}")


class ContextBuffer:
    """Ring buffer of the last ``context_len + 1`` ticks; see the module docstring for layout.

    The context is valid once it holds ``C + 1`` contiguous entries. It is cleared (and must
    refill) when two entries are more than ``max_gap_ms`` apart, when a state or action is
    non-finite, or when no action is known for a tick. An entry whose stamp is not newer than
    the last one (the odometry did not advance since the previous tick) is skipped, not
    stored twice: if the odometry stays silent, the next fresh entry then breaks on the gap.
    """

    def __init__(self, config: ContextConfig | None = None) -> None:
        self.config = config or ContextConfig()
        self.config.validate()
        self.context_len = self.config.context_len
        self._max_gap_ns = round(self.config.max_gap_ms * 1e6)
        size = self.context_len + 1
        # Preallocated rings: slot (head - 1) % size is the newest entry.
        self._stamps_ns = np.zeros(size, dtype=np.int64)
        self._states = np.zeros((size, STATE_DIM))
        self._actions = np.zeros((size, ACTION_DIM))
        self._slots = np.arange(size)
        self._head = 0
        self._count = 0
        self.counters = ReasonCounter()

    def clear(self) -> None:
        """Drop every entry (e.g. when a new encoder is swapped in)."""
        self._count = 0

    def push(self, stamp_ns: int, state: np.ndarray, action: np.ndarray | None) -> bool:
        """Append one tick: odometry ``stamp_ns``, ``state`` (13,) and the ``action`` (4,) that
        led to it (None when no command is known). Returns True when the entry was stored."""
        last = self.last_stamp_ns
        if last is not None and stamp_ns <= last:
            self.counters.count(SKIP_STALE_STAMP)
            return False
        reason = self._break_reason(stamp_ns, state, action)
        if reason is not None:
            self.counters.count(reason)
            self.clear()
            if reason != BREAK_GAP:
                return False
        slot = self._head
        self._stamps_ns[slot] = stamp_ns
        self._states[slot] = state
        self._actions[slot] = action
        self._head = (slot + 1) % len(self._slots)
        self._count = min(self._count + 1, len(self._slots))
        return True

    def _break_reason(
        self, stamp_ns: int, state: np.ndarray, action: np.ndarray | None
    ) -> str | None:
        if action is None:
            return BREAK_NO_ACTION
        if not (np.isfinite(state).all() and np.isfinite(action).all()):
            return BREAK_NON_FINITE
        last = self.last_stamp_ns
        if last is not None and stamp_ns - last > self._max_gap_ns:
            return BREAK_GAP  # the new entry itself is fine: it starts the refill
        return None

    @property
    def valid(self) -> bool:
        """True when the buffer holds ``C + 1`` contiguous entries."""
        return self._count == len(self._slots)

    def __len__(self) -> int:
        return self._count

    @property
    def last_stamp_ns(self) -> int | None:
        """Stamp of the newest entry (None when empty)."""
        return int(self._stamps_ns[self._head - 1]) if self._count else None

    def window(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(states (C+1, 13), actions (C, 4))`` oldest first, or None while not valid.
        Fresh arrays: the caller may keep or modify them."""
        if not self.valid:
            return None
        order = (self._slots + self._head) % len(self._slots)  # oldest slot first
        return self._states[order], self._actions[order[1:]]


class CommandLatch:
    """Keeps the last few commands with the odometry stamp each one answers, and gives the
    action in effect at a state's stamp: the newest command answering an earlier odometry.

    Commands carry the stamp of the odometry they answer (CtbrCommand.header.stamp), so this
    pairs states and actions correctly whether the policy ticked before or after the encoder.
    """

    def __init__(self, depth: int = 8) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._commands: deque[tuple[int, np.ndarray]] = deque(maxlen=depth)

    def add(self, answered_stamp_ns: int, action: np.ndarray) -> None:
        """Record a command ``action`` (4,) that answers odometry stamped ``answered_stamp_ns``."""
        action = np.asarray(action, dtype=float).reshape(ACTION_DIM).copy()
        if self._commands and answered_stamp_ns < self._commands[-1][0]:
            return  # out of order (a late delivery): newer commands already supersede it
        self._commands.append((answered_stamp_ns, action))

    def action_before(self, stamp_ns: int) -> np.ndarray | None:
        """The newest action answering odometry older than ``stamp_ns``, or None."""
        for answered_ns, action in reversed(self._commands):
            if answered_ns < stamp_ns:
                return action
        return None
