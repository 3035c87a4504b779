"""Batches of control-tick records: what the policy node logs once per 50 Hz tick.

One record per tick: the odometry stamp the command answers, the state measured at that stamp,
the command actually sent (after the safety filter), the controller mode and the versions of the
policy and encoder that produced it. The condition label is simulation ground truth, used only
for evaluation (latent plots, k-NN accuracy); it never reaches the learning loss.

Records cross a process boundary between the learner node and the learner, so they convert to
and from a plain ``dict[str, np.ndarray]`` (no pickle, no object arrays).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from vnd_core.state import ACTION_DIM, STATE_DIM
from vnd_core.wire import Mode

# Controller modes as the ``mode`` column holds them (vnd_core.wire.Mode).
MODE_IDLE = Mode.IDLE
MODE_POLICY = Mode.POLICY
MODE_FALLBACK_HOLD = Mode.FALLBACK_HOLD
MODE_FALLBACK_LAND = Mode.FALLBACK_LAND
MODE_DISARMED = Mode.DISARMED

# Field -> (dtype, trailing shape) of every array field; ``condition`` is optional.
_LAYOUT: dict[str, tuple[type, tuple[int, ...]]] = {
    "stamp_ns": (np.int64, ()),
    "state": (np.float64, (STATE_DIM,)),
    "action": (np.float64, (ACTION_DIM,)),
    "mode": (np.uint8, ()),
    "policy_version": (np.uint32, ()),
    "encoder_version": (np.uint32, ()),
}


@dataclass
class TickRecords:
    """A batch of N control ticks (numpy arrays, one row per tick)."""

    stamp_ns: np.ndarray  # (N,) int64, odometry stamp of the tick
    state: np.ndarray  # (N, 13) float64, measured state at that stamp
    action: np.ndarray  # (N, 4) float64, the command actually sent (after safety)
    mode: np.ndarray  # (N,) uint8, CtbrCommand MODE_* (1 = POLICY)
    policy_version: np.ndarray  # (N,) uint32, bundle version of the policy that acted
    encoder_version: np.ndarray  # (N,) uint32, bundle version of the encoder's latent
    condition: np.ndarray | None = None  # (N,) str labels, evaluation only (sim ground truth)

    def __post_init__(self) -> None:
        for name, (dtype, tail) in _LAYOUT.items():
            value: np.ndarray = np.asarray(getattr(self, name), dtype=dtype)
            if value.ndim != 1 + len(tail) or value.shape[1:] != tail:
                raise ValueError(
                    f"TickRecords.{name} must have shape (N{''.join(f', {d}' for d in tail)}), "
                    f"got {value.shape}"
                )
            setattr(self, name, value)
        if self.condition is not None:
            self.condition = np.asarray(self.condition, dtype=np.str_)
        n = len(self.stamp_ns)
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and len(value) != n:
                raise ValueError(f"TickRecords.{f.name} has {len(value)} rows, stamp_ns has {n}")

    def __len__(self) -> int:
        return len(self.stamp_ns)

    def take(self, index: np.ndarray | slice) -> TickRecords:
        """The rows selected by ``index`` (integer array, boolean mask or slice)."""
        columns: dict[str, Any] = {
            f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[index]
            for f in fields(self)
        }
        return TickRecords(**columns)

    @classmethod
    def empty(cls, with_condition: bool = False) -> TickRecords:
        """A batch of zero ticks."""
        arrays: dict[str, Any] = {
            name: np.zeros((0, *tail), dtype) for name, (dtype, tail) in _LAYOUT.items()
        }
        return cls(**arrays, condition=np.zeros(0, np.str_) if with_condition else None)

    @classmethod
    def concat(cls, batches: Sequence[TickRecords]) -> TickRecords:
        """Rows of ``batches`` one after the other. Condition labels are kept only when every
        batch has them (a batch without labels would otherwise need invented ones)."""
        if not batches:
            return cls.empty()
        arrays = {name: np.concatenate([getattr(b, name) for b in batches]) for name in _LAYOUT}
        labelled = all(b.condition is not None for b in batches)
        condition = np.concatenate([b.condition for b in batches]) if labelled else None
        return cls(**arrays, condition=condition)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain dict of numpy arrays (IPC or ``np.savez``); ``condition`` only when present."""
        out = {name: getattr(self, name) for name in _LAYOUT}
        if self.condition is not None:
            out["condition"] = self.condition
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> TickRecords:
        """Inverse of :meth:`to_arrays`; a missing or unknown key raises ValueError naming it."""
        missing = [name for name in _LAYOUT if name not in arrays]
        unknown = [k for k in arrays if k not in _LAYOUT and k != "condition"]
        if missing or unknown:
            raise ValueError(f"tick record arrays: missing {missing}, unknown {unknown}")
        if "condition" in arrays and np.asarray(arrays["condition"]).dtype == object:
            raise ValueError("tick record arrays: condition must be a str array, not objects")
        return cls(**{k: np.asarray(v) for k, v in arrays.items()})


def records_from_arrays(
    states: np.ndarray,
    actions: np.ndarray,
    start_stamp_ns: int = 0,
    period_s: float = 0.02,
    condition: str | None = None,
    version: int = 1,
) -> TickRecords:
    """POLICY-mode records of a contiguous run: ``states`` (N, 13), ``actions`` (N, 4) or
    (N-1, 4) (the last action is then repeated: it has no observed outcome anyway), stamps
    ``start_stamp_ns + k * period_s``, policy and encoder ``version``, one ``condition``."""
    states = np.asarray(states, dtype=np.float64)
    actions = np.asarray(actions, dtype=np.float64)
    n = len(states)
    if len(actions) == n - 1:
        actions = np.concatenate([actions, actions[-1:]])
    period_ns = round(period_s * 1e9)
    return TickRecords(
        stamp_ns=start_stamp_ns + period_ns * np.arange(n, dtype=np.int64),
        state=states,
        action=actions,
        mode=np.full(n, MODE_POLICY, dtype=np.uint8),
        policy_version=np.full(n, version, dtype=np.uint32),
        encoder_version=np.full(n, version, dtype=np.uint32),
        condition=None if condition is None else np.array([condition] * n, dtype=np.str_),
    )
