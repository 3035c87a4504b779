"""The learner worker process: runs the continual learner away from the node's callbacks.

Started by :class:`vnd_learner.worker_client.WorkerClient` as ``python -m vnd_learner.worker``
with the vehicle, the active bundle file and the learner's configuration file (written by the
node, every LearnerConfig field typed and checked: :mod:`vnd_core.learner.settings`). It
lowers its priority (``os.nice``, and on Linux the SCHED_IDLE class: it runs only on CPU time
no flight process wants, so training never delays a control tick), runs torch on one thread,
and talks to the node over its stdin/stdout with the frames of
:mod:`vnd_flight.learner_store.ipc` (JSON header + numpy buffers, bundles as safetensors bytes;
never pickle). Stray prints cannot corrupt the
frame stream: file descriptor 1 is pointed at stderr once the frame channel has its own copy.

Frames in: ``ticks`` (TickRecords arrays), ``stop``. Frames out: ``ready``, ``progress``
(stage of an update and its fraction of the cycle), ``result`` (accepted, rejected or preempted,
``kind`` "model" for a model update or "policy" for a policy improvement round, timings,
metrics, the bundle bytes when accepted), ``error`` (fatal, then the process exits
non-zero). Tick frames that arrive during an update are ingested at its progress points while it
may still be preempted, so that a new condition can preempt it (:meth:`ContinualLearner.update`).
A closed stdin means the node is gone: the worker exits at once, even mid-update (it keeps no state
the node's replay store and registry do not hold).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import math
import os
import queue
import signal
import sys
import threading
import time
import traceback
from typing import Any, BinaryIO

from vnd_flight.learner_store.ipc import Frame, FrameError, read_frame, write_frame

EXIT_ERROR = 2  # the learner could not start or failed repeatedly
EXIT_PROTOCOL = 3  # the node sent something that is not a frame
MAX_CONSECUTIVE_FAILURES = 3  # update() exceptions in a row before the worker gives up
PROGRESS_PERIOD_S = 1.0  # shortest interval between progress frames of one stage [s]
POLL_S = 0.2  # longest wait for a frame between should_update() checks [s]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command line of the worker (set by WorkerClient)."""
    parser = argparse.ArgumentParser(prog="vnd_learner.worker", description=__doc__)
    parser.add_argument("--vehicle", required=True, help="vehicle name or YAML path")
    parser.add_argument("--bundle", required=True, help="active bundle file to learn from")
    parser.add_argument(
        "--config", required=True, help="LearnerConfig YAML file written by the learner node"
    )
    parser.add_argument("--nice", type=int, default=10, help="niceness increment")
    return parser.parse_args(argv)


