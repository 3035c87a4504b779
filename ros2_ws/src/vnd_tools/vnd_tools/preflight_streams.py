"""Preflight checks of the live streams and the disk: rate and jitter of a topic, clock
offset, odometry sanity, the policy's commands, free space for the replay store.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from vnd_core import wire
from vnd_core.state import ACTION_DIM, OMEGA, POS, QUAT, STATE_DIM, VEL
from vnd_core.units import NS_PER_MS, NS_PER_S

from vnd_tools.preflight import BYTES_PER_MB, CheckRow, PreflightThresholds, _row


@dataclass(frozen=True)
class StreamStats:
    """Timing of one stream from its header stamps."""

    count: int  # messages received
    rate_hz: float  # (count - 1) / stamp span; NaN with fewer than 2 stamps [Hz]
    jitter_ms: float  # standard deviation of the stamp intervals; NaN below 3 stamps [ms]
    max_gap_ms: float  # longest stamp interval; NaN below 2 stamps [ms]
    non_increasing: int  # intervals <= 0 (repeated or out-of-order stamps)


def stream_stats(stamps_ns: Sequence[int]) -> StreamStats:
    """Rate, jitter and gaps of a stream from its stamps in arrival order (ns)."""
    stamps = np.asarray(stamps_ns, dtype=np.int64)
    count = int(stamps.size)
    if count < 2:
        return StreamStats(count, math.nan, math.nan, math.nan, 0)
    intervals_ms = np.diff(stamps).astype(float) / NS_PER_MS
    span_s = float(stamps.max() - stamps.min()) / NS_PER_S
    rate = (count - 1) / span_s if span_s > 0 else math.inf
    jitter = float(np.std(intervals_ms)) if count >= 3 else math.nan
    return StreamStats(
        count=count,
        rate_hz=rate,
        jitter_ms=jitter,
        max_gap_ms=float(intervals_ms.max()),
        non_increasing=int(np.count_nonzero(intervals_ms <= 0)),
    )


def check_stream_rate(
    name: str, topic: str, stats: StreamStats, min_hz: float, max_hz: float, window_s: float
) -> CheckRow:
    """PASS when the stamp rate of ``topic`` lies in [min_hz, max_hz]."""
    expected = f"{min_hz:.1f}-{max_hz:.1f} Hz"
    if stats.count < 2:
        return _row(
            name, False, f"{stats.count} message(s) on {topic} in {window_s:.1f} s", expected
        )
    ok = min_hz <= stats.rate_hz <= max_hz
    measured = f"{stats.rate_hz:.1f} Hz over {stats.count} stamps ({topic})"
    return _row(name, ok, measured, expected)


def check_stream_jitter(
    name: str, topic: str, stats: StreamStats, thresholds: PreflightThresholds
) -> CheckRow:
    """PASS when stamp intervals are steady, strictly increasing and without long gaps."""
    expected = (
        f"interval std <= {thresholds.mocap_max_jitter_ms:.1f} ms, "
        f"gap <= {thresholds.mocap_max_gap_ms:.0f} ms, increasing stamps"
    )
    if stats.count < 3:
        return _row(name, False, f"{stats.count} message(s) on {topic}: too few", expected)
    ok = (
        stats.jitter_ms <= thresholds.mocap_max_jitter_ms
        and stats.max_gap_ms <= thresholds.mocap_max_gap_ms
        and stats.non_increasing == 0
    )
    measured = f"std {stats.jitter_ms:.2f} ms, max gap {stats.max_gap_ms:.1f} ms"
    if stats.non_increasing:
        measured += f", {stats.non_increasing} non-increasing stamp(s)"
    return _row(name, ok, measured, expected)


def check_clock_offset(
    topic: str,
    stamps_ns: Sequence[int],
    receive_ns: Sequence[int],
    thresholds: PreflightThresholds,
) -> CheckRow:
    """PASS when the median of (receive wall time - stamp) is within the offset limit.

    The median absorbs transport and scheduling delays of single messages; what remains is
    the clock offset of the publisher plus its typical latency (both matter: the policy's
    odometry watchdog compares stamps with its own clock).
    """
    name = "clock offset"
    expected = f"|median| <= {thresholds.max_clock_offset_ms:.0f} ms"
    stamps = np.asarray(stamps_ns, dtype=np.int64)
    received = np.asarray(receive_ns, dtype=np.int64)
    if stamps.size == 0 or stamps.size != received.size:
        return _row(name, False, f"no stamps received on {topic}", expected)
    offsets_ms = (received - stamps).astype(float) / NS_PER_MS
    median = float(np.median(offsets_ms))
    ok = abs(median) <= thresholds.max_clock_offset_ms
    measured = (
        f"receive - stamp median {median:+.1f} ms "
        f"(range {offsets_ms.min():+.1f}..{offsets_ms.max():+.1f} ms, {topic})"
    )
    return _row(name, ok, measured, expected)


def check_odometry(topic: str, states: np.ndarray, thresholds: PreflightThresholds) -> CheckRow:
    """PASS when every odometry state is finite, unit-quaternion and physically plausible.

    Args:
        topic: odometry topic name (for the message).
        states: (N, 13) states p, q (w x y z), v (world), omega (body) of the received messages.
        thresholds: the quaternion-norm tolerance and the speed and body-rate limits.
    """
    name = "odometry sanity"
    expected = (
        f"finite, ||q|-1| <= {thresholds.quat_norm_tol:g}, speed <= "
        f"{thresholds.max_speed_mps:g} m/s, body rate <= {thresholds.max_body_rate_radps:g} rad/s"
    )
    states = np.asarray(states, dtype=float).reshape(-1, STATE_DIM)
    if states.shape[0] == 0:
        return _row(name, False, f"no odometry on {topic}", expected)
    finite = np.isfinite(states).all(axis=1)
    good = states[finite]
    problems = []
    if not finite.all():
        problems.append(f"{int((~finite).sum())} non-finite")
    if good.shape[0]:
        quat_err = float(np.abs(np.linalg.norm(good[:, QUAT], axis=1) - 1.0).max())
        speed = float(np.linalg.norm(good[:, VEL], axis=1).max())
        rate = float(np.abs(good[:, OMEGA]).max())
        if quat_err > thresholds.quat_norm_tol:
            problems.append(f"||q|-1| up to {quat_err:.3g}")
        if speed > thresholds.max_speed_mps:
            problems.append(f"speed up to {speed:.2f} m/s")
        if rate > thresholds.max_body_rate_radps:
            problems.append(f"body rate up to {rate:.2f} rad/s")
        position = good[-1, POS]
        summary = (
            f"{states.shape[0]} msgs, max ||q|-1| {quat_err:.1e}, max speed {speed:.2f} m/s, "
            f"max rate {rate:.2f} rad/s, last p [{position[0]:.2f} {position[1]:.2f} "
            f"{position[2]:.2f}] m"
        )
    else:
        summary = f"{states.shape[0]} msgs"
    measured = summary + (f"; BAD: {', '.join(problems)}" if problems else "")
    return _row(name, not problems, measured, expected)


def check_commands(
    topic: str,
    stamps_ns: Sequence[int],
    actions: np.ndarray,
    modes: Sequence[int],
    policy_versions: Sequence[int],
    policy_active_version: int | None,
    thresholds: PreflightThresholds,
) -> CheckRow:
    """PASS when the policy publishes finite, non-negative-thrust commands at rate, in an
    accepted mode, tagged with its active bundle version.

    Args:
        topic: command topic name (for the message).
        stamps_ns: (N,) command header stamps (= the odometry stamps they answer) [ns].
        actions: (N, 4) thrust [N] and body rates [rad/s].
        modes: (N,) CtbrCommand MODE_* of each command.
        policy_versions: (N,) policy_version of each command.
        policy_active_version: the policy's NodeStatus active version (None: no status).
        thresholds: the least command rate and the accepted modes.
    """
    name = "policy commands"
    accepted = "/".join(thresholds.accepted_modes)
    expected = (
        f">= {thresholds.command_min_rate_hz:g} Hz, finite, thrust >= 0, mode {accepted}, "
        "version = policy's"
    )
    actions = np.asarray(actions, dtype=float).reshape(-1, ACTION_DIM)
    count = actions.shape[0]
    if count == 0:
        return _row(name, False, f"no commands on {topic}", expected)
    stats = stream_stats(stamps_ns)
    finite = np.isfinite(actions).all(axis=1)
    last_mode = int(modes[-1])
    mode_name = wire.mode_name(last_mode)
    versions = sorted(set(int(v) for v in policy_versions))
    problems = []
    if not count >= 2 or not stats.rate_hz >= thresholds.command_min_rate_hz:
        problems.append("too slow")
    if not finite.all():
        problems.append(f"{int((~finite).sum())} non-finite")
    if np.any(actions[finite, 0] < 0):
        problems.append("negative thrust")
    if mode_name not in thresholds.accepted_modes:
        problems.append(f"mode {mode_name}")
    if policy_active_version is not None and versions != [policy_active_version]:
        problems.append(f"versions {versions} != policy v{policy_active_version}")
    last = actions[-1]
    measured = (
        f"{stats.rate_hz:.1f} Hz, {count} cmds, mode {mode_name}, v{','.join(map(str, versions))}"
        f", last thrust {last[0]:.2f} N rates [{last[1]:.2f} {last[2]:.2f} {last[3]:.2f}] rad/s"
    )
    measured += f"; BAD: {', '.join(problems)}" if problems else ""
    return _row(name, not problems, measured, expected)


@dataclass(frozen=True)
class DiskSample:
    """Free space where the replay store will live."""

    run_dir: str  # the learner run directory asked about
    probed: str  # the existing directory measured (run_dir or its nearest existing parent)
    free_bytes: int  # bytes available to this user
    writable: bool  # this user may create files there
    store_bytes: int  # bytes already in <run_dir>/replay (0 when absent)


def measure_disk(run_dir: str | os.PathLike[str]) -> DiskSample:
    """Free space and writability of ``run_dir`` (or of its nearest existing parent)."""
    path = Path(run_dir).expanduser().absolute()
    probed = path
    while not probed.exists() and probed != probed.parent:
        probed = probed.parent
    store = path / "replay"
    store_bytes = (
        sum(f.stat().st_size for f in store.rglob("*") if f.is_file()) if store.is_dir() else 0
    )
    return DiskSample(
        run_dir=str(path),
        probed=str(probed),
        free_bytes=int(shutil.disk_usage(probed).free),
        writable=os.access(probed, os.W_OK),
        store_bytes=store_bytes,
    )


def check_disk(sample: DiskSample, thresholds: PreflightThresholds) -> CheckRow:
    """PASS when the run directory is writable and has ``min_free_mb`` free."""
    name = "disk space"
    expected = f">= {thresholds.min_free_mb:.0f} MiB free, writable"
    free_mb = sample.free_bytes / BYTES_PER_MB
    where = (
        sample.run_dir
        if sample.probed == sample.run_dir
        else (f"{sample.run_dir} (to be created; measured {sample.probed})")
    )
    store_mb = sample.store_bytes / BYTES_PER_MB
    measured = f"{free_mb:.0f} MiB free at {where}, replay store {store_mb:.1f} MiB"
    ok = free_mb >= thresholds.min_free_mb and sample.writable
    if not sample.writable:
        measured += "; BAD: not writable"
    return _row(name, ok, measured, expected)
