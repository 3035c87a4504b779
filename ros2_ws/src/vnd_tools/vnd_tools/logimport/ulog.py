"""PX4 ULog flight logs (read with ``pyulog``).

Topics read (one instance of each, see below):

- ``vehicle_local_position``: ``x y z`` [m] and ``vx vy vz`` [m/s], world NED; its samples
  are the odometry stamps;
- ``vehicle_attitude``: ``q[0..3]`` (w x y z), body FRD to world NED;
- ``vehicle_angular_velocity``: ``xyz[0..2]`` [rad/s], body FRD;
- ``vehicle_rates_setpoint``: ``roll pitch yaw`` [rad/s], body FRD; its samples are the command
  stamps;
- ``vehicle_thrust_setpoint``: ``xyz[2]``, normalised thrust along body z (negative up). When
  the log lacks it, ``vehicle_rates_setpoint.thrust_body[2]`` stands in (and the report says so);
- ``vehicle_status`` (``arming_state``, ``nav_state``) and ``vehicle_land_detected``
  (``landed``), when logged: odometry samples count as flight only while armed and not landed,
  and a change of ``nav_state`` (the flight mode) splits the segment.

A topic logged in several instances (``multi_id``: two estimators, redundant sensors) is read
from instance 0 unless that one holds fewer than :data:`MIN_INSTANCE_SHARE` of the samples of
the fullest instance (a stalled or short-lived publisher); then from the lowest instance that
does. ``instances`` (``vnd import --ulog-instance TOPIC=N``) chooses one; the report notes the
instance read of every topic logged in more than one.

Attitude and body rates are interpolated onto the position stamps (the attitude on the nearer
hemisphere, renormalised); odometry samples outside the span of any of the three topics are not
formed. Frames go NED/FRD -> ENU/FLU (:mod:`.frames`); normalised thrust becomes newtons through
the vehicle's thrust curve (:mod:`.thrust_curve`: ``thrust_max_n`` and ``thrust_model_factor``).
ULog stamps count microseconds since the autopilot booted.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from vnd_core.vehicle import VehicleParams

from vnd_tools.logimport.frames import command_to_flu, state_to_enu_flu
from vnd_tools.logimport.streams import FlightStreams, held_values
from vnd_tools.logimport.thrust_curve import ThrustCurve

TOPICS = (
    "vehicle_local_position",
    "vehicle_attitude",
    "vehicle_angular_velocity",
    "vehicle_rates_setpoint",
    "vehicle_thrust_setpoint",
    "vehicle_status",
    "vehicle_land_detected",
)
ARMING_STATE_ARMED = 2  # vehicle_status.arming_state of an armed vehicle
MIN_INSTANCE_SHARE = 0.5  # instance 0 is read unless it has fewer samples than this share
_NS_PER_US = 1000


class UlogError(ValueError):
    """A ULog file cannot be imported; the message names the file and the reason."""


def torn_tail_bytes(path: Path) -> int:
    """Bytes after the last complete message of ULog file ``path`` (0 for a whole file): the
    messages (``u16 size | u8 type | body``) after the 16-byte header are walked to the end.
    pyulog stops quietly at a torn last message; this tells the import to refuse the file."""
    data = path.read_bytes()
    offset = 16
    while offset + 3 <= len(data):
        (size,) = struct.unpack_from("<H", data, offset)
        if offset + 3 + size > len(data):
            break
        offset += 3 + size
    return len(data) - offset


def _columns(data: dict[str, np.ndarray], names: list[str], path: Path, topic: str) -> np.ndarray:
    missing = [name for name in names if name not in data]
    if missing:
        raise UlogError(f"{path}: {topic} has no fields {missing}")
    return np.stack([np.asarray(data[name], dtype=np.float64) for name in names], axis=1)


def _interp(t_us: np.ndarray, stamps_us: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.stack([np.interp(t_us, stamps_us, values[:, i]) for i in range(values.shape[1])], 1)


def _interp_quat(t_us: np.ndarray, stamps_us: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Quaternions (N, 4) at ``t_us`` from samples ``q`` (M, 4), sign made continuous first."""
    q = q.copy()
    for i in range(1, len(q)):
        if float(q[i] @ q[i - 1]) < 0:
            q[i] = -q[i]
    out = _interp(t_us, stamps_us, q)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def parse_instances(specs: list[str]) -> dict[str, int]:
    """``TOPIC=N`` options as {topic: instance}; ValueError naming a malformed one."""
    chosen = {}
    for spec in specs:
        topic, sep, number = spec.partition("=")
        if not sep or not topic or not number.isdigit():
            raise ValueError(f"--ulog-instance {spec!r}: expected TOPIC=N (N an instance number)")
        if topic not in TOPICS:
            raise ValueError(f"--ulog-instance {spec!r}: {topic} is not read (read: {TOPICS})")
        chosen[topic] = int(number)
    return chosen


