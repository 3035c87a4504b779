"""The encoder node's logic without middleware: pair odometry with commands, keep the context
window, and infer the latent z with the active bundle's VND encoder.

Pairing: each ``CtbrCommand`` carries the stamp of the odometry it answers. When a command
answering odometry stamp S arrives, the state measured at S is looked up in a short odometry
history (a command that overtook its odometry on the way waits for it) and pushed into the
:class:`~vnd_core.context.ContextBuffer` together with the action in effect at S (the
previous command, see :class:`~vnd_core.context.CommandLatch`); then the command
itself is latched. So the context advances once per control tick, at the
policy's pace, and the latent for state S is ready right after the command for S went out.

Command latency: a model with ``action_delay_ticks = d`` pairs transition s_t -> s_{t+1} with
the action issued d ticks before (see :mod:`vnd_core.vnd.data`); the estimator keeps the last
d + 1 actions of the window for that, and, like the training data, the first d transitions
after a window (re)starts get no feature row.

Cost: ``VNDModel.encode`` on a whole window recomputes the prior for all C transitions every
tick (several ms). Only the newest transition is new, so its context-feature row is computed
once on arrival (``context_features`` on a one-transition window, the very function
``encode`` uses) and the GRU runs on the cached rows; a test checks the result equals
``encode`` on the window.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np
import torch

from vnd_core.context import BREAK_GAP, CommandLatch, ContextBuffer, ContextConfig
from vnd_core.counters import ReasonCounter
from vnd_core.vnd.features import context_features

if TYPE_CHECKING:
    from vnd_core.vnd.model import VNDModel

UNPAIRED_COMMAND = "unpaired_command"  # no odometry with the command's stamp is held
NON_FINITE_ODOM = "odom_non_finite"  # odometry with NaN/inf, dropped
ENCODER_ERROR = "encoder_error"  # the encoder raised or gave a non-finite z


class LatentEstimator:
    """Context window and latent inference (see the module docstring).

    Args:
        max_gap_ms: two context entries further apart than this break the context.
        odom_history: odometry samples kept for pairing with commands.
    """

    def __init__(self, max_gap_ms: float = 45.0, odom_history: int = 32) -> None:
        self.max_gap_ms = max_gap_ms
        self.counters = ReasonCounter()
        self._odom: deque[tuple[int, np.ndarray]] = deque(maxlen=odom_history)
        # commands that arrived before the odometry they answer, oldest first
        self._pending: deque[tuple[int, np.ndarray]] = deque(maxlen=8)
        self._latch = CommandLatch()
        self._model: VNDModel | None = None
        self.buffer = ContextBuffer(ContextConfig(context_len=1, max_gap_ms=max_gap_ms))
        self._rows: deque[torch.Tensor] = deque(maxlen=1)  # feature rows (28,), oldest first
        # actions of the newest transitions of the window, oldest first (d + 1 of them)
        self._actions: deque[np.ndarray] = deque(maxlen=1)
        self._last_state: np.ndarray | None = None  # newest state in the buffer
        self._stale_entry_ns: int | None = None  # newest entry found stale at the last gap check

    @property
    def context_len(self) -> int:
        """C of the current buffer (the active model's, 1 without a model)."""
        return self.buffer.context_len

    def set_model(self, model: VNDModel | None) -> None:
        """Use ``model`` (a VNDModel, or None) from now on; keeps the context when its C and
        prior are unchanged, else starts a fresh window of the new length."""
        old = self._model
        self._model = model
        same_prior = (
            old is not None
            and model is not None
            and old.context_len == model.context_len
            and _delay(old) == _delay(model)
            and old.vehicle == model.vehicle
            and old.prior.config == model.prior.config
        )
        if same_prior:
            return
        c = model.context_len if model is not None else 1
        if c != self.buffer.context_len:
            self.buffer = ContextBuffer(ContextConfig(context_len=c, max_gap_ms=self.max_gap_ms))
            self._last_state = None
        d = _delay(model)
        self._rows = deque(maxlen=c)
        self._actions = deque(maxlen=d + 1)
        window = self.buffer.window() if model is not None else None
        if window is not None and model is not None:  # same window, another prior: recompute
            states, actions = window  # (C + 1, 13), (C, 4); a_k drives s_k
            if len(actions) > d:
                with torch.inference_mode():
                    rows = context_features(
                        model.prior, _f32(states[d:]), _f32(actions[: len(actions) - d])
                    )
                self._rows.extend(rows)
            self._actions.extend(actions[-(d + 1) :])

    def add_odometry(self, stamp_ns: int, state: np.ndarray) -> bool:
        """Keep one odometry sample (13,) for pairing (a non-finite one is counted and
        dropped); True when a command waiting for this sample advanced the context."""
        state = np.asarray(state, dtype=float)
        if not np.isfinite(state).all():
            self.counters.count(NON_FINITE_ODOM)
            return False
        self._odom.append((stamp_ns, state))
        pushed = False
        while self._pending and self._pending[0][0] <= stamp_ns:
            answered_ns, action = self._pending.popleft()
            pushed |= self._pair(answered_ns, self._state_at(answered_ns), action)
        return pushed

    def add_command(self, answered_stamp_ns: int, action: np.ndarray) -> bool:
        """Fold in a command (4,) answering odometry ``answered_stamp_ns``; True when the
        context advanced (the answered state was pushed). A command that overtook its
        odometry waits for it (see :meth:`add_odometry`)."""
        newest_ns = self._odom[-1][0] if self._odom else None
        if self._pending or newest_ns is None or answered_stamp_ns > newest_ns:
            self._pending.append((answered_stamp_ns, np.asarray(action, dtype=float)))
            return False
        return self._pair(answered_stamp_ns, self._state_at(answered_stamp_ns), action)

    def _pair(self, answered_ns: int, state: np.ndarray | None, action: np.ndarray) -> bool:
        """Push ``state`` with the action in effect before it, then latch ``action``."""
        pushed = False
        if state is None:
            self.counters.count(UNPAIRED_COMMAND)
        else:
            previous = self._last_state if len(self.buffer) else None
            prior_action = self._latch.action_before(answered_ns)
            pushed = self.buffer.push(answered_ns, state, prior_action)
            if pushed:
                self._on_push(previous, prior_action, state)
            elif not len(self.buffer):  # refused and cleared (no action or not finite)
                self._rows.clear()
                self._actions.clear()
        self._latch.add(answered_ns, action)
        return pushed

    def break_on_gap(self, now_ns: int) -> bool:
        """Clear the context when its newest entry is older than the gap limit at ``now_ns``
        and already was at the previous call with no entry since (the command stream
        stopped); True when it was cleared now.

        One stale call is not enough: it is what a late call looks like when this process was
        itself held up (a bundle swap, a busy core) while the commands that continue the
        window wait, untaken, behind the timer. Clearing then threw away a window the next
        messages would have continued: 0.45 s of invalid latents (z = 0) under wind. A real
        gap inside the stream still breaks the window at once, by the entries' own stamps
        (:class:`ContextBuffer`)."""
        last = self.buffer.last_stamp_ns
        if last is None or now_ns - last <= self.max_gap_ms * 1e6:
            self._stale_entry_ns = None
            return False
        if self._stale_entry_ns != last:  # first call that finds this entry stale
            self._stale_entry_ns = last
            return False
        self._stale_entry_ns = None
        self.buffer.clear()
        self.buffer.counters.count(BREAK_GAP)
        self._rows.clear()
        self._actions.clear()
        return True

    @property
    def valid(self) -> bool:
        """True when a full context and a model are there."""
        return (
            self._model is not None
            and self.buffer.valid
            and len(self._rows) == self.buffer.context_len
        )

    @property
    def newest_stamp_ns(self) -> int | None:
        """Stamp of the newest odometry in the context (None when empty)."""
        return self.buffer.last_stamp_ns

    def latent(self) -> np.ndarray | None:
        """z (nz,) float32 of the current window, or None while not valid (or on an error)."""
        model = self._model
        if not self.valid or model is None:
            return None
        features = torch.stack(list(self._rows)).unsqueeze(0)  # (1, C, 28)
        try:
            with torch.inference_mode():
                z = model.encoder(features)[0].numpy()
        except Exception:  # a broken encoder must not kill the node: counted, z invalid
            self.counters.count(ENCODER_ERROR)
            return None
        if not np.isfinite(z).all():
            self.counters.count(ENCODER_ERROR)
            return None
        return z.astype(np.float32, copy=False)

    def all_counters(self) -> dict[str, int]:
        """Pairing, context and encoder counters by reason."""
        return {**self.buffer.counters.totals, **self.counters.totals}

    # ------------------------------------------------------------------ internals
    def _state_at(self, stamp_ns: int) -> np.ndarray | None:
        for held_ns, state in reversed(self._odom):
            if held_ns == stamp_ns:
                return state
            if held_ns < stamp_ns:
                break
        return None

    def _on_push(
        self, previous: np.ndarray | None, action: np.ndarray | None, state: np.ndarray
    ) -> None:
        """Keep the feature rows in step with the buffer after a successful push."""
        if len(self.buffer) == 1:  # the push started a new window (first entry or gap)
            self._rows.clear()
            self._actions.clear()
        elif self._model is not None and previous is not None:
            self._actions.append(np.asarray(action, dtype=float))
            if len(self._actions) == self._actions.maxlen:  # a_{t-d} of transition t is held
                states = _f32(np.stack([previous, state]))
                delayed = _f32(self._actions[0][None])
                with torch.inference_mode():
                    row = context_features(self._model.prior, states, delayed)[0]
                self._rows.append(row)
        self._last_state = state


def _delay(model: VNDModel | None) -> int:
    """Command delay d (ticks) the model's transitions are paired with (0 without a model)."""
    return model.config.action_delay_ticks if model is not None else 0


def _f32(array: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.asarray(array), dtype=torch.float32)
