"""Control-path latency and late ticks of the full simulated stack, per middleware, in one run.

Flies the stack of ``make demo`` (``vnd fly``: sim, pose filter, encoder, policy, learner, each
its own process) once per ``--middleware`` choice, one flight after the other, through a wind
schedule that keeps the learner busy for ``--duration`` seconds (default 60) each:

* ``dds``: every node on the project's Cyclone DDS backend (what ``make demo`` flies);
* ``rclpy``: every node on real rclpy (Fast DDS), from the ``make ros`` wheels or a sourced
  ROS 2;
* ``mixed``: the sim on dds, the pose filter, encoder, policy and learner on rclpy.

Each flight's report gives the latency from the odometry stamp (the mocap measurement time) to
the publication of the command answering it (``p50_ms`` / ``p99_ms``; both ends are DDS
source timestamps on this host's clock, read by a Cyclone reader of ``vnd fly`` that sees
either vendor's writers), the same from the odometry's publication (``from_odom_publication``),
and the policy ticks later than 1.5 control periods (``late_ticks``). ``vnd fly`` runs a
SCHED_FIFO 99 probe pinned to each CPU (``vnd_tools.hoststall``): a late tick during which
one CPU lost at least half as much time to host stalls as the tick was late counts as the
host's (``late_ticks_host``); one the host does not explain, during which other processes' real-time
threads took at least as much CPU (``vnd_tools.rtcensus``: another flight's or a test run's
SCHED_FIFO nodes), counts as theirs (``late_ticks_foreign_realtime``); the rest are the
stack's own (``late_ticks_stack``).

Prints ONE JSON object last: ``{"duration_s", "middlewares": {name: {...}}, "budget": {...}}``;
``budget`` compares rclpy with dds: ``rclpy_p99_over_dds`` (goal <= 1.5) and the stack's own
late ticks on rclpy (goal 0). Run folders (bags, logs, reports) go under ``--out`` (default
``runs/control_latency_<date>_<time>/<middleware>``; runs/ is ignored by git). The stack flies
in a vehicle namespace of its own (``--vehicle``), so another stack on the same DDS domain (a
demo's vnd1) cannot publish into it.

    python benchmarks/control_latency.py --middleware dds,rclpy,mixed --duration 60
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIDDLEWARES = ("dds", "rclpy", "mixed")
BUDGET_P99_RATIO = 1.5  # rclpy p99 at most this multiple of the dds backend's

SCENARIO = """name: latency_endurance
description: figure-eight, wind switching every 30 s so the learner keeps updating
duration_s: {duration}
reference: {{kind: figure8, center_m: [0.0, 0.0, 1.2], amplitude_m: 1.2, period_s: 6.0}}
phases:
{phases}
events:{events}
"""

WINDS_MPS = ((0.0, 0.0, 0.0), (4.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 4.0, 0.0))
PHASE_S = 30.0


def scenario_yaml(duration_s: float) -> str:
    """A schedule of calm and wind phases, each PHASE_S long, covering ``duration_s``."""
    phases, events = [], []
    k = 0
    while k * PHASE_S < duration_s:
        wind = WINDS_MPS[k % len(WINDS_MPS)]
        start = k * PHASE_S
        calm = not any(wind)
        phases.append(f"  - {{name: {'calm' if calm else f'wind_{k}'}, start_s: {start}}}")
        if calm and k > 0:
            events.append(f"  - {{at_s: {start}, type: wind_off}}")
        elif not calm:
            vel = f"[{wind[0]}, {wind[1]}, {wind[2]}]"
            events.append(f"  - {{at_s: {start}, type: wind, kind: constant, velocity_mps: {vel}}}")
        k += 1
    listed = "".join(f"\n{event}" for event in events) or " []"  # one calm phase: no events
    return SCENARIO.format(duration=duration_s, phases="\n".join(phases), events=listed)


def parse_middlewares(values: list[str] | None) -> list[str]:
    """``--middleware`` values (repeatable, each a comma list) in order, duplicates dropped;
    default: all three when rclpy is installed, else dds only. Unknown names raise."""
    if not values:
        return list(MIDDLEWARES) if importlib.util.find_spec("rclpy") else ["dds"]
    chosen: list[str] = []
    for value in values:
        for name in (part.strip().lower() for part in value.split(",")):
            if name not in MIDDLEWARES:
                raise ValueError(f"--middleware {name!r}: expected one of {', '.join(MIDDLEWARES)}")
            if name not in chosen:
                chosen.append(name)
    return chosen


def summarise(report: dict, exit_code: int, wall_s: float) -> dict:
    """The figures of one flight's report.json."""
    latency = report.get("control_latency_ms") or {}
    from_stamp = (report.get("latency_other") or {}).get("odom_stamp_to_command_ms") or {}
    stalls = report.get("host_stalls") or {}
    probed = bool(stalls.get("probed"))
    return {
        "p50_ms": from_stamp.get("p50"),
        "p99_ms": from_stamp.get("p99"),
        "max_ms": from_stamp.get("max"),
        "samples": from_stamp.get("samples"),
        "from_odom_publication": {k: latency.get(k) for k in ("p50", "p99", "max")},
        "late_ticks": stalls.get("late_ticks") if probed else report.get("missed_ticks"),
        "late_ticks_host": stalls.get("late_ticks_with_host_stall") if probed else None,
        "late_ticks_foreign_realtime": (
            stalls.get("late_ticks_with_foreign_realtime") if probed else None
        ),
        "late_ticks_stack": stalls.get("late_ticks_stack") if probed else None,
        "host_probed": probed,
        "policy_missed_ticks": report.get("missed_ticks"),
        "model_updates": len(report.get("model_updates") or []),
        "overall_rmse_m": report.get("overall_rmse_m"),
        "vehicle_crashed": report.get("vehicle_crashed"),
        "end_reason": report.get("end_reason"),
        "vnd_fly_exit_code": exit_code,
        "stack_failures": report.get("stack_failures") or [],
        "wall_s": round(wall_s, 1),
        "host_cpu_steal_fraction": (report.get("host_cpu") or {}).get("steal_fraction"),
        "run": report.get("run_dir"),
    }


