"""The node's side of the learner worker: start it, feed it, collect its frames, notice its end.

Everything here is non-blocking for the caller: frames to the worker go through a sender
thread (a worker busy in an update cannot stall a callback on a full pipe), frames from it are
read by a reader thread into a queue that :meth:`WorkerClient.poll` drains. When the process
ends, ``poll`` returns one synthetic ``exited`` frame with its return code.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import threading
from dataclasses import dataclass

from vnd_core.learner.records import TickRecords
from vnd_flight.learner_store.ipc import Frame, FrameError, encode_frame, read_frame

_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
STOP_TIMEOUT_S = 3.0  # wait for a clean worker exit before killing it [s]


@dataclass(frozen=True)
class WorkerSpec:
    """How to start a worker."""

    vehicle: str  # vehicle name or YAML path
    bundle_path: str  # active bundle file the learner continues from
    config_path: str  # LearnerConfig file (vnd_core.learner.settings.write_config_file)
    niceness: int = 10  # nice increment of the worker process


class WorkerClient:
    """One worker process (start it again with :meth:`start` after it ended)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self._proc: subprocess.Popen | None = None
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self._inbox: queue.Queue[Frame] = queue.Queue()
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Spawn the worker process and its pipe threads."""
        if self.running:
            raise RuntimeError("learner worker already running")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.update({name: "1" for name in _THREAD_ENV})  # torch and BLAS: one thread each
        command = [
            sys.executable,
            "-m",
            "vnd_learner.worker",
            "--vehicle",
            self.spec.vehicle,
            "--bundle",
            self.spec.bundle_path,
            "--config",
            self.spec.config_path,
            "--nice",
            str(self.spec.niceness),
        ]
        self._stopping = False
        self._outbox = queue.Queue()
        self._proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        proc, outbox, inbox = self._proc, self._outbox, self._inbox
        threading.Thread(
            target=_send_loop, args=(proc, outbox), name="vnd-worker-send", daemon=True
        ).start()
        threading.Thread(
            target=_receive_loop, args=(proc, inbox), name="vnd-worker-receive", daemon=True
        ).start()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Ask the worker to stop, kill it after ``timeout_s``; its return code (None if none)."""
        proc = self._proc
        if proc is None:
            return None
        self._stopping = True
        if proc.poll() is None:
            self._outbox.put(encode_frame("stop"))
            self._outbox.put(None)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    @property
    def running(self) -> bool:
        """True while the worker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """Process id of the current (or last) worker."""
        return self._proc.pid if self._proc is not None else None

    # ------------------------------------------------------------------ traffic
    def send_ticks(self, records: TickRecords) -> None:
        """Queue a batch of tick records for the worker (never blocks)."""
        if len(records) and self.running:
            self._outbox.put(encode_frame("ticks", arrays=records.to_arrays()))

    def poll(self) -> list[Frame]:
        """Frames received since the last call (``exited`` last when the process ended)."""
        frames = []
        while True:
            try:
                frames.append(self._inbox.get_nowait())
            except queue.Empty:
                return frames


def _send_loop(proc: subprocess.Popen, outbox: queue.Queue) -> None:
    """Sender thread: write queued frames to the worker's stdin until None or a broken pipe."""
    assert proc.stdin is not None
    try:
        while (data := outbox.get()) is not None:
            proc.stdin.write(data)
            proc.stdin.flush()
    except (BrokenPipeError, OSError):
        pass  # the worker is gone; the receive thread reports how it ended
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()


def _receive_loop(proc: subprocess.Popen[bytes], inbox: queue.Queue) -> None:
    """Reader thread: frames from the worker's stdout; an ``exited`` frame once it ends."""
    assert proc.stdout is not None
    note = ""
    try:
        while (frame := read_frame(proc.stdout)) is not None:
            inbox.put(frame)
    except FrameError as err:
        note = f"corrupt frame from the worker: {err}"
        proc.kill()
    returncode = proc.wait()
    inbox.put(Frame("exited", {"returncode": returncode, "note": note}))
