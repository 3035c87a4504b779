"""``vnd fly``: fly the simulated stack through a scenario, record it, and write the report.

    vnd fly --scenario recurring_wind [--out runs/<stamp>] [--real-time-factor 1] [--no-learn]
            [--middleware dds|rclpy|mixed]
    vnd fly --report-only runs/<stamp>        (recompute the report from a recorded run)

Steps: copy the node parameter files to ``<out>/config`` (``learn: false`` for the learner with
``--no-learn``), launch ``launch/vnd_sim.launch.yaml`` through the launch runner (one OS process
per node, node output in ``<out>/logs``, the loopback Cyclone configuration inherited), record an
MCAP bag of the vehicle's vnd and sim topics, show a live progress line, stop when
``sim/condition`` says ``done`` (or at the timeout), stop the stack (SIGINT, reaped) and write
``report.json``, ``report.md`` and ``report.png`` (see :mod:`vnd_tools.flight_report`).

``--middleware`` picks the node processes' backend (``VND_MIDDLEWARE`` of each child): ``dds``
(the default, also what ``make demo`` flies), ``rclpy`` (real rclpy on Fast DDS, from the
``make ros`` wheels or a sourced ROS 2), or ``mixed`` (the sim on dds, the pose filter, encoder,
policy and learner on rclpy: the vehicle's traffic crosses vendors both ways). The ``vnd fly``
process itself (monitor, recorder, latency probe) keeps its own backend, dds under the Makefile.
rclpy asked for and absent stops the flight with one line naming ``make ros``.

Control latency is measured outside the nodes: a raw DDS reader (dds backend) receives every
command and odometry sample with the source timestamp its writer stamped at publication, so
each tick gives ``odometry stamp -> command publication`` and ``odometry publication ->
command publication`` without trusting the node's own bookkeeping.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import yaml
from vnd_core.wire import LEARNER_STATE_NAMES, MODE_NAMES
from vnd_ros import messages, runtime
from vnd_ros.bag import BagError, BagRecorder, read_messages
from vnd_ros.client import StackClient, namespaced, stamp_ns
from vnd_ros.launch import LaunchError, LaunchService
from vnd_ros.launch.resolve import default_environment, resolve_launch
from vnd_ros.paths import REPO_ROOT
from vnd_ros.qos import QoSProfile, ReliabilityPolicy, qos_profile_status

from vnd_tools import hostcpu, hoststall

LAUNCH_FILE = REPO_ROOT / "launch" / "vnd_sim.launch.yaml"
CONFIG_DIR = REPO_ROOT / "config"
# Every vnd and sim topic of the vehicle namespace (docs/topics.md).
RECORD_TOPICS = (
    "mocap/pose",
    "odom",
    "vnd/command",
    "vnd/latent",
    "vnd/replay",
    "vnd/reference",
    "vnd/model",
    "vnd/checkpoint/command",
    "vnd/checkpoint/status",
    "vnd/node_status",
    "vnd/learner/status",
    "sim/truth",
    "sim/condition",
    "sim/disturbance",
)
MIDDLEWARES = ("dds", "rclpy", "mixed")  # --middleware choices
SIM_NODE = "sim"  # node name of the plant: the one node on dds under --middleware mixed
STARTUP_ALLOWANCE_S = 90.0  # default timeout = scenario duration / rtf + this
SETTLE_AFTER_DONE_S = 1.0  # keep recording this long after 'done' (last replies, statuses)
PROGRESS_PERIOD_S = 0.5  # progress line refresh (a TTY); non-TTY prints every 10 s
SPIN_STEP_S = 0.02
LATENCY_FILE = "control_latency.npz"  # per-tick latency samples (numpy arrays, no pickle)
HOST_CPU_FILE = "host_cpu.npz"  # the machine's CPU times, 10 Hz (vnd_tools.hostcpu)
HOST_STALLS_FILE = "host_stalls.npz"  # the per-CPU stall probe's (vnd_tools.hoststall)
META_FILE = "flight_meta.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``vnd fly``."""
    parser.add_argument("--scenario", default="recurring_wind", help="scenario name or YAML")
    parser.add_argument("--out", type=Path, help="run folder (default runs/<date>_<time>)")
    parser.add_argument(
        "--real-time-factor", type=float, default=1.0, help="simulated s per s (default 1)"
    )
    parser.add_argument("--no-learn", action="store_true", help="record only, no model updates")
    parser.add_argument("--vehicle", default="vnd1", help="vehicle namespace (default vnd1)")
    parser.add_argument("--vehicle-model", default="agile", help="vehicle parameters name")
    parser.add_argument("--bundle", default="", help="start-up bundle (default: shipped base)")
    parser.add_argument("--seed", type=int, default=0, help="seed of mocap noise and gusts")
    parser.add_argument(
        "--timeout", type=float, default=0.0, metavar="S", help="give up after S s of wall time"
    )
    parser.add_argument(
        "--launch-file", type=Path, default=LAUNCH_FILE, help="sim launch file (default: ours)"
    )
    parser.add_argument(
        "--no-host-probe",
        action="store_true",
        help="fly without the per-CPU probe that tells host stalls from the stack's",
    )
    parser.add_argument(
        "--middleware",
        choices=MIDDLEWARES,
        default=default_middleware(),
        help="backend of the node processes: dds (default; VND_MIDDLEWARE when it names one), "
        "rclpy, or mixed (sim on dds, the other nodes on rclpy)",
    )
    parser.add_argument(
        "--report-only", type=Path, metavar="RUN", help="recompute the report of a recorded run"
    )