def fly(
    middleware: str, scenario: Path, out: Path, duration_s: float, probe: bool, vehicle: str
) -> dict:
    """One ``vnd fly --middleware`` flight; its summary (or why there is none)."""
    command = [
        sys.executable, "-m", "vnd_tools.cli", "fly", "--scenario", str(scenario),
        "--middleware", middleware, "--out", str(out), "--timeout", str(duration_s + 180.0),
        "--vehicle", vehicle,
    ]  # fmt: skip
    if probe:
        command.append("--host-diagnostics")
    start = time.monotonic()
    log = out.parent / f"{middleware}.vnd_fly.log"
    with log.open("w") as stream:
        flown = subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT)
    wall_s = time.monotonic() - start
    report_path = out / "report.json"
    if not report_path.exists():  # a failed stack process still leaves a report; none: say so
        return {"error": f"vnd fly exited {flown.returncode} without a report (see {log})"}
    report = json.loads(report_path.read_text())
    report["run_dir"] = str(out)
    return summarise(report, flown.returncode, wall_s)


def budget(results: dict[str, dict]) -> dict:
    """rclpy against dds: the p99 ratio and the stack's own late ticks."""
    dds, rclpy = results.get("dds") or {}, results.get("rclpy") or {}
    if dds.get("p99_ms") is None or rclpy.get("p99_ms") is None:
        return {"compared": False, "why": "needs both a dds and an rclpy flight with figures"}
    ratio = rclpy["p99_ms"] / dds["p99_ms"]
    stack_late = rclpy.get("late_ticks_stack")
    return {
        "compared": True,
        "rclpy_p99_over_dds": round(ratio, 3),
        "p99_goal_ratio": BUDGET_P99_RATIO,
        "p99_within_goal": ratio <= BUDGET_P99_RATIO,
        "rclpy_late_ticks_stack": stack_late,
        "late_within_goal": stack_late == 0,
    }


def main() -> int:
    """Fly each middleware in turn, print the JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--middleware",
        action="append",
        help="dds, rclpy or mixed; repeatable or a comma list (default: all three when rclpy "
        "is installed, else dds)",
    )
    parser.add_argument("--duration", type=float, default=60.0, help="flight seconds each")
    parser.add_argument("--out", type=Path, help="folder of the run folders (default runs/...)")
    parser.add_argument(
        "--no-host-probe", action="store_true", help="fly without the host stall probe"
    )
    parser.add_argument(
        "--vehicle",
        default=f"vnd_latency_{os.getpid()}",
        help="vehicle namespace (default: one of this run's own, so that another stack on the "
        "domain, say a demo's vnd1, cannot feed this one)",
    )
    args = parser.parse_args()
    try:
        middlewares = parse_middlewares(args.middleware)
    except ValueError as err:
        parser.error(str(err))
    if args.duration <= 0:
        parser.error("--duration must be > 0")
    root = args.out or REPO / "runs" / time.strftime("control_latency_%Y%m%d_%H%M%S")
    if root.exists() and any(root.iterdir()):
        parser.error(f"{root} is not empty; choose another --out")
    root.mkdir(parents=True, exist_ok=True)
    scenario = root / "latency_endurance.yaml"
    scenario.write_text(scenario_yaml(args.duration))
    results: dict[str, dict] = {}
    for middleware in middlewares:
        print(f"control_latency: flying {middleware} ({args.duration:.0f} s)", file=sys.stderr)
        results[middleware] = fly(
            middleware,
            scenario,
            root / middleware,
            args.duration,
            not args.no_host_probe,
            args.vehicle,
        )
    summary = {
        "duration_s": args.duration,
        "middlewares": results,
        "budget": budget(results),
        "rclpy_executor": os.environ.get("VND_RCLPY_EXECUTOR", "events"),
        "runs": str(root),
    }
    (root / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
    failed = [m for m, r in results.items() if "error" in r or r.get("vnd_fly_exit_code")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