class Channel:
    """The frame stream to the node (main thread only)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def send(self, kind: str, **parts: Any) -> None:
        """Write one frame; a node that is gone ends the process quietly."""
        try:
            write_frame(self._stream, kind, **parts)
        except (BrokenPipeError, OSError):
            os._exit(0)


def _read_inbox(stream: BinaryIO, inbox: queue.Queue) -> None:
    """Reader thread: frames from the node into ``inbox``; exit the process when it is gone."""
    try:
        while True:
            frame = read_frame(stream)
            if frame is None:
                os._exit(0)  # the node closed the pipe (stopped or killed)
            inbox.put(frame)
    except FrameError as err:
        print(f"learner worker: bad frame from the node: {err}", file=sys.stderr, flush=True)
        os._exit(EXIT_PROTOCOL)


def _finite_json(value: Any) -> Any:
    """``value`` with non-finite floats as None and numpy scalars as Python numbers."""
    if isinstance(value, dict):
        return {str(k): _finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_json(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)


def build_learner(args: argparse.Namespace) -> Any:
    """The ContinualLearner for the command line (imports torch)."""
    import torch
    from vnd_core.bundle import load_bundle
    from vnd_core.learner import ContinualLearner
    from vnd_core.learner.settings import read_config_file
    from vnd_core.vehicle import load_vehicle

    torch.set_num_threads(1)
    config = read_config_file(args.config)
    return ContinualLearner(load_vehicle(args.vehicle), config, load_bundle(args.bundle))


def _result_frame(result: Any, bundle_bytes: bytes | None) -> dict[str, Any]:
    bundle = getattr(result, "bundle", None)
    meta = {
        "accepted": bool(result.accepted),
        "preempted": bool(getattr(result, "preempted", False)),
        "reason": str(getattr(result, "reason", "")),
        "kind": str(getattr(result, "kind", "model")),
        "version": int(bundle.version) if bundle is not None else 0,
        "parent_version": int(bundle.parent_version) if bundle is not None else 0,
        "decided_wall_s": time.time(),
        "metrics": _finite_json(getattr(result, "metrics", {}) or {}),
    }
    for name in ("fit_s", "train_s", "validate_s", "total_s"):
        meta[name] = _finite_json(float(getattr(result, name, 0.0) or 0.0))
    blobs = {"bundle": bundle_bytes} if bundle_bytes is not None else {}
    return {"meta": meta, "blobs": blobs}


def run_update(
    learner: Any, channel: Channel, inbox: queue.Queue, held: list[Frame], improve: bool = False
) -> None:
    """One update() (or, with ``improve``, one improve() round) with progress frames, then the
    result frame. Tick frames that arrive meanwhile are ingested when the job polls; other
    frames are kept in ``held``."""
    from vnd_core.bundle import bundle_to_bytes

    last: dict[str, Any] = {"stage": "", "sent_s": 0.0}

    def progress(stage: str, fraction: float) -> None:
        # Stage changes always go out; within a stage at most one frame per PROGRESS_PERIOD_S.
        now_s = time.monotonic()
        if stage == last["stage"] and now_s - last["sent_s"] < PROGRESS_PERIOD_S:
            return
        last.update(stage=stage, sent_s=now_s)
        channel.send("progress", meta={"stage": stage, "fraction": round(float(fraction), 3)})

    def poll() -> None:
        for frame in _drain(inbox):
            if frame.kind == "ticks":
                _ingest(learner, frame)
            else:
                held.append(frame)

    job = learner.improve if improve else learner.update
    result = job(progress=progress, poll=poll)
    accepted = bool(result.accepted) and result.bundle is not None
    bundle_bytes = bundle_to_bytes(result.bundle) if accepted else None
    channel.send("result", **_result_frame(result, bundle_bytes))


def serve(learner: Any, channel: Channel, inbox: queue.Queue) -> int:
    """Main loop: ingest tick batches, update when the learner says so; returns an exit code."""
    failures = 0
    held: list[Frame] = []  # frames that arrived during an update, other than ticks
    while True:
        frames, held = held, []
        if not frames:
            with contextlib.suppress(queue.Empty):
                frames.append(inbox.get(timeout=POLL_S))
        for frame in frames + _drain(inbox):
            if frame.kind == "stop":
                return 0
            if frame.kind == "ticks":
                _ingest(learner, frame)
        # A model update first; between model updates, policy improvement rounds.
        if learner.should_update(time.monotonic()):
            improve = False
        elif learner.should_improve():
            improve = True
        else:
            continue
        try:
            run_update(learner, channel, inbox, held, improve)
            failures = 0
        except Exception as err:  # a failed update is reported; repeated failures end the worker
            failures += 1
            traceback.print_exc()
            channel.send(
                "result",
                meta={"accepted": False, "reason": f"update raised {type(err).__name__}: {err}"},
            )
            if failures >= MAX_CONSECUTIVE_FAILURES:
                return EXIT_ERROR


def _drain(inbox: queue.Queue) -> list[Frame]:
    """Every frame waiting in ``inbox`` (none: an empty list)."""
    frames: list[Frame] = []
    try:
        while True:
            frames.append(inbox.get_nowait())
    except queue.Empty:
        return frames


def _ingest(learner: Any, frame: Frame) -> None:
    from vnd_core.learner.records import TickRecords

    learner.ingest(TickRecords.from_arrays(frame.arrays))


def _enter_idle_class() -> None:
    """Switch this process (and the threads it starts later) to SCHED_IDLE where the OS has it.

    Nice 10 still takes a share of a core from a busy flight process; SCHED_IDLE takes none.
    ``benchmarks/control_latency.py`` measures the control path with the worker training.
    """
    if not hasattr(os, "SCHED_IDLE"):
        return
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError as err:  # not permitted in some containers: nice alone still applies
        print(f"vnd-worker: SCHED_IDLE unavailable ({err}); running niced only", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Worker entry point; the exit code tells the node why it ended."""
    args = parse_args(argv)
    # The node owns our lifetime (we exit when its pipe closes); a Ctrl-C sent to the whole
    # process group by a launcher must not kill us mid-write with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable(all_threads=True)  # a C-extension crash leaves its Python stacks
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.nice(args.nice)
    _enter_idle_class()
    channel = Channel(os.fdopen(os.dup(sys.stdout.fileno()), "wb"))
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints now land on stderr
    inbox: queue.Queue = queue.Queue()
    threading.Thread(
        target=_read_inbox, args=(sys.stdin.buffer, inbox), name="vnd-worker-inbox", daemon=True
    ).start()
    try:
        learner = build_learner(args)
    except Exception as err:  # reported to the node, which says so on LearnerStatus
        traceback.print_exc()
        channel.send("error", meta={"message": f"learner failed to start: {err}"})
        return EXIT_ERROR
    try:
        # Before "ready": the ticks that arrive meanwhile wait in the inbox.
        warm = learner.warm_up()
        if warm.compiled:
            print(
                f"vnd-worker: policy training compiled in {warm.wall_s:.1f} s "
                f"({warm.graphs_built} graphs)",
                file=sys.stderr,
            )
    except Exception:  # not fatal here: the first update compiles, and reports it if it fails
        traceback.print_exc()
    channel.send("ready", meta={"pid": os.getpid(), "bundle": args.bundle, "config": args.config})
    return serve(learner, channel, inbox)


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    # The inbox thread may be blocked reading stdin, which the node keeps open: a normal
    # interpreter exit then aborts on the stdin lock (SIGABRT) instead of returning ``code``.
    os._exit(code)
