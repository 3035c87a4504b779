"""rosbag2 flight logs (MCAP or sqlite3): an odometry or mocap pose topic plus a command topic.

Read with rosbags (both storage plugins; definitions embedded in the bag are used, else the
Jazzy typestore plus the vendored px4_msgs / mavros_msgs subsets and vnd_msgs/CtbrCommand).

Odometry topics, chosen by type unless ``odom_topic`` names one:

- ``nav_msgs/msg/Odometry``: pose, velocity, body rates. The stack publishes the velocity in
  the world frame; a bag whose odometry follows nav_msgs' convention (velocity in the child,
  body frame) is read with ``velocity_frame="body"``.
- ``geometry_msgs/msg/PoseStamped`` (mocap): velocity and body rates are estimated by the
  stack's :class:`~vnd_flight.pose_filter.PoseFilter`, fed the rate commands as in flight.

Command topics, chosen by type unless ``command_topic`` names one:

- ``vnd_msgs/msg/CtbrCommand``: thrust [N] and body rates FLU, as sent;
- ``px4_msgs/msg/VehicleRatesSetpoint``: rates FRD, ``-thrust_body[2]`` normalised thrust;
- ``mavros_msgs/msg/AttitudeTarget``: body rates FLU, normalised thrust (rates masked out by
  ``type_mask`` read as NaN and are dropped by the checks).

Flight phase, when the bag holds a status topic (chosen by type unless ``status_topic`` names
one): only flight is kept and a change of flight mode splits the segment, counted as
``not_flying`` and ``phase_change``; odometry before the first status message counts as not
flying. Without one, every sample counts as flight (and the report says so).

- ``mavros_msgs/msg/State``: ``armed``, ``mode`` (a name: each name seen is a phase);
- ``px4_msgs/msg/VehicleStatus``: ``arming_state`` (2: armed), ``nav_state``. Its layout
  changes between PX4 versions, so it is read with the definition the bag carries (MCAP bags
  and rosbag2 bags recorded on Iron or later do).

Normalised thrust becomes newtons through the vehicle's thrust curve (:mod:`.thrust_curve`:
``thrust_max_n`` and ``thrust_model_factor``). Stamps are the header stamps; when a topic read
has no header (px4_msgs), every stream uses the bag's receive times, so all stay on one clock.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.highlevel import AnyReader
from rosbags.interfaces import Connection
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore
from vnd_core.evaluation.replay_bag import transition_msg_path
from vnd_core.plant_parts import rotate_np, rotmat_np
from vnd_core.state import STATE_DIM
from vnd_core.vehicle import VehicleParams
from vnd_flight.msgfields import odometry_state, stamp_ns
from vnd_flight.pose_filter import PoseFilter

from vnd_tools.logimport.frames import frd_to_flu
from vnd_tools.logimport.streams import FlightStreams, held_values
from vnd_tools.logimport.thrust_curve import ThrustCurve

ODOMETRY_TYPES = ("nav_msgs/msg/Odometry", "geometry_msgs/msg/PoseStamped")
COMMAND_TYPES = (
    "vnd_msgs/msg/CtbrCommand",
    "px4_msgs/msg/VehicleRatesSetpoint",
    "mavros_msgs/msg/AttitudeTarget",
)
STATUS_TYPES = ("mavros_msgs/msg/State", "px4_msgs/msg/VehicleStatus")
VELOCITY_FRAMES = ("world", "body")
PX4_ARMED = 2  # VehicleStatus.arming_state of an armed vehicle
_VENDORED = {
    "px4_msgs/msg/VehicleRatesSetpoint": "px4_msgs/msg/VehicleRatesSetpoint.msg",
    "mavros_msgs/msg/AttitudeTarget": "mavros_msgs/msg/AttitudeTarget.msg",
}
# mavros_msgs/msg/State of MAVROS 2.x (topic /mavros/state), fields only: the MODE_* name
# constants do not change the layout. Kept here, not with the bridges' vendored definitions:
# only the import reads it.
_MAVROS_STATE = """std_msgs/Header header
bool connected
bool armed
bool guided
bool manual_input
string mode
uint8 system_status
"""
_MAVROS_IGNORE_RATES = (1, 2, 4)  # AttitudeTarget.IGNORE_{ROLL,PITCH,YAW}_RATE


class Rosbag2LogError(ValueError):
    """A rosbag2 log cannot be imported; the message names the bag and the reason."""


def _vendored_dir() -> Path:
    spec = importlib.util.find_spec("vnd_ros")
    if spec is not None and spec.submodule_search_locations:
        installed = Path(next(iter(spec.submodule_search_locations))) / "msg_defs"
        if installed.is_dir():
            return installed
    return Path(__file__).resolve().parents[3] / "vnd_ros" / "vnd_ros" / "msg_defs"


def log_typestore() -> Typestore:
    """Jazzy typestore with the command types of :data:`COMMAND_TYPES` and mavros_msgs/State
    registered."""
    store = get_typestore(Stores.ROS2_JAZZY)
    ctbr = transition_msg_path().with_name("CtbrCommand.msg")
    types = get_types_from_msg(ctbr.read_text(), "vnd_msgs/msg/CtbrCommand")
    for name, relative in _VENDORED.items():
        types.update(get_types_from_msg((_vendored_dir() / relative).read_text(), name))
    types.update(get_types_from_msg(_MAVROS_STATE, "mavros_msgs/msg/State"))
    store.register(types)
    return store


def _pick(
    connections: Sequence[Connection],
    types: tuple[str, ...],
    wanted: str | None,
    what: str,
    bag: Path,
    required: bool = True,
) -> list[Connection]:
    """The connection of topic ``wanted``, else the only one of the first type present (none:
    an error, or an empty list when not ``required``)."""
    found = sorted({f"{c.topic} ({c.msgtype})" for c in connections})
    if wanted is not None:
        chosen = [c for c in connections if c.topic == wanted]
        if not chosen:
            raise Rosbag2LogError(f"{bag}: no topic {wanted}; found {found}")
        if chosen[0].msgtype not in types:
            raise Rosbag2LogError(
                f"{bag}: {wanted} is {chosen[0].msgtype}, not a {what} type ({', '.join(types)})"
            )
        return chosen
    for msgtype in types:
        chosen = [c for c in connections if c.msgtype == msgtype]
        topics = sorted({c.topic for c in chosen})
        if len(topics) > 1:
            raise Rosbag2LogError(
                f"{bag}: several {msgtype} topics {topics}; choose one with --{what}"
            )
        if chosen:
            return chosen
    if not required:
        return []
    raise Rosbag2LogError(f"{bag}: no {what} topic ({', '.join(types)}); found {found}")


def _command(msg: Any, msgtype: str, curve: ThrustCurve) -> np.ndarray:
    """(thrust [N], rates FLU (3)) of one command message."""
    if msgtype == "vnd_msgs/msg/CtbrCommand":
        return np.array([msg.thrust_n, *np.asarray(msg.body_rate_radps, dtype=float)])
    if msgtype == "px4_msgs/msg/VehicleRatesSetpoint":
        rates = frd_to_flu(np.array([[msg.roll, msg.pitch, msg.yaw]], dtype=float))[0]
        return np.array([float(curve.thrust_n(-float(msg.thrust_body[2]))), *rates])
    rate = msg.body_rate
    rates = np.array([rate.x, rate.y, rate.z], dtype=float)
    for axis, bit in enumerate(_MAVROS_IGNORE_RATES):
        if msg.type_mask & bit:
            rates[axis] = np.nan
    return np.array([float(curve.thrust_n(float(msg.thrust))), *rates])


def _status(msg: Any, msgtype: str) -> tuple[bool, int | str]:
    """(armed, flight mode) of one status message."""
    if msgtype == "mavros_msgs/msg/State":
        return bool(msg.armed), str(msg.mode)
    return int(msg.arming_state) == PX4_ARMED, int(msg.nav_state)


def _flight_phase(
    rows: list[tuple[int, int, tuple[bool, int | str]]], pick: int, stamps: np.ndarray
) -> tuple[np.ndarray, str]:
    """The flight phase at odometry ``stamps`` from status ``rows`` (header stamp, log time,
    (armed, mode)): a code of the mode while armed, -1 otherwise; and the modes seen."""
    rows = sorted(rows, key=lambda row: row[pick])
    codes: dict[int | str, int] = {}
    phase = np.array(
        [codes.setdefault(mode, len(codes)) if armed else -1 for _, _, (armed, mode) in rows],
        dtype=np.int64,
    )
    at = np.array([row[pick] for row in rows], dtype=np.int64)
    return held_values(at, phase, stamps, -1), ", ".join(map(str, codes)) or "none while armed"


def read_rosbag2_log(
    bag: str | Path,
    vehicle: VehicleParams,
    odom_topic: str | None = None,
    command_topic: str | None = None,
    velocity_frame: str = "world",
    status_topic: str | None = None,
) -> FlightStreams:
    """The streams of rosbag2 bag ``bag``; Rosbag2LogError naming the bag on any problem."""
    bag = Path(bag)
    if velocity_frame not in VELOCITY_FRAMES:
        raise Rosbag2LogError(f"velocity_frame must be one of {VELOCITY_FRAMES}")
    curve = ThrustCurve.of(vehicle)
    odom_rows: list[tuple[int, int, Any]] = []  # (header stamp, log time, message)
    command_rows: list[tuple[int, int, np.ndarray]] = []
    status_rows: list[tuple[int, int, tuple[bool, int | str]]] = []
    try:
        with AnyReader([bag], default_typestore=log_typestore()) as reader:
            odom = _pick(reader.connections, ODOMETRY_TYPES, odom_topic, "odom", bag)
            command = _pick(reader.connections, COMMAND_TYPES, command_topic, "command", bag)
            status = _pick(
                reader.connections, STATUS_TYPES, status_topic, "status", bag, required=False
            )
            odom_type, command_type = odom[0].msgtype, command[0].msgtype
            status_type = status[0].msgtype if status else ""
            chosen = [*odom, *command, *status]
            for connection, log_ns, raw in reader.messages(connections=chosen):
                msg: Any = reader.deserialize(raw, connection.msgtype)
                if connection in odom:
                    odom_rows.append((stamp_ns(msg.header.stamp), log_ns, msg))
                elif connection in command:
                    header = (
                        0 if command_type.startswith("px4_msgs") else stamp_ns(msg.header.stamp)
                    )
                    command_rows.append((header, log_ns, _command(msg, command_type, curve)))
                else:
                    header = 0 if status_type.startswith("px4_msgs") else stamp_ns(msg.header.stamp)
                    status_rows.append((header, log_ns, _status(msg, status_type)))
    except Rosbag2LogError:
        raise
    except Exception as err:  # rosbags raises several unrelated types for unreadable bags
        raise Rosbag2LogError(f"{bag}: cannot read bag: {err}") from err
    use_log_time = command_type.startswith("px4_msgs") or status_type.startswith("px4_msgs")
    pick = 1 if use_log_time else 0
    command_ns = np.array([row[pick] for row in command_rows], dtype=np.int64)
    commands = np.array([row[2] for row in command_rows]).reshape(-1, 4)
    topics = [f"{c[0].topic} {c[0].msgtype}" for c in (odom, command, status) if c]
    source = f"{bag} ({', '.join(topics)})"
    substitutions = []
    if use_log_time:
        substitutions.append("stamps: the bag's receive times (px4_msgs carry no header)")
    if odom_type == "nav_msgs/msg/Odometry":
        stamps = np.array([row[pick] for row in odom_rows], dtype=np.int64)
        state = np.array([odometry_state(row[2]) for row in odom_rows]).reshape(-1, STATE_DIM)
        if velocity_frame == "body":
            state[:, 7:10] = rotate_np(rotmat_np(_unit(state[:, 3:7])), state[:, 7:10])
    else:
        stamps, state, counts = _filter_poses(odom_rows, pick, command_ns, commands, vehicle)
        substitutions.append(
            f"velocity and body rates: estimated from the poses by the pose filter {counts}"
        )
    phase, notes = None, []
    if status:
        phase, modes = _flight_phase(status_rows, pick, stamps)
        notes.append(f"flight phase: from {status[0].topic} (modes flown: {modes})")
    else:
        substitutions.append(
            f"flight phase: every sample counts as flight (no {' or '.join(STATUS_TYPES)})"
        )
    return FlightStreams(
        source=source,
        state_stamp_ns=stamps,
        state=state,
        command_stamp_ns=command_ns,
        command=commands,
        substitutions=substitutions,
        phase=phase,
        thrust_curve=curve if command_type != "vnd_msgs/msg/CtbrCommand" else None,
        notes=notes,
    )


def _unit(q: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(q, axis=1, keepdims=True)
    return q / np.where(norm > 0, norm, 1.0)


def _filter_poses(
    rows: list[tuple[int, int, Any]],
    pick: int,
    command_ns: np.ndarray,
    commands: np.ndarray,
    vehicle: VehicleParams,
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Pose samples through the pose filter, rate commands fed in stamp order; the estimates
    (K,), (K, 13) and the filter's rejection counts."""
    pose_filter = PoseFilter(rate_time_constant_s=vehicle.body_rate_time_constant_s)
    order = np.argsort(command_ns, kind="stable")
    next_command = 0
    stamps, states = [], []
    for row in rows:
        stamp = row[pick]
        while next_command < len(order) and command_ns[order[next_command]] <= stamp:
            i = order[next_command]
            if np.isfinite(commands[i, 1:]).all():
                pose_filter.set_rate_command(int(command_ns[i]), commands[i, 1:])
            next_command += 1
        p, q = row[2].pose.position, row[2].pose.orientation
        estimate = pose_filter.update(stamp, (p.x, p.y, p.z), (q.w, q.x, q.y, q.z))
        if estimate is not None:
            stamps.append(estimate.stamp_ns)
            states.append(estimate.as_state())
    counts = pose_filter.counters.totals
    return np.array(stamps, np.int64), np.array(states).reshape(-1, STATE_DIM), counts
