"""Run resolved launch processes: one OS process each, output prefixed or logged, crashes
reported (and respawned where asked), shutdown forwarded as SIGINT -> SIGTERM -> SIGKILL.

Children start in their own process group: a terminal Ctrl-C then reaches only the launcher,
which forwards exactly one SIGINT per child (ros2 launch has the same single-signal contract),
and signalling the group also reaches anything a child itself started. The flip side: stop the
launcher with SIGINT or SIGTERM (or ``shutdown()``), not SIGKILL, or its children keep running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TextIO

from vnd_ros.launch.resolve import ProcessSpec, resolve_launch

# Exit statuses that mean "stopped by the signal we sent" (negative: killed by it; 128+n: a
# Python or shell process that exited with the conventional status for it).
_CLEAN_STOP_CODES = frozenset(
    {0, -signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM}
)
_LOG_TAIL_LINES = 10  # lines of a crashed process's log shown on screen


@dataclass(frozen=True)
class ProcessInfo:
    """A snapshot of one launched process."""

    name: str  # unique label from the launch file
    pid: int | None  # OS pid of the current (or last) run, None if it never started
    running: bool  # True while the process is alive
    returncode: int | None  # exit status of the last run, None while running
    starts: int  # how many times it was started (1 + respawns)
    node_name: str | None  # fully qualified node name when the launch file set one


def default_log_dir() -> Path:
    """``$ROS_LOG_DIR`` or ``~/.ros/log``, plus a per-run folder like ros2 launch uses."""
    root = Path(os.environ.get("ROS_LOG_DIR") or Path.home() / ".ros" / "log")
    return root / time.strftime(f"vnd-launch-%Y-%m-%d-%H-%M-%S-{os.getpid()}")


class _Child:
    """Book-keeping for one spec across respawns."""

    def __init__(self, spec: ProcessSpec) -> None:
        self.spec = spec
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.returncode: int | None = None
        self.respawn_at: float | None = None  # monotonic time of the pending respawn
        self.done = False  # exited for good (or never started)
        self.reader: threading.Thread | None = None
        self.log_path: Path | None = None
        self.log_offset = 0  # size of the log file when the current run started

    @property
    def running(self) -> bool:
        return self.popen is not None and self.returncode is None


class LaunchService:
    """Start, watch and stop a set of processes (what ``vnd launch`` and ``vnd fly`` use).

    Usage::

        service = LaunchService.from_file(path, {"rate_hz": "50"})
        service.start()
        code = service.wait(timeout_s=10.0)  # None while something still runs
        code = service.shutdown()  # 0 when everything ran and stopped cleanly
    """

    def __init__(
        self,
        processes: Sequence[ProcessSpec],
        *,
        log_dir: Path | None = None,
        screen: TextIO | None = None,
        report: Callable[[str, str], None] | None = None,
        sigint_timeout_s: float = 5.0,
        sigterm_timeout_s: float = 5.0,
        poll_period_s: float = 0.05,
    ) -> None:
        """``screen``: where 'screen' output goes (default stdout); ``report(level, text)``
        receives launcher events (default: ``[LEVEL] [launch]: text`` on stderr)."""
        self._children = [_Child(spec) for spec in processes]
        self._log_dir = log_dir
        self._screen = screen
        self._report_fn = report or _print_report
        self._sigint_timeout_s = sigint_timeout_s
        self._sigterm_timeout_s = sigterm_timeout_s
        self._poll_period_s = poll_period_s
        self._cond = threading.Condition()
        self._screen_lock = threading.Lock()
        self._monitor: threading.Thread | None = None
        self._shutting_down = False
        self._finished = False
        self._failures: list[str] = []

    @classmethod
    def from_file(
        cls,
        path: Path,
        launch_args: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        **kwargs: object,
    ) -> LaunchService:
        """Resolve a YAML launch file (LaunchError on any problem) into a service."""
        resolved = resolve_launch(Path(path), dict(launch_args or {}), env)
        return cls(resolved.processes, **kwargs)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ public API

    def start(self) -> None:
        """Start every process in declaration order and begin watching them."""
        with self._cond:
            if self._monitor is not None:
                raise RuntimeError("LaunchService.start() called twice")
            for child in self._children:
                self._spawn(child)
            self._monitor = threading.Thread(target=self._watch, name="vnd-launch", daemon=True)
            self._monitor.start()

    def processes(self) -> list[ProcessInfo]:
        """Name, pid and state of every process."""
        with self._cond:
            return [
                ProcessInfo(
                    name=child.spec.name,
                    pid=None if child.popen is None else child.popen.pid,
                    running=child.running,
                    returncode=child.returncode,
                    starts=child.starts,
                    node_name=child.spec.node_name,
                )
                for child in self._children
            ]

    @property
    def failures(self) -> list[str]:
        """One line per crash, failed start or unclean stop, in order of occurrence."""
        with self._cond:
            return list(self._failures)

    @property
    def log_dir(self) -> Path:
        """Folder of the 'log' and 'both' output files (created on first use)."""
        if self._log_dir is None:
            self._log_dir = default_log_dir()
        return self._log_dir

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Block until every process has exited for good; the exit code, or None on timeout."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._finished, timeout_s):
                return None
        self._join_threads()
        return self.exit_code

    @property
    def exit_code(self) -> int:
        """0 when no process failed so far, else 1."""
        with self._cond:
            return 1 if self._failures else 0

    def shutdown(self) -> int:
        """SIGINT every running process, then SIGTERM, then SIGKILL after the timeouts.

        Cancels pending respawns, reaps every child and returns the exit code.
        """
        with self._cond:
            self._shutting_down = True
            for child in self._children:
                if child.respawn_at is not None:
                    child.respawn_at, child.done = None, True
            targets = [child for child in self._children if child.running]
            self._cond.notify_all()
        escalation = (
            (signal.SIGINT, self._sigint_timeout_s),
            (signal.SIGTERM, self._sigterm_timeout_s),
            (signal.SIGKILL, self._sigterm_timeout_s),
        )
        for signum, timeout_s in escalation:
            if not self._signal_and_wait(targets, signum, timeout_s):
                break
        if self._monitor is not None:
            self._monitor.join()
        self._join_threads()
        return self.exit_code

    def __enter__(self) -> LaunchService:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ internals

    def _report(self, level: str, text: str) -> None:
        self._report_fn(level, text)

    def _fail(self, text: str) -> None:
        self._failures.append(text)
        self._report("ERROR", text)

    def _spawn(self, child: _Child) -> None:
        """Start ``child`` (lock held)."""
        spec = child.spec
        stdout: int | IO[bytes] = subprocess.PIPE
        log_file: IO[bytes] | None = None
        if spec.output in ("log", "both"):
            self.log_dir.mkdir(parents=True, exist_ok=True)
            child.log_path = self.log_dir / f"{spec.name}.log"
            log_file = child.log_path.open("ab")
            child.log_offset = log_file.tell()
            if spec.output == "log":
                stdout = log_file
        try:
            popen = subprocess.Popen(
                spec.cmd,
                env=spec.env,
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=subprocess.STDOUT,
                process_group=0,
            )
        except OSError as err:
            if log_file is not None:
                log_file.close()
            child.done = True
            self._fail(f"process '{spec.name}' could not start: {err} ({spec.where})")
            return
        child.popen, child.returncode, child.respawn_at = popen, None, None
        child.starts += 1
        self._report("INFO", f"process '{spec.name}' started with pid {popen.pid}")
        if spec.output == "log" and log_file is not None:
            log_file.close()  # the child holds its own descriptor
            log_file = None
        if popen.stdout is not None:
            child.reader = threading.Thread(
                target=self._pump, args=(spec.name, popen.stdout, log_file), daemon=True
            )
            child.reader.start()

    def _pump(self, name: str, stream: IO[bytes], log_file: IO[bytes] | None) -> None:
        """Copy a child's output to the screen, prefixed with its name (and to its log)."""
        screen = self._screen or sys.stdout
        with stream:
            for raw in iter(stream.readline, b""):
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                with self._screen_lock:
                    screen.write(f"[{name}] {text}\n")
                    screen.flush()
                if log_file is not None:
                    log_file.write(raw)
                    log_file.flush()
        if log_file is not None:
            log_file.close()

    def _watch(self) -> None:
        """Poll children: report exits, schedule and run respawns, detect the end."""
        while True:
            with self._cond:
                now = time.monotonic()
                for child in self._children:
                    self._check(child, now)
                if all(child.done for child in self._children):
                    self._finished = True
                    self._cond.notify_all()
                    return
                self._cond.notify_all()
            time.sleep(self._poll_period_s)

    def _check(self, child: _Child, now: float) -> None:
        if child.running:
            assert child.popen is not None
            code = child.popen.poll()
            if code is not None:
                child.returncode = code
                self._on_exit(child, code, now)
        elif child.respawn_at is not None and now >= child.respawn_at and not self._shutting_down:
            self._spawn(child)

    def _on_exit(self, child: _Child, code: int, now: float) -> None:
        spec = child.spec
        assert child.popen is not None
        pid = child.popen.pid
        if self._shutting_down:
            child.done = True
            if code in _CLEAN_STOP_CODES:
                self._report("INFO", f"process '{spec.name}' (pid {pid}) stopped, exit code {code}")
            else:
                self._fail(f"process '{spec.name}' (pid {pid}) stopped with exit code {code}")
            return
        if code == 0:
            self._report("INFO", f"process '{spec.name}' (pid {pid}) finished cleanly")
        else:
            tail = self._tail(child)
            self._fail(f"process '{spec.name}' (pid {pid}) died with exit code {code}{tail}")
        if spec.respawn:
            child.respawn_at = now + spec.respawn_delay_s
            self._report("INFO", f"respawning '{spec.name}' in {spec.respawn_delay_s:g} s")
        else:
            child.done = True

    def _tail(self, child: _Child) -> str:
        """Last lines of a 'log'-only child's output: the crash would be invisible otherwise."""
        if child.spec.output != "log" or child.log_path is None or not child.log_path.exists():
            return ""
        with child.log_path.open("rb") as log:
            log.seek(child.log_offset)
            text = log.read().decode("utf-8", errors="replace")
        lines = text.splitlines()[-_LOG_TAIL_LINES:]
        body = "".join(f"\n    {line}" for line in lines)
        return f"; log {child.log_path}:{body}" if body else f"; log {child.log_path}"

    def _signal_and_wait(self, targets: list[_Child], signum: int, timeout_s: float) -> bool:
        """Signal the still-running targets; False when none was left to signal."""
        with self._cond:
            alive = [child for child in targets if child.running]
            if not alive:
                return False
            name = signal.Signals(signum).name
            for child in alive:
                assert child.popen is not None
                if signum == signal.SIGKILL:
                    self._failures.append(
                        f"process '{child.spec.name}' ignored SIGINT and SIGTERM: killed"
                    )
                self._report(
                    "INFO" if signum == signal.SIGINT else "WARN",
                    f"sending {name} to '{child.spec.name}' (pid {child.popen.pid})",
                )
                _signal_group(child.popen.pid, signum)
            self._cond.wait_for(lambda: not any(child.running for child in alive), timeout_s)
        return True

    def _join_threads(self) -> None:
        for child in self._children:
            if child.reader is not None:
                child.reader.join(timeout=2.0)


def _signal_group(pid: int, signum: int) -> None:
    """Signal the child's process group (the child leads it); a vanished group is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def _print_report(level: str, text: str) -> None:
    print(f"[{level}] [launch]: {text}", file=sys.stderr, flush=True)
