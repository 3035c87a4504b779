"""Small run-time statistics the flight nodes report: latency percentiles, missed-tick
detection, message rates and the scheduling of the tick thread. Pure Python and
numpy, no middleware.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable

import numpy as np
from vnd_core.units import NS_PER_S


class LatencyWindow:
    """Percentiles over the last ``window`` latency samples (milliseconds)."""

    def __init__(self, window: int = 3000) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1 sample, got {window}")
        self._samples_ms: deque[float] = deque(maxlen=window)

    def add_ms(self, latency_ms: float) -> None:
        """Record one latency sample in milliseconds."""
        self._samples_ms.append(float(latency_ms))

    def add_ns(self, latency_ns: int) -> None:
        """Record one latency sample given in nanoseconds."""
        self._samples_ms.append(latency_ns * 1e-6)

    def __len__(self) -> int:
        return len(self._samples_ms)

    def percentile_ms(self, q: float) -> float:
        """The ``q``-th percentile (0-100) of the window in ms; NaN while the window is empty."""
        if not self._samples_ms:
            return float("nan")
        return float(np.percentile(np.fromiter(self._samples_ms, dtype=float), q))

    @property
    def p50_ms(self) -> float:
        """Median latency of the window in ms."""
        return self.percentile_ms(50.0)

    @property
    def p99_ms(self) -> float:
        """99th-percentile latency of the window in ms."""
        return self.percentile_ms(99.0)


class TickMonitor:
    """Counts periodic ticks and detects missed ones from a monotonic clock.

    A tick interval longer than ``overrun_factor`` periods counts as missed ticks: one for a
    late tick, and one per whole period lost beyond that (an interval of 3 periods = 2 missed).
    """

    def __init__(
        self,
        period_s: float,
        overrun_factor: float = 1.5,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        if not overrun_factor > 1:
            raise ValueError(f"overrun_factor must be > 1, got {overrun_factor}")
        self.period_ns = round(period_s * NS_PER_S)
        self.overrun_factor = overrun_factor
        self._clock_ns = clock_ns
        self._last_ns: int | None = None
        self.ticks = 0  # ticks seen
        self.missed_ticks = 0  # ticks lost to overruns
        self.max_interval_ns = 0  # longest interval between two ticks
        self.last_interval_ns = 0  # interval ending at the latest tick (0 before the second)

    def tick(self, now_ns: int | None = None) -> int:
        """Record a tick at ``now_ns`` (default: the monotonic clock); returns ticks missed
        since the previous one (0 normally)."""
        now_ns = self._clock_ns() if now_ns is None else now_ns
        missed = 0
        if self._last_ns is not None:
            interval_ns = now_ns - self._last_ns
            self.last_interval_ns = interval_ns
            self.max_interval_ns = max(self.max_interval_ns, interval_ns)
            if interval_ns > self.overrun_factor * self.period_ns:
                missed = max(1, round(interval_ns / self.period_ns) - 1)
        self._last_ns = now_ns
        self.ticks += 1
        self.missed_ticks += missed
        return missed


class RateEstimator:
    """Message rate over a sliding time window, from arrival (or stamp) times."""

    def __init__(self, window_s: float = 2.0) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_ns = round(window_s * NS_PER_S)
        self._stamps_ns: deque[int] = deque()

    def add(self, now_ns: int) -> None:
        """Record one event at ``now_ns``."""
        self._stamps_ns.append(now_ns)
        self._trim(now_ns)

    def rate_hz(self, now_ns: int | None = None) -> float:
        """Events per second over the window ending at ``now_ns`` (default: the last event);
        0.0 with fewer than two events in the window."""
        if now_ns is not None:
            self._trim(now_ns)
        if len(self._stamps_ns) < 2:
            return 0.0
        span_ns = self._stamps_ns[-1] - self._stamps_ns[0]
        return (len(self._stamps_ns) - 1) * NS_PER_S / span_ns if span_ns > 0 else 0.0

    def _trim(self, now_ns: int) -> None:
        while self._stamps_ns and now_ns - self._stamps_ns[0] > self.window_ns:
            self._stamps_ns.popleft()


SCHEDSTAT_PATH = "/proc/thread-self/schedstat"


class ThreadSchedStat:
    """CPU time and run-queue wait of the thread that created it (Linux schedstat).

    A late tick's interval splits into the time the tick thread was on a CPU, the time it was
    ready but waited for one (other tasks of its priority, or the vCPU under it taken while it
    was queued), and the rest: asleep or blocked (the GIL, a lock, I/O). Time the host takes
    from a running vCPU counts as on a CPU unless the guest accounts it as steal (measured on
    a nested VM: a tick "on a CPU" 23 ms while the host stall probe saw 16-19 ms taken).
    The file is opened once, by the thread measured; a read is one ``pread`` (a few
    microseconds). Elsewhere than Linux :meth:`read` returns None.
    """

    def __init__(self, path: str = SCHEDSTAT_PATH) -> None:
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> tuple[int, int] | None:
        """(time on CPU [ns], time waiting on a run queue [ns]) since the thread started."""
        if self._fd is None:
            return None
        try:
            fields = os.pread(self._fd, 128, 0).split()
            return int(fields[0]), int(fields[1])
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        """Release the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def late_tick_breakdown(
    interval_ns: int, before: tuple[int, int], after: tuple[int, int]
) -> dict[str, float]:
    """A late tick's interval [ms] split by :class:`ThreadSchedStat` readings taken at the
    previous tick and at this one: ``ran_ms``, ``waited_for_cpu_ms`` and ``off_cpu_ms`` (the
    rest: asleep, blocked, or its vCPU taken while running)."""
    ran = (after[0] - before[0]) / 1e6
    waited = (after[1] - before[1]) / 1e6
    interval = interval_ns / 1e6
    return {
        "interval_ms": round(interval, 2),
        "ran_ms": round(ran, 2),
        "waited_for_cpu_ms": round(waited, 2),
        "off_cpu_ms": round(max(interval - ran - waited, 0.0), 2),
    }
