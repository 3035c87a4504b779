"""``vnd import`` on CSV logs of a simulated flight with known truth, the data checks, the frame
conversions and ``vnd learn`` on an imported bag.

The flight: the shipped base policy hovers in wind on the true plant. The log holds the true
state every 10 ms, 4 ms off the control grid (so every imported tick is interpolated), and on
each row the command in effect at that instant (the policy's, issued every 20 ms).
"""

from __future__ import annotations

import argparse
import json
import struct
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import get_types_from_msg
from rosbags.typesys.store import Typestore
from vnd_core.bundle import Bundle, load_bundle, save_bundle, shipped_bundle_path
from vnd_core.evaluation.replay_bag import (
    ReadReport,
    ReplayBagWarning,
    read_transitions,
    write_transitions,
)
from vnd_core.learner.records import MODE_POLICY, TickRecords
from vnd_core.plant import TruePlant
from vnd_core.plant_parts import rotate_np, rotmat_np
from vnd_core.policy import PolicyRunner
from vnd_core.reference import ReferenceSpec
from vnd_core.scenario import Phase, Scenario, WindEvent
from vnd_core.state import OMEGA, POS, QUAT, VEL
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import FitConfig, VNDModel, fit_vnd
from vnd_tools.cli import main as vnd_main
from vnd_tools.commands import learn, model_eval
from vnd_tools.logimport.checks import CheckConfig, check_odometry
from vnd_tools.logimport.csvlog import (
    SCHEMA,
    CsvLogError,
    CsvMapping,
    read_csv_log,
    write_csv_log,
)
from vnd_tools.logimport.frames import (
    frd_to_flu,
    ned_to_enu,
    quat_ned_frd_to_enu_flu,
    state_to_enu_flu,
)
from vnd_tools.logimport.rosbag2log import Rosbag2LogError, log_typestore, read_rosbag2_log
from vnd_tools.logimport.streams import FlightStreams
from vnd_tools.logimport.thrust_curve import ThrustCurve
from vnd_tools.logimport.ulog import UlogError, read_ulog
from vnd_tools.logimport.writer import read_import_report, resample

VEHICLE = load_vehicle("agile")
T0_NS = 1_700_000_000_000_000_000  # first stamp of the flight (a multiple of 20 ms)
TICK_NS = 20_000_000  # control period
LOG_OFFSET_NS = 4_000_000  # log rows are 4 ms off the control grid
LOG_STEP_NS = 10_000_000  # 100 Hz log
WINDY = Scenario(
    name="windy",
    duration_s=8.0,
    phases=(Phase("calm", 0.0), Phase("wind", 1.0)),
    events=(WindEvent(type="wind", at_s=1.0, kind="constant", velocity_mps=(3.0, 0.0, 0.0)),),
)
# Tolerances of an imported tick against the truth at its stamp: linear interpolation over
# 10 ms of a hovering vehicle.
POSITION_TOL_M = 1e-3
VELOCITY_TOL_MPS = 0.02
ATTITUDE_TOL_RAD = 3e-3
RATE_TOL_RADPS = 0.1


@dataclass
class Flight:
    """Truth every 2 ms (physics step) and the log rows every 10 ms."""

    truth_ns: np.ndarray  # (T,) stamps of the truth
    truth: np.ndarray  # (T, 13) true states
    command_ns: np.ndarray  # (K,) when each policy command was issued
    command: np.ndarray  # (K, 4) the commands
    log_ns: np.ndarray  # (L,) log row stamps
    log_state: np.ndarray  # (L, 13) true state of each row
    log_command: np.ndarray  # (L, 4) command in effect at each row

    def truth_at(self, stamp_ns: np.ndarray) -> np.ndarray:
        """True states (N, 13) at stamps on the 2 ms physics grid."""
        index = np.searchsorted(self.truth_ns, stamp_ns)
        assert np.array_equal(self.truth_ns[index], stamp_ns)
        return self.truth[index]

    def command_for_tick(self, stamp_ns: np.ndarray) -> np.ndarray:
        """The policy's command issued at each control tick stamp (N, 4)."""
        index = np.searchsorted(self.command_ns, stamp_ns)
        assert np.array_equal(self.command_ns[index], stamp_ns)
        return self.command[index]


@pytest.fixture(scope="module")
def flight() -> Flight:
    return _fly(seed=3)


@pytest.fixture(scope="module")
def held_out_flight() -> Flight:
    """Another flight in the same wind (other noise), never learned from."""
    return _fly(seed=4)


def _fly(
    seed: int,
    act: Callable[[np.ndarray, float], np.ndarray] | None = None,
    scenario: Scenario = WINDY,
    ticks: int = 400,
) -> Flight:
    """``ticks`` control periods of ``scenario`` on the true plant, flown by ``act`` (measured
    state, time [s] -> command; default: the shipped policy)."""
    if act is None:
        act = PolicyRunner(load_bundle(shipped_bundle_path()).policy, scenario.reference).act
    plant = TruePlant(VEHICLE, scenario, batch_size=1, seed=seed)
    plant.reset(scenario.start_state(1))
    truth_ns, truth, command_ns, command = [T0_NS], [plant.state[0].double().numpy()], [], []
    for _ in range(ticks):
        t_s = plant.time_s
        action = act(plant.measure()[0].double().numpy(), t_s)
        plant.set_command(torch.from_numpy(action).float())
        command_ns.append(T0_NS + round(t_s * 1e9))
        command.append(action)
        for _ in range(10):
            plant.advance(0.002)
            truth_ns.append(T0_NS + round(plant.time_s * 1e9))
            truth.append(plant.state[0].double().numpy())
    truth_ns, truth = np.array(truth_ns), np.stack(truth)
    command_ns, command = np.array(command_ns), np.stack(command)
    log_ns = np.arange(T0_NS + LOG_OFFSET_NS, truth_ns[-1], LOG_STEP_NS)
    log_state = truth[np.searchsorted(truth_ns, log_ns)]
    log_command = command[np.searchsorted(command_ns, log_ns, side="right") - 1]
    return Flight(truth_ns, truth, command_ns, command, log_ns, log_state, log_command)


