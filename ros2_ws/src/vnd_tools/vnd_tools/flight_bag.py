"""What ``vnd fly`` reads back after a flight: the recorded bag and the side files of the
run directory (control latency, host CPU, host stalls, model updates), turned into the
flight report (:func:`write_report`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from vnd_core.wire import LEARNER_STATE_NAMES
from vnd_ros.bag_read import read_messages
from vnd_ros.stack_records import namespaced, stamp_ns

from vnd_tools import hostcpu, hoststall, rtcensus

if TYPE_CHECKING:
    from vnd_tools.flight_report import ScenarioClock

LATENCY_FILE = "control_latency.npz"  # per-tick latency samples (numpy arrays, no pickle)
HOST_CPU_FILE = "host_cpu.npz"  # the machine's CPU times, 10 Hz (vnd_tools.hostcpu)
HOST_STALLS_FILE = "host_stalls.npz"  # the per-CPU stall probe's (vnd_tools.hoststall)
REALTIME_CENSUS_FILE = "realtime_census.npz"  # other processes' real-time CPU (rtcensus)
META_FILE = "flight_meta.json"


def write_report(run_dir: Path) -> str:
    """Compute and write report.json, report.md and report.png of a recorded run; returns the
    summary table."""
    from vnd_tools import flight_report as fr
    from vnd_tools import flight_report_files
    from vnd_tools.base_reference import against_base, reference_phases

    meta = json.loads((run_dir / META_FILE).read_text())
    inputs = read_flight(run_dir / "bag", meta["vehicle"])
    clock = fr.ScenarioClock(inputs.clock_points, meta["real_time_factor"])
    spans, period_s = _scenario_timing(meta)
    latency_ms, method, latency_extra, tick_wall_s = _latency(
        run_dir / LATENCY_FILE, inputs, clock, spans
    )
    updates = _model_updates(run_dir / "learner" / "bundles" / "index.json", inputs, clock)
    extra = {
        "scenario": meta["scenario"],
        "duration_s": meta["duration_s"],
        "real_time_factor": meta["real_time_factor"],
        "learn": meta["learn"],
        "wall_time_s": round(meta["wall_end_s"] - meta["wall_start_s"], 1),
        "end_reason": meta["end_reason"],
        "stack_exit_code": meta["stack_exit_code"],
        "stack_failures": meta["failures"],
        "stack_respawns": meta.get("respawns", []),  # runs recorded before it have none
        "latency_other": latency_extra,
        "host_cpu": _host_cpu(run_dir / HOST_CPU_FILE, tick_wall_s, latency_ms),
        "host_stalls": _host_stalls(run_dir / HOST_STALLS_FILE, run_dir / LATENCY_FILE),
        "nodes": inputs.final_nodes,
        "learner": inputs.final_learner,
        "vehicle_crashed": inputs.crash_stamp_ns is not None,
        # first sim status reporting the crash: within 1 s (the status period) after it
        "crash_reported_s": None
        if inputs.crash_stamp_ns is None
        else round(float(clock.to_scenario_s(inputs.crash_stamp_ns)), 1),
        "bag": str((run_dir / "bag").resolve()),
    }
    report = fr.build_report(
        inputs.series,
        clock,
        spans,
        latency_ms=latency_ms,
        latency_method=method,
        missed_ticks=inputs.policy_missed_ticks,
        updates=updates,
        extra=extra,
        reference_period_s=period_s,
    )
    for name, phases in reference_phases(meta, spans, period_s).items():
        reference = [p.as_json() for p in phases]
        report.data[f"{name}_phases"] = reference
        report.data[f"against_{name}"] = against_base(report.data["phases"], reference)
    title = f"vnd fly: {meta['scenario']} ({run_dir.name})"
    flight_report_files.write_json(report, run_dir / "report.json")
    flight_report_files.write_markdown(report, run_dir / "report.md", title)
    flight_report_files.plot_report(report, run_dir / "report.png", title)
    return flight_report_files.summary_table(report.data)


@dataclass
class FlightInputs:
    """What the report needs from the bag."""

    series: Any  # vnd_tools.flight_report.FlightSeries
    clock_points: list  # vnd_tools.flight_report.ClockPoint of the sim's status reports
    swaps: dict[int, dict[str, int]]  # version -> node -> stamp [ns] it announced the swap
    learner_versions: dict[int, int]  # version -> first learner status stamp naming it [ns]
    policy_missed_ticks: int | None  # policy's final missed-tick count
    policy_windows: list[tuple[float, float]]  # (p50, p99) [ms] of each policy status
    final_nodes: dict[str, dict]  # node -> final status summary
    final_learner: dict | None  # final learner status summary
    crash_stamp_ns: int | None  # first sim status saying the vehicle crashed (None: it did not)


def _learner_summary(status: Any) -> dict[str, Any]:
    """The report's record of one vnd/learner/status message."""
    return {
        "state": LEARNER_STATE_NAMES.get(int(status.state), str(status.state)),
        "ticks_stored": int(status.ticks_stored),
        "latest_version": int(status.latest_version),
        "updates_accepted": int(status.updates_accepted),
        "updates_rejected": int(status.updates_rejected),
        "improvements_accepted": int(getattr(status, "improvements_accepted", 0)),
        "last_update_duration_s": round(float(status.last_update_duration_s), 2),
        "message": str(status.message),
    }


