"""Stand-in node process for launch tests: no middleware, only process behaviour.

Writes ``<marker-dir>/<label>.<pid>.started`` when it starts and ``.stopped`` when SIGINT or
SIGTERM ends it cleanly, prints a line per tick, and can crash on purpose after a delay.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--marker-dir", type=Path, required=True)
    parser.add_argument("--crash-after", type=float, default=-1.0, help="seconds, <0: never")
    parser.add_argument("--exit-code", type=int, default=3)
    parser.add_argument("--period", type=float, default=0.05)
    args, ros_args = parser.parse_known_args()
    stop = []
    signal.signal(signal.SIGINT, lambda signum, frame: stop.append(signum))
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    marker = args.marker_dir / f"{args.label}.{os.getpid()}"
    marker.with_name(marker.name + ".started").write_text(" ".join(ros_args) + "\n")
    print(f"{args.label} up, env VND_TEST_ENV={os.environ.get('VND_TEST_ENV', '')}", flush=True)
    start = time.monotonic()
    while not stop:
        if 0.0 <= args.crash_after <= time.monotonic() - start:
            print(f"{args.label} crashing with {args.exit_code}", flush=True)
            return args.exit_code
        time.sleep(args.period)
    marker.with_name(marker.name + ".stopped").write_text(signal.Signals(stop[0]).name + "\n")
    print(f"{args.label} stopping on {signal.Signals(stop[0]).name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
