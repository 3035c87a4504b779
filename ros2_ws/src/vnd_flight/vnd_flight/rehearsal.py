"""Cache warming for the control tick: run it once off the record just before odometry is due.

Why: on the 2-core target (a shared EPYC VM, 512 KB L2 per core) the policy tick's code and
data leave the caches within a few milliseconds, whether the core idles or runs other work in
between. The same tick then costs about 1.1 ms of CPU instead of 0.25 ms when it runs right
after another one (``benchmarks/tick_warmth.py``), and that difference is most of the demo's
odometry-to-command median without a rehearsal. Running the tick once, with every effect undone,
shortly before the next sample arrives brings the code and data back at a time when nobody
waits for them.

:class:`StateSnapshot` makes the rehearsal side-effect free: it copies the attribute
dictionaries of the objects a tick mutates (arrays, lists and dicts one level deep, which is
how the controller, safety filter, planner and counters keep their state) and puts them back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar, cast

import numpy as np

_Value = TypeVar("_Value")


def _copied(value: _Value) -> _Value:
    """A copy of a mutable container attribute; immutable values and objects as they are."""
    if isinstance(value, (np.ndarray, list, dict, set)):
        return cast(_Value, value.copy())
    return value


class StateSnapshot:
    """The attribute state of ``objects``, restorable once or more.

    Objects listed here must keep their mutable state in plain attributes holding numpy
    arrays, lists, dicts, sets or immutable values; nested stateful objects are listed on
    their own (``SafetyFilter.stateful_parts``).
    """

    def __init__(self, objects: Iterable[Any]) -> None:
        self._saved = [(obj, {k: _copied(v) for k, v in vars(obj).items()}) for obj in objects]

    def restore(self) -> None:
        """Put every attribute back as it was at construction (added ones are removed)."""
        for obj, saved in self._saved:
            state = vars(obj)
            state.clear()
            state.update({k: _copied(v) for k, v in saved.items()})