def _node_summary(status: Any) -> dict[str, Any]:
    """The report's record of one vnd/node_status message (its counters parsed)."""
    return {
        "active_version": int(status.active_version),
        "ticks": int(status.ticks),
        "missed_ticks": int(status.missed_ticks),
        "latency_p50_ms": round(float(status.latency_p50_ms), 4),
        "latency_p99_ms": round(float(status.latency_p99_ms), 4),
        "counters": json.loads(status.counters_json or "{}"),
    }


def read_flight(bag: Path, vehicle: str) -> FlightInputs:
    """Parse the recorded topics of ``vehicle`` from ``bag``."""
    from vnd_tools import flight_report as fr

    ns = namespaced(vehicle, "")
    truth_t, truth_p, tick_t, tick_ref, tick_z, tick_valid, tick_mode = [], [], [], [], [], [], []
    dist_t, dist_f, points, policy_windows = [], [], [], []
    force_t, force_n = [], []
    swaps: dict[int, dict[str, int]] = {}
    learner_versions: dict[int, int] = {}
    final_nodes: dict[str, dict] = {}
    final_learner = None
    policy_missed = None
    crash_stamp = None
    for topic, _type, _t, msg in read_messages(bag):
        name = topic[len(ns) :] if topic.startswith(ns) else topic
        stamp = stamp_ns(msg.header.stamp) if hasattr(msg, "header") else 0
        if name == "sim/truth":
            p = msg.pose.pose.position
            truth_t.append(stamp)
            truth_p.append((p.x, p.y, p.z))
        elif name == "vnd/replay":
            tick_t.append(stamp)
            tick_ref.append(tuple(msg.reference[:3]))
            tick_z.append(np.asarray(msg.z, dtype=float))
            tick_valid.append(bool(msg.z_valid))
            tick_mode.append(int(msg.mode))
        elif name == "sim/disturbance":
            dist_t.append(stamp)
            dist_f.append((msg.vector.x, msg.vector.y, msg.vector.z))
        elif name == "vnd/force_input":
            force_t.append(stamp)
            force_n.append((msg.vector.x, msg.vector.y, msg.vector.z))
        elif name == "vnd/checkpoint/status" and msg.accepted:
            if msg.request_id.startswith("model:"):
                version = int(msg.request_id.split(":", 1)[1])
                swaps.setdefault(version, {}).setdefault(msg.node, stamp)
        elif name == "vnd/learner/status":
            learner_versions.setdefault(int(msg.latest_version), stamp)
            final_learner = _learner_summary(msg)
        elif name == "vnd/node_status":
            final_nodes[msg.node] = _node_summary(msg)
            counters = final_nodes[msg.node]["counters"]
            if msg.node.endswith("/sim"):
                if counters.get("crashed") and crash_stamp is None:
                    crash_stamp = stamp
                points.append(
                    fr.ClockPoint(
                        stamp,
                        counters.get("scenario_time_ms", 0) / 1e3,
                        counters.get("slipped_ms", 0) / 1e3,
                        bool(counters.get("started", 0)),
                    )
                )
            elif msg.node.endswith("/policy"):
                policy_missed = int(msg.missed_ticks)
                if msg.ticks:
                    policy_windows.append((float(msg.latency_p50_ms), float(msg.latency_p99_ms)))
    series = fr.FlightSeries(
        truth_stamp_ns=np.array(truth_t, dtype=np.int64),
        truth_pos_m=np.array(truth_p, dtype=float).reshape(-1, 3),
        tick_stamp_ns=np.array(tick_t, dtype=np.int64),
        reference_pos_m=np.array(tick_ref, dtype=float).reshape(-1, 3),
        tick_z=tick_z,
        tick_z_valid=np.array(tick_valid, dtype=bool),
        tick_mode=np.array(tick_mode, dtype=int),
        disturbance_stamp_ns=np.array(dist_t, dtype=np.int64),
        disturbance_n=np.array(dist_f, dtype=float).reshape(-1, 3),
        force_input_stamp_ns=np.array(force_t, dtype=np.int64),
        force_input_n=np.array(force_n, dtype=float).reshape(-1, 3),
    )
    return FlightInputs(
        series,
        points,
        swaps,
        learner_versions,
        policy_missed,
        policy_windows,
        final_nodes,
        final_learner,
        crash_stamp,
    )


def _scenario_timing(meta: dict) -> tuple[list[tuple[str, float, float]], float | None]:
    """The flown scenario's phase spans and its reference's repeat period (None: hover)."""
    from vnd_core.scenario import load_scenario

    scenario = load_scenario(meta["scenario_arg"])
    return scenario.phase_spans(), scenario.reference.repeat_period_s()


