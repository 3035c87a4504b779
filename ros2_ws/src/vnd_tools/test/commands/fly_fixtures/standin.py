"""Stand-ins for the nodes of a flight, to test how ``vnd fly`` judges the stack's processes.

    python standin.py sim --vehicle NS [--done-after S]
    python standin.py learner --marker-dir DIR

sim: publishes 'calm' on /NS/sim/condition (the status QoS, as vnd_sim does), then 'done' after
``--done-after`` seconds, and spins until SIGINT/SIGTERM.
learner: on its first start (no marker in DIR) kills itself with SIGKILL after 1 s, as an
operator's ``kill -9`` or the kernel's OOM killer would; started again, it idles until
SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path


def _sim(vehicle: str, done_after_s: float) -> int:
    from vnd_ros.messages import get_message
    from vnd_ros.qos import qos_profile_status
    from vnd_ros.runtime import ExternalShutdownException, Node, init, spin, try_shutdown

    init(args=[])
    node = Node("sim", namespace=f"/{vehicle}")
    string = get_message("std_msgs/msg/String")
    publisher = node.create_publisher(string, f"/{vehicle}/sim/condition", qos_profile_status)
    publisher.publish(string(data="calm"))
    start = time.monotonic()
    timer = None

    def tick() -> None:
        if time.monotonic() - start >= done_after_s:
            publisher.publish(string(data="done"))
            timer.cancel()

    timer = node.create_timer(0.1, tick)
    try:
        spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        try_shutdown()
    return 0


def _learner(marker_dir: Path) -> int:
    marker = marker_dir / "learner.started"
    if not marker.exists():
        marker.write_text(f"{os.getpid()}\n")
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=("sim", "learner"))
    parser.add_argument("--vehicle", default="vnd1")
    parser.add_argument("--done-after", type=float, default=6.0)
    parser.add_argument("--marker-dir", type=Path)
    args, _ros_args = parser.parse_known_args()
    if args.role == "sim":
        return _sim(args.vehicle, args.done_after)
    return _learner(args.marker_dir)


if __name__ == "__main__":
    sys.exit(main())
