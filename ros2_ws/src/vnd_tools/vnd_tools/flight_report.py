"""Flight report of a simulated scenario flight: per-phase tracking error, recovery, control
latency, model updates, and report.json / report.md / report.png (ROS-free; ``vnd fly`` feeds it).

Definitions (also written into report.md):

- Scenario time: the simulated vehicle's clock, 0 at its first valid command. Its node status
  carries ``scenario_time_ms`` (integrated so far) with the report's stamp; every such pair
  bounds the clock time of scenario zero from above, so the smallest bound (per stretch without
  a slip of the real-time mapping) gives the mapping, within one simulator tick (10 ms).
- Position error per control tick: ``|p_true - p_ref|`` where ``p_ref`` is the reference the
  policy used that tick (Transition.reference) and ``p_true`` the simulator's true position at
  the tick's odometry stamp (sim/truth carries the same stamps as the mocap samples).
- Phase RMSE: root mean square of the per-tick error over the phase's scenario-time span.
- Recovery time (:mod:`vnd_core.recovery`, shared with ``vnd eval``): the steady level is the
  error of the phase's second half as a profile over the reference period (under wind the
  settled error swings with the point of the figure-eight); recovery = time from the phase
  start until the 1-s moving RMSE is back within 1.2x + 1 cm of that level at the same point
  of the reference and stays there for 0.5 s; 0 when it never leaves that band in the first
  half of the phase. ``settled m``: the RMSE over the phase's second half.
- Control latency: per control tick of the scenario, publication of the odometry sample ->
  publication of the command answering it (DDS source timestamps of the pose filter's and the
  policy's writers, one host clock): odometry arrival -> command out, the control path. The
  report also gives it from the odometry stamp (mocap measurement time: adds the simulator's
  and the pose filter's delay). Without per-tick samples: the policy's NodeStatus windows.
- Model update: ``decided_s`` = scenario time the learner accepted the bundle (registry index),
  ``active_s`` = scenario time by which both encoder and policy announced it active.
- Host CPU steal (``host_cpu``, Linux): share of the machine's CPU time over the flight that a
  hypervisor gave to others while a vCPU was ready to run (``/proc/stat``, sampled ten times
  a second). The control ticks are split into 10-s windows with less than 1 % steal and the
  others, with the p99 latency and the late ticks (more than 1.5 control periods after the
  previous command) of each; a late tick is "during steal" when the samples around its gap
  show steal time. Steal is outside the stack's reach: no scheduling class helps against it.
- Host stalls (``host_stalls``, ``vnd fly`` on Linux): a probe pinned to each CPU at the top
  real-time priority records every wake-up the host delayed by 1 ms or more
  (``vnd_tools.hoststall``); every policy tick more than 1.5 periods after the previous
  one (the policy's missed-tick rule; watchdog ticks count) is put against them, with the
  time each CPU lost inside its gap and the longest odometry gap around it.
- Force input (``force_input``, bundles whose policy reads a force observer): per phase, the
  mean magnitude of the force the observer estimated (vnd/force_input), of the simulator's true
  external force at the same stamps (sim/disturbance, held from its last sample), and the RMS
  of their vector difference. The observer measures what the prior does not explain, so
  unmodelled vehicle effects (motor lag, drag in calm air) count as difference too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from vnd_core.recovery import recovery
from vnd_core.units import NS_PER_S

STAMP_MATCH_TOLERANCE_NS = 6_000_000  # truth sample within this of a tick stamp is its match


# ---------------------------------------------------------------- scenario clock


@dataclass(frozen=True)
class ClockPoint:
    """One simulator status report: its stamp and the scenario time integrated by then."""

    stamp_ns: int  # report time on the simulator's clock [ns]
    scenario_time_s: float  # scenario time integrated so far [s]
    slipped_s: float  # total slip of the real-time mapping so far [s]
    started: bool  # scenario time runs


class ScenarioClock:
    """Clock time [ns] -> scenario time [s] of a real-time-paced simulation.

    Args:
        points: simulator status reports (any order); only started ones are used.
        real_time_factor: simulated seconds per clock second.
    """

    def __init__(self, points: Sequence[ClockPoint], real_time_factor: float) -> None:
        if real_time_factor <= 0:
            raise ValueError(f"real_time_factor must be > 0, got {real_time_factor}")
        self.rtf = real_time_factor
        started = sorted((p for p in points if p.started), key=lambda p: p.stamp_ns)
        if not started:
            raise ValueError("no simulator status with scenario time running: cannot map time")
        # Each report bounds the zero from above (zero <= stamp - time / rtf: the time was
        # integrated at or before the report), so the smallest bound is the best estimate. A
        # slip moves the zero later: one estimate per stretch of equal total slip, valid from
        # the first report that shows the slip.
        stretches: dict[float, list[ClockPoint]] = {}
        for p in started:
            stretches.setdefault(round(p.slipped_s, 3), []).append(p)
        ordered = sorted(stretches.values(), key=lambda points: points[0].stamp_ns)
        self._zero_ns = np.array(
            [
                min(p.stamp_ns - p.scenario_time_s / self.rtf * NS_PER_S for p in pts)
                for pts in ordered
            ]
        )
        self._valid_from_ns = np.array([pts[0].stamp_ns for pts in ordered], dtype=np.int64)
        self._valid_from_ns[0] = np.iinfo(np.int64).min

    @property
    def zero_ns(self) -> float:
        """Clock time of scenario time 0 [ns] (before any slip)."""
        return float(self._zero_ns[0])

    def to_scenario_s(self, stamp_ns: np.ndarray | Sequence[int] | int) -> np.ndarray:
        """Scenario time [s] of clock times ``stamp_ns`` (negative before the start)."""
        stamps = np.asarray(stamp_ns, dtype=np.int64)
        index = np.searchsorted(self._valid_from_ns, stamps, side="right") - 1
        zero = self._zero_ns[np.clip(index, 0, len(self._zero_ns) - 1)]
        return (stamps - zero) / NS_PER_S * self.rtf

    def wall_to_scenario_s(self, wall_s: float) -> float:
        """Scenario time of a wall-clock time in seconds since the epoch."""
        return float(self.to_scenario_s(int(wall_s * NS_PER_S)))


# ---------------------------------------------------------------- tracking error


def tracking_error(
    truth_stamp_ns: np.ndarray,
    truth_pos_m: np.ndarray,
    tick_stamp_ns: np.ndarray,
    reference_pos_m: np.ndarray,
    tolerance_ns: int = STAMP_MATCH_TOLERANCE_NS,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-tick position error ``|p_true - p_ref|`` [m] matched by stamp.

    Args:
        truth_stamp_ns: (N,) stamps of the true states.
        truth_pos_m: (N, 3) true positions.
        tick_stamp_ns: (M,) odometry stamps of the control ticks.
        reference_pos_m: (M, 3) reference positions of the ticks.
        tolerance_ns: a tick without a truth sample this close is dropped.

    Returns:
        (stamps (K,), errors (K,)) of the matched ticks, in stamp order (duplicate stamps,
        i.e. watchdog ticks repeating an odometry sample, kept once).
    """
    order = np.argsort(truth_stamp_ns, kind="stable")
    t_stamp, t_pos = np.asarray(truth_stamp_ns)[order], np.asarray(truth_pos_m)[order]
    ticks, first = np.unique(np.asarray(tick_stamp_ns), return_index=True)
    refs = np.asarray(reference_pos_m)[first]
    if len(t_stamp) == 0 or len(ticks) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    right = np.clip(np.searchsorted(t_stamp, ticks), 0, len(t_stamp) - 1)
    left = np.clip(right - 1, 0, len(t_stamp) - 1)
    nearest = np.where(np.abs(t_stamp[left] - ticks) < np.abs(t_stamp[right] - ticks), left, right)
    keep = np.abs(t_stamp[nearest] - ticks) <= tolerance_ns
    errors = np.linalg.norm(t_pos[nearest[keep]] - refs[keep], axis=1)
    return ticks[keep], errors


