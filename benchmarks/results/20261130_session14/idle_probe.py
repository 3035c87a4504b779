"""The stall probe on an idle machine, with and without a PM QoS request that keeps the CPUs
out of their halt state (``/dev/cpu_dma_latency`` = 0: the haltpoll cpuidle driver then
polls). Needs root for the request.

    python idle_probe.py {0|1} SECONDS      # 1: hold the request while probing

Prints the probe summary (stalls >= the probe threshold, per CPU).
"""

from __future__ import annotations

import os
import struct
import sys
import time

from vnd_core.flight.hoststall import StallProbe, probe_summary


def main() -> None:
    hold_request = sys.argv[1] == "1"
    if hold_request:  # released when this process exits
        fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
        os.write(fd, struct.pack("i", 0))
    probe = StallProbe()
    start = time.time()
    probe.start()
    time.sleep(float(sys.argv[2]))
    stalls = probe.stop()
    label = "cpu_dma_latency=0" if hold_request else "default idle"
    print(label, probe_summary(stalls, start, time.time()))


if __name__ == "__main__":
    main()
