"""From checked streams to replay bags: resampling onto the control period, segments, the
command delay, and the rosbag2 bag of ``vnd_msgs/msg/Transition`` messages.

Resampling. Ticks lie on the absolute grid of the control period (stamps that are multiples of
``period_s``) inside each checked segment of the odometry: position, velocity and body rates
are interpolated linearly, the attitude by normalised linear interpolation on the nearer
hemisphere. The command of a tick is the one in effect at the middle of its control
period (the last stamped at or before tick + period / 2): the command that acts on the
transition from this tick to the next, as in a live flight, where the policy answers the state
of the tick a few milliseconds after its stamp. A tick whose command is missing or older than
``max_command_age_s`` at that instant is dropped and splits the segment.

Segments. A segment shorter than ``min_segment_ticks`` is dropped; consecutive segments are kept
at least two control periods apart, so the learner's own run splitter (1.5 periods) never joins
them. Every dropped tick is counted (:data:`~.checks.RULES`).

Command delay. The lag (whole ticks) after which the measured body rates best follow the
commanded ones as a first-order response is reported: the latency of the vehicle's command
path. The ticks are not shifted by it; the learned model carries its own action delay.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.evaluation.replay_bag import write_transitions
from vnd_core.learner.records import MODE_POLICY, TickRecords
from vnd_core.state import OMEGA, QUAT, RATES, STATE_DIM
from vnd_core.units import NS_PER_S
from vnd_core.vehicle import VehicleParams

from vnd_tools.logimport.checks import (
    CheckConfig,
    StreamCheck,
    check_commands,
    check_odometry,
    max_acceleration_mps2,
)
from vnd_tools.logimport.streams import FlightStreams

SOURCE_KEY = "source"  # custom_data key of the bag metadata naming the imported file
REPORT_KEY = "vnd_import"  # custom_data key holding the import report (JSON)


class LogImportError(ValueError):
    """A log cannot be imported; the message names the file and the reason."""


@dataclass(frozen=True)
class ImportConfig:
    """How checked streams become replay ticks."""

    period_s: float = CONTROL_PERIOD_S  # control period the ticks are resampled to [s]
    max_command_age_s: float = 0.1  # a tick whose last command is older is dropped [s]
    min_segment_ticks: int = 50  # shorter segments are dropped (ticks)
    max_delay_s: float = 0.3  # longest command delay searched for [s]
    checks: CheckConfig = field(default_factory=CheckConfig)  # limits of the data checks


@dataclass
class ImportReport:
    """What one imported file gave and what was dropped on the way."""

    source: str  # the imported file (and topics or message names)
    ticks: int  # ticks written
    segments: list[tuple[int, int]]  # (first stamp [ns], ticks) of each segment written
    odometry: StreamCheck  # checks of the odometry stream
    command: StreamCheck  # checks of the command stream
    resampling: StreamCheck  # ticks dropped while resampling
    command_delay_s: float | None  # estimated command-to-response delay (None: not estimated)
    substitutions: list[str]  # streams the log lacked and what stands in for them
    bag: str = ""  # bag folder written ("" before writing)
    # thrust_max_n and thrust_model_factor that turned normalised thrust into newtons (None:
    # the log gave newtons); ``vnd vehicle fit`` reads it to recover the logged command
    thrust_curve: dict[str, float] | None = None
    notes: list[str] = field(default_factory=list)  # choices the reader made (e.g. instances)

    def describe(self) -> str:
        """The report for the terminal, one fact per line."""
        seconds = self.ticks * CONTROL_PERIOD_S
        lines = [
            f"{self.source}: {self.ticks} ticks ({seconds:.1f} s) in {len(self.segments)} "
            f"segments" + (f" -> {self.bag}" if self.bag else "")
        ]
        for check in (self.odometry, self.command, self.resampling):
            lines += ["  " + line for line in check.describe()]
        if self.command_delay_s is None:
            lines.append("  command delay: not estimated (no commanded body rates)")
        else:
            lines.append(f"  command delay: {self.command_delay_s * 1e3:.0f} ms (rates, estimated)")
        lines += [f"  substituted: {text}" for text in self.substitutions]
        if self.thrust_curve is not None:
            lines.append(
                "  thrust: normalised in the log, newtons through thrust_max_n "
                f"{self.thrust_curve['thrust_max_n']:g} N, thrust_model_factor "
                f"{self.thrust_curve['thrust_model_factor']:g}"
            )
        lines += [f"  note: {text}" for text in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict:
        """Plain-JSON form (written beside the bag and into its metadata)."""
        return asdict(self)


def interpolate_states(stamp_ns: np.ndarray, state: np.ndarray, tick_ns: np.ndarray) -> np.ndarray:
    """States (T, 13) at ``tick_ns`` (T,) from samples ``stamp_ns`` (N,), ``state`` (N, 13).

    Linear in every component but the attitude, which is interpolated on the nearer hemisphere
    and renormalised. Ticks must lie within [stamp_ns[0], stamp_ns[-1]].
    """
    t = (stamp_ns - stamp_ns[0]).astype(np.float64)
    x = (tick_ns - stamp_ns[0]).astype(np.float64)
    out = np.empty((len(tick_ns), STATE_DIM))
    for column in range(STATE_DIM):
        out[:, column] = np.interp(x, t, state[:, column])
    right = np.clip(np.searchsorted(t, x, side="right"), 1, len(t) - 1)
    left = right - 1
    frac = ((x - t[left]) / (t[right] - t[left]))[:, None]
    q_left, q_right = state[left, QUAT], state[right, QUAT]
    sign = np.where((q_left * q_right).sum(axis=1, keepdims=True) < 0, -1.0, 1.0)
    quat = (1.0 - frac) * q_left + frac * sign * q_right
    out[:, QUAT] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    return out


def estimate_command_delay_s(
    segments: list[tuple[np.ndarray, np.ndarray]], period_s: float, max_delay_s: float
) -> float | None:
    """Delay [s] of the body rates' response to the commanded rates.

    ``segments`` holds (state (T, 13), action (T, 4)) per segment. For each lag d (whole ticks
    up to ``max_delay_s``) the first-order response ``w[k+1] - w[k] = a (c[k-d] - w[k])`` is
    fitted by least squares on every axis; the lag with the smallest residual wins. Unlike a
    plain cross-correlation this is not fooled by the closed loop (the controller's commands
    follow the measured rates). None when no segment is longer than the lags searched or the
    rates never move.
    """
    max_lag = max(1, round(max_delay_s / period_s))
    residual = np.zeros(max_lag + 1)
    used = False
    for state, action in segments:
        if len(state) <= max_lag + 2:
            continue
        command, rate = action[:, RATES], state[:, OMEGA]
        k = np.arange(max_lag, len(state) - 1)
        change = (rate[k + 1] - rate[k]).ravel()
        for lag in range(max_lag + 1):
            drive = (command[k - lag] - rate[k]).ravel()
            power = float(drive @ drive)
            gain = float(drive @ change) / power if power > 0 else 0.0
            residual[lag] += float(((change - gain * drive) ** 2).sum())
        used = True
    if not used or not np.ptp(residual) > 0:
        return None
    return float(np.argmin(residual)) * period_s


def resample(
    streams: FlightStreams, vehicle: VehicleParams, config: ImportConfig | None = None
) -> tuple[TickRecords, ImportReport]:
    """Check ``streams`` and resample them onto the control period; the ticks and the report.

    Raises LogImportError naming the source when nothing learnable is left.
    """
    config = config or ImportConfig()
    limit = max_acceleration_mps2(vehicle, config.checks)
    stamps, states, breaks, odometry = check_odometry(
        streams.state_stamp_ns, streams.state, limit, config.checks, streams.phase
    )
    command_ns, commands, command_check = check_commands(streams.command_stamp_ns, streams.command)
    resampling = StreamCheck(stream="ticks", samples=0)
    period_ns = round(config.period_s * NS_PER_S)
    max_age_ns = round(config.max_command_age_s * NS_PER_S)
    edges = np.concatenate([[0], np.flatnonzero(breaks) + 1, [len(stamps)]])
    pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    last_tick_ns: int | None = None
    for a, b in itertools.pairwise(edges):
        if b - a < 2:
            continue
        first = -(-int(stamps[a]) // period_ns) * period_ns
        ticks = np.arange(first, int(stamps[b - 1]) + 1, period_ns, dtype=np.int64)
        resampling.samples += len(ticks)
        if not len(ticks):
            continue
        middle = ticks + period_ns // 2
        held = np.searchsorted(command_ns, middle, side="right") - 1
        has_command = held >= 0
        has_command[has_command] &= (
            middle[has_command] - command_ns[held[has_command]] <= max_age_ns
        )
        resampling.add("no_command", int((~has_command).sum()))
        tick_state = interpolate_states(stamps[a:b], states[a:b], ticks)
        # runs of ticks with a command are segments of their own
        cut = np.flatnonzero(np.diff(has_command.astype(np.int8)) != 0) + 1
        for run in np.split(np.arange(len(ticks)), cut):
            if not len(run) or not has_command[run[0]]:
                continue
            if last_tick_ns is not None:
                close = ticks[run] - last_tick_ns < 2 * period_ns
                resampling.add("segment_boundary", int(close.sum()))
                run = run[~close]
            if len(run) < config.min_segment_ticks:
                resampling.add("short_segment", len(run))
                continue
            pieces.append((ticks[run], tick_state[run], commands[held[run]]))
            last_tick_ns = int(ticks[run[-1]])
    resampling.kept = sum(len(p[0]) for p in pieces)
    if not pieces:
        raise LogImportError(
            f"{streams.source}: no learnable segment of {config.min_segment_ticks} ticks left "
            f"after the checks ({'; '.join(odometry.describe() + command_check.describe())})"
        )
    rates_logged = not any("body rates" in text for text in streams.substitutions)
    delay = (
        estimate_command_delay_s(
            [(p[1], p[2]) for p in pieces], config.period_s, config.max_delay_s
        )
        if rates_logged
        else None
    )
    n = resampling.kept
    records = TickRecords(
        stamp_ns=np.concatenate([p[0] for p in pieces]),
        state=np.concatenate([p[1] for p in pieces]),
        action=np.concatenate([p[2] for p in pieces]),
        mode=np.full(n, MODE_POLICY, dtype=np.uint8),
        policy_version=np.zeros(n, dtype=np.uint32),
        encoder_version=np.zeros(n, dtype=np.uint32),
    )
    report = ImportReport(
        source=streams.source,
        ticks=n,
        segments=[(int(p[0][0]), len(p[0])) for p in pieces],
        odometry=odometry,
        command=command_check,
        resampling=resampling,
        command_delay_s=delay,
        substitutions=list(streams.substitutions),
        thrust_curve=None if streams.thrust_curve is None else streams.thrust_curve.as_dict(),
        notes=list(streams.notes),
    )
    return records, report


def write_replay_bag(bag_dir: str | Path, records: TickRecords, report: ImportReport) -> Path:
    """Write ``records`` as a replay bag at ``bag_dir`` (new folder), the report in its
    metadata (``source`` and ``vnd_import``) and beside it as ``<bag_dir>.import.json``."""
    bag_dir = Path(bag_dir)
    if bag_dir.exists():
        raise LogImportError(f"{report.source}: output {bag_dir} exists already")
    report.bag = str(bag_dir)
    text = json.dumps(report.to_json())
    write_transitions(bag_dir, records, custom_data={SOURCE_KEY: report.source, REPORT_KEY: text})
    bag_dir.with_name(bag_dir.name + ".import.json").write_text(
        json.dumps(report.to_json(), indent=2) + "\n"
    )
    return bag_dir


def read_import_report(bag_dir: str | Path) -> dict:
    """The ``custom_data`` of an imported bag's metadata (``source``, ``vnd_import`` JSON)."""
    import yaml

    info = yaml.safe_load((Path(bag_dir) / "metadata.yaml").read_text())
    return dict(info["rosbag2_bagfile_information"].get("custom_data") or {})