# ---------------------------------------------------------------- phases and recovery


@dataclass(frozen=True)
class PhaseResult:
    """Tracking quality of one scenario phase."""

    name: str  # condition label (calm, wind_a, ...)
    start_s: float  # scenario time the phase begins [s]
    end_s: float  # scenario time the phase ends [s]
    rmse_m: float | None  # RMSE of the position error [m] (None: no samples)
    recovery_s: float | None  # see module docstring (None: too few samples)
    steady_rmse_m: float | None  # RMSE over the second half of the phase [m]
    peak_rmse_m: float | None  # peak 1-s moving RMSE in the first half [m]
    samples: int  # ticks in the phase

    def as_json(self) -> dict[str, Any]:
        """The report.json entry (contract keys first)."""
        return {
            "name": self.name,
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
            "rmse_m": _round(self.rmse_m, 5),
            "recovery_s": _round(self.recovery_s, 3),
            "steady_rmse_m": _round(self.steady_rmse_m, 5),
            "peak_rmse_m": _round(self.peak_rmse_m, 5),
            "samples": self.samples,
        }


def phase_results(
    t_s: np.ndarray,
    err_m: np.ndarray,
    spans: Sequence[tuple[str, float, float]],
    reference_period_s: float | None = None,
) -> list[PhaseResult]:
    """One :class:`PhaseResult` per ``(name, start_s, end_s)`` span, in flight order;
    ``reference_period_s``: period of the reference (None: a hover point)."""
    order = np.argsort(t_s, kind="stable")
    t_s, err_m = np.asarray(t_s)[order], np.asarray(err_m)[order]
    results = []
    for name, start_s, end_s in spans:
        inside = (t_s >= start_s) & (t_s < end_s)
        t, e = t_s[inside], err_m[inside]
        rmse = float(np.sqrt(np.mean(np.square(e)))) if len(e) else None
        rec = recovery(t, e, start_s, end_s, reference_period_s)
        results.append(
            PhaseResult(
                name=name,
                start_s=start_s,
                end_s=end_s,
                rmse_m=rmse,
                recovery_s=rec.recovery_s if rec else None,
                steady_rmse_m=rec.steady_m if rec else None,
                peak_rmse_m=rec.peak_m if rec else None,
                samples=len(e),
            )
        )
    return results