def _to_ned_frd(state: np.ndarray, command: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ENU/FLU -> NED/FRD (each conversion is its own inverse: the axis swaps and half turns)."""
    ned = state_to_enu_flu(state, "ned_frd")
    frd = command.copy()
    frd[:, 1:] = frd_to_flu(command[:, 1:])
    return ned, frd


def _attitude_error_rad(q_a: np.ndarray, q_b: np.ndarray) -> np.ndarray:
    dot = np.clip(np.abs((q_a * q_b).sum(axis=1)), 0.0, 1.0)
    return 2.0 * np.arccos(dot)


def _assert_matches_truth(records: TickRecords, flight: Flight, slack: float = 1.0) -> None:
    """States within the tolerances (times ``slack``), commands exactly the policy's."""
    _assert_states_match(records, flight, slack)
    # the command of each tick is the one the policy issued at that tick, exactly
    assert np.array_equal(records.action, flight.command_for_tick(records.stamp_ns))


def _assert_states_match(records: TickRecords, flight: Flight, slack: float = 1.0) -> None:
    """States within the tolerances (times ``slack``) of the truth at their stamps."""
    truth = flight.truth_at(records.stamp_ns)
    assert np.abs(records.state[:, POS] - truth[:, POS]).max() < slack * POSITION_TOL_M
    assert np.abs(records.state[:, VEL] - truth[:, VEL]).max() < slack * VELOCITY_TOL_MPS
    attitude_rad = _attitude_error_rad(records.state[:, QUAT], truth[:, QUAT])
    assert attitude_rad.max() < slack * ATTITUDE_TOL_RAD
    assert np.abs(records.state[:, OMEGA] - truth[:, OMEGA]).max() < slack * RATE_TOL_RADPS


def test_csv_import_matches_the_truth(flight, tmp_path, capsys):
    log = write_csv_log(tmp_path / "hover.csv", flight.log_ns, flight.log_state, flight.log_command)
    out = tmp_path / "bags"
    assert vnd_main(["import", str(log), "--vehicle", "agile", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    records = read_transitions(out)  # the learner's reader, on the output directory
    assert np.all(np.diff(records.stamp_ns) == TICK_NS) and np.all(records.mode == MODE_POLICY)
    assert records.stamp_ns[0] % TICK_NS == 0
    # ticks from the first grid point with a log row before it to the last one within the log
    assert len(records) == 399
    _assert_matches_truth(records, flight)
    custom = read_import_report(out / "hover")
    assert custom["source"] == str(log)
    report = json.loads((out / "hover.import.json").read_text())
    assert report == json.loads(custom["vnd_import"])
    assert report["ticks"] == 399 and report["odometry"]["counts"] == {}
    # the plant's 30 ms command latency and its motors' lag
    assert 0.03 <= report["command_delay_s"] <= 0.08
    assert "399 ticks (8.0 s) in 1 segments" in printed and "ticks/s" in printed


def test_ned_frd_csv_with_mapping_matches_the_truth(flight, tmp_path):
    """Renamed columns, time in milliseconds, normalised thrust and NED/FRD frames."""
    state, command = _to_ned_frd(flight.log_state, flight.log_command)
    command[:, 0] /= VEHICLE.thrust_max_n
    names = {name: f"col_{i}" for i, name in enumerate(SCHEMA)}
    # time in milliseconds since the first tick (written as seconds, read with scale 1e-3)
    since_start_ns = (flight.log_ns - T0_NS) * 1000
    log = write_csv_log(
        tmp_path / "px4.csv", since_start_ns, state, command, CsvMapping(columns=names)
    )
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(
        "frame: ned_frd\nthrust: normalised\nscale: {t_s: 1.0e-3}\ncolumns:\n"
        + "".join(f"  {k}: {v}\n" for k, v in names.items())
    )
    out = tmp_path / "bags"
    argv = ["import", str(log), "--vehicle", "agile", "--out", str(out), "--mapping", str(mapping)]
    assert vnd_main(argv) == 0
    records = read_transitions(out / "px4")
    records.stamp_ns += T0_NS
    truth = flight.truth_at(records.stamp_ns)
    assert len(records) == 399
    _assert_states_match(records, flight)
    # thrust went through the normalisation and back: equal up to rounding
    expected = flight.command_for_tick(records.stamp_ns)
    assert np.allclose(records.action, expected, rtol=1e-12, atol=1e-12)
    # read as if it were ENU, the same file is far from the truth (the conversion is needed)
    mapping.write_text(mapping.read_text().replace("frame: ned_frd", "frame: enu_flu"))
    assert vnd_main([*argv[:5], str(tmp_path / "wrong"), *argv[6:]]) == 0
    wrong = read_transitions(tmp_path / "wrong" / "px4")
    wrong.stamp_ns += T0_NS
    assert np.abs(wrong.state[:, POS] - truth[:, POS]).max() > 0.5


def test_frame_conversion_rotates_every_vector_consistently():
    """For random attitudes and body vectors: rotating the converted body vector by the
    converted attitude gives the converted world vector."""
    rng = np.random.default_rng(0)
    q_ned_frd = rng.normal(size=(500, 4))
    q_ned_frd /= np.linalg.norm(q_ned_frd, axis=1, keepdims=True)
    v_frd = rng.normal(size=(500, 3))
    world_ned = rotate_np(rotmat_np(q_ned_frd), v_frd)
    q_enu_flu = quat_ned_frd_to_enu_flu(q_ned_frd)
    assert np.allclose(np.linalg.norm(q_enu_flu, axis=1), 1.0)
    world_enu = rotate_np(rotmat_np(q_enu_flu), frd_to_flu(v_frd))
    assert np.allclose(world_enu, ned_to_enu(world_ned), atol=1e-12)
    # a level NED vehicle facing north faces north in ENU too: body x along world y
    level_north = quat_ned_frd_to_enu_flu(np.array([[1.0, 0.0, 0.0, 0.0]]))
    assert np.allclose(rotate_np(rotmat_np(level_north), np.array([[1.0, 0.0, 0.0]])), [0, 1, 0])
    assert np.allclose(rotate_np(rotmat_np(level_north), np.array([[0.0, 0.0, 1.0]])), [0, 0, 1])


def _streams_with_faults(flight: Flight) -> FlightStreams:
    """The log with known faults put in (indices into the 100 Hz rows)."""
    stamps, state = flight.log_ns.copy(), flight.log_state.copy()
    state[100, VEL.start] = np.nan  # one NaN row
    state[150, QUAT] *= 1.02  # non-unit quaternion: renormalised and kept
    state[160, QUAT] *= 1.5  # far from unit: dropped
    stamps[200] = stamps[199]  # duplicate stamp
    swapped = [251, 250]  # two rows in the wrong order: the second is out of order
    stamps[[250, 251]], state[[250, 251]] = stamps[swapped], state[swapped]
    state[400, VEL] += 5.0  # a 5 m/s velocity step in 10 ms: 500 m/s^2
    state[120:, POS.start] += 0.5  # the mocap origin moves by 0.5 m (velocities unchanged)
    keep = np.ones(len(stamps), bool)
    keep[600:630] = False  # 300 ms without odometry: a gap
    return FlightStreams(
        source="faults.csv",
        state_stamp_ns=stamps[keep],
        state=state[keep],
        command_stamp_ns=flight.log_ns.copy(),
        command=flight.log_command.copy(),
    )


def test_every_data_check_is_counted(flight):
    records, report = resample(_streams_with_faults(flight), VEHICLE)
    assert report.odometry.counts == {
        "non_finite": 1,
        "bad_quaternion": 1,
        "duplicate_stamp": 1,
        "out_of_order": 1,
        "non_unit_quaternion": 1,
        "gap": 1,
        # into and out of the jumped sample: it is a one-sample segment, dropped
        "implausible_acceleration": 2,
        "position_jump": 1,
    }
    assert report.odometry.samples == len(flight.log_ns) - 30
    assert report.odometry.kept == report.odometry.samples - 4
    # four segments: before the position jump, from it to the velocity step, from that to
    # the gap, after the gap
    assert len(report.segments) == 4 and sum(n for _, n in report.segments) == len(records)
    assert report.resampling.samples - report.resampling.kept == sum(
        report.resampling.counts.values()
    ), "every tick of the grid is written or counted"
    # no learned transition crosses a split: the segments are more than 1.5 periods apart
    steps = np.diff(records.stamp_ns)
    assert np.sum(steps > 1.5 * TICK_NS) == 3 and np.all(steps >= TICK_NS)
    text = report.describe()
    for name in report.odometry.counts:
        assert name in text
    # what is kept is still right; where a sample was dropped the interpolation spans 20 ms
    # instead of 10 ms (four times the error of a quadratic motion)
    moved = records.stamp_ns > flight.log_ns[119]
    records.state[moved, POS.start] -= 0.5
    _assert_matches_truth(records, flight, slack=4.0)


def test_check_rules_on_stamps():
    stamps = np.array([0, 10, 10, 5, 20, 30, 100], dtype=np.int64) * 1_000_000
    state = np.zeros((7, 13))
    state[:, 3] = 1.0
    kept_ns, _, breaks, check = check_odometry(stamps, state, 50.0, CheckConfig(gap_factor=3.0))
    # the first of a stamp is kept; an earlier stamp is dropped; 70 ms after 10 ms steps is a gap
    assert kept_ns.tolist() == [0, 10_000_000, 20_000_000, 30_000_000, 100_000_000]
    assert check.counts == {"duplicate_stamp": 1, "out_of_order": 1, "gap": 1}
    assert breaks.tolist() == [False, False, False, True]


def test_csv_errors_name_the_file_and_line(flight, tmp_path):
    log = write_csv_log(tmp_path / "cut.csv", flight.log_ns, flight.log_state, flight.log_command)
    text = log.read_text()
    log.write_text(text[: len(text) // 2])  # truncated mid-row
    with pytest.raises(CsvLogError, match=r"cut.csv:\d+: \d+ fields, the header has 18"):
        read_csv_log(log, VEHICLE)
    bad = tmp_path / "bad.csv"
    bad.write_text(text.replace("qw", "q_w", 1))
    with pytest.raises(CsvLogError, match=r"bad.csv: missing columns \['qw'\]"):
        read_csv_log(bad, VEHICLE)
    out = tmp_path / "bags"
    assert vnd_main(["import", str(bad), "--vehicle", "agile", "--out", str(out)]) == 1


def test_csv_without_rate_commands_says_what_stands_in(flight, tmp_path, capsys):
    columns = [n for n in SCHEMA if not n.startswith("rate_")]
    log = tmp_path / "norates.csv"
    rows = [",".join(columns)]
    for t, s, c in zip(flight.log_ns, flight.log_state, flight.log_command, strict=True):
        rows.append(",".join(map(repr, [int(t) / 1e9, *s.tolist(), float(c[0])])))
    log.write_text("\n".join(rows) + "\n")
    assert vnd_main(["import", str(log), "--vehicle", "agile", "--out", str(tmp_path / "o")]) == 0
    printed = capsys.readouterr().out
    assert "substituted: commanded body rates: the measured body rates" in printed
    assert "command delay: not estimated" in printed


def _resting_ticks(stamps: np.ndarray, height_m: float = 1.0) -> TickRecords:
    """POLICY-mode ticks of a vehicle resting level at ``height_m``, at ``stamps`` (N,)."""
    n = len(stamps)
    state = np.zeros((n, 13))
    state[:, 2], state[:, 3] = height_m, 1.0
    return TickRecords(
        stamp_ns=stamps,
        state=state,
        action=np.zeros((n, 4)),
        mode=np.full(n, MODE_POLICY, np.uint8),
        policy_version=np.zeros(n, np.uint32),
        encoder_version=np.zeros(n, np.uint32),
    )


def test_duplicate_stamps_across_bags_keep_the_bag_listed_first(flight, tmp_path):
    n = 60
    stamps = T0_NS + TICK_NS * np.arange(n, dtype=np.int64)

    def bag(name: str, height_m: float):
        return write_transitions(tmp_path / name, _resting_ticks(stamps, height_m))

    a, b = bag("a", 1.0), bag("b", 2.0)
    report = ReadReport()
    assert np.all(read_transitions([a, b], report=report).state[:, 2] == 1.0)
    assert report.messages == 2 * n and report.duplicate_stamps == n
    assert "bag listed first" in report.describe()
    with pytest.warns(ReplayBagWarning, match=f"{n} transitions share a stamp"):
        assert np.all(read_transitions([b, a]).state[:, 2] == 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_transitions(a)  # no duplicates: no warning


def test_learn_runs_on_an_imported_bag(flight, tmp_path, capsys):
    log = write_csv_log(tmp_path / "hover.csv", flight.log_ns, flight.log_state, flight.log_command)
    out = tmp_path / "bags"
    assert vnd_main(["import", str(log), "--vehicle", "agile", "--out", str(out)]) == 0
    parser = argparse.ArgumentParser()
    learn.add_arguments(parser)
    bundle = tmp_path / "learned.safetensors"
    argv = ["--bag", str(out), "--init", str(shipped_bundle_path()), "--out", str(bundle)]
    argv += ["--preset", "quick", "--vehicle", "agile", "--fit-steps", "30"]
    argv += ["--train-iterations", "2", "--summary", str(tmp_path / "s.json")]
    code = learn.run(parser.parse_args(argv))
    printed = capsys.readouterr().out
    assert "input ticks: 399, every data check passed" in printed
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["ticks_read"] == 399 and summary["ticks_stored"] == 399
    assert summary["metrics"]["fit"]["steps"] == 30
    if code == 0:
        assert load_bundle(bundle).version == 2
    else:  # a rejected candidate is reported and not written
        assert code == learn.EXIT_REJECTED and not bundle.exists()
        assert "rejected" in printed


def test_command_delay_follows_the_log(flight):
    """Commands logged 40 ms late (stamped 40 ms after they were issued) look 40 ms faster."""

    def delay_s(command_shift_ns: int) -> float:
        streams = FlightStreams(
            source="shifted.csv",
            state_stamp_ns=flight.log_ns,
            state=flight.log_state,
            command_stamp_ns=flight.log_ns + command_shift_ns,
            command=flight.log_command,
        )
        return resample(streams, VEHICLE)[1].command_delay_s

    on_time = delay_s(0)
    assert delay_s(40_000_000) == pytest.approx(on_time - 0.04)


# ---------------------------------------------------------------- rosbag2 logs


def _write_rosbag2(
    path: Path,
    flight: Flight,
    storage: StoragePlugin,
    odom_type: str,
    command_type: str,
    odom_velocity_in_body: bool = False,
    status: tuple[str, str, list[tuple[int, object]]] | None = None,
    store: Typestore | None = None,
) -> Path:
    """The flight as a rosbag2 bag: odometry (or poses) at the log rows, the policy's commands
    when issued, ``status`` (topic, type, (stamp, message) pairs) when given; receive time =
    stamp. ``store`` holds the types (default: the importer's)."""
    store = store or log_typestore()
    types = store.types
    time_class, header_class = types["builtin_interfaces/msg/Time"], types["std_msgs/msg/Header"]
    point, quat, vec3 = (
        types["geometry_msgs/msg/Point"],
        types["geometry_msgs/msg/Quaternion"],
        types["geometry_msgs/msg/Vector3"],
    )

    def header(stamp_ns: int, frame: str):
        sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
        return header_class(stamp=time_class(sec=sec, nanosec=nanosec), frame_id=frame)

    def pose(state: np.ndarray):
        return types["geometry_msgs/msg/Pose"](
            position=point(x=state[0], y=state[1], z=state[2]),
            orientation=quat(w=state[3], x=state[4], y=state[5], z=state[6]),
        )

    messages: list[tuple[int, str, object]] = []
    for stamp, state in zip(flight.log_ns, flight.log_state, strict=True):
        if odom_type == "nav_msgs/msg/Odometry":
            velocity = state[VEL]
            if odom_velocity_in_body:
                velocity = rotate_np(
                    rotmat_np(state[None, QUAT]).transpose(0, 2, 1), state[None, VEL]
                )[0]
            twist = types["geometry_msgs/msg/Twist"](
                linear=vec3(x=velocity[0], y=velocity[1], z=velocity[2]),
                angular=vec3(x=state[10], y=state[11], z=state[12]),
            )
            msg = types[odom_type](
                header=header(stamp, "world"),
                child_frame_id="base_link",
                pose=types["geometry_msgs/msg/PoseWithCovariance"](
                    pose=pose(state), covariance=np.zeros(36)
                ),
                twist=types["geometry_msgs/msg/TwistWithCovariance"](
                    twist=twist, covariance=np.zeros(36)
                ),
            )
        else:
            msg = types[odom_type](header=header(stamp, "world"), pose=pose(state))
        messages.append((int(stamp), "/odom", msg))
    for stamp, command in zip(flight.command_ns, flight.command, strict=True):
        thrust, rates = command[0], command[1:]
        if command_type == "vnd_msgs/msg/CtbrCommand":
            msg = types[command_type](
                header=header(stamp, "base_link"),
                thrust_n=thrust,
                body_rate_radps=rates.copy(),
                mode=1,
                policy_version=1,
            )
        elif command_type == "px4_msgs/msg/VehicleRatesSetpoint":
            frd = frd_to_flu(rates[None])[0]
            msg = types[command_type](
                timestamp=np.uint64(stamp // 1000),
                roll=np.float32(frd[0]),
                pitch=np.float32(frd[1]),
                yaw=np.float32(frd[2]),
                thrust_body=np.array([0, 0, -thrust / VEHICLE.thrust_max_n], np.float32),
                reset_integral=False,
            )
        else:
            msg = types[command_type](
                header=header(stamp, "base_link"),
                type_mask=128,
                orientation=quat(w=1.0, x=0.0, y=0.0, z=0.0),
                body_rate=vec3(x=rates[0], y=rates[1], z=rates[2]),
                thrust=np.float32(thrust / VEHICLE.thrust_max_n),
            )
        messages.append((int(stamp), "/cmd", msg))
    msgtypes = {"/odom": odom_type, "/cmd": command_type}
    if status is not None:
        topic, msgtypes[topic], stamped = status
        messages += [(stamp, topic, msg) for stamp, msg in stamped]
    messages.sort(key=lambda m: m[0])
    with Writer(path, version=9, storage_plugin=storage) as writer:
        connections = {
            topic: writer.add_connection(topic, msgtype, typestore=store)
            for topic, msgtype in msgtypes.items()
        }
        for stamp, topic, msg in messages:
            data = store.serialize_cdr(msg, msgtypes[topic])
            writer.write(connections[topic], stamp, data)
    return path


ODOMETRY, POSE = "nav_msgs/msg/Odometry", "geometry_msgs/msg/PoseStamped"
CTBR, PX4_RATES = "vnd_msgs/msg/CtbrCommand", "px4_msgs/msg/VehicleRatesSetpoint"
MAVROS = "mavros_msgs/msg/AttitudeTarget"


def _import_bag(
    tmp_path: Path, name: str, *write_args, options: tuple[str, ...] = (), **write_kwargs
) -> TickRecords:
    """Write the flight as bag ``name`` (see :func:`_write_rosbag2`), ``vnd import`` it into
    ``tmp_path/bags`` and read the ticks back."""
    bag = _write_rosbag2(tmp_path / name, *write_args, **write_kwargs)
    out = tmp_path / "bags"
    assert vnd_main(["import", str(bag), "--vehicle", "agile", "--out", str(out), *options]) == 0
    return read_transitions(out / name)


def test_mcap_odometry_and_ctbr_commands_match_the_truth(flight, tmp_path):
    records = _import_bag(tmp_path, "flight", flight, StoragePlugin.MCAP, ODOMETRY, CTBR)
    assert len(records) == 399
    _assert_matches_truth(records, flight)
    source = read_import_report(tmp_path / "bags" / "flight")["source"]
    assert "/odom nav_msgs/msg/Odometry" in source


def test_sqlite3_px4_rates_setpoint_with_body_frame_velocity(flight, tmp_path):
    records = _import_bag(
        tmp_path,
        "px4",
        flight,
        StoragePlugin.SQLITE3,
        ODOMETRY,
        PX4_RATES,
        options=("--odom-velocity-frame", "body"),
        odom_velocity_in_body=True,
    )
    truth = flight.truth_at(records.stamp_ns)
    assert np.abs(records.state[:, VEL] - truth[:, VEL]).max() < VELOCITY_TOL_MPS
    # px4_msgs carry float32 rates and normalised thrust
    expected = flight.command_for_tick(records.stamp_ns)
    assert np.allclose(records.action, expected, rtol=1e-6, atol=1e-5)


def test_mocap_poses_with_mavros_commands_go_through_the_pose_filter(flight, tmp_path, capsys):
    records = _import_bag(tmp_path, "mocap", flight, StoragePlugin.MCAP, POSE, MAVROS)
    assert "estimated from the poses by the pose filter" in capsys.readouterr().out
    truth = flight.truth_at(records.stamp_ns)
    error = np.abs(records.state - truth)
    # positions as logged; velocity and rates are the filter's estimates, which lag the
    # truth of this oscillating hover (rates RMS error about 0.5 rad/s on 4 rad/s swings)
    assert error[:, POS].max() < 0.001
    assert error[:, VEL].max() < 0.05
    assert np.sqrt((error[:, OMEGA] ** 2).mean()) < 0.75
    assert np.allclose(records.action, flight.command_for_tick(records.stamp_ns), atol=1e-5)


def test_rosbag2_topic_choice_errors_name_the_bag(flight, tmp_path):
    bag = _write_rosbag2(tmp_path / "flight", flight, StoragePlugin.MCAP, ODOMETRY, CTBR)
    with pytest.raises(Rosbag2LogError, match=r"flight: no topic /nope; found"):
        read_rosbag2_log(bag, VEHICLE, odom_topic="/nope")
    with pytest.raises(Rosbag2LogError, match=r"/cmd is vnd_msgs/msg/CtbrCommand, not a odom"):
        read_rosbag2_log(bag, VEHICLE, odom_topic="/cmd")


# ---------------------------------------------------------------- PX4 ULog logs

_ULOG_MAGIC = b"ULog\x01\x12\x35"
_ULOG_TYPES = {"uint64_t": "Q", "float": "f", "uint8_t": "B", "bool": "?"}


def write_ulog(path: Path, topics: dict, instances: dict | None = None) -> Path:
    """A minimal ULog file (format version 1): header, flag bits, one format message per topic
    and one add-logged message per instance, then the data messages in time order.

    ``topics`` maps a topic name to (fields as "type name" / "type[n] name", rows (N, k)) where
    the first field is ``uint64_t timestamp`` [us] and each row holds every scalar in order:
    instance 0 of the topic. ``instances`` maps (topic, multi_id) to rows of further instances.
    """

    def message(kind: bytes, body: bytes) -> bytes:
        return struct.pack("<HB", len(body), kind[0]) + body

    out = bytearray(_ULOG_MAGIC + b"\x01" + struct.pack("<Q", 0))
    out += message(b"B", bytes(16) + struct.pack("<3Q", 0, 0, 0))
    packers = {}
    for name, (fields, _) in topics.items():
        out += message(b"F", f"{name}:{';'.join(fields)};".encode())
        code = ""
        for field in fields:
            kind = field.split()[0]
            base, _, count = kind.partition("[")
            code += _ULOG_TYPES[base] * (int(count[:-1]) if count else 1)
        packers[name] = struct.Struct("<" + code)
    rows = []
    logged = [(name, 0, data) for name, (_, data) in topics.items()]
    logged += [(name, multi_id, data) for (name, multi_id), data in (instances or {}).items()]
    for msg_id, (name, multi_id, data) in enumerate(logged):
        out += message(b"A", struct.pack("<BH", multi_id, msg_id) + name.encode())
        rows += [(int(row[0]), msg_id, name, row) for row in data]
    rows.sort(key=lambda r: (r[0], r[1]))
    for _, msg_id, name, row in rows:
        codes = packers[name].format[1:]
        values = [float(v) if c == "f" else int(v) for c, v in zip(codes, row, strict=True)]
        out += message(b"D", struct.pack("<H", msg_id) + packers[name].pack(*values))
    path.write_bytes(bytes(out))
    return path


def _px4_log(
    path: Path,
    flight: Flight,
    with_thrust_topic: bool = True,
    status: dict | None = None,
    curve: ThrustCurve | None = None,
    stalled: dict[str, int] | None = None,
) -> Path:
    """The flight as PX4 would log it: NED/FRD, microseconds since boot, thrust normalised
    through ``curve`` (default: the vehicle's, linear). ``stalled`` topics (name -> rows) are
    logged twice: instance 0 stops after that many rows, instance 1 holds them all."""
    curve = curve or ThrustCurve.of(VEHICLE)
    boot_ns = T0_NS - 60 * 1_000_000_000  # the autopilot booted a minute before the flight
    log_us = (flight.log_ns - boot_ns) // 1000
    cmd_us = (flight.command_ns - boot_ns) // 1000
    ned, frd = _to_ned_frd(flight.log_state, flight.command)
    thrust_z = -curve.normalised(frd[:, 0])
    zeros = np.zeros_like(thrust_z)
    topics = {
        "vehicle_local_position": (
            ["uint64_t timestamp", *(f"float {n}" for n in ("x", "y", "z", "vx", "vy", "vz"))],
            np.column_stack([log_us, ned[:, POS], ned[:, VEL]]),
        ),
        "vehicle_attitude": (
            ["uint64_t timestamp", "float[4] q"],
            np.column_stack([log_us, ned[:, QUAT]]),
        ),
        "vehicle_angular_velocity": (
            ["uint64_t timestamp", "float[3] xyz"],
            np.column_stack([log_us, ned[:, OMEGA]]),
        ),
        "vehicle_rates_setpoint": (
            [
                "uint64_t timestamp",
                "float roll",
                "float pitch",
                "float yaw",
                "float[3] thrust_body",
            ],
            np.column_stack([cmd_us, frd[:, 1:], zeros, zeros, thrust_z]),
        ),
    }
    topics.update(status or {})
    if with_thrust_topic:
        topics["vehicle_thrust_setpoint"] = (
            ["uint64_t timestamp", "float[3] xyz"],
            np.column_stack([cmd_us, zeros, zeros, thrust_z]),
        )
    instances = {}
    for name, rows in (stalled or {}).items():
        fields, data = topics[name]
        topics[name] = (fields, data[:rows])
        instances[(name, 1)] = data
    return write_ulog(path, topics, instances)


def test_px4_ulog_matches_the_truth(flight, tmp_path):
    log = _px4_log(tmp_path / "px4.ulg", flight)
    out = tmp_path / "bags"
    assert vnd_main(["import", str(log), "--vehicle", "agile", "--out", str(out)]) == 0
    records = read_transitions(out / "px4")
    records.stamp_ns += T0_NS - 60 * 1_000_000_000  # from time since boot to the flight's
    assert len(records) == 399
    # a ULog holds float32: states within the same tolerances, commands to float32 rounding
    _assert_states_match(records, flight)
    expected = flight.command_for_tick(records.stamp_ns)
    assert np.allclose(records.action, expected, rtol=1e-6, atol=1e-5)


def test_px4_ulog_without_thrust_topic_and_corrupt_files(flight, tmp_path, capsys):
    log = _px4_log(tmp_path / "old.ulg", flight, with_thrust_topic=False)
    assert vnd_main(["import", str(log), "--vehicle", "agile", "--out", str(tmp_path / "o")]) == 0
    assert "substituted: thrust: vehicle_rates_setpoint.thrust_body" in capsys.readouterr().out
    cut = tmp_path / "cut.ulg"
    cut.write_bytes(log.read_bytes()[:-7])  # the last data message torn
    with pytest.raises(UlogError, match=r"cut.ulg: corrupt or truncated"):
        read_ulog(cut, VEHICLE)
    garbage = tmp_path / "garbage.ulg"
    garbage.write_bytes(b"not a ulog file at all")
    with pytest.raises(UlogError, match=r"garbage.ulg: not a readable ULog file"):
        read_ulog(garbage, VEHICLE)


def test_a_model_learned_from_imported_px4_logs_beats_the_prior_on_a_held_out_log(
    flight, held_out_flight, tmp_path, capsys
):
    out = tmp_path / "bags"
    for name, one in (("train", flight), ("held_out", held_out_flight)):
        log = _px4_log(tmp_path / f"{name}.ulg", one)
        assert vnd_main(["import", str(log), "--vehicle", "agile", "--out", str(out)]) == 0
    torch.manual_seed(0)
    model = VNDModel(VEHICLE)
    dataset, _ = model_eval.replay_dataset(model, read_transitions(out / "train"))
    fit_vnd(model, dataset, FitConfig.quick(steps=60), warm_start=False)
    base = load_bundle(shipped_bundle_path())
    bundle = save_bundle(
        Bundle(version=2, parent_version=1, policy=base.policy, vehicle=VEHICLE, model=model),
        tmp_path / "v2.safetensors",
    )
    report_path, png = tmp_path / "eval.json", tmp_path / "segments.png"
    argv = ["model-eval", "--bag", str(out / "held_out"), "--bundle", str(bundle)]
    assert vnd_main([*argv, "--json", str(report_path), "--png", str(png)]) == 0
    report = json.loads(report_path.read_text())
    print("held-out open-loop error", report["prior_err_m"], report["model_err_m"])
    # the wind the prior does not know is learned from the imported flight
    assert report["model_err_m"]["10"] < report["prior_err_m"]["10"]
    assert report["model_err_m"]["50"] < report["prior_err_m"]["50"]
    # per segment (one here): position, velocity and attitude errors, and the figure of them
    (segment,) = report["per_segment"]
    assert segment["ticks"] == 399
    assert segment["50"]["model"]["position_m"] == pytest.approx(report["model_err_m"]["50"])
    print("held-out segment errors at 50 steps", segment["50"])
    for kind in ("position_m", "velocity_mps"):  # the wind is a force: what the model learns
        assert segment["50"]["model"][kind] < segment["50"]["prior"][kind], kind
    assert np.isfinite(segment["50"]["model"]["attitude_rad"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_vehicle_fit_recovers_mass_and_rate_time_constant(flight, tmp_path, capsys):
    log = _px4_log(tmp_path / "px4.ulg", flight)
    out = tmp_path / "bags"
    assert vnd_main(["import", str(log), "--vehicle", "agile", "--out", str(out)]) == 0
    fitted_path = tmp_path / "fitted.yaml"
    argv = ["vehicle", "fit", str(out / "px4"), "--out", str(fitted_path), "--vehicle"]
    # the log's thrust is normalised: the mass comes out in proportion to the base vehicle's
    # full thrust (kinematics fix only their ratio)
    assert vnd_main([*argv, "small"]) == 0
    small = load_vehicle(fitted_path)
    assert small.mass_kg == pytest.approx(VEHICLE.mass_kg * small.thrust_max_n / 30.0, rel=0.03)
    assert vnd_main([*argv, "agile"]) == 0
    printed = capsys.readouterr().out
    assert "body-rate time constant" in printed
    # a hover holds one thrust level: the curve is not identified, and the output says so
    assert "thrust curve: NOT identified: the normalised thrust spans only" in printed
    fitted = load_vehicle(fitted_path)  # the result loads as a vehicle file
    assert fitted.name == "agile_fit" and fitted.inertia_kgm2 == VEHICLE.inertia_kgm2
    # the simulated vehicle: 0.752 kg; its rate loop 1 / rate_gain_p = 50 ms
    assert fitted.mass_kg == pytest.approx(VEHICLE.mass_kg, rel=0.03)
    assert fitted.body_rate_time_constant_s == pytest.approx(1.0 / VEHICLE.rate_gain_p[0], rel=0.03)
    assert fitted.thrust_model_factor == VEHICLE.thrust_model_factor  # kept from the base


TRUE_CURVE = ThrustCurve(thrust_max_n=VEHICLE.thrust_max_n, factor=0.45)  # a propeller's curve


def _vertical_flight(tracking_controller, seed: int, amplitude_m: float, period_s: float) -> Flight:
    """12 s of climbs and descents (from 2 m up to 2 m + twice ``amplitude_m`` and back, a
    cosine) with a sideways weave in calm air, flown by the textbook tracking controller."""
    omega, weave = 2.0 * np.pi / period_s, 2.0 * np.pi / 1.3

    def act(measured: np.ndarray, t_s: float) -> np.ndarray:
        phase = omega * t_s
        side = 0.3 * np.sin(weave * t_s)
        reference = (
            [side, 0.0, 2.0 + amplitude_m * (1.0 - np.cos(phase))],
            [0.3 * weave * np.cos(weave * t_s), 0.0, amplitude_m * omega * np.sin(phase)],
            [-(weave**2) * side, 0.0, amplitude_m * omega**2 * np.cos(phase)],
        )
        state = torch.from_numpy(measured[None]).float()
        pva = tuple(torch.tensor([row], dtype=torch.float32) for row in reference)
        return tracking_controller(state, pva, VEHICLE)[0].double().numpy()

    scenario = Scenario(
        name="vertical",
        duration_s=12.0,
        reference=ReferenceSpec(center_m=(0.0, 0.0, 2.0)),
        phases=(Phase("calm", 0.0),),
    )
    return _fly(seed, act, scenario, ticks=600)


def test_vehicle_fit_recovers_mass_and_thrust_curve_from_px4_climbs(
    tracking_controller, tmp_path, capsys
):
    """PX4 logs of climbs and descents with a quadratic-leaning thrust curve, imported with the
    vehicle's linear default: the fit recovers mass and curve, and a re-import through the
    fitted vehicle gives the thrust that was flown."""
    flights = {
        "slow": _vertical_flight(tracking_controller, 5, amplitude_m=1.2, period_s=3.0),
        "fast": _vertical_flight(tracking_controller, 6, amplitude_m=0.5, period_s=2.0),
    }
    out = tmp_path / "bags"
    for name, one in flights.items():
        log = _px4_log(tmp_path / f"{name}.ulg", one, curve=TRUE_CURVE)
        assert vnd_main(["import", str(log), "--vehicle", "agile", "--out", str(out)]) == 0
    capsys.readouterr()
    fitted_path = tmp_path / "fitted.yaml"
    argv = ["vehicle", "fit", str(out), "--vehicle", "agile", "--out", str(fitted_path)]
    assert vnd_main(argv) == 0
    printed = capsys.readouterr().out
    print(printed)
    fitted = load_vehicle(fitted_path)
    mass_error = fitted.mass_kg / VEHICLE.mass_kg - 1.0
    factor_error = fitted.thrust_model_factor / TRUE_CURVE.factor - 1.0
    u = np.linspace(0.0, 1.0, 101)[1:]
    curve_error = np.abs(ThrustCurve.of(fitted).thrust_n(u) / TRUE_CURVE.thrust_n(u) - 1.0).max()
    print(
        f"recovery: mass {mass_error:+.2%}, thrust_model_factor {factor_error:+.2%}, thrust "
        f"curve over u in (0, 1] at most {curve_error:.2%}"
    )
    assert abs(mass_error) < 0.03 and abs(factor_error) < 0.03 and curve_error < 0.03
    assert "thrust_model_factor" in printed and "fitted (normalised thrust u" in printed
    assert "thrust_model_factor" in fitted_path.read_text().splitlines()[0]
    # the fitted vehicle turns the logged commands back into the newtons that were flown
    log = tmp_path / "slow.ulg"
    again = tmp_path / "again"
    assert vnd_main(["import", str(log), "--vehicle", str(fitted_path), "--out", str(again)]) == 0
    records = read_transitions(again / "slow")
    records.stamp_ns += T0_NS - 60 * 1_000_000_000
    flown = flights["slow"].command_for_tick(records.stamp_ns)[:, 0]
    assert np.abs(records.action[:, 0] / flown - 1.0).max() < 0.03


def test_learn_reports_the_data_checks_of_its_input(tmp_path, capsys):
    n = 60
    stamps = T0_NS + TICK_NS * np.arange(n, dtype=np.int64)
    stamps[40:] += 10 * TICK_NS  # 200 ms without ticks
    records = _resting_ticks(stamps)
    records.state[10, 7] = np.nan
    records.state[20, 3:7] = [1.0, 0.01, 0.0, 0.0]  # norm 1.00005: within tolerance
    records.state[30, 3:7] = [1.02, 0.0, 0.0, 0.0]  # norm 1.02: counted
    bag = write_transitions(tmp_path / "bag", records)
    parser = argparse.ArgumentParser()
    learn.add_arguments(parser)
    argv = ["--bag", str(bag), "--init", str(shipped_bundle_path()), "--out", str(tmp_path / "o")]
    assert learn.run(parser.parse_args([*argv, "--preset", "quick"])) == 2  # too little data
    printed = capsys.readouterr().out
    assert "input ticks: 60 samples read, 59 kept" in printed
    assert "non_finite: 1" in printed and "gap: 1" in printed
    assert "non_unit_quaternion: 1" in printed


def test_px4_ulog_keeps_flight_only_and_splits_at_mode_changes(flight, tmp_path, capsys):
    """Disarmed for the first second, landed until 1.5 s, position mode until 4 s, then
    offboard: ground time is dropped and counted, the mode change splits the segment."""
    first_us = (flight.log_ns[0] - (T0_NS - 60 * 1_000_000_000)) // 1000
    at_us = [first_us + round(t_s * 1e6) for t_s in (0.0, 1.0, 4.0)]
    status = {
        "vehicle_status": (
            ["uint64_t timestamp", "uint8_t arming_state", "uint8_t nav_state"],
            np.array([[at_us[0], 1, 2], [at_us[1], 2, 2], [at_us[2], 2, 14]]),
        ),
        "vehicle_land_detected": (
            ["uint64_t timestamp", "bool landed"],
            np.array([[at_us[0], 1], [at_us[1] + 500_000, 0]]),
        ),
    }
    log = _px4_log(tmp_path / "modes.ulg", flight, status=status)
    out = tmp_path / "bags"
    assert vnd_main(["import", str(log), "--vehicle", "agile", "--out", str(out)]) == 0
    report = json.loads((out / "modes.import.json").read_text())
    counts = report["odometry"]["counts"]
    assert counts["not_flying"] == 150  # 1.5 s of 100 Hz rows
    assert counts["phase_change"] == 1 and len(report["segments"]) == 2
    stamps = read_transitions(out / "modes").stamp_ns  # ULog stamps: time since boot
    assert stamps[0] >= (at_us[1] + 500_000) * 1000  # nothing before take-off
    # no learned transition crosses the mode change: the ticks around it are apart
    after = np.searchsorted(stamps, at_us[2] * 1000)
    assert stamps[after] - stamps[after - 1] > 1.5 * TICK_NS
    assert "not_flying: 150" in capsys.readouterr().out


def test_px4_ulog_reads_the_instance_that_holds_the_flight(flight, tmp_path, capsys):
    """Instance 0 of the position topic stops after half a second (a stalled estimator),
    instance 1 holds the flight: instance 1 is read and the report says so; an instance can be
    chosen, and one the log lacks is refused naming the file."""
    log = _px4_log(tmp_path / "two.ulg", flight, stalled={"vehicle_local_position": 50})
    out = tmp_path / "bags"
    assert vnd_main(["import", str(log), "--vehicle", "agile", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "note: vehicle_local_position: instance 1 read (instance 0 holds under 50%" in printed
    assert f"samples per instance 0: 50, 1: {len(flight.log_ns)}" in printed
    records = read_transitions(out / "two")
    records.stamp_ns += T0_NS - 60 * 1_000_000_000
    assert len(records) == 399
    _assert_states_match(records, flight)
    chosen = ["--ulog-instance", "vehicle_local_position=0", "--min-segment-s", "0.2"]
    argv = ["import", str(log), "--vehicle", "agile", "--out", str(tmp_path / "zero"), *chosen]
    assert vnd_main(argv) == 0
    assert "instance 0 read (chosen with --ulog-instance" in capsys.readouterr().out
    assert len(read_transitions(tmp_path / "zero" / "two")) < 30  # half a second of odometry
    argv = ["import", str(log), "--vehicle", "agile", "--out", str(tmp_path / "three")]
    assert vnd_main([*argv, "--ulog-instance", "vehicle_local_position=3"]) == 1
    assert "two.ulg: vehicle_local_position has no instance 3 (has [0, 1])" in (
        capsys.readouterr().out
    )
    assert vnd_main([*argv, "--ulog-instance", "vehicle_local_position"]) == 2


def _phase_cells(flight: Flight) -> dict[str, list[str]]:
    """armed / mode cells of the 100 Hz rows, written only when they change: disarmed for the
    first second, then position mode until 4 s, then offboard."""
    t_s = (flight.log_ns - flight.log_ns[0]) / 1e9
    armed = np.where(t_s < 1.0, "0", "1")
    mode = np.where(t_s < 4.0 - 1e-9, "POSCTL", "OFFBOARD")
    return {"armed": _changes_only(list(armed)), "mode": _changes_only(list(mode))}


def _changes_only(cells: list[str]) -> list[str]:
    """``cells`` with a value only where it differs from the row above (empty cells hold it)."""
    return [c if i == 0 or c != cells[i - 1] else "" for i, c in enumerate(cells)]


def test_csv_armed_and_mode_columns_keep_flight_only_and_split_at_mode_changes(flight, tmp_path):
    cells = _phase_cells(flight)
    log = write_csv_log(
        tmp_path / "modes.csv", flight.log_ns, flight.log_state, flight.log_command, extra=cells
    )
    out = tmp_path / "bags"
    assert vnd_main(["import", str(log), "--vehicle", "agile", "--out", str(out)]) == 0
    report = json.loads((out / "modes.import.json").read_text())
    assert report["odometry"]["counts"]["not_flying"] == 100  # the first second of rows
    assert report["odometry"]["counts"]["phase_change"] == 1
    assert len(report["segments"]) == 2
    assert any("POSCTL, OFFBOARD" in note for note in report["notes"])
    records = read_transitions(out / "modes")
    assert records.stamp_ns[0] >= flight.log_ns[100]
    after = np.searchsorted(records.stamp_ns, flight.log_ns[0] + 4_000_000_000)
    assert records.stamp_ns[after] - records.stamp_ns[after - 1] > 1.5 * TICK_NS
    _assert_matches_truth(records, flight)
    # the same columns under other names, through a mapping file
    renamed = write_csv_log(
        tmp_path / "renamed.csv",
        flight.log_ns,
        flight.log_state,
        flight.log_command,
        extra={"is_armed": cells["armed"], "flight_mode": cells["mode"]},
    )
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("columns: {armed: is_armed, mode: flight_mode}\n")
    argv = ["import", str(renamed), "--vehicle", "agile", "--out", str(out), "--mapping"]
    assert vnd_main([*argv, str(mapping)]) == 0
    assert json.loads((out / "renamed.import.json").read_text())["segments"] == report["segments"]
    bad = cells["armed"].copy()
    bad[300] = "maybe"
    broken = write_csv_log(
        tmp_path / "bad.csv",
        flight.log_ns,
        flight.log_state,
        flight.log_command,
        extra={"armed": bad},
    )
    with pytest.raises(CsvLogError, match=r"bad.csv:302: column 'armed': 'maybe' is not 0/1"):
        read_csv_log(broken, VEHICLE)


def _status_messages(flight: Flight, msgtype: str, store) -> list[tuple[int, object]]:
    """Status messages at the changes of :func:`_phase_cells` (and once a second between)."""
    t_s = (flight.log_ns - flight.log_ns[0]) / 1e9
    messages = []
    for stamp, t in zip(flight.log_ns[::50], t_s[::50], strict=True):
        armed, offboard = t >= 1.0, t >= 4.0 - 1e-9
        if msgtype == "mavros_msgs/msg/State":
            sec, nanosec = divmod(int(stamp), 1_000_000_000)
            header = store.types["std_msgs/msg/Header"](
                stamp=store.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec),
                frame_id="",
            )
            msg = store.types[msgtype](
                header=header,
                connected=True,
                armed=armed,
                guided=offboard,
                manual_input=False,
                mode="OFFBOARD" if offboard else "POSCTL",
                system_status=4,
            )
        else:
            msg = store.types[msgtype](
                timestamp=np.uint64(stamp // 1000),
                arming_state=2 if armed else 1,
                nav_state=14 if offboard else 2,
            )
        messages.append((int(stamp), msg))
    return messages


# a subset of px4_msgs/msg/VehicleStatus: bags carry the definition of the PX4 version flown
_PX4_STATUS = "uint64 timestamp\nuint8 arming_state\nuint8 nav_state\n"


@pytest.mark.parametrize("status_type", ["mavros_msgs/msg/State", "px4_msgs/msg/VehicleStatus"])
def test_rosbag2_status_topics_keep_flight_only_and_split_at_mode_changes(
    flight, tmp_path, status_type
):
    store = log_typestore()
    if status_type.startswith("px4_msgs"):
        store.register(get_types_from_msg(_PX4_STATUS, status_type))
    status = ("/status", status_type, _status_messages(flight, status_type, store))
    bag = _write_rosbag2(
        tmp_path / "modes", flight, StoragePlugin.MCAP, ODOMETRY, CTBR, status=status, store=store
    )
    streams = read_rosbag2_log(bag, VEHICLE)
    records, report = resample(streams, VEHICLE)
    # odometry rows of the first second (the status says disarmed) are not flight
    assert report.odometry.counts["not_flying"] == 100
    assert report.odometry.counts["phase_change"] == 1 and len(report.segments) == 2
    assert "/status" in report.source and any("/status" in note for note in report.notes)
    after = np.searchsorted(records.stamp_ns, flight.log_ns[0] + 4_000_000_000)
    assert records.stamp_ns[after] - records.stamp_ns[after - 1] > 1.5 * TICK_NS
    _assert_matches_truth(records, flight)


def test_a_truncated_rosbag2_file_is_refused_naming_it(flight, tmp_path, capsys):
    bag = _write_rosbag2(tmp_path / "torn", flight, StoragePlugin.MCAP, ODOMETRY, CTBR)
    (mcap,) = bag.glob("*.mcap")
    mcap.write_bytes(mcap.read_bytes()[: mcap.stat().st_size // 2])
    out = tmp_path / "bags"
    assert vnd_main(["import", str(bag), "--vehicle", "agile", "--out", str(out)]) == 1
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith(f"vnd import: {bag}: cannot read bag")
    assert not (out / "torn").exists()


@settings(max_examples=200, deadline=None)
@given(
    quat=st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4).filter(
        lambda q: sum(x * x for x in q) > 0.01
    ),
    vector=st.lists(st.floats(-10.0, 10.0), min_size=3, max_size=3),
)
def test_ned_frd_conversion_property(quat, vector):
    """Any attitude and body vector: the converted attitude maps the converted body vector onto
    the converted world vector, and converting twice gives the same rotation back."""
    q = np.array([quat]) / np.linalg.norm(quat)
    v = np.array([vector])
    q_enu = quat_ned_frd_to_enu_flu(q)
    expected = ned_to_enu(rotate_np(rotmat_np(q), v))
    assert np.allclose(rotate_np(rotmat_np(q_enu), frd_to_flu(v)), expected, atol=1e-9)
    back = quat_ned_frd_to_enu_flu(q_enu)
    assert abs(abs(float((back * q).sum())) - 1.0) < 1e-12