def _latency(
    path: Path, inputs: FlightInputs, clock: ScenarioClock, spans: list
) -> tuple[np.ndarray, str, dict, np.ndarray | None]:
    """Per-tick latencies [ms] during the scenario, the method sentence, other measures, and
    the wall times [s] of those ticks' commands (None without per-tick samples)."""
    windows = inputs.policy_windows
    from_status = {
        "policy_status_p50_ms_median": round(float(np.median([w[0] for w in windows])), 4)
        if windows
        else None,
        "policy_status_p99_ms_max": round(float(max(w[1] for w in windows)), 4)
        if windows
        else None,
    }
    if not path.is_file():
        p99 = np.array([w[1] for w in windows], dtype=float)
        method = (
            "no per-tick samples (not the dds backend): the policy node's NodeStatus window "
            "p99 values (odometry stamp -> command publication, its own clock), one per second"
        )
        return p99, method, from_status, None
    with np.load(path, allow_pickle=False) as data:
        cmd_stamp, cmd_pub = data["command_stamp_ns"], data["command_source_ns"]
        odom_stamp, odom_pub = data["odom_stamp_ns"], data["odom_source_ns"]
    # One sample per odometry stamp: the first command answering it (a watchdog tick that
    # repeats a stamp is a stale-odometry tick, not the control path).
    stamps, first = np.unique(cmd_stamp, return_index=True)
    published = cmd_pub[first]
    t_s = clock.to_scenario_s(stamps)
    flying = (t_s >= 0) & (t_s <= spans[-1][2])
    stamps, published = stamps[flying], published[flying]
    index = np.searchsorted(odom_stamp, stamps)
    index = np.clip(index, 0, max(len(odom_stamp) - 1, 0))
    has_odom = len(odom_stamp) > 0 and (odom_stamp[index] == stamps)
    from_odom_pub = (published[has_odom] - odom_pub[index[has_odom]]) / 1e6
    from_stamp = (published - stamps) / 1e6
    from vnd_tools.flight_report import latency_summary

    other = {
        "odom_stamp_to_command_ms": latency_summary(from_stamp),
        **from_status,
    }
    method = (
        "per control tick during the scenario: publication time of the odometry sample -> "
        "publication time of the command answering it (both DDS source timestamps, pose "
        "filter and policy writers, same host clock), i.e. odometry arrival -> command out; "
        "latency_other.odom_stamp_to_command_ms counts from the odometry stamp (the mocap "
        "measurement time) instead and so includes the simulator's and pose filter's delay"
    )
    return from_odom_pub, method, other, published[has_odom] / 1e9


def _host_cpu(path: Path, tick_wall_s: np.ndarray | None, latency_ms: np.ndarray) -> dict:
    """The machine's steal time over the flight and the latency split by it (hostcpu.py)."""
    from vnd_core.dynamics import CONTROL_PERIOD_S

    if tick_wall_s is None or not path.is_file():
        return {"sampled": False}
    with np.load(path, allow_pickle=False) as data:
        wall_s, cpu_times = data["wall_s"], data["cpu_times"]
    split = hostcpu.steal_by_window(wall_s, cpu_times, tick_wall_s, latency_ms, CONTROL_PERIOD_S)
    return {"sampled": False} if split is None else {"sampled": True, **split}


def _host_stalls(path: Path, samples_path: Path) -> dict:
    """Every policy tick of the recording (watchdog ticks too: the policy's missed-tick rule)
    put against the host stalls the probe saw (hoststall.py)."""
    from vnd_core.dynamics import CONTROL_PERIOD_S

    if not path.is_file() or not samples_path.is_file():
        return {"probed": False}
    with np.load(samples_path, allow_pickle=False) as data:
        ticks_s, odom_s = data["command_source_ns"] / 1e9, data["odom_source_ns"] / 1e9
    probes = hoststall.load_stalls(path)
    census = path.parent / REALTIME_CENSUS_FILE
    realtime = rtcensus.load_use(census) if census.is_file() else None
    return hoststall.host_stall_report(probes, ticks_s, odom_s, CONTROL_PERIOD_S, realtime)


def _model_updates(index_path: Path, inputs: FlightInputs, clock: ScenarioClock) -> list:
    """One ModelUpdate per learner bundle of this flight."""
    from vnd_tools.flight_report import ModelUpdate

    decided: dict[int, float] = {}
    kinds: dict[int, str] = {}  # version -> "model" or "policy" (a policy improvement)
    if index_path.is_file():
        for entry in json.loads(index_path.read_text()).get("bundles", []):
            kinds[int(entry["version"])] = str((entry.get("metrics") or {}).get("kind", "model"))
            if entry.get("decided_wall_s") is not None:
                decided[int(entry["version"])] = clock.wall_to_scenario_s(entry["decided_wall_s"])
    for version, stamp in inputs.learner_versions.items():
        if version and version not in decided:  # fallback: first status naming it
            decided[version] = float(clock.to_scenario_s(stamp))
    updates = []
    for version in sorted(set(decided) | set(inputs.swaps)):
        nodes = inputs.swaps.get(version, {})
        both = len(nodes) >= 2
        active = float(clock.to_scenario_s(max(nodes.values()))) if both else None
        kind = kinds.get(version, "model")
        updates.append(ModelUpdate(version, decided.get(version), active, kind))
    return updates
