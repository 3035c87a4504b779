"""The training tick under ``torch.compile``: one graph per process, shared by every trainer."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch

from vnd_core.rollout import window_tick

_COMPILED: dict[str, Callable] = {}
_GRAPHS_COMPILED = [0]  # graphs the compiled roll-out has built in this process


def _counting_inductor(graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """The inductor backend, counting the graphs it compiles (see :func:`compiled_graphs`)."""
    from torch._inductor.compile_fx import compile_fx

    _GRAPHS_COMPILED[0] += 1
    # torch annotates compile_fx's result more widely than the callable a backend returns
    return cast(Callable, compile_fx(graph, example_inputs))


def compiled_tick() -> Callable:
    """:func:`window_tick` under ``torch.compile``, created once per process.

    One tick, not the unrolled window: every tick of every window has the same shapes, so one
    small graph (forward and backward) serves them all and compiles in seconds to a minute,
    where the unrolled window takes many minutes. Dynamo keys its graphs by what changes them
    (tensor shapes and dtypes, the policy's and dynamics' structure, which of lag and drag are
    on), not by the tensors' values or identities: a new trainer with a new policy and model of
    the same shapes reuses the graph, so a learner process compiles on its first update only.
    Inductor's on-disk cache shortens the compilation of a restarted process.
    """
    if "tick" not in _COMPILED:
        _COMPILED["tick"] = torch.compile(window_tick, backend=_counting_inductor)
    return _COMPILED["tick"]


def compiled_graphs() -> int:
    """How many graphs :func:`compiled_tick` has compiled in this process."""
    return _GRAPHS_COMPILED[0]
