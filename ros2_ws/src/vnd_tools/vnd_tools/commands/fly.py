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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml
from vnd_ros import runtime
from vnd_ros.bag import BagRecorder
from vnd_ros.bag_read import BagError
from vnd_ros.launch import LaunchError, LaunchService
from vnd_ros.launch.resolve import default_environment, resolve_launch
from vnd_ros.paths import REPO_ROOT
from vnd_ros.stack_records import namespaced

from vnd_tools import hoststall, rtcensus
from vnd_tools.flight_bag import (
    HOST_CPU_FILE,
    HOST_STALLS_FILE,
    LATENCY_FILE,
    META_FILE,
    REALTIME_CENSUS_FILE,
    write_report,
)
from vnd_tools.flight_monitor import FlightMonitor, FlightOutcome

if TYPE_CHECKING:
    from vnd_core.scenario import Scenario

LAUNCH_FILE = REPO_ROOT / "launch" / "vnd_sim.launch.yaml"
CONFIG_DIR = REPO_ROOT / "config"
# Every vnd and sim topic of the vehicle namespace (docs/topics.md).
RECORD_TOPICS = (
    "mocap/pose",
    "odom",
    "vnd/command",
    "vnd/latent",
    "vnd/replay",
    "vnd/force_input",
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
    parser.add_argument("--bundle", default="", help="start-up bundle file (overrides --start)")
    parser.add_argument(
        "--start",
        choices=["base", "observer"],
        default="base",
        help="shipped bundle to start from: the base policy, or the force-observer policy "
        "(reads the observer's force, compensates the commands; make demo flies it)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of mocap noise and gusts")
    parser.add_argument(
        "--timeout", type=float, default=0.0, metavar="S", help="give up after S s of wall time"
    )
    parser.add_argument(
        "--launch-file", type=Path, default=LAUNCH_FILE, help="sim launch file (default: ours)"
    )
    parser.add_argument(
        "--host-diagnostics",
        action="store_true",
        help="sample the host's CPU steal, run the per-CPU probe that tells host stalls from the "
        "stack's, and have the policy split late ticks by its thread's scheduling (Linux)",
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


def _shipped_start(start: str) -> str:
    """The bundle path of ``--start``: '' for the base (the nodes' default), else the file."""
    if start == "base":
        return ""
    from vnd_core.bundle import shipped_observer_bundle_path

    return str(shipped_observer_bundle_path())


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
    # CPU steal sampling, the per-CPU stall probe and the policy's schedstat reads (Linux)
    host_diagnostics: bool = False
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
            bundle=args.bundle or _shipped_start(args.start),
            seed=args.seed,
            launch_file=args.launch_file,
            timeout_s=args.timeout,
            host_diagnostics=args.host_diagnostics,
            middleware=args.middleware,
        )


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
    config_dir = prepare_config(
        out / "config", learn=options.learn, host_diagnostics=options.host_diagnostics
    )
    timeout_s = options.timeout_s or scenario.duration_s / options.real_time_factor
    timeout_s += 0 if options.timeout_s else STARTUP_ALLOWANCE_S
    launch_args = _launch_arguments(options, config_dir, (out / "learner").resolve())
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
    meta = _flight_meta(options, scenario, launch_args, processes)
    topics = [namespaced(options.vehicle, topic) for topic in options.topics]
    recorder = BagRecorder(out / "bag", topics, node_name="vnd_fly_recorder").start()
    monitor = FlightMonitor(
        options.vehicle, options.measure_latency, sample_host_cpu=options.host_diagnostics
    )
    outcome = FlightOutcome("interrupted", 130)
    probe = hoststall.StallProbe() if options.host_diagnostics and sys.platform == "linux" else None
    # Other processes' real-time threads delay the stack where the host probe sees nothing.
    census = rtcensus.RealtimeCensus() if probe is not None else None
    try:
        if probe is not None and census is not None:
            probe.start()
            census.start()
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
        _save_measurements(out, monitor, probe, census)
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


def _launch_arguments(options: FlightOptions, config_dir: Path, learner_dir: Path) -> dict:
    """The launch file's arguments for a flight of ``options`` (node logs to files)."""
    return {
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


def _flight_meta(
    options: FlightOptions, scenario: Scenario, launch_args: dict, processes: Sequence[Any]
) -> dict[str, Any]:
    """flight_meta.json as the flight starts (the end fields are added when it ends)."""
    return {
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


def _save_measurements(
    out: Path,
    monitor: FlightMonitor,
    probe: hoststall.StallProbe | None,
    census: rtcensus.RealtimeCensus | None,
) -> None:
    """Write the per-tick latency and, with the host diagnostics, the CPU times, the stall
    probe's samples and the real-time census; then close the monitor."""
    monitor.save_latency(out / LATENCY_FILE)
    if monitor.cpu is not None:
        monitor.cpu.save(out / HOST_CPU_FILE)
    if probe is not None:
        try:
            hoststall.save_stalls(out / HOST_STALLS_FILE, probe.stop())
        except RuntimeError as err:  # the report then says the flight was not probed
            print(f"vnd fly: no host stall record: {err}", file=sys.stderr)
    if census is not None:
        try:
            rtcensus.save_use(out / REALTIME_CENSUS_FILE, census.stop())
        except RuntimeError as err:  # the report then puts late ticks against the host only
            print(f"vnd fly: no real-time census: {err}", file=sys.stderr)
    monitor.close()


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


def prepare_config(target: Path, learn: bool, host_diagnostics: bool = False) -> Path:
    """Copy the node parameter files to ``target`` (kept with the run): the learner's ``learn``
    and the policy's ``host_diagnostics`` set from the options."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(CONFIG_DIR, target, ignore=shutil.ignore_patterns("cyclonedds_*"))
    learner = target / "learner.yaml"
    data = yaml.safe_load(learner.read_text())
    data["/**"]["ros__parameters"]["learn"] = bool(learn)
    learner.write_text("# Copied by vnd fly; 'learn' set from --no-learn.\n" + yaml.safe_dump(data))
    policy = target / "policy.yaml"
    data = yaml.safe_load(policy.read_text())
    data["/**"]["ros__parameters"]["host_diagnostics"] = bool(host_diagnostics)
    policy.write_text(
        "# Copied by vnd fly; 'host_diagnostics' set from --host-diagnostics.\n"
        + yaml.safe_dump(data)
    )
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