def choose_instances(
    datasets: list[Any], path: Path, wanted: Mapping[str, int]
) -> tuple[dict[str, dict[str, np.ndarray]], list[str]]:
    """The data of one instance per topic of pyulog ``datasets`` (see the module docstring)
    and a note per topic logged in several instances; UlogError for a missing wanted one."""
    by_topic: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    for dataset in datasets:
        by_topic.setdefault(dataset.name, {})[int(dataset.multi_id)] = dataset.data
    data, notes = {}, []
    for topic, instances in sorted(by_topic.items()):
        samples = {i: len(d["timestamp"]) for i, d in sorted(instances.items())}
        if topic in wanted:
            chosen = wanted[topic]
            if chosen not in instances:
                raise UlogError(f"{path}: {topic} has no instance {chosen} (has {list(samples)})")
            why = "chosen with --ulog-instance"
        else:
            enough = MIN_INSTANCE_SHARE * max(samples.values())
            chosen = next(i for i, n in samples.items() if n >= enough)
            first = min(samples)
            why = (
                "the lowest-numbered"
                if chosen == first
                else f"instance {first} holds under {MIN_INSTANCE_SHARE:.0%} of the samples"
                " of the fullest"
            )
        data[topic] = instances[chosen]
        if len(instances) > 1 or topic in wanted:
            counts = ", ".join(f"{i}: {n}" for i, n in samples.items())
            notes.append(f"{topic}: instance {chosen} read ({why}; samples per instance {counts})")
    missing = sorted(set(wanted) - set(by_topic))
    if missing:
        raise UlogError(f"{path}: instances chosen for {missing}, which the log does not hold")
    return data, notes


