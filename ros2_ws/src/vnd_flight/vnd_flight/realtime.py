"""Real-time scheduling for the control path (policy, pose filter, simulated vehicle).

On a 2-core flight computer the learner, the encoder and the tools compete with the 50 Hz
control path; under the default scheduler a tick can wait several milliseconds for a core.
SCHED_FIFO makes the control path preempt them (as ros2_control does for its loop). It needs
CAP_SYS_NICE (root or ``ulimit -r``); without it the node logs why and runs as before.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def request_realtime(priority: int) -> str:
    """Put every thread of this process (and threads started later by the caller) under
    SCHED_FIFO at ``priority`` (1-99; 0 leaves scheduling alone). Returns a log line."""
    if priority <= 0:
        return "normal scheduling (realtime_priority 0)"
    if not 1 <= priority <= 99:
        raise ValueError(f"realtime_priority must be 0 (off) or 1-99, got {priority}")
    param = os.sched_param(priority)
    try:
        for task in Path("/proc/self/task").iterdir():
            os.sched_setscheduler(int(task.name), os.SCHED_FIFO, param)
    except (PermissionError, OSError) as err:
        return f"SCHED_FIFO {priority} refused ({err.strerror}): normal scheduling"
    return f"SCHED_FIFO priority {priority}"


def leave_realtime() -> None:
    """Put the calling thread (only) back under the default scheduler, at nice 0.

    For the helper threads of a real-time process: a thread inherits SCHED_FIFO from the
    thread that starts it, and a CPU-bound FIFO thread (a bundle load and its smoke tests,
    about a second) holds its core against every other FIFO task of the control path until it
    blocks (measured: the policy's tick slipped to 30 ms at each learner swap). Nothing
    happens when the thread is not real-time or the change is refused.
    """
    if os.sched_getscheduler(0) not in (os.SCHED_FIFO, os.SCHED_RR):
        return
    with contextlib.suppress(OSError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # 0: this thread