def default_middleware() -> str:
    """``VND_MIDDLEWARE`` when it names a backend (dds, rclpy), else dds."""
    choice = os.environ.get("VND_MIDDLEWARE", "").strip().lower()
    return choice if choice in ("dds", "rclpy") else "dds"


def node_backends(middleware: str) -> tuple[str, str]:
    """(sim backend, control-node backend) of a ``--middleware`` choice."""
    if middleware not in MIDDLEWARES:
        raise ValueError(f"--middleware {middleware!r}: expected one of {', '.join(MIDDLEWARES)}")
    if middleware == "mixed":
        return "dds", "rclpy"
    return middleware, middleware


def rclpy_problem(env: dict[str, str]) -> str | None:
    """None when rclpy and vnd_msgs import in a child with ``env`` (the nodes' environment),
    else one line saying what failed and naming ``make ros``."""
    import subprocess

    check = "import rclpy, vnd_msgs.msg"
    found = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=120
    )
    if found.returncode == 0:
        return None
    lines = [line for line in found.stderr.strip().splitlines() if line.strip()]
    why = lines[-1] if lines else f"exit code {found.returncode}"
    return (
        f"--middleware needs rclpy, which does not import here ({why}): run `make ros` "
        "(ROS 2 Jazzy from the PyPI wheels into the venv) or source /opt/ros/jazzy/setup.bash"
    )


def run(args: argparse.Namespace) -> int:
    """Fly and report (or only report); the exit code."""
    os.environ.update(default_environment(os.environ))  # loopback unless configured
    if args.report_only is not None:
        report = write_report(args.report_only)
        print(report)
        return 0
    if args.real_time_factor <= 0:
        print("vnd fly: error: --real-time-factor must be > 0", file=sys.stderr)
        return 2
    options = FlightOptions.from_args(args)
    if "rclpy" in node_backends(options.middleware):
        problem = rclpy_problem(dict(os.environ))
        if problem:
            print(f"vnd fly: error: {problem}", file=sys.stderr)
            return 2
    try:
        outcome = fly(options)
    except (LaunchError, OSError, ValueError) as err:
        print(f"vnd fly: error: {err}", file=sys.stderr)
        return 1
    print(f"\nrun folder: {options.out}")
    try:
        print(write_report(options.out))
    except (ValueError, OSError) as err:
        print(f"vnd fly: no report: {err}", file=sys.stderr)
        return 1
    return outcome.exit_code


