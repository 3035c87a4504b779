"""Real-time census: the CPU time other real-time tasks of the machine take during a flight.

The control path runs under SCHED_FIFO (policy, pose filter and simulated vehicle at 20, the
encoder at 10). A real-time task of another process at the same or a higher priority that
computes without blocking keeps every thread of the stack off its CPU, and with two of them
on a 2-core machine the whole stack stops: the simulator misses its timer, the policy's
watchdog does not fire (its timer thread waits for a CPU), and the policy's tick thread is
seen off the CPU, not waiting for one. The host stall probe (:mod:`vnd_tools.hoststall`, at
FIFO 99) sees nothing then, because nothing delays it. Another flight's nodes or a test run's
start them (every node that asks for real time gets it from its first line of start-up).

So ``vnd fly`` also samples, every :data:`SAMPLE_PERIOD_S`, the CPU time of every real-time
thread (SCHED_FIFO or SCHED_RR, kernel threads left out) of the processes outside its own
process tree. A late tick is put against the CPU time those took around it: as a rate over
the samples that span the tick's gap, times the gap, so a task using a steady tenth of a core
does not explain a 40-ms delay and two that held both CPUs for 300 ms do. A thread that
starts between two scans counts from its start, one that turns real time counts from the
scan before; what one uses after the last scan before it exits is not counted. Linux only;
the counters come in 10-ms units (``USER_HZ``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PROC = Path("/proc")
SAMPLE_PERIOD_S = 0.2  # census period; a scan of a few hundred threads takes about 5 ms
REALTIME_POLICIES = (1, 2)  # SCHED_FIFO, SCHED_RR (the ``policy`` field of /proc/.../stat)
PF_KTHREAD = 0x00200000  # the ``flags`` bit of kernel threads
USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Fields of /proc/<pid>/task/<tid>/stat after the command, 0 = the state (field 3).
_PPID, _FLAGS, _UTIME, _STIME, _START, _RT_PRIORITY, _POLICY = 1, 6, 11, 12, 19, 37, 38


@dataclass(frozen=True)
class ThreadSample:
    """One thread as /proc shows it."""

    pid: int  # process id
    tid: int  # thread id
    ppid: int  # parent process id
    realtime: bool  # SCHED_FIFO or SCHED_RR, not a kernel thread
    priority: int  # real-time priority (0 when not real time)
    cpu_ticks: int  # user + system CPU time [USER_HZ ticks]
    start_ticks: int  # start time after boot [USER_HZ ticks]


def read_threads(proc: Path = PROC) -> list[ThreadSample]:
    """Every thread of every process (threads that end while read are skipped)."""
    out = []
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            tids = [entry.name for entry in (pid_dir / "task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            sample = _read_thread(pid_dir / "task" / tid / "stat", int(pid_dir.name), int(tid))
            if sample is not None:
                out.append(sample)
    return out


def _read_thread(path: Path, pid: int, tid: int) -> ThreadSample | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) <= _POLICY:
        return None
    kernel = bool(int(fields[_FLAGS]) & PF_KTHREAD)
    realtime = int(fields[_POLICY]) in REALTIME_POLICIES and not kernel
    return ThreadSample(
        pid=pid,
        tid=tid,
        ppid=int(fields[_PPID]),
        realtime=realtime,
        priority=int(fields[_RT_PRIORITY]) if realtime else 0,
        cpu_ticks=int(fields[_UTIME]) + int(fields[_STIME]),
        start_ticks=int(fields[_START]),
    )


def process_tree(root_pid: int, threads: list[ThreadSample]) -> set[int]:
    """``root_pid`` and every process descending from it."""
    children: dict[int, set[int]] = {}
    for thread in threads:
        children.setdefault(thread.ppid, set()).add(thread.pid)
    tree, todo = set(), [root_pid]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, set()) - tree)
    return tree


@dataclass
class RealtimeUse:
    """What the census saw: the foreign real-time CPU time over the flight."""

    wall_s: np.ndarray  # (S,) time of each sample [s]
    foreign_cpu_s: np.ndarray  # (S,) cumulative CPU time of foreign real-time threads [s]
    # per foreign process that ran real-time threads: pid, priority (highest), cpu_s, command
    processes: list[dict] = field(default_factory=list)

    def cpu_in_gap_ms(self, t0_s: float, t1_s: float) -> float:
        """Estimated foreign real-time CPU time [ms] inside (t0_s, t1_s): the rate over the
        samples that span the gap, times the gap's length."""
        if len(self.wall_s) < 2:
            return 0.0
        lo = max(int(np.searchsorted(self.wall_s, t0_s, side="right")) - 1, 0)
        hi = min(int(np.searchsorted(self.wall_s, t1_s, side="left")), len(self.wall_s) - 1)
        if hi <= lo:
            return 0.0
        span_s = float(self.wall_s[hi] - self.wall_s[lo])
        used_s = float(self.foreign_cpu_s[hi] - self.foreign_cpu_s[lo])
        return 1e3 * used_s / span_s * (t1_s - t0_s) if span_s > 0 else 0.0


