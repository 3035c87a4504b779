"""The flight report on synthetic data: scenario clock, stamp matching, phase RMSE, the recovery
definition, improvement, report.json keys, and the bag -> report path of ``vnd fly``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from vnd_tools import flight_report as fr
from vnd_tools import flight_report_files

NS = 1_000_000_000
ZERO_NS = 1_700_000_000 * NS  # clock time of scenario time 0 in these tests


def test_scenario_clock_takes_the_tightest_bound_and_follows_slips():
    rng = np.random.default_rng(0)
    points = [fr.ClockPoint(ZERO_NS - NS, 0.0, 0.0, False)]  # before the start: ignored
    for k in range(1, 20):  # reports lag the integrated time by 0-10 ms
        lag_ns = int(rng.uniform(0, 10e6)) if k != 7 else 0
        points.append(fr.ClockPoint(ZERO_NS + k * NS + lag_ns, float(k), 0.0, True))
    # a 0.3 s slip after 20 s: the zero moves 0.3 s later
    slip_zero = ZERO_NS + int(0.3 * NS)
    points += [fr.ClockPoint(slip_zero + k * NS + 2_000_000, float(k), 0.3, True) for k in (21, 22)]
    clock = fr.ScenarioClock(points, real_time_factor=1.0)
    assert clock.zero_ns == pytest.approx(ZERO_NS, abs=1)
    assert clock.to_scenario_s(ZERO_NS + 5 * NS) == pytest.approx(5.0, abs=1e-9)
    assert clock.to_scenario_s(slip_zero + 22 * NS + 2_000_000) == pytest.approx(22.0, abs=1e-6)
    fast = fr.ScenarioClock([fr.ClockPoint(ZERO_NS + NS, 2.0, 0.0, True)], real_time_factor=2.0)
    assert fast.to_scenario_s(ZERO_NS + 3 * NS) == pytest.approx(6.0)
    with pytest.raises(ValueError, match="scenario time running"):
        fr.ScenarioClock(points[:1], 1.0)


def test_tracking_error_matches_stamps_and_drops_repeats_and_strays():
    truth_t = np.arange(10, dtype=np.int64) * 10_000_000  # 100 Hz
    truth_p = np.zeros((10, 3))
    truth_p[:, 0] = np.arange(10) * 0.1
    ticks = np.array([0, 20_000_000, 20_000_000, 41_000_000, 500_000_000], dtype=np.int64)
    refs = np.zeros((5, 3))
    refs[:, 1] = 0.5
    stamps, err = fr.tracking_error(truth_t, truth_p, ticks, refs)
    assert stamps.tolist() == [0, 20_000_000, 41_000_000]  # repeat kept once, stray dropped
    expected = [math.hypot(0.0, 0.5), math.hypot(0.2, 0.5), math.hypot(0.4, 0.5)]
    assert err == pytest.approx(expected)


def _step_flight(dt_s: float = 0.02) -> tuple[np.ndarray, np.ndarray, list]:
    """calm 0-10 s at 0.1 m; wind_a 10-20 s: 0.5 m for 2 s then 0.1 m; calm; wind_a again
    30-40 s with 0.05 m throughout."""
    t = np.arange(0.0, 40.0, dt_s)
    err = np.full_like(t, 0.1)
    err[(t >= 10.0) & (t < 12.0)] = 0.5
    err[t >= 30.0] = 0.05
    spans = [("calm", 0.0, 10.0), ("wind_a", 10.0, 20.0), ("calm", 20.0, 30.0)]
    spans.append(("wind_a", 30.0, 40.0))
    return t, err, spans


def test_phase_rmse_and_recovery_definition():
    t, err, spans = _step_flight()
    phases = fr.phase_results(t, err, spans)
    assert [p.name for p in phases] == ["calm", "wind_a", "calm", "wind_a"]
    assert phases[0].rmse_m == pytest.approx(0.1)
    assert phases[1].rmse_m == pytest.approx(math.sqrt((2 * 0.25 + 8 * 0.01) / 10), rel=1e-3)
    # Centred 1-s window, steady 0.1 m, band 1.2 x 0.1 + 0.01 = 0.13 m: the share f of the
    # window still on the 0.5 m step must satisfy 0.25 f + 0.01 (1 - f) <= 0.0169, i.e. the
    # centre at >= 12.5 - 0.0069 / 0.24 s; recovery is measured from the phase start (10 s).
    assert phases[1].recovery_s == pytest.approx(2.5 - 0.0069 / 0.24, abs=0.021)
    assert phases[1].steady_rmse_m == pytest.approx(0.1)
    assert phases[1].peak_rmse_m == pytest.approx(0.5)
    assert phases[0].recovery_s == 0.0  # no excursion above the band
    assert phases[3].recovery_s == 0.0
    assert phases[3].samples == 500


def test_a_too_short_phase_has_no_recovery():
    t = np.arange(0.0, 0.4, 0.02)
    (phase,) = fr.phase_results(t, np.full_like(t, 0.1), [("calm", 0.0, 0.4)])
    assert (phase.recovery_s, phase.steady_rmse_m, phase.peak_rmse_m) == (None, None, None)
    assert phase.rmse_m == pytest.approx(0.1)


def test_improvement_compares_last_repeat_with_first():
    t, err, spans = _step_flight()
    phases = fr.phase_results(t, err, spans)
    imp = fr.improvement(phases, "wind_a")
    assert imp["reduction"] == pytest.approx(1 - 0.05 / phases[1].rmse_m, abs=1e-4)
    assert imp["last_rmse_m"] == pytest.approx(0.05)
    assert fr.improvement(phases, "wind_b") is None


def _series(t_s: np.ndarray, err: np.ndarray) -> fr.FlightSeries:
    stamps = ZERO_NS + np.round(t_s * NS).astype(np.int64)
    truth = np.zeros((len(t_s), 3))
    truth[:, 2] = 1.0 + err  # error purely vertical
    refs = np.zeros((len(t_s), 3))
    refs[:, 2] = 1.0
    z = [np.array([np.sin(x), np.cos(x), 0.1 * x]) for x in t_s]
    return fr.FlightSeries(
        stamps, truth, stamps, refs, z, np.ones(len(t_s), bool), np.ones(len(t_s), int)
    )


def test_report_json_contract_and_files(tmp_path):
    t, err, spans = _step_flight()
    clock = fr.ScenarioClock([fr.ClockPoint(ZERO_NS + NS, 1.0, 0.0, True)], 1.0)
    updates = [fr.ModelUpdate(2, 12.0, 12.4), fr.ModelUpdate(3, 25.0, None)]
    report = fr.build_report(
        _series(t, err),
        clock,
        spans,
        latency_ms=np.linspace(0.5, 1.5, 101),
        latency_method="synthetic",
        missed_ticks=0,
        updates=updates,
    )
    data = json.loads(flight_report_files.write_json(report, tmp_path / "report.json").read_text())
    assert [p["name"] for p in data["phases"]] == ["calm", "wind_a", "calm", "wind_a"]
    for phase in data["phases"]:
        assert {"name", "start_s", "end_s", "rmse_m", "recovery_s"} <= set(phase)
    assert data["phases"][1]["rmse_m"] == pytest.approx(math.sqrt(0.058), rel=1e-3)
    assert data["control_latency_ms"]["p50"] == pytest.approx(1.0)
    assert data["control_latency_ms"]["p99"] == pytest.approx(1.49)
    assert data["missed_ticks"] == 0
    assert data["model_updates"][0] == {
        "version": 2,
        "decided_s": 12.0,
        "active_s": 12.4,
        "push_s": 0.4,
        "kind": "model",
    }
    assert data["model_updates"][1]["active_s"] is None
    assert data["model_push_median_s"] == pytest.approx(0.4)
    assert data["improvement"]["phase"] == "wind_a"
    assert data["force_input"] is None  # a policy without a force input publishes none
    md = flight_report_files.write_markdown(report, tmp_path / "report.md", "test").read_text()
    assert "1.2" in md and "median" in md and "wind_a" in md
    png = flight_report_files.plot_report(report, tmp_path / "report.png", "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.latent_z.shape == (len(t), 3)


def test_fly_reads_a_bag_into_the_same_report(tmp_path):
    """``vnd fly --report-only``: a bag written with the stack's message types -> report."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from vnd_ros import messages
    from vnd_tools import flight_bag

    run = tmp_path / "run"
    run.mkdir()
    ns = "/vt"
    msg = messages.get_message
    writer = Writer(run / "bag", version=9, storage_plugin=StoragePlugin.MCAP)
    writer.open()
    conns = {}
    for topic, type_name in (
        ("sim/truth", "nav_msgs/msg/Odometry"),
        ("vnd/replay", "vnd_msgs/msg/Transition"),
        ("vnd/node_status", "vnd_msgs/msg/NodeStatus"),
        ("vnd/checkpoint/status", "vnd_msgs/msg/CheckpointStatus"),
        ("sim/disturbance", "geometry_msgs/msg/Vector3Stamped"),
        ("vnd/force_input", "geometry_msgs/msg/Vector3Stamped"),
    ):
        definition, _ = messages.message_definition(type_name)
        conns[topic] = writer.add_connection(
            f"{ns}/{topic}", type_name, msgdef=definition, rihs01=messages.type_hash(type_name)
        )

    def put(topic: str, message, stamp_ns: int) -> None:
        writer.write(conns[topic], stamp_ns, messages.serialize(message))

    def stamped(message, stamp_ns: int):
        message.header.stamp.sec, message.header.stamp.nanosec = divmod(stamp_ns, NS)
        return message

    spans_s = [0.0, 2.0, 4.0]
    for k in range(250):  # 5 s at 50 Hz: 0.1 m error, 0.3 m in the second second
        t_s = k * 0.02
        stamp = ZERO_NS + k * 20_000_000
        error = 0.3 if 1.0 <= t_s < 2.0 else 0.1
        truth = stamped(msg("nav_msgs/msg/Odometry")(), stamp)
        truth.pose.pose.position.z = 1.0 + error
        put("sim/truth", truth, stamp)
        tick = msg("vnd_msgs/msg/Transition")(reference=[0, 0, 1.0] + [0.0] * 6, z_valid=False)
        put("vnd/replay", stamped(tick, stamp), stamp)
        # from 2 s on a 1 N push along x, of which the observer reads 0.9 N
        force = msg("geometry_msgs/msg/Vector3Stamped")()
        force.vector.x = 0.9 if t_s >= 2.0 else 0.0
        put("vnd/force_input", stamped(force, stamp), stamp)
        if k % 5 == 0:  # the simulator publishes at its own rate
            true = msg("geometry_msgs/msg/Vector3Stamped")()
            true.vector.x = 1.0 if t_s >= 2.0 else 0.0
            put("sim/disturbance", stamped(true, stamp), stamp)
    for second in range(6):
        stamp = ZERO_NS + second * NS + 3_000_000
        counters = {"scenario_time_ms": second * 1000, "slipped_ms": 0, "started": 1}
        status = msg("vnd_msgs/msg/NodeStatus")(
            node=f"{ns}/sim", counters_json=json.dumps(counters)
        )
        put("vnd/node_status", stamped(status, stamp), stamp)
        policy = msg("vnd_msgs/msg/NodeStatus")(
            node=f"{ns}/policy", ticks=50 * second, missed_ticks=second // 5, latency_p99_ms=0.9
        )
        put("vnd/node_status", stamped(policy, stamp), stamp)
    for node, offset_ms in (("encoder", 100), ("policy", 150)):
        stamp = ZERO_NS + 3 * NS + offset_ms * 1_000_000
        swap = msg("vnd_msgs/msg/CheckpointStatus")(
            request_id="model:2", node=f"{ns}/{node}", accepted=True, active_version=2
        )
        put("vnd/checkpoint/status", stamped(swap, stamp), stamp)
    writer.close()
    registry = run / "learner" / "bundles"
    registry.mkdir(parents=True)
    entry = {"version": 2, "file": "v0002.safetensors", "decided_wall_s": ZERO_NS / NS + 2.9}
    (registry / "index.json").write_text(json.dumps({"format_version": 1, "bundles": [entry]}))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\nduration_s: 4.0\nphases:\n"
        + "".join(f"  - {{name: p{i}, start_s: {s}}}\n" for i, s in enumerate(spans_s[:2]))
    )
    meta = {
        "scenario": "s",
        "scenario_arg": str(scenario),
        "duration_s": 4.0,
        "real_time_factor": 1.0,
        "vehicle": "vt",
        "learn": True,
        "wall_start_s": 0.0,
        "wall_end_s": 10.0,
        "end_reason": "done",
        "stack_exit_code": 0,
        "failures": [],
    }
    (run / flight_bag.META_FILE).write_text(json.dumps(meta))
    table = flight_bag.write_report(run)
    data = json.loads((run / "report.json").read_text())
    assert [p["name"] for p in data["phases"]] == ["p0", "p1"]
    assert data["phases"][0]["rmse_m"] == pytest.approx(math.sqrt((0.01 + 0.09) / 2), rel=0.02)
    assert data["phases"][1]["rmse_m"] == pytest.approx(0.1, rel=1e-3)
    assert data["missed_ticks"] == 1
    # the sim's reports lag by 3 ms: scenario zero is estimated 3 ms after ZERO_NS
    update = data["model_updates"][0]
    assert update["version"] == 2 and len(data["model_updates"]) == 1
    assert update["decided_s"] == pytest.approx(2.897, abs=1e-3)
    assert update["active_s"] == pytest.approx(3.147, abs=1e-3)
    assert update["push_s"] == pytest.approx(0.25, abs=1e-3)
    assert data["control_latency_ms"]["p99"] == pytest.approx(0.9)  # NodeStatus fallback
    assert data["host_cpu"] == {"sampled": False}  # no per-tick samples to split
    assert data["host_stalls"] == {"probed": False}  # flown without the probe
    assert "p0" in table and (run / "report.png").is_file() and (run / "report.md").is_file()
    calm, pushed = data["force_input"]
    # scenario zero is 3 ms after ZERO_NS: the push's first tick counts to p0
    assert calm["read_n"] == pytest.approx(0.0, abs=0.01)
    assert calm["true_n"] == pytest.approx(0.0, abs=0.01)
    assert pushed["read_n"] == pytest.approx(0.9) and pushed["true_n"] == pytest.approx(1.0)
    # the sim's sample is held until its next one, so the stamps line up without a lag
    assert pushed["rms_difference_n"] == pytest.approx(0.1, abs=0.01)
    assert "force observer, estimate / true" in table and "p1 0.90 / 1.00 N" in table