# ---------------------------------------------------------------- the flight


@dataclass
class FlightOptions:
    """What to fly and where to put it."""

    scenario: str  # scenario name (config/scenarios) or YAML path
    out: Path  # run folder (created)
    real_time_factor: float = 1.0  # simulated seconds per second
    learn: bool = True  # run the learner's worker (model updates)
    vehicle: str = "vnd1"  # vehicle namespace
    vehicle_model: str = "agile"  # vehicle parameters
    bundle: str = ""  # start-up bundle ('' = shipped base)
    seed: int = 0  # mocap noise seed
    launch_file: Path = LAUNCH_FILE  # launch file with vnd_sim.launch.yaml's arguments
    timeout_s: float = 0.0  # wall-time limit (0 = duration / rtf + STARTUP_ALLOWANCE_S)
    topics: tuple[str, ...] = RECORD_TOPICS  # recorded topics (relative to the namespace)
    measure_latency: bool = True  # raw DDS readers for per-tick latency (dds backend)
    host_probe: bool = True  # per-CPU SCHED_FIFO probe of host stalls (Linux)
    middleware: str = "dds"  # node backends: dds, rclpy or mixed (sim dds, the rest rclpy)
    progress: TextIO | None = None  # where the progress line goes (default stdout)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> FlightOptions:
        """From ``vnd fly`` arguments."""
        out = args.out or Path("runs") / time.strftime("%Y%m%d_%H%M%S")
        return cls(
            scenario=args.scenario,
            out=out,
            real_time_factor=args.real_time_factor,
            learn=not args.no_learn,
            vehicle=args.vehicle,
            vehicle_model=args.vehicle_model,
            bundle=args.bundle,
            seed=args.seed,
            launch_file=args.launch_file,
            timeout_s=args.timeout,
            host_probe=not args.no_host_probe,
            middleware=args.middleware,
        )


@dataclass
class FlightOutcome:
    """How the flight ended."""

    reason: str  # done | timeout | interrupted | stack failed
    exit_code: int  # 0 when done and the stack stopped cleanly
    failures: list[str] = field(default_factory=list)  # launcher failure lines
    respawns: list[str] = field(default_factory=list)  # expected restarts (respawn: true)


def respawn_lines(events: Sequence[Any]) -> list[str]:
    """One line per exit that the launcher answered with a respawn (``respawn: true`` within
    its budgets): what the launch file asks for, e.g. the learner restarting and reloading its
    replay store. ``events`` are the launcher's ``LaunchEvent``s in order; the matching
    failure lines are what ``LaunchService.unexpected_failures`` leaves out."""
    lines = []
    for index, event in enumerate(events):
        if event.kind != "exit" or event.returncode == 0:
            continue
        answer = next((e for e in events[index + 1 :] if e.name == event.name), None)
        if answer is None or answer.kind != "respawn":
            continue
        uptime = "" if event.uptime_s is None else f" after {event.uptime_s:.1f} s"
        lines.append(
            f"'{event.name}' (pid {event.pid}) exited with code {event.returncode}{uptime} "
            f"and was respawned (respawn: true): {answer.detail}"
        )
    return lines


