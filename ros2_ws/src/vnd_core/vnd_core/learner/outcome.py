"""What an update reports: progress while it runs, its timing, and the result it ends with."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vnd_core.bundle import Bundle, content_id
from vnd_core.policy import PolicyNet
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.model import VNDModel

# progress(stage, fraction of the whole cycle done in [0, 1])
UpdateProgress = Callable[[str, float], None]
# Share of the cycle each stage is reported over (progress only, not a time budget).
STAGE_SPAN = {
    "fit": (0.0, 0.4),
    "train": (0.4, 0.9),
    "improve": (0.0, 0.9),  # an improvement round: training, then the gates
    "validate": (0.9, 1.0),
}


@dataclass
class UpdateResult:
    """Outcome of one update cycle."""

    accepted: bool  # True: ``bundle`` passed every gate and is now the active bundle
    bundle: Bundle | None  # the new version (None when the cycle failed before emitting one)
    reason: str  # why it was rejected ("" when accepted)
    fit_s: float  # wall time of the model fit (with dataset build and re-encoding)
    train_s: float  # wall time of the policy training
    validate_s: float  # wall time of the validation gates
    total_s: float  # wall time of the whole cycle
    metrics: dict  # losses, data counts, validation figures (JSON-able)
    preempted: bool = False  # abandoned for a new condition (not a rejection)
    kind: str = "model"  # "model": fit, train, validate; "policy": one improvement round


class PreemptedError(Exception):
    """Raised at a progress point of an update when a new condition has begun."""


class Progress:
    """Maps per-stage fractions to the whole cycle and forwards them (if a callback is set)."""

    def __init__(self, callback: UpdateProgress | None) -> None:
        self.callback = callback
        self.preempt_when: Callable[[], bool] | None = None  # checked until validation
        self.preempted_by: tuple[str, int] = ("", 0)  # (judge, unexplained count) last checked
        # (active version, model) once the fit is done: carried past a preemption
        self.fitted_model: tuple[int, VNDModel] | None = None
        self.stage = ""  # the stage of the last progress point

    def __call__(self, stage: str, fraction: float) -> None:
        """Report ``fraction`` of ``stage`` done; raise :class:`PreemptedError` when asked to."""
        self.stage = stage
        if self.callback is not None:
            low, high = STAGE_SPAN[stage]
            self.callback(stage, low + (high - low) * min(max(fraction, 0.0), 1.0))
        if stage != "validate" and self.preempt_when is not None and self.preempt_when():
            raise PreemptedError


@dataclass
class StageClock:
    """Wall and CPU time of a cycle, split at the end of each stage."""

    start_s: float = field(default_factory=time.perf_counter)  # wall clock at the start [s]
    cpu_start_s: float = field(default_factory=time.process_time)  # process CPU at the start
    laps_s: dict[str, float] = field(default_factory=dict)  # stage -> its wall time [s]

    def elapsed_s(self) -> float:
        """Wall time since the start [s]."""
        return time.perf_counter() - self.start_s

    def lap(self, stage: str) -> float:
        """End ``stage`` now (since the start or the previous lap); its wall time [s], added
        to the stage's earlier laps (a model update validates in two parts)."""
        lap_s = self.elapsed_s() - sum(self.laps_s.values())
        self.laps_s[stage] = self.laps_s.get(stage, 0.0) + lap_s
        return self.laps_s[stage]

    def get(self, stage: str) -> float:
        """Wall time of ``stage`` [s] (0 when it did not run)."""
        return self.laps_s.get(stage, 0.0)

    def total_s(self) -> float:
        """Wall time up to the end of the last stage [s]."""
        return sum(self.laps_s.values())

    def result(
        self, *, bundle: Bundle | None, reason: str, metrics: dict, kind: str = "model"
    ) -> UpdateResult:
        """The cycle's result with its stage times (accepted when ``bundle`` is set); with no
        stage finished its total is the time so far."""
        return UpdateResult(
            accepted=bundle is not None,
            bundle=bundle,
            reason=reason,
            fit_s=self.get("fit"),
            train_s=self.get("train"),
            validate_s=self.get("validate"),
            total_s=self.total_s() if self.laps_s else self.elapsed_s(),
            metrics=metrics,
            kind=kind,
        )

    def timing(self) -> dict[str, float]:
        """The laps, the total and the CPU total (rounded, JSON-able) [s]."""
        out = {stage: round(seconds, 3) for stage, seconds in self.laps_s.items()}
        out["total"] = round(self.total_s(), 3)
        out["cpu_total"] = round(time.process_time() - self.cpu_start_s, 3)  # wall, idle core
        return out


def preempted_result(reason: str, elapsed_s: float, *, kind: str) -> UpdateResult:
    """The result of an update or improvement round abandoned for a new condition."""
    return UpdateResult(
        accepted=False,
        bundle=None,
        reason=reason,
        fit_s=0.0,
        train_s=0.0,
        validate_s=0.0,
        total_s=elapsed_s,
        metrics={},
        preempted=True,
        kind=kind,
    )


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats replaced by None (bundle metadata is strict JSON)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.generic):
        return json_safe(value.item())
    return value


def child_bundle(
    active: Bundle,
    *,
    policy: PolicyNet,
    model: VNDModel,
    vehicle: VehicleParams,
    metrics: dict,
    lineage: str,
) -> Bundle:
    """Version ``active.version + 1`` of ``lineage``, naming ``active`` as its parent."""
    return Bundle(
        version=active.version + 1,
        parent_version=active.version,
        policy=policy,
        vehicle=vehicle,
        model=model,
        summary=json_safe(metrics),
        parent_sha256=content_id(active),
        lineage=lineage,
    )