def test_fly_splits_latency_by_host_steal_and_prints_it(tmp_path):
    """host_cpu.npz + per-tick latencies -> report.json's host_cpu and the summary line."""
    from vnd_tools import flight_bag

    wall_s = 500.0 + np.arange(31, dtype=float)
    per_second = np.zeros((30, 8), dtype=np.int64)
    per_second[:, 3] = 200  # idle
    per_second[10:20, 7] = 20  # 10 % steal from 10 s to 20 s
    cpu_times = np.vstack([np.zeros((1, 8), np.int64), np.cumsum(per_second, axis=0)])
    np.savez(tmp_path / flight_bag.HOST_CPU_FILE, wall_s=wall_s, cpu_times=cpu_times)
    ticks = 500.005 + 0.02 * np.arange(1500)
    latency = np.where((ticks >= 510.005) & (ticks < 520.005), 4.0, 0.8)
    host = flight_bag._host_cpu(tmp_path / flight_bag.HOST_CPU_FILE, ticks, latency)
    assert host["sampled"] and host["quiet"]["windows"] == 2 and host["steal"]["windows"] == 1
    assert host["quiet"]["p99_ms"] == pytest.approx(0.8)
    assert host["steal"]["p99_ms"] == pytest.approx(4.0)
    assert flight_bag._host_cpu(tmp_path / "missing.npz", ticks, latency) == {"sampled": False}
    data = {
        "phases": [],
        "control_latency_ms": {"p50": 0.8, "p99": 4.0, "samples": 1500},
        "missed_ticks": 0,
        "model_updates": [],
        "host_cpu": host,
    }
    line = flight_report_files.summary_table(data).splitlines()[2]
    assert line.startswith("host CPU steal 3.2% of the flight")  # 200 of 6200 ticks
    assert "< 1% steal: 2, p99 0.800 ms, 0 late ticks" in line
    assert "others (steal up to" in line and "1, p99 4.000 ms" in line
    assert line.endswith("late ticks during steal: 0 of 0")