def fly(options: FlightOptions) -> FlightOutcome:
    """Launch, record and watch one flight; writes the bag, logs and flight_meta.json."""
    from vnd_core.scenario import load_scenario

    scenario = load_scenario(options.scenario)
    out = options.out
    if (out / "bag").exists():
        raise OSError(f"{out} already holds a flight (bag/); choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    config_dir = prepare_config(out / "config", learn=options.learn)
    learner_dir = (out / "learner").resolve()
    timeout_s = options.timeout_s or scenario.duration_s / options.real_time_factor
    timeout_s += 0 if options.timeout_s else STARTUP_ALLOWANCE_S
    launch_args = {
        "vehicle": options.vehicle,
        "scenario": options.scenario,
        "vehicle_model": options.vehicle_model,
        "bundle": options.bundle,
        "run_dir": str(learner_dir),
        "real_time_factor": str(options.real_time_factor),
        "seed": str(options.seed),
        "config_dir": str(config_dir.resolve()),
        "output": "log",
    }
    launch_log = (out / "logs").resolve()
    launch_log.mkdir(exist_ok=True)
    events = (launch_log / "launch.log").open("a")
    resolved = resolve_launch(options.launch_file, launch_args)
    processes = with_backends(resolved.processes, options.middleware)
    service = LaunchService(
        processes,
        log_dir=launch_log,
        report=lambda level, text: _launch_event(events, level, text),
    )
    vital = {spec.name for spec in processes if not spec.respawn}
    meta: dict[str, Any] = {
        "scenario": scenario.name,
        "scenario_arg": options.scenario,
        "duration_s": scenario.duration_s,
        "real_time_factor": options.real_time_factor,
        "vehicle": options.vehicle,
        "vehicle_model": options.vehicle_model,
        "learn": options.learn,
        "launch_file": str(options.launch_file),
        "seed": options.seed,
        "launch_args": launch_args,
        "backend": runtime.BACKEND,  # this process's: monitor, recorder, latency probe
        "middleware": options.middleware,
        "node_backends": {spec.name: spec.env.get("VND_MIDDLEWARE", "") for spec in processes},
        "wall_start_s": time.time(),
    }
    topics = [namespaced(options.vehicle, topic) for topic in options.topics]
    recorder = BagRecorder(out / "bag", topics, node_name="vnd_fly_recorder").start()
    monitor = FlightMonitor(options.vehicle, options.measure_latency)
    outcome = FlightOutcome("interrupted", 130)
    probe = hoststall.StallProbe() if options.host_probe and sys.platform == "linux" else None
    try:
        if probe is not None:
            probe.start()
        service.start()
        outcome = monitor.watch(service, vital, timeout_s, options.progress or sys.stdout)
    finally:
        try:
            counts = recorder.stop()
        except BagError as err:  # e.g. Ctrl-C shut the middleware down under the recorder
            print(f"vnd fly: recording ended early: {err}", file=sys.stderr)
            counts = recorder.counts
        service.shutdown()
        events.close()
        # a crash the launch file answers with a respawn is no failure of the stack
        outcome.failures = service.unexpected_failures
        outcome.respawns = respawn_lines(service.events)
        code = 1 if outcome.failures else 0
        if code != 0 and outcome.exit_code == 0:
            outcome = FlightOutcome("stack failed", 1, outcome.failures, outcome.respawns)
        monitor.save_latency(out / LATENCY_FILE)
        monitor.cpu.save(out / HOST_CPU_FILE)
        if probe is not None:
            try:
                hoststall.save_stalls(out / HOST_STALLS_FILE, probe.stop())
            except RuntimeError as err:  # the report then says the flight was not probed
                print(f"vnd fly: no host stall record: {err}", file=sys.stderr)
        monitor.close()
        meta.update(
            wall_end_s=time.time(),
            end_reason=outcome.reason,
            stack_exit_code=code,
            failures=outcome.failures,
            respawns=outcome.respawns,
            messages_recorded=counts,
        )
        (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    for respawn in outcome.respawns:
        print(f"[stack] expected respawn: {respawn}", file=sys.stderr)
    for failure in outcome.failures:
        print(f"[stack] {failure}", file=sys.stderr)
    return outcome


def with_backends(processes: Sequence[Any], middleware: str) -> list[Any]:
    """The launch file's processes with ``VND_MIDDLEWARE`` set per :func:`node_backends`: the
    node named :data:`SIM_NODE` gets the sim's backend, every other one the control nodes'."""
    import dataclasses

    sim_backend, control_backend = node_backends(middleware)
    chosen = []
    for spec in processes:
        is_sim = (spec.node_name or "").rsplit("/", 1)[-1] == SIM_NODE
        backend = sim_backend if is_sim else control_backend
        chosen.append(dataclasses.replace(spec, env={**spec.env, "VND_MIDDLEWARE": backend}))
    return chosen


def prepare_config(target: Path, learn: bool) -> Path:
    """Copy the node parameter files to ``target`` (kept with the run); learner ``learn``."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(CONFIG_DIR, target, ignore=shutil.ignore_patterns("cyclonedds_*"))
    learner = target / "learner.yaml"
    data = yaml.safe_load(learner.read_text())
    data["/**"]["ros__parameters"]["learn"] = bool(learn)
    learner.write_text("# Copied by vnd fly; 'learn' set from --no-learn.\n" + yaml.safe_dump(data))
    return target


def _launch_event(log: TextIO, level: str, text: str) -> None:
    """Launcher events go to logs/launch.log; errors and respawns also to the terminal (the
    exit of a respawning process is reported as an error first, its respawn right after)."""
    log.write(f"{time.strftime('%H:%M:%S')} [{level}] {text}\n")
    log.flush()
    if level == "ERROR":
        print(f"\n[launch] {text}", file=sys.stderr, flush=True)
    elif text.startswith("respawning "):
        print(f"\n[launch] {text} (expected: respawn: true)", file=sys.stderr, flush=True)


class FlightMonitor:
    """Live view of a flight: condition, tracking error, modes, versions, learner state, and
    the per-tick latency samples (source timestamps of command and odometry)."""

    def __init__(self, vehicle: str, measure_latency: bool) -> None:
        self.client = StackClient(vehicle, node_name="vnd_fly_monitor")
        self.snapshot = self.client.watch_status()
        self.condition = "no sim yet"
        self.truth: dict[int, np.ndarray] = {}  # recent truth positions by stamp
        self.error_m: float | None = None
        self.last_tick: Any = None
        node, topic = self.client.node, self.client.topic
        latest = QoSProfile(ReliabilityPolicy.BEST_EFFORT, depth=50)
        node.create_subscription(
            messages.get_message("std_msgs/msg/String"),
            topic("sim/condition"),
            self._on_condition,
            qos_profile_status,
        )
        node.create_subscription(
            messages.get_message("nav_msgs/msg/Odometry"),
            topic("sim/truth"),
            self._on_truth,
            latest,
        )
        node.create_subscription(
            messages.get_message("vnd_msgs/msg/Transition"),
            topic("vnd/replay"),
            self._on_tick,
            latest,
        )
        self.latency = (
            LatencyProbe(node, topic("vnd/command"), topic("odom"))
            if measure_latency and runtime.BACKEND == "dds"
            else None
        )
        self.cpu = hostcpu.CpuSampler()  # the host's CPU times (steal), beside the latency

    def _on_condition(self, msg: Any) -> None:
        self.condition = str(msg.data)

    def _on_truth(self, msg: Any) -> None:
        p = msg.pose.pose.position
        self.truth[stamp_ns(msg.header.stamp)] = np.array([p.x, p.y, p.z])
        if len(self.truth) > 400:  # keep about 4 s
            for key in sorted(self.truth)[:200]:
                del self.truth[key]

    def _on_tick(self, msg: Any) -> None:
        self.last_tick = msg
        truth = self.truth.get(stamp_ns(msg.header.stamp))
        if truth is not None:
            self.error_m = float(np.linalg.norm(truth - np.asarray(msg.reference[:3])))

    def watch(
        self, service: LaunchService, vital: set[str], timeout_s: float, out: TextIO
    ) -> FlightOutcome:
        """Spin until 'done', timeout, the end of a ``vital`` process (one that is not
        respawned) or Ctrl-C; prints the progress line."""
        start = time.monotonic()
        next_print = 0.0
        tty = out.isatty()
        try:
            while True:
                self.client.cli_node.spin_once(SPIN_STEP_S)
                if self.latency is not None:
                    self.latency.poll()
                self.cpu.poll()
                now = time.monotonic()
                if now >= next_print:
                    line = self.progress_line(now - start)
                    out.write(f"\r{line:<150}" if tty else line + "\n")
                    out.flush()
                    next_print = now + (PROGRESS_PERIOD_S if tty else 10.0)
                if self.condition == "done":
                    self.client.spin_for(SETTLE_AFTER_DONE_S)
                    return FlightOutcome("done", 0)
                if now - start > timeout_s:
                    out.write(f"\nvnd fly: timeout after {timeout_s:.0f} s\n")
                    return FlightOutcome("timeout", 1)
                dead = [p.name for p in service.processes() if p.name in vital and not p.running]
                if dead:
                    out.write(f"\nvnd fly: stack process {', '.join(dead)} has exited\n")
                    return FlightOutcome("stack failed", 1)
                if not runtime.ok():
                    return FlightOutcome("interrupted", 130)
        except KeyboardInterrupt:
            out.write("\nvnd fly: interrupted\n")
            return FlightOutcome("interrupted", 130)
        finally:
            if tty:
                out.write("\n")

    def progress_line(self, wall_s: float) -> str:
        """sim time / duration, phase, error, mode, versions, learner state."""
        sim = next((h for n, h in self.snapshot.nodes.items() if n.endswith("/sim")), None)
        sim_s = sim.counters.get("scenario_time_ms", 0) / 1e3 if sim else 0.0
        tick = self.last_tick
        mode = MODE_NAMES.get(int(tick.mode), "?") if tick is not None else "-"
        versions = f"v{tick.policy_version}/enc v{tick.encoder_version}" if tick else "-"
        error = f"{self.error_m:.3f} m" if self.error_m is not None else "-"
        learner = self.snapshot.learner
        learning = (
            f"{LEARNER_STATE_NAMES.get(learner.state, '?')} ({learner.ticks_stored} ticks, "
            f"latest v{learner.latest_version})"
            if learner
            else "-"
        )
        return (
            f"[{wall_s:5.0f} s] sim {sim_s:6.1f} s  {self.condition:<8} err {error:<8} "
            f"mode {mode:<6} policy {versions}  learner {learning}"
        )

    def save_latency(self, path: Path) -> None:
        """Per-tick latency samples (when measured) as a numpy archive."""
        if self.latency is not None:
            self.latency.poll()
            self.latency.save(path)

    def close(self) -> None:
        """Leave the graph."""
        if self.latency is not None:
            self.latency.close()
        self.client.close()


class LatencyProbe:
    """Raw Cyclone readers of the command and odometry topics that keep each sample's source
    timestamp (the writer's clock at publication). dds backend only."""

    def __init__(self, node: Any, command_topic: str, odom_topic: str) -> None:
        from cyclonedds.sub import DataReader
        from vnd_ros.names import dds_topic_name
        from vnd_ros.qos import to_cyclone_qos

        self._readers = {}
        for key, topic, type_name in (
            ("command", command_topic, "vnd_msgs/msg/CtbrCommand"),
            ("odom", odom_topic, "nav_msgs/msg/Odometry"),
        ):
            msg_type = messages.get_message(type_name)
            dds_topic = node.context.topic(dds_topic_name(topic), msg_type)
            qos = to_cyclone_qos(QoSProfile(ReliabilityPolicy.BEST_EFFORT, depth=200))
            reader = DataReader(node.context.participant, dds_topic, qos)
            self._readers[key] = (reader, msg_type.deserialize)
        self.command_stamp_ns: list[int] = []  # odometry stamp each command answers
        self.command_source_ns: list[int] = []  # publication time of the command
        self.odom_source_ns: dict[int, int] = {}  # odometry stamp -> its publication time

    def poll(self) -> None:
        """Take everything received so far."""
        from cyclonedds.core import InstanceState, SampleState, ViewState
        from vnd_ros.cyclone_compat import take_cdr

        state = SampleState.Any | ViewState.Any | InstanceState.Any
        for key, (reader, deserialize) in self._readers.items():
            while True:
                samples = take_cdr(reader, state, 256)
                if isinstance(samples, int) or not samples:
                    break
                for data, info in samples:
                    if not info.valid_data:
                        continue
                    stamp = stamp_ns(deserialize(data).header.stamp)
                    if key == "command":
                        self.command_stamp_ns.append(stamp)
                        self.command_source_ns.append(int(info.source_timestamp))
                    else:
                        self.odom_source_ns.setdefault(stamp, int(info.source_timestamp))

    def save(self, path: Path) -> None:
        """``command_stamp_ns``, ``command_source_ns``, ``odom_stamp_ns``, ``odom_source_ns``."""
        odom = sorted(self.odom_source_ns.items())
        np.savez(
            path,
            command_stamp_ns=np.array(self.command_stamp_ns, dtype=np.int64),
            command_source_ns=np.array(self.command_source_ns, dtype=np.int64),
            odom_stamp_ns=np.array([k for k, _ in odom], dtype=np.int64),
            odom_source_ns=np.array([v for _, v in odom], dtype=np.int64),
        )

    def close(self) -> None:
        """Drop the readers (deleted with their participant at the latest)."""
        self._readers.clear()


# ---------------------------------------------------------------- the report


def write_report(run_dir: Path) -> str:
    """Compute and write report.json, report.md and report.png of a recorded run; returns the
    summary table."""
    from vnd_tools import flight_report as fr

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
    title = f"vnd fly: {meta['scenario']} ({run_dir.name})"
    fr.write_json(report, run_dir / "report.json")
    fr.write_markdown(report, run_dir / "report.md", title)
    fr.plot_report(report, run_dir / "report.png", title)
    return fr.summary_table(report.data)


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


def read_flight(bag: Path, vehicle: str) -> FlightInputs:
    """Parse the recorded topics of ``vehicle`` from ``bag``."""
    from vnd_tools import flight_report as fr

    ns = namespaced(vehicle, "")
    truth_t, truth_p, tick_t, tick_ref, tick_z, tick_valid, tick_mode = [], [], [], [], [], [], []
    dist_t, dist_f, points, policy_windows = [], [], [], []
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
        elif name == "vnd/checkpoint/status" and msg.accepted:
            if msg.request_id.startswith("model:"):
                version = int(msg.request_id.split(":", 1)[1])
                swaps.setdefault(version, {}).setdefault(msg.node, stamp)
        elif name == "vnd/learner/status":
            learner_versions.setdefault(int(msg.latest_version), stamp)
            final_learner = {
                "state": LEARNER_STATE_NAMES.get(int(msg.state), str(msg.state)),
                "ticks_stored": int(msg.ticks_stored),
                "latest_version": int(msg.latest_version),
                "updates_accepted": int(msg.updates_accepted),
                "updates_rejected": int(msg.updates_rejected),
                "last_update_duration_s": round(float(msg.last_update_duration_s), 2),
                "message": str(msg.message),
            }
        elif name == "vnd/node_status":
            counters = json.loads(msg.counters_json or "{}")
            final_nodes[msg.node] = {
                "active_version": int(msg.active_version),
                "ticks": int(msg.ticks),
                "missed_ticks": int(msg.missed_ticks),
                "latency_p50_ms": round(float(msg.latency_p50_ms), 4),
                "latency_p99_ms": round(float(msg.latency_p99_ms), 4),
                "counters": counters,
            }
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
    path: Path, inputs: FlightInputs, clock: Any, spans: list
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
    return hoststall.host_stall_report(probes, ticks_s, odom_s, CONTROL_PERIOD_S)


def _model_updates(index_path: Path, inputs: FlightInputs, clock: Any) -> list:
    """One ModelUpdate per learner bundle of this flight."""
    from vnd_tools.flight_report import ModelUpdate

    decided: dict[int, float] = {}
    if index_path.is_file():
        for entry in json.loads(index_path.read_text()).get("bundles", []):
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
        updates.append(ModelUpdate(version, decided.get(version), active))
    return updates