def improvement(phases: Sequence[PhaseResult], name: str) -> dict[str, Any] | None:
    """RMSE of the last phase called ``name`` against its first occurrence.

    ``reduction`` = 1 - last / first (0.4 = 40 % lower); None when ``name`` occurs once.
    """
    same = [(p, p.rmse_m) for p in phases if p.name == name and p.rmse_m is not None]
    if len(same) < 2 or not same[0][1]:
        return None
    (first, first_rmse_m), (last, last_rmse_m) = same[0], same[-1]
    return {
        "phase": name,
        "first_rmse_m": _round(first_rmse_m, 5),
        "last_rmse_m": _round(last_rmse_m, 5),
        "reduction": _round(1.0 - last_rmse_m / first_rmse_m, 4),
        "first_recovery_s": _round(first.recovery_s, 3),
        "last_recovery_s": _round(last.recovery_s, 3),
    }


# ---------------------------------------------------------------- latency and updates


def latency_summary(latency_ms: np.ndarray) -> dict[str, Any]:
    """p50, p99, max [ms] and sample count of per-tick latencies."""
    values = np.asarray(latency_ms, dtype=float)
    if len(values) == 0:
        return {"p50": None, "p99": None, "max": None, "samples": 0}
    return {
        "p50": round(float(np.percentile(values, 50)), 4),
        "p99": round(float(np.percentile(values, 99)), 4),
        "max": round(float(values.max()), 4),
        "samples": len(values),
    }


