"""Transition data: contiguous segments of 50 Hz ticks cut into (context, K transitions) windows.

Convention. A segment holds states s_0..s_{N-1} (N, 13) and actions a_0..a_{N-2} (N-1, 4) (an
N-th action, if given, is ignored: it has no observed outcome). Transition t is
``s_t --a_t--> s_{t+1}``. A window starting at transition g uses transitions g..g+C-1 as its
context (states s_g..s_{g+C}, actions a_g..a_{g+C-1}) and the K transitions g+C..g+C+K-1 that
follow it as targets, all predicted from the one latent of that context. At deployment the
encoder at tick t reads s_{t-C}..s_t and a_{t-C}..a_{t-1}, and z serves the prediction from s_t:
the same alignment.

Command latency. When commands reach the vehicle ``d`` ticks after they are logged, the
transition ``s_t -> s_{t+1}`` is driven by ``a_{t-d}``, not by ``a_t``; a residual D(s, a, z)
cannot see the older action and learns only a blurred average. ``action_delay_ticks = d`` pairs
each transition with the action issued d ticks before it (the first d states of a segment lose
their transition). The model records d in its architecture so the deployed encoder and the
policy trainer's command delay can use the same alignment.

Two views of the states. The residual learns from the best estimate of the state there is; the
encoder must learn from what it will read in flight. A segment may therefore carry
``context_states`` (as the pose filter gave them) beside ``states`` (e.g. the learner's
position-slope velocities, :mod:`vnd_core.learner.segmenter`): context windows are built from
the former, residual inputs and targets from the latter. Without them both are ``states``.

Everything that depends only on the data and on the fixed prior (dynamics inputs, prior errors)
is computed once when a segment is added, so a fit step only gathers rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from vnd_core.dynamics import NominalModel
from vnd_core.state import ACTION_DIM, STATE_DIM
from vnd_core.vnd.features import dynamics_input, prior_error

NO_LABEL = -1  # condition label of a tick whose condition is unknown


@dataclass
class Segment:
    """One contiguous run of ticks at the control rate.

    ``states`` (N, 13), ``actions`` (N-1, 4) or (N, 4), ``labels`` (N,) integer condition ids
    (evaluation only; NO_LABEL where unknown) or None, ``context_states`` (N, 13) the states
    the deployed encoder reads for the same ticks, or None (= ``states``).
    """

    states: torch.Tensor | np.ndarray
    actions: torch.Tensor | np.ndarray
    labels: torch.Tensor | np.ndarray | None = None
    context_states: torch.Tensor | np.ndarray | None = None


@dataclass
class WindowBatch:
    """Gathered windows (B of them); see the module docstring for the alignment."""

    context: torch.Tensor  # (B, C, 28) raw context features (of the context states)
    inputs: torch.Tensor  # (B, K, 16) dynamics inputs of the K target transitions
    targets: torch.Tensor  # (B, K, 12) prior errors (residual targets) of those transitions
    states: torch.Tensor  # (B, K+1, 13) observed states s_{g+C}..s_{g+C+K}
    actions: torch.Tensor  # (B, K, 4) actions a_{g+C}..a_{g+C+K-1}
    labels: torch.Tensor  # (B,) condition label of state s_{g+C} (the first predicted-from)


class TransitionDataset:
    """All transitions of a set of segments, with the prior's errors precomputed.

    Rows are transitions, concatenated over segments (segment order is insertion order).
    Storage per transition: state, action, next state, dynamics input and prior error
    (about 60 floats).
    """

    def __init__(
        self,
        prior: NominalModel,
        segments: Iterable[Segment] = (),
        action_delay_ticks: int = 0,
    ) -> None:
        if action_delay_ticks < 0:
            raise ValueError(f"action_delay_ticks must be >= 0, got {action_delay_ticks}")
        self.prior = prior
        self.action_delay_ticks = action_delay_ticks  # see the module docstring
        self._parts: dict[str, list[torch.Tensor]] = {
            k: []
            for k in (
                "state",
                "action",
                "next",
                "inputs",
                "targets",
                "context_inputs",
                "context_targets",
                "labels",
            )
        }
        self._segment_lengths: list[int] = []
        self._cache: dict[str, torch.Tensor] | None = None
        for segment in segments:
            self.add_segment(segment)

    def add_segment(self, segment: Segment) -> bool:
        """Append one segment; one with no transition left after the action delay is
        ignored (returns False), a malformed one raises ValueError."""
        states = torch.as_tensor(segment.states, dtype=torch.float32)
        actions = torch.as_tensor(segment.actions, dtype=torch.float32)
        _check_segment(states, actions)
        labels = (
            torch.full((states.shape[0],), NO_LABEL, dtype=torch.long)
            if segment.labels is None
            else torch.as_tensor(segment.labels, dtype=torch.long).reshape(-1)
        )
        if labels.shape[0] != states.shape[0]:
            raise ValueError(
                f"labels must have one entry per state ({states.shape[0]}), got {labels.shape[0]}"
            )
        delay = self.action_delay_ticks
        n = states.shape[0] - 1 - delay  # transitions s_t -> s_{t+1} for t = delay .. N-2
        if n < 1:
            return False
        states, labels, actions = states[delay:], labels[delay:], actions[:n]
        with torch.no_grad():
            current, following = states[:-1], states[1:]
            inputs = dynamics_input(current, actions)
            targets = prior_error(self.prior, current, actions, following)
            if segment.context_states is not None:
                seen = torch.as_tensor(segment.context_states, dtype=torch.float32)
                if seen.shape != (states.shape[0] + delay, STATE_DIM):
                    raise ValueError(
                        f"context_states must match states {(states.shape[0] + delay, STATE_DIM)}"
                        f", got {tuple(seen.shape)}"
                    )
                seen = seen[delay:]
                context_inputs = dynamics_input(seen[:-1], actions)
                context_targets = prior_error(self.prior, seen[:-1], actions, seen[1:])
            else:
                context_inputs, context_targets = inputs, targets
        self._parts["inputs"].append(inputs)
        self._parts["targets"].append(targets)
        self._parts["context_inputs"].append(context_inputs)
        self._parts["context_targets"].append(context_targets)
        self._parts["state"].append(current)
        self._parts["action"].append(actions)
        self._parts["next"].append(following)
        self._parts["labels"].append(labels[1:])  # label of each outcome state
        self._segment_lengths.append(n)
        self._cache = None
        return True

    def select(self, segment_indices: Iterable[int]) -> TransitionDataset:
        """A dataset of the chosen segments (in the given order), sharing the precomputed rows:
        for eviction and for rolling windows of recent data, without recomputing the prior."""
        chosen = TransitionDataset(self.prior, action_delay_ticks=self.action_delay_ticks)
        for i in segment_indices:
            if not -self.num_segments <= i < self.num_segments:
                raise IndexError(f"segment {i} out of range ({self.num_segments} segments)")
            for key, parts in self._parts.items():
                chosen._parts[key].append(parts[i])
            chosen._segment_lengths.append(self._segment_lengths[i])
        return chosen

    @property
    def segment_lengths(self) -> list[int]:
        """Transitions per segment, in insertion order."""
        return list(self._segment_lengths)

    @property
    def num_transitions(self) -> int:
        """Number of transitions over all segments."""
        return sum(self._segment_lengths)

    @property
    def num_segments(self) -> int:
        """Number of segments added."""
        return len(self._segment_lengths)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Concatenated per-transition tensors (T, ...): state, action, next, inputs, targets,
        labels."""
        if self._cache is None:
            if not self._segment_lengths:
                raise ValueError("the dataset is empty: add at least one segment")
            self._cache = {k: torch.cat(v) for k, v in self._parts.items()}
        return self._cache

    def window_starts(self, context_len: int, horizon: int) -> torch.Tensor:
        """Global index g (M,) of every window with ``context_len`` + ``horizon`` transitions
        inside one segment, in data order."""
        starts, offset = [], 0
        span = context_len + horizon
        for length in self._segment_lengths:
            if length >= span:
                starts.append(torch.arange(offset, offset + length - span + 1))
            offset += length
        return torch.cat(starts) if starts else torch.zeros(0, dtype=torch.long)

    def partner_starts(
        self,
        starts: torch.Tensor,
        context_len: int,
        horizon: int,
        max_offset: int,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """For each window start (B,), a start up to ``max_offset`` transitions later in the
        same segment (the window itself when it is the segment's last), uniformly drawn."""
        span = context_len + horizon
        ends = torch.cumsum(torch.tensor(self._segment_lengths), 0)  # one past each segment
        segment = torch.searchsorted(ends, starts, right=True)
        last_start = ends[segment] - span  # last valid start of each window's segment
        room = (last_start - starts).clamp(0, max_offset)
        draw = torch.rand(starts.shape, generator=generator)
        return starts + torch.floor(draw * (room + 1).float()).long().clamp(max=room)

    def context(self, starts: torch.Tensor, context_len: int) -> torch.Tensor:
        """Raw context features (B, C, 28) of the windows starting at ``starts`` (B,)."""
        rows = self.tensors()
        index = starts[:, None] + torch.arange(context_len)
        return torch.cat([rows["context_inputs"][index], rows["context_targets"][index]], dim=-1)

    def gather(self, starts: torch.Tensor, context_len: int, horizon: int) -> WindowBatch:
        """Windows starting at ``starts`` (B,) with ``context_len`` context transitions and
        ``horizon`` target transitions."""
        rows = self.tensors()
        first = starts + context_len
        index = first[:, None] + torch.arange(horizon)
        states = torch.cat([rows["state"][first][:, None], rows["next"][index]], dim=1)
        return WindowBatch(
            context=self.context(starts, context_len),
            inputs=rows["inputs"][index],
            targets=rows["targets"][index],
            states=states,
            actions=rows["action"][index],
            labels=rows["labels"][first - 1],
        )


def _check_segment(states: torch.Tensor, actions: torch.Tensor) -> None:
    """Raise ValueError naming what is wrong with a segment's shapes or values."""
    if states.ndim != 2 or states.shape[1] != STATE_DIM:
        raise ValueError(f"segment states must be (N, {STATE_DIM}), got {tuple(states.shape)}")
    if actions.ndim != 2 or actions.shape[1] != ACTION_DIM:
        raise ValueError(f"segment actions must be (N, {ACTION_DIM}), got {tuple(actions.shape)}")
    if states.shape[0] < 2:
        raise ValueError("a segment needs at least two states (one transition)")
    if actions.shape[0] < states.shape[0] - 1:
        raise ValueError(
            f"a segment of {states.shape[0]} states needs at least {states.shape[0] - 1} "
            f"actions, got {actions.shape[0]}"
        )
    if not (torch.isfinite(states).all() and torch.isfinite(actions[: states.shape[0] - 1]).all()):
        raise ValueError("segment contains non-finite states or actions")
