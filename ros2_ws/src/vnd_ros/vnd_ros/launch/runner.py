"""Run resolved launch processes: one OS process each, output prefixed or logged, crashes
reported (and respawned where asked), shutdown forwarded as SIGINT -> SIGTERM -> SIGKILL.

Failure semantics follow ros2 launch: a process with ``on_exit: shutdown`` (``required``) ends
the whole launch when it exits, with the reason and a non-zero exit code unless it exited 0;
``respawn_max_retries`` bounds the respawns of a process. One rule is ours: a process that
dies within ``RespawnPolicy.startup_window_s`` of starting is respawned with a doubling delay
and given up after ``startup_failure_limit`` such deaths in a row, because a fatal start-up
error (a bad vehicle file, a broken install) does not heal by retrying, and a crash loop hides
the first error under its repetitions. ros2 launch, without respawn_max_retries, retries forever.

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
from pathlib import Path
from typing import IO, TextIO

from vnd_ros.launch.processes import LaunchEvent, ProcessInfo, RespawnPolicy, default_log_dir
from vnd_ros.launch.resolve import ProcessSpec, resolve_launch

# Exit statuses that mean "stopped by the signal we sent" (negative: killed by it; 128+n: a
# Python or shell process that exited with the conventional status for it).
_CLEAN_STOP_CODES = frozenset(
    {0, -signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM}
)
_LOG_TAIL_LINES = 10  # lines of a crashed process's log shown on screen


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
        self.started_at = 0.0  # monotonic time of the current run's start
        self.startup_failures = 0  # consecutive runs that died inside the start-up window
        self.gave_up: str | None = None  # why respawning stopped

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
        respawn_policy: RespawnPolicy | None = None,
    ) -> None:
        """``screen``: where 'screen' output goes (default stdout); ``report(level, text)``
        receives launcher events (default: ``[LEVEL] [launch]: text`` on stderr);
        ``respawn_policy``: the start-up crash budget (default ``RespawnPolicy()``)."""
        self._children = [_Child(spec) for spec in processes]
        self._policy = respawn_policy or RespawnPolicy()
        self._events: list[LaunchEvent] = []
        self._shutdown_reason: str | None = None
        self._stopper: threading.Thread | None = None
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
        self._respawned_failures: set[int] = set()  # indices in _failures followed by a respawn

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
                    required=child.spec.required,
                    respawn_pending=child.respawn_at is not None,
                    gave_up=child.gave_up,
                )
                for child in self._children
            ]

    @property
    def events(self) -> list[LaunchEvent]:
        """Exits, scheduled respawns, given-up respawns and required exits, in order."""
        with self._cond:
            return list(self._events)

    @property
    def shutdown_reason(self) -> str | None:
        """Why the launch shut itself down (a required process exited), None otherwise."""
        with self._cond:
            return self._shutdown_reason

    @property
    def failures(self) -> list[str]:
        """One line per crash, failed start or unclean stop, in order of occurrence."""
        with self._cond:
            return list(self._failures)

    @property
    def unexpected_failures(self) -> list[str]:
        """``failures`` without the crashes a respawn followed (within the budgets): what
        is left means the stack itself failed (a required exit, a respawn budget used up, a
        crash of a process that is not respawned, an unclean stop)."""
        with self._cond:
            return [
                text
                for index, text in enumerate(self._failures)
                if index not in self._respawned_failures
            ]

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
            targets = self._begin_shutdown()
        self._escalate(targets)
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

    def _begin_shutdown(self) -> list[_Child]:
        """Stop respawning; the children still running (lock held)."""
        self._shutting_down = True
        for child in self._children:
            if child.respawn_at is not None:
                child.respawn_at, child.done = None, True
        self._cond.notify_all()
        return [child for child in self._children if child.running]

    def _escalate(self, targets: list[_Child]) -> None:
        """SIGINT, then SIGTERM, then SIGKILL the targets still running after each timeout."""
        escalation = (
            (signal.SIGINT, self._sigint_timeout_s),
            (signal.SIGTERM, self._sigterm_timeout_s),
            (signal.SIGKILL, self._sigterm_timeout_s),
        )
        for signum, timeout_s in escalation:
            if not self._signal_and_wait(targets, signum, timeout_s):
                break

    def _event(self, kind: str, child: _Child, code: int | None, now: float, detail: str) -> None:
        pid = None if child.popen is None else child.popen.pid
        uptime_s = None if child.popen is None else now - child.started_at
        self._events.append(LaunchEvent(kind, child.spec.name, now, pid, code, uptime_s, detail))

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
        child.started_at = time.monotonic()
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
        uptime_s = now - child.started_at
        crash_index = None
        if code == 0:
            line = f"process '{spec.name}' (pid {pid}) finished cleanly"
            self._report("INFO", line)
        else:
            line = f"process '{spec.name}' (pid {pid}) died with exit code {code}"
            crash_index = len(self._failures)
            self._fail(line + self._tail(child))
        self._event("exit", child, code, now, line)
        if spec.required:
            self._required_exit(child, code, now)
        elif spec.respawn:
            self._schedule_respawn(child, code, uptime_s, now)
            if child.respawn_at is not None and crash_index is not None:
                self._respawned_failures.add(crash_index)
        else:
            child.done = True

    def _required_exit(self, child: _Child, code: int, now: float) -> None:
        """``on_exit: shutdown``: end the launch, off the monitor thread (lock held)."""
        child.done = True
        how = "finished cleanly" if code == 0 else f"exited with code {code}"
        reason = f"required process '{child.spec.name}' {how}: shutting the launch down"
        self._shutdown_reason = reason
        self._event("required_exit", child, code, now, reason)
        self._report("INFO" if code == 0 else "ERROR", reason)
        targets = self._begin_shutdown()
        self._stopper = threading.Thread(
            target=self._escalate, args=(targets,), name="vnd-launch-stop", daemon=True
        )
        self._stopper.start()

    def _schedule_respawn(self, child: _Child, code: int, uptime_s: float, now: float) -> None:
        """Respawn within the budgets, with a doubling delay after start-up failures."""
        spec, policy = child.spec, self._policy
        quick = uptime_s < policy.startup_window_s
        child.startup_failures = child.startup_failures + 1 if quick else 0
        respawns = child.starts - 1
        reason = None
        if 0 <= spec.respawn_max_retries <= respawns:
            reason = f"respawn_max_retries ({spec.respawn_max_retries}) used up"
        elif child.startup_failures >= policy.startup_failure_limit:
            reason = (
                f"it died within {policy.startup_window_s:g} s of starting "
                f"{child.startup_failures} times in a row"
            )
        if reason is not None:
            child.done, child.gave_up = True, reason
            line = f"not respawning '{spec.name}' again: {reason} (last exit code {code})"
            self._event("gave_up", child, code, now, line)
            self._fail(line)
            return
        delay_s = spec.respawn_delay_s
        if child.startup_failures > 1:
            base_s = max(spec.respawn_delay_s, policy.backoff_min_s)
            delay_s = min(base_s * 2.0 ** (child.startup_failures - 1), policy.backoff_max_s)
        child.respawn_at = now + delay_s
        line = f"respawning '{spec.name}' in {delay_s:g} s"
        if quick:
            line += (
                f" (start-up failure {child.startup_failures} of "
                f"{policy.startup_failure_limit}: it lived {uptime_s:.1f} s)"
            )
        self._event("respawn", child, code, now, line)
        self._report("INFO", line)

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
        if self._stopper is not None:
            self._stopper.join()
        for child in self._children:
            if child.reader is not None:
                child.reader.join(timeout=2.0)


def _signal_group(pid: int, signum: int) -> None:
    """Signal the child's process group (the child leads it); a vanished group is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def _print_report(level: str, text: str) -> None:
    print(f"[{level}] [launch]: {text}", file=sys.stderr, flush=True)