class RealtimeCensus:
    """Samples the real-time threads outside ``root_pid``'s process tree on a thread of its
    own; :meth:`start`, then :meth:`stop` for what it saw."""

    def __init__(self, root_pid: int | None = None, period_s: float = SAMPLE_PERIOD_S) -> None:
        self.root_pid = os.getpid() if root_pid is None else root_pid
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wall_s: list[float] = []
        self._cpu_ticks: list[int] = []
        self._seen: dict[tuple[int, int], int] = {}  # (pid, tid) -> CPU ticks at the last scan
        self._scanned_ticks: float | None = None  # boot time [USER_HZ ticks] of the last scan
        self._processes: dict[int, dict] = {}
        self._error: Exception | None = None  # what ended the sampling thread early

    def start(self) -> None:
        """Start sampling (a no-op when it runs)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rt-census", daemon=True)
            self._thread.start()

    def stop(self) -> RealtimeUse:
        """Stop sampling; what it saw. Raises RuntimeError when the sampling failed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._error is not None:
            raise RuntimeError(f"real-time census failed: {self._error!r}") from self._error
        ticks = np.asarray(self._cpu_ticks, dtype=float)
        return RealtimeUse(
            wall_s=np.asarray(self._wall_s, dtype=float),
            foreign_cpu_s=ticks / USER_HZ,
            processes=sorted(self._processes.values(), key=lambda p: -p["cpu_s"]),
        )

    def _run(self) -> None:
        total = 0
        while not self._stop.is_set():
            now = time.time()
            try:
                total += self.sample()
            except Exception as error:  # reported by stop(), not lost with the thread
                self._error = error
                return
            self._wall_s.append(now)
            self._cpu_ticks.append(total)
            self._stop.wait(max(0.0, self.period_s - (time.time() - now)))

    def sample(self) -> int:
        """One scan: the CPU ticks foreign real-time threads used since the last one. A
        thread first seen counts all its time when it started after the last scan (a short
        busy task lives between two scans), none when it was running before the census."""
        previous = self._scanned_ticks
        self._scanned_ticks = time.clock_gettime(time.CLOCK_BOOTTIME) * USER_HZ
        threads = read_threads()
        ours = process_tree(self.root_pid, threads)
        used = 0
        # Every foreign thread's counter is kept, real time or not: a process turns real time
        # after its start-up, often while the census waits for a CPU its real-time threads
        # hold, and what it used since the scan that saw it start counts.
        seen, self._seen = self._seen, {}
        for thread in threads:
            if thread.pid in ours:
                continue
            key = (thread.pid, thread.tid)
            before = seen.get(key)
            self._seen[key] = thread.cpu_ticks
            if not thread.realtime:
                continue
            if before is None:
                new = previous is not None and thread.start_ticks >= previous
                before = 0 if new else thread.cpu_ticks
            delta = thread.cpu_ticks - before
            if delta <= 0:
                continue
            used += delta
            self._note_process(thread, delta)
        return used

    def _note_process(self, thread: ThreadSample, ticks: int) -> None:
        entry = self._processes.get(thread.pid)
        if entry is None:
            entry = self._processes[thread.pid] = {
                "pid": thread.pid,
                "priority": thread.priority,
                "cpu_s": 0.0,
                "command": _command(thread.pid),
            }
        entry["priority"] = max(entry["priority"], thread.priority)
        entry["cpu_s"] = round(entry["cpu_s"] + ticks / USER_HZ, 2)


def _command(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:160]


def save_use(path: Path, use: RealtimeUse) -> None:
    """Write the census as a numpy archive (no pickle): ``wall_s``, ``foreign_cpu_s`` (S,)
    and per process ``pids``, ``priorities``, ``cpu_s``, ``commands``."""
    procs = use.processes
    np.savez(
        path,
        wall_s=use.wall_s,
        foreign_cpu_s=use.foreign_cpu_s,
        pids=np.array([p["pid"] for p in procs], dtype=np.int64),
        priorities=np.array([p["priority"] for p in procs], dtype=np.int64),
        cpu_s=np.array([p["cpu_s"] for p in procs], dtype=float),
        commands=np.array([p["command"] for p in procs], dtype=str),
    )


def load_use(path: Path) -> RealtimeUse:
    """The census written by :func:`save_use`."""
    with np.load(path, allow_pickle=False) as data:
        processes = [
            {"pid": int(pid), "priority": int(prio), "cpu_s": float(cpu), "command": str(cmd)}
            for pid, prio, cpu, cmd in zip(
                data["pids"], data["priorities"], data["cpu_s"], data["commands"], strict=True
            )
        ]
        return RealtimeUse(data["wall_s"], data["foreign_cpu_s"], processes)
