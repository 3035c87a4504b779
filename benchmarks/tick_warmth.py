"""CPU time of the policy node's odometry-to-command callback, hot and cold.

Builds a real policy node (dds backend, shipped base bundle, figure-eight reference) in this
process and feeds it odometry messages directly, timing ``on_odom`` (odometry decode, policy,
safety filter, command and tick record built and published) with the thread's CPU clock:

- ``hot``: ticks back to back, code and data in the caches;
- ``cold``: one tick every ``--gap-ms`` of sleep, as in flight (50 Hz), where the caches have
  been taken by other work in between;
- ``rehearsed``: as ``cold``, with the node's cache-warming rehearsal run ``--lead-ms`` before
  each tick (``vnd_flight.rehearsal``).

Prints one JSON object last: {"hot_p50_us", "cold_p50_us", "rehearsed_p50_us", ... p90 ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def main() -> None:
    """Measure and print the JSON figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=300, help="timed ticks per condition")
    parser.add_argument("--gap-ms", type=float, default=20.0, help="time between cold ticks")
    parser.add_argument("--lead-ms", type=float, default=1.0, help="rehearsal lead time")
    args = parser.parse_args()
    os.environ.setdefault("VND_MIDDLEWARE", "dds")
    import torch
    from vnd_flight.msgfields import set_stamp
    from vnd_policy.policy_node import PolicyNode
    from vnd_ros.messages import get_message
    from vnd_ros.runtime import init, shutdown

    torch.set_num_threads(1)
    init(args=["tick_warmth", "--ros-args", "-p", "rehearsal_lead_s:=0.0"])
    node = PolicyNode()
    odom = get_message("nav_msgs/msg/Odometry")()
    odom.pose.pose.position.z = 1.2
    odom.pose.pose.orientation.w = 1.0
    start_ns = time.time_ns()
    count = 0

    def run(gap_s: float, lead_s: float | None) -> np.ndarray:
        nonlocal count
        cpu_ns = []
        for _ in range(args.ticks + 30):  # the first 30 settle the condition
            count += 1
            set_stamp(odom.header.stamp, start_ns + count * 20_000_000)
            if lead_s is None:
                time.sleep(gap_s)
            else:
                time.sleep(gap_s - lead_s)
                node.on_rehearse()
                time.sleep(lead_s)
            begin = time.thread_time_ns()
            node.on_odom(odom)
            cpu_ns.append(time.thread_time_ns() - begin)
        return np.asarray(cpu_ns[30:]) / 1e3

    results = {}
    for name, gap_s, lead_s in (
        ("hot", 0.0, None),
        ("cold", args.gap_ms / 1e3, None),
        ("rehearsed", args.gap_ms / 1e3, args.lead_ms / 1e3),
    ):
        us = run(gap_s, lead_s)
        results[f"{name}_p50_us"] = round(float(np.percentile(us, 50)), 1)
        results[f"{name}_p90_us"] = round(float(np.percentile(us, 90)), 1)
    results.update(ticks=args.ticks, gap_ms=args.gap_ms, lead_ms=args.lead_ms)
    node.destroy_node()
    shutdown()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
