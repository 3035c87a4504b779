"""Data checks of imported streams: each problem counted per file, each with a rule for what is
kept, so nothing is dropped without a line in the import report.

The rules (:data:`RULES`, printed with the counts):

- a sample with a NaN or infinite value is dropped;
- a quaternion whose norm is off 1 by more than ``quaternion_reject`` is dropped, one off by more
  than ``quaternion_tolerance`` is renormalised and kept;
- stamps are read in file order: the first sample of a stamp is kept, a later sample with the
  same stamp (duplicate) or an earlier one (out of order) is dropped;
- a stamp step above ``gap_factor`` times the stream's median step splits the segment there;
- a velocity change between two samples that needs more acceleration than the vehicle can make
  (full thrust over mass, plus gravity, plus ``accel_margin_mps2``) splits the segment there, so
  no learned transition crosses it;
- a position step that the logged velocities do not explain (off the trapezoid rule by more
  than the acceleration limit allows, plus ``position_jump_m``) splits the segment there too.

The writer adds the rules of resampling (ticks without a command, short segments).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from vnd_core.state import GRAVITY_MPS2, POS, QUAT, VEL
from vnd_core.units import NS_PER_S
from vnd_core.vehicle import VehicleParams

RULES: dict[str, str] = {
    "not_flying": "dropped: logged while not in flight (disarmed or on the ground)",
    "phase_change": "segment split: the flight mode changed",
    "non_finite": "dropped: a NaN or infinite value",
    "bad_quaternion": "dropped: quaternion norm off 1 by more than the reject limit",
    "non_unit_quaternion": "kept, renormalised: quaternion norm off 1 within the reject limit",
    "duplicate_stamp": "dropped: same stamp as an earlier sample (the first in the file is kept)",
    "out_of_order": "dropped: stamped before the sample read just before it",
    "gap": "segment split: stamp step above gap_factor median steps",
    "implausible_acceleration": "segment split: velocity step beyond what the vehicle can do",
    "position_jump": "segment split: position step the logged velocities do not explain",
    "no_command": "tick dropped: no command yet, or the last one older than max_command_age_s",
    "short_segment": "ticks dropped: segment shorter than min_segment_ticks",
    "segment_boundary": "tick dropped: keeps consecutive segments two control periods apart",
}


@dataclass(frozen=True)
class CheckConfig:
    """Limits of the data checks."""

    quaternion_tolerance: float = 1e-3  # |norm - 1| above this is renormalised and counted
    quaternion_reject: float = 0.1  # |norm - 1| above this drops the sample
    gap_factor: float = 3.0  # a stamp step above this many median steps splits a segment
    accel_margin_mps2: float = 10.0  # added to full thrust / mass + g for the accel limit
    position_jump_m: float = 0.02  # position step allowance beyond the velocities' account [m]

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if not 0 < self.quaternion_tolerance < self.quaternion_reject:
            raise ValueError("need 0 < quaternion_tolerance < quaternion_reject")
        if not self.gap_factor > 1:
            raise ValueError(f"gap_factor must be > 1, got {self.gap_factor}")
        if not self.accel_margin_mps2 >= 0:
            raise ValueError(f"accel_margin_mps2 must be >= 0, got {self.accel_margin_mps2}")
        if not self.position_jump_m > 0:
            raise ValueError(f"position_jump_m must be > 0, got {self.position_jump_m}")


def max_acceleration_mps2(vehicle: VehicleParams, config: CheckConfig) -> float:
    """Largest plausible acceleration magnitude of ``vehicle`` [m/s^2]."""
    return vehicle.thrust_max_n / vehicle.mass_kg + GRAVITY_MPS2 + config.accel_margin_mps2


@dataclass
class StreamCheck:
    """What the checks found in one stream of one file."""

    stream: str  # "odometry" or "command"
    samples: int  # samples read
    kept: int = 0  # samples left after the checks
    counts: dict[str, int] = field(default_factory=dict)  # check name (RULES) -> how many

    def add(self, name: str, count: int) -> None:
        """Count ``count`` findings of check ``name`` (a key of :data:`RULES`)."""
        if name not in RULES:
            raise KeyError(f"unknown check {name!r}")
        if count:
            self.counts[name] = self.counts.get(name, 0) + int(count)

    def describe(self) -> list[str]:
        """One line for the stream, then one per check that found something, with its rule."""
        lines = [f"{self.stream}: {self.samples} samples read, {self.kept} kept"]
        lines += [f"  {name}: {n} ({RULES[name]})" for name, n in self.counts.items()]
        return lines


def _stamp_order(stamp_ns: np.ndarray, check: StreamCheck) -> np.ndarray:
    """Mask (N,) of samples kept by the stamp rule: strictly after the previous kept stamp."""
    keep = np.zeros(len(stamp_ns), dtype=bool)
    last = None
    duplicate = backwards = 0
    for i, stamp in enumerate(stamp_ns.tolist()):
        if last is None or stamp > last:
            keep[i], last = True, stamp
        elif stamp == last:
            duplicate += 1
        else:
            backwards += 1
    check.add("duplicate_stamp", duplicate)
    check.add("out_of_order", backwards)
    return keep


def check_odometry(
    stamp_ns: np.ndarray,
    state: np.ndarray,
    max_accel_mps2: float,
    config: CheckConfig | None = None,
    phase: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, StreamCheck]:
    """Apply the checks to an odometry stream ``stamp_ns`` (N,), ``state`` (N, 13) and its
    flight ``phase`` (N,) (see :class:`~.streams.FlightStreams`; None: all in flight).

    Returns the kept stamps (K,), states (K, 13, quaternions unit), a mask ``breaks`` (K - 1,)
    true where a segment ends between sample i and i + 1, and the counts.
    """
    config = config or CheckConfig()
    config.validate()
    check = StreamCheck(stream="odometry", samples=len(stamp_ns))
    phase = np.zeros(len(stamp_ns), np.int64) if phase is None else phase
    flying = phase >= 0
    check.add("not_flying", int((~flying).sum()))
    finite = np.isfinite(state).all(axis=1)
    check.add("non_finite", int((flying & ~finite).sum()))
    norm = np.linalg.norm(np.where(finite[:, None], state[:, QUAT], 1.0), axis=1)
    off = np.abs(norm - 1.0)
    good_quat = off <= config.quaternion_reject
    check.add("bad_quaternion", int((flying & finite & ~good_quat).sum()))
    valid = flying & finite & good_quat
    index = np.flatnonzero(valid)
    index = index[_stamp_order(stamp_ns[index], check)]
    stamps, states = stamp_ns[index].copy(), state[index].copy()
    check.add("non_unit_quaternion", int((off[index] > config.quaternion_tolerance).sum()))
    states[:, QUAT] /= norm[index, None]
    breaks = np.zeros(max(len(stamps) - 1, 0), dtype=bool)
    if len(stamps) > 1:
        step_s = np.diff(stamps) / NS_PER_S
        gap = step_s > config.gap_factor * float(np.median(step_s))
        accel = np.linalg.norm(np.diff(states[:, VEL], axis=0), axis=1) / step_s
        jump = ~gap & (accel > max_accel_mps2)
        mean_v = 0.5 * (states[1:, VEL] + states[:-1, VEL])
        unexplained_m = np.linalg.norm(
            np.diff(states[:, POS], axis=0) - mean_v * step_s[:, None], axis=1
        )
        allowed_m = 0.5 * max_accel_mps2 * step_s**2 + config.position_jump_m
        teleport = ~gap & ~jump & (unexplained_m > allowed_m)
        changed = np.diff(phase[index]) != 0
        check.add("gap", int(gap.sum()))
        check.add("implausible_acceleration", int(jump.sum()))
        check.add("position_jump", int(teleport.sum()))
        check.add("phase_change", int((changed & ~gap).sum()))
        breaks = gap | jump | teleport | changed
    check.kept = len(stamps)
    return stamps, states, breaks, check


def check_commands(
    stamp_ns: np.ndarray, command: np.ndarray
) -> tuple[np.ndarray, np.ndarray, StreamCheck]:
    """Apply the sample checks to a command stream ``stamp_ns`` (M,), ``command`` (M, 4).

    Returns the kept stamps (K,), commands (K, 4) and the counts. Gaps in commands are handled
    when they are held onto the ticks (the writer's ``max_command_age_s``).
    """
    check = StreamCheck(stream="command", samples=len(stamp_ns))
    finite = np.isfinite(command).all(axis=1)
    check.add("non_finite", int((~finite).sum()))
    index = np.flatnonzero(finite)
    index = index[_stamp_order(stamp_ns[index], check)]
    check.kept = len(index)
    return stamp_ns[index].copy(), command[index].copy(), check


def check_replay_input(stamp_ns: np.ndarray, state: np.ndarray, vehicle: VehicleParams) -> str:
    """The data checks of a learning input (replay ticks ``stamp_ns`` (N,), ``state`` (N, 13)),
    as one line per finding. Nothing is removed here: the learner drops non-finite ticks and
    splits its runs at gaps itself; the other findings are reported so that a bag that needs
    ``vnd import`` 's cleaning is noticed."""
    *_, check = check_odometry(stamp_ns, state, max_acceleration_mps2(vehicle, CheckConfig()))
    check.stream = "input ticks"
    if not check.counts:
        return f"input ticks: {check.samples}, every data check passed"
    return "\n".join(check.describe())