def read_ulog(
    path: str | Path, vehicle: VehicleParams, instances: Mapping[str, int] | None = None
) -> FlightStreams:
    """The streams of ULog file ``path``, topics from the instances of :func:`choose_instances`
    (``instances``: topic -> instance to read); UlogError naming the file on any problem."""
    from pyulog import ULog

    path = Path(path)
    try:
        log = ULog(str(path), list(TOPICS))
    except Exception as err:  # pyulog raises ULogException, struct.error, IndexError, ...
        raise UlogError(f"{path}: not a readable ULog file: {err}") from err
    if log.file_corruption:
        raise UlogError(f"{path}: corrupt or truncated ULog file (pyulog found a damaged message)")
    torn = torn_tail_bytes(path)
    if torn:
        raise UlogError(f"{path}: corrupt or truncated ULog file ({torn} bytes of a torn message)")
    data, notes = choose_instances(log.data_list, path, instances or {})
    missing = [t for t in TOPICS[:4] if t not in data]
    if missing:
        raise UlogError(f"{path}: the log has no {missing} (has {sorted(data)})")
    substitutions = []
    position = data["vehicle_local_position"]
    t_us = np.asarray(position["timestamp"], dtype=np.int64)
    attitude, rates = data["vehicle_attitude"], data["vehicle_angular_velocity"]
    att_us = np.asarray(attitude["timestamp"], dtype=np.int64)
    rate_us = np.asarray(rates["timestamp"], dtype=np.int64)
    lo, hi = max(att_us.min(), rate_us.min()), min(att_us.max(), rate_us.max())
    inside = (t_us >= lo) & (t_us <= hi)
    if inside.sum() < len(t_us):
        substitutions.append(
            f"odometry: {int((~inside).sum())} position samples outside the attitude and rate"
            " span not formed"
        )
    t_us = t_us[inside]
    state_ned = np.concatenate(
        [
            _columns(position, ["x", "y", "z"], path, "vehicle_local_position")[inside],
            _interp_quat(
                t_us,
                att_us,
                _columns(attitude, [f"q[{i}]" for i in range(4)], path, "vehicle_attitude"),
            ),
            _columns(position, ["vx", "vy", "vz"], path, "vehicle_local_position")[inside],
            _interp(
                t_us,
                rate_us,
                _columns(rates, [f"xyz[{i}]" for i in range(3)], path, "vehicle_angular_velocity"),
            ),
        ],
        axis=1,
    )
    setpoint = data["vehicle_rates_setpoint"]
    cmd_us = np.asarray(setpoint["timestamp"], dtype=np.int64)
    rates_frd = _columns(setpoint, ["roll", "pitch", "yaw"], path, "vehicle_rates_setpoint")
    if "vehicle_thrust_setpoint" in data:
        thrust = data["vehicle_thrust_setpoint"]
        thrust_us = np.asarray(thrust["timestamp"], dtype=np.int64)
        z = _columns(thrust, ["xyz[2]"], path, "vehicle_thrust_setpoint")[:, 0]
        held = np.searchsorted(thrust_us, cmd_us, side="right") - 1
        normalised = np.where(held >= 0, -z[np.maximum(held, 0)], np.nan)
    else:
        z = _columns(setpoint, ["thrust_body[2]"], path, "vehicle_rates_setpoint")[:, 0]
        normalised = -z
        substitutions.append(
            "thrust: vehicle_rates_setpoint.thrust_body (no vehicle_thrust_setpoint)"
        )
    curve = ThrustCurve.of(vehicle)
    command_frd = np.concatenate([curve.thrust_n(normalised)[:, None], rates_frd], axis=1)
    phase = _flight_phase(data, t_us, path)
    if phase is None:
        substitutions.append("flight phase: every sample counts as flight (no vehicle_status)")
    return FlightStreams(
        phase=phase,
        source=str(path),
        state_stamp_ns=t_us * _NS_PER_US,
        state=state_to_enu_flu(state_ned, "ned_frd"),
        command_stamp_ns=cmd_us * _NS_PER_US,
        command=command_to_flu(command_frd, "ned_frd"),
        substitutions=substitutions,
        thrust_curve=curve,
        notes=notes,
    )


def _flight_phase(
    data: dict[str, dict[str, np.ndarray]], t_us: np.ndarray, path: Path
) -> np.ndarray | None:
    """nav_state while armed and not landed, -1 otherwise, at ``t_us``; None without status."""
    if "vehicle_status" not in data:
        return None
    status = data["vehicle_status"]
    status_us = np.asarray(status["timestamp"], dtype=np.int64)
    armed_state, nav_state = _columns(
        status, ["arming_state", "nav_state"], path, "vehicle_status"
    ).T
    armed = held_values(status_us, armed_state.astype(np.int64), t_us, 0) == ARMING_STATE_ARMED
    phase = held_values(status_us, nav_state.astype(np.int64), t_us, -1)
    if "vehicle_land_detected" in data:
        land = data["vehicle_land_detected"]
        land_us = np.asarray(land["timestamp"], dtype=np.int64)
        landed = _columns(land, ["landed"], path, "vehicle_land_detected")[:, 0].astype(np.int64)
        armed &= held_values(land_us, landed, t_us, 1) == 0
    return np.where(armed, phase, -1)
