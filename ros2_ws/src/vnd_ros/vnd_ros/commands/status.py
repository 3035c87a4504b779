"""``vnd status``: one table of the flight stack of a vehicle: modes, versions, rates, latency.

    vnd status [--vehicle NS] [--watch] [--spin-time S]

Reads ``vnd/node_status`` (every node's latest report; transient local, so it arrives at once)
and ``vnd/learner/status``. ``--watch`` reprints the table every second until Ctrl-C. The exit
code is 1 when no node reported within the spin time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from vnd_ros.client import MODE_NAMES, StackClient, StackSnapshot
from vnd_ros.launch.resolve import default_environment

WATCH_PERIOD_S = 1.0  # table refresh period of --watch (the nodes report at 1 Hz)
STALE_AFTER_S = 3.0  # a report older than this is marked stale (the node may be gone)
HEADER = (
    f"{'node':<18} {'mode':<8} {'version':<12} {'rate Hz':>8} {'p50 ms':>7} {'p99 ms':>7} "
    f"{'ticks':>8} {'missed':>6}  counters"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``vnd status``."""
    parser.add_argument("--vehicle", default="vnd1", help="vehicle namespace (default vnd1)")
    parser.add_argument("--watch", action="store_true", help="refresh every second until Ctrl-C")
    parser.add_argument(
        "--spin-time",
        type=float,
        default=1.5,
        metavar="S",
        help="time to collect reports before printing (default 1.5 s)",
    )


def run(args: argparse.Namespace) -> int:
    """Print the table once, or repeatedly with --watch."""
    os.environ.update(default_environment(os.environ))  # loopback unless configured
    try:
        with StackClient(args.vehicle) as client:
            snapshot = client.watch_status()
            client.spin_for(args.spin_time)
            if not snapshot.nodes and snapshot.learner is None:
                print(f"no status from vehicle '{args.vehicle}' within {args.spin_time} s")
                if not args.watch:
                    return 1
            print(format_table(snapshot, time.time_ns()), flush=True)
            while args.watch:
                client.spin_for(WATCH_PERIOD_S)
                print(f"\n{time.strftime('%H:%M:%S')}\n" + format_table(snapshot, time.time_ns()))
                sys.stdout.flush()
    except KeyboardInterrupt:
        return 0
    return 0


def format_table(snapshot: StackSnapshot, now_ns: int) -> str:
    """The node table and the learner line."""
    lines = [HEADER]
    for name in sorted(snapshot.nodes):
        h = snapshot.nodes[name]
        version = f"{h.active_version}" + (
            f" (prev {h.previous_version})" if h.previous_version else ""
        )
        version += " pin" if h.pinned else ""
        mode = MODE_NAMES.get(h.mode, str(h.mode)) if "policy" in name.rsplit("/", 1)[-1] else "-"
        stale = " STALE" if (now_ns - h.stamp_ns) / 1e9 > STALE_AFTER_S else ""
        lines.append(
            f"{name:<18} {mode:<8} {version:<12} {h.rate_hz:>8.1f} {h.latency_p50_ms:>7.2f} "
            f"{h.latency_p99_ms:>7.2f} {h.ticks:>8d} {h.missed_ticks:>6d}  "
            f"{format_counters(h.counters)}{stale}"
        )
    learner = snapshot.learner
    if learner is None:
        lines.append("learner: no status")
    else:
        lines.append(
            f"learner: {learner.state_name}, {learner.ticks_stored} ticks stored, latest version "
            f"{learner.latest_version}, updates {learner.updates_accepted} accepted / "
            f"{learner.updates_rejected} rejected, last update {learner.last_update_duration_s:.1f}"
            f" s" + (f" ({learner.message})" if learner.message else "")
        )
    return "\n".join(lines)


def format_counters(counters: dict) -> str:
    """Non-zero counters as ``name=value`` (zero counters carry no news)."""
    return " ".join(f"{key}={value}" for key, value in sorted(counters.items()) if value) or "-"