def test_fly_puts_late_ticks_against_the_host_stalls_and_prints_them(tmp_path):
    """host_stalls.npz + the per-tick samples -> report.json's host_stalls and its line."""
    from vnd_tools import flight_bag, hoststall

    ticks_s = 600.0 + 0.02 * np.arange(500)
    ticks_s[100:] += 0.015  # tick 100 is 35 ms after tick 99 ...
    ticks_s[300:] += 0.015  # ... and so is tick 300
    odom_s = np.sort(np.concatenate([ticks_s - 0.001, ticks_s + 0.009]))
    np.savez(
        tmp_path / flight_bag.LATENCY_FILE,
        command_stamp_ns=(ticks_s * 1e9).astype(np.int64),
        command_source_ns=(ticks_s * 1e9).astype(np.int64),
        odom_stamp_ns=(odom_s * 1e9).astype(np.int64),
        odom_source_ns=(odom_s * 1e9).astype(np.int64),
    )
    # CPU 1 lost 12 ms inside tick 100's gap; nothing around tick 300's
    gap_start = ticks_s[99] + 0.004
    stall = np.array([[gap_start, gap_start + hoststall.PROBE_PERIOD_S + 0.012]])
    probes = [
        hoststall.CpuStalls(0, True, 5000, np.zeros(0), np.zeros(0)),
        hoststall.CpuStalls(1, True, 5000, stall[:, 0], stall[:, 1]),
    ]
    hoststall.save_stalls(tmp_path / flight_bag.HOST_STALLS_FILE, probes)
    stalls = flight_bag._host_stalls(
        tmp_path / flight_bag.HOST_STALLS_FILE, tmp_path / flight_bag.LATENCY_FILE
    )
    assert stalls["probed"] and stalls["late_ticks"] == 2
    assert stalls["late_ticks_with_host_stall"] == 1
    assert [row["host"] for row in stalls["late"]] == [True, False]
    assert stalls["late"][0]["cpu_lost_ms"] == {"0": 0.0, "1": pytest.approx(12.0)}
    assert stalls["probe"]["1"]["stalls"] == 1 and stalls["probe"]["0"]["wakeups"] == 5000
    assert flight_bag._host_stalls(
        tmp_path / "missing.npz", tmp_path / flight_bag.LATENCY_FILE
    ) == {"probed": False}
    data = {
        "phases": [],
        "control_latency_ms": {"p50": 0.8, "p99": 1.0, "samples": 500},
        "missed_ticks": 2,
        "model_updates": [],
        "host_stalls": stalls,
    }
    line = flight_report_files.summary_table(data).splitlines()[2]
    assert line.startswith("host stalls (per-CPU SCHED_FIFO 99 probe")
    assert "CPU 1 12 ms in 1 (longest 12.0 ms)" in line
    assert line.endswith(
        "policy ticks > 1.5 periods apart: 2, 1 with the host taking a CPU "
        "for at least half the delay"
    )