@dataclass(frozen=True)
class ModelUpdate:
    """One learner bundle and when it became active in the flight nodes."""

    version: int  # bundle version
    decided_s: float | None  # scenario time the learner accepted it [s]
    active_s: float | None  # scenario time both encoder and policy had it active [s]
    kind: str = "model"  # "model": a model update; "policy": a policy improvement

    @property
    def push_s(self) -> float | None:
        """Decision -> active in both nodes [s of scenario time]."""
        if self.decided_s is None or self.active_s is None:
            return None
        return self.active_s - self.decided_s

    def as_json(self) -> dict[str, Any]:
        """The report.json entry (contract keys first)."""
        return {
            "version": self.version,
            "decided_s": _round(self.decided_s, 3),
            "active_s": _round(self.active_s, 3),
            "push_s": _round(self.push_s, 3),
            "kind": self.kind,
        }


# ---------------------------------------------------------------- the report


@dataclass
class FlightSeries:
    """The time series a report is computed from (all stamps on the stack's clock)."""

    truth_stamp_ns: np.ndarray  # (N,) sim/truth stamps
    truth_pos_m: np.ndarray  # (N, 3) true positions
    tick_stamp_ns: np.ndarray  # (M,) Transition stamps (odometry stamps)
    reference_pos_m: np.ndarray  # (M, 3) Transition reference positions
    tick_z: list[np.ndarray] = field(default_factory=list)  # (M,) latents used (may be empty)
    tick_z_valid: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # (M,)
    tick_mode: np.ndarray = field(default_factory=lambda: np.zeros(0, int))  # (M,)
    disturbance_stamp_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    disturbance_n: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))  # (D, 3) [N]
    force_input_stamp_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    force_input_n: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))  # (F, 3) [N]


@dataclass
class FlightReport:
    """Everything report.json holds, plus the series the figure needs."""

    data: dict[str, Any]  # the report.json object
    error_t_s: np.ndarray  # (K,) scenario time of each matched tick
    error_m: np.ndarray  # (K,) position error of each matched tick
    latent_t_s: np.ndarray  # (L,) scenario time of each valid latent
    latent_z: np.ndarray  # (L, Z) valid latents
    disturbance_t_s: np.ndarray  # (D,) scenario time of the disturbance samples
    disturbance_n: np.ndarray  # (D, 3) true external force [N]
    force_input_t_s: np.ndarray  # (F,) scenario time of the policy's force-input samples
    force_input_n: np.ndarray  # (F, 3) force the policy read [N]


def build_report(
    series: FlightSeries,
    clock: ScenarioClock,
    spans: Sequence[tuple[str, float, float]],
    *,
    latency_ms: np.ndarray,
    latency_method: str,
    missed_ticks: int | None,
    updates: Sequence[ModelUpdate],
    extra: dict[str, Any] | None = None,
    recurring_phase: str = "wind_a",
    reference_period_s: float | None = None,
) -> FlightReport:
    """Compute the report of one flight.

    Args:
        series: recorded time series.
        clock: clock -> scenario time mapping.
        spans: ``(name, start_s, end_s)`` of the scenario phases in flight order.
        latency_ms: per-tick control latencies [ms].
        latency_method: how ``latency_ms`` was measured (one sentence, goes into the report).
        missed_ticks: policy ticks later than 1.5 periods over the flight (None: unknown).
        updates: model updates of the flight.
        extra: further JSON-able entries (scenario, durations, counters ...).
        recurring_phase: phase whose repetition ``improvement`` compares.
        reference_period_s: period of the flown reference (None: a hover point), for the
            recovery times.
    """
    stamps, errors = tracking_error(
        series.truth_stamp_ns, series.truth_pos_m, series.tick_stamp_ns, series.reference_pos_m
    )
    t_s = clock.to_scenario_s(stamps)
    duration_s = spans[-1][2] if spans else 0.0
    flying = (t_s >= 0) & (t_s <= duration_s)
    phases = phase_results(t_s[flying], errors[flying], spans, reference_period_s)
    flown = errors[flying]
    data: dict[str, Any] = {
        "phases": [p.as_json() for p in phases],
        "control_latency_ms": {**latency_summary(latency_ms), "method": latency_method},
        "missed_ticks": missed_ticks,
        "model_updates": [u.as_json() for u in updates],
        "improvement": improvement(phases, recurring_phase),
        "overall_rmse_m": _round(float(np.sqrt(np.mean(flown**2))) if len(flown) else None, 5),
        "ticks_matched": len(flown),
        "model_push_median_s": _round(_median([u.push_s for u in updates]), 3),
        **(extra or {}),
    }
    disturbance_t = clock.to_scenario_s(series.disturbance_stamp_ns)
    disturbance_n = np.asarray(series.disturbance_n, dtype=float).reshape(-1, 3)
    force_t = clock.to_scenario_s(series.force_input_stamp_ns)
    force_n = np.asarray(series.force_input_n, dtype=float).reshape(-1, 3)
    data["force_input"] = force_input_phases(force_t, force_n, disturbance_t, disturbance_n, spans)
    latent_t, latent_z = _valid_latents(series, clock)
    return FlightReport(
        data=data,
        error_t_s=t_s[flying],
        error_m=flown,
        latent_t_s=latent_t,
        latent_z=latent_z,
        disturbance_t_s=disturbance_t,
        disturbance_n=disturbance_n,
        force_input_t_s=force_t,
        force_input_n=force_n,
    )


