"""Control-path latency and missed ticks of the full simulated stack while the learner trains.

Flies the stack of ``make demo`` (``vnd fly``: sim, pose filter, encoder, policy, learner, each
its own process over Cyclone DDS on loopback) through a wind schedule that keeps the learner
busy for ``--duration`` seconds (default 300), then reads the flight report: latency from the
publication of an odometry sample to the publication of the command answering it, and policy
ticks later than 1.5 control periods. Prints one JSON object last:
``{"p50_ms", "p99_ms", "missed_ticks", "duration_s", ..., "host_cpu"}``; ``host_cpu`` has the
machine's vCPU steal over the flight and the p99 and late ticks of the 10-s windows with and
without steal, so a figure the hypervisor caused can be told from one the stack caused.

``host_stalls`` (from the report) goes further: ``vnd fly`` runs a SCHED_FIFO 99 probe pinned
to each CPU (``vnd_core.flight.hoststall``) that records every wake-up the host delayed by 1 ms
or more, and puts each policy tick later than 1.5 periods (the policy's missed-tick rule, from
the command publication times) against them: ``late_ticks_with_host_stall`` are those during
which one CPU lost at least half as much time to such stalls as the tick was late,
``late_ticks_without_host_stall`` are the stack's to explain. Each late tick also carries the
longest gap of the odometry it answers (a late input points upstream). The policy's log breaks
each late tick down by its thread's scheduling (ran, waited for a CPU, off-CPU).
``--no-host-probe`` flies without the probe.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SCENARIO = """name: latency_endurance
description: figure-eight, wind switching every 30 s so the learner keeps updating
duration_s: {duration}
reference: {{kind: figure8, center_m: [0.0, 0.0, 1.2], amplitude_m: 1.2, period_s: 6.0}}
phases:
{phases}
events:
{events}
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
    return SCENARIO.format(duration=duration_s, phases="\n".join(phases), events="\n".join(events))


def main() -> int:
    """Fly, read report.json, print the JSON figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=300.0, help="flight seconds")
    parser.add_argument("--out", type=Path, help="run folder (default: a temporary one)")
    parser.add_argument(
        "--no-host-probe", action="store_true", help="fly without the host stall probe"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vnd_latency_") as tmp:
        scenario = Path(tmp) / "latency_endurance.yaml"
        scenario.write_text(scenario_yaml(args.duration))
        out = args.out or Path(tmp) / "run"
        command = [
            sys.executable, "-m", "vnd_ros.cli", "fly", "--scenario", str(scenario),
            "--out", str(out), "--timeout", str(args.duration + 180.0),
        ]  # fmt: skip
        if args.no_host_probe:
            command.append("--no-host-probe")
        # A failed stack process (say the learner) still leaves a report: read it and say so.
        flown = subprocess.run(command, stdout=subprocess.DEVNULL)
        report_path = out / "report.json"
        if not report_path.exists():
            print(f"vnd fly exited {flown.returncode} without a report", file=sys.stderr)
            return 1
        report = json.loads(report_path.read_text())
    latency = report["control_latency_ms"]
    updates = report.get("model_updates") or []
    result = {
        "p50_ms": latency.get("p50"),
        "p99_ms": latency.get("p99"),
        "missed_ticks": report.get("missed_ticks"),
        "duration_s": args.duration,
        "latency_method": latency.get("method"),
        "model_updates": len(updates),
        "vnd_fly_exit_code": flown.returncode,
        "stack_failures": report.get("stack_failures") or [],
        # the host's vCPU steal and the latency split by it (vnd_core.flight.hostcpu)
        "host_cpu": report.get("host_cpu"),
        "host_stalls": report.get("host_stalls"),
    }
    print(json.dumps(result))
    return 0 if flown.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