def force_input_phases(
    force_t_s: np.ndarray,
    force_n: np.ndarray,
    disturbance_t_s: np.ndarray,
    disturbance_n: np.ndarray,
    spans: Sequence[tuple[str, float, float]],
) -> list[dict[str, Any]] | None:
    """Per phase: the force the policy read (``force_t_s`` (F,), ``force_n`` (F, 3)) against
    the true external force (``disturbance_t_s`` (D,), ``disturbance_n`` (D, 3), each sample
    held until the next); None when no force input was recorded (module docstring)."""
    if not len(force_t_s):
        return None
    true_n = _held(disturbance_t_s, disturbance_n, force_t_s)
    rows = []
    for name, start_s, end_s in spans:
        inside = (force_t_s >= start_s) & (force_t_s < end_s)
        read, true = force_n[inside], true_n[inside]
        known = np.isfinite(true).all(axis=1)
        rows.append(
            {
                "name": name,
                "samples": int(inside.sum()),
                "read_n": _round(_mean_norm(read), 4),
                "true_n": _round(_mean_norm(true[known]), 4),
                "rms_difference_n": _round(
                    float(np.sqrt(np.mean(np.sum((read[known] - true[known]) ** 2, axis=1))))
                    if known.any()
                    else None,
                    4,
                ),
            }
        )
    return rows


def _held(t_s: np.ndarray, values: np.ndarray, at_s: np.ndarray) -> np.ndarray:
    """``values`` (N, 3) sampled at increasing ``t_s`` (N,), held from each sample to the next,
    at times ``at_s`` (M,); NaN before the first sample."""
    out = np.full((len(at_s), 3), np.nan)
    if not len(t_s):
        return out
    order = np.argsort(t_s, kind="stable")
    index = np.searchsorted(np.asarray(t_s)[order], at_s, side="right") - 1
    valid = index >= 0
    out[valid] = np.asarray(values)[order][index[valid]]
    return out


def _mean_norm(vectors: np.ndarray) -> float | None:
    return float(np.mean(np.linalg.norm(vectors, axis=1))) if len(vectors) else None


def _valid_latents(series: FlightSeries, clock: ScenarioClock) -> tuple[np.ndarray, np.ndarray]:
    """Scenario times and latents of the ticks whose z came from a matching encoder."""
    ticks = zip(series.tick_stamp_ns, series.tick_z, series.tick_z_valid, strict=True)
    rows = [(stamp, np.asarray(z, dtype=float)) for stamp, z, valid in ticks if valid and len(z)]
    if not rows:
        return np.zeros(0), np.zeros((0, 0))
    size = max(len(z) for _, z in rows)  # versions may differ in size: keep the common one
    rows = [(s, z) for s, z in rows if len(z) == size]
    return clock.to_scenario_s([s for s, _ in rows]), np.stack([z for _, z in rows])


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def _round(value: float | None, digits: int) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)
