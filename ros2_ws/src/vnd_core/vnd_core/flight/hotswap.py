"""Live model swaps: load and validate off the control thread, swap between ticks, roll back.

Generic over the model object: the caller passes a ``loader_fn`` that loads *and* validates
(raising with a readable message on any problem) and a ``version_of`` function, so this module
knows nothing about bundles. Threading contract: :meth:`ModelSwapper.submit` may be called from
any thread; everything else (:meth:`poll`, :meth:`activate`, :meth:`rollback`, :meth:`pin`,
:meth:`unpin`, :attr:`active`) belongs to the control thread, which swaps by one reference
assignment inside :meth:`poll` between two ticks.
"""

from __future__ import annotations

import enum
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from vnd_core.flight.realtime import leave_realtime

T = TypeVar("T")


class Source(enum.StrEnum):
    """Who asked for a model."""

    LEARNER = "learner"  # a new bundle from the learner (refused while pinned)
    OPERATOR = "operator"  # an operator's checkpoint command (always considered)


class Action(enum.StrEnum):
    """What a :class:`SwapEvent` answers."""

    LOAD = "load"
    ACTIVATE = "activate"
    ROLLBACK = "rollback"
    PIN = "pin"
    UNPIN = "unpin"


@dataclass(frozen=True)
class SwapEvent:
    """Outcome of one request, to be reported on the status topic."""

    request_id: str  # the requester's id ("" for unsolicited learner bundles)
    action: Action  # what was asked
    accepted: bool  # carried out
    message: str  # what happened, or why not
    version: int | None  # model version concerned (None when unknown, e.g. the load failed)
    source: Source  # who asked
    changed: bool = False  # the active model changed with this event


@dataclass(frozen=True)
class _Job(Generic[T]):
    loader_fn: Callable[[], T]
    source: Source
    request_id: str
    activate: bool


@dataclass(frozen=True)
class _Result(Generic[T]):
    job: _Job[T]
    model: T | None
    version: int | None
    error: str | None


class ModelSwapper(Generic[T]):
    """Holds the active model, the previous one (for rollback) and a small registry of loaded
    versions; loads new ones on a background worker thread."""

    def __init__(
        self,
        version_of: Callable[[T], int],
        registry_size: int = 4,
        max_pending: int = 4,
        name: str = "model",
    ) -> None:
        if registry_size < 2:
            raise ValueError(f"registry_size must be >= 2 (active + previous), got {registry_size}")
        self.version_of = version_of
        self.registry_size = registry_size
        self.name = name
        self.active: T | None = None  # the model the control loop uses this tick
        self.active_version: int | None = None
        self.previous_version: int | None = None
        self.pinned = False
        self._registry: OrderedDict[int, T] = OrderedDict()
        self._lock = threading.Lock()  # guards _pending (submit may run on any thread)
        self._pending = 0
        self._jobs: queue.Queue[_Job[T] | None] = queue.Queue(maxsize=max_pending)
        self._results: queue.Queue[_Result[T] | SwapEvent] = queue.Queue()
        self._worker = threading.Thread(target=self._work, name=f"{name}-loader", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------ any thread

    def submit(
        self,
        loader_fn: Callable[[], T],
        source: Source,
        request_id: str = "",
        activate: bool | None = None,
    ) -> None:
        """Queue ``loader_fn`` (load + validate, raises on failure) for the worker thread.

        ``activate`` defaults to True for learner bundles and False for operator loads
        (which only make a version available). The answer comes out of a later :meth:`poll`.
        """
        source = Source(source)
        activate = source == Source.LEARNER if activate is None else activate
        if source == Source.LEARNER and self.pinned:
            self._results.put(self._pinned_refusal(request_id, None))
            return
        try:
            with self._lock:
                self._jobs.put_nowait(_Job(loader_fn, source, request_id, activate))
                self._pending += 1
        except queue.Full:
            message = f"busy: {self._jobs.maxsize} loads already pending"
            self._results.put(SwapEvent(request_id, Action.LOAD, False, message, None, source))

    @property
    def pending(self) -> int:
        """Loads queued or running whose result :meth:`poll` has not handed out yet."""
        with self._lock:
            return self._pending

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the worker after the load in progress (queued loads are dropped)."""
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        self._jobs.put(None, timeout=timeout_s)
        self._worker.join(timeout_s)

    def _work(self) -> None:
        leave_realtime()  # loads must never compete with a real-time control thread
        while (job := self._jobs.get()) is not None:
            try:
                model = job.loader_fn()
                result = _Result(job, model, int(self.version_of(model)), None)
            except Exception as err:  # any failure of a load is a rejection, not a crash
                result = _Result(job, None, None, str(err) or type(err).__name__)
            self._results.put(result)

    # ------------------------------------------------------------------ control thread

    def poll(self) -> list[SwapEvent]:
        """Apply every finished load (never waits) and return the events, oldest first."""
        events = []
        while True:
            try:
                item = self._results.get_nowait()
            except queue.Empty:
                return events
            if isinstance(item, SwapEvent):
                events.append(item)
                continue
            with self._lock:
                self._pending -= 1
            events.append(self._apply(item))

    def available_versions(self) -> list[int]:
        """Versions held and ready to activate, ascending."""
        return sorted(self._registry)

    def activate(self, version: int, request_id: str = "") -> SwapEvent:
        """Make a held ``version`` active now (operator request)."""
        if version not in self._registry:
            held = ", ".join(map(str, self.available_versions())) or "none"
            return self._event(
                request_id,
                Action.ACTIVATE,
                False,
                f"version {version} is not loaded (held: {held})",
                version,
            )
        if version == self.active_version:
            return self._event(
                request_id, Action.ACTIVATE, True, f"version {version} is already active", version
            )
        self._make_active(version)
        return self._event(
            request_id, Action.ACTIVATE, True, f"activated version {version}", version, changed=True
        )

    def rollback(self, request_id: str = "") -> SwapEvent:
        """Swap back to the previously active version."""
        previous = self.previous_version
        if previous is None or previous not in self._registry:
            return self._event(
                request_id, Action.ROLLBACK, False, "no previous version to roll back to", previous
            )
        self._make_active(previous)
        return self._event(
            request_id,
            Action.ROLLBACK,
            True,
            f"rolled back to version {previous}",
            previous,
            changed=True,
        )

    def pin(self, request_id: str = "") -> SwapEvent:
        """Refuse learner bundles until :meth:`unpin`; operator loads still work."""
        self.pinned = True
        return self._event(
            request_id,
            Action.PIN,
            True,
            f"pinned at version {self.active_version}",
            self.active_version,
        )

    def unpin(self, request_id: str = "") -> SwapEvent:
        """Accept learner bundles again."""
        self.pinned = False
        return self._event(
            request_id,
            Action.UNPIN,
            True,
            "unpinned: learner bundles are accepted",
            self.active_version,
        )

    # ------------------------------------------------------------------ internals

    def _apply(self, result: _Result[T]) -> SwapEvent:
        job, version = result.job, result.version
        if result.error is not None:
            return self._event(
                job.request_id, Action.LOAD, False, f"rejected: {result.error}", None, job.source
            )
        if job.source == Source.LEARNER:
            if self.pinned:
                return self._pinned_refusal(job.request_id, version)
            if version == self.active_version:
                return self._event(
                    job.request_id,
                    Action.LOAD,
                    True,
                    f"version {version} is already active",
                    version,
                    job.source,
                )
            if self._registry and version <= max(self._registry):
                return self._event(
                    job.request_id,
                    Action.LOAD,
                    False,
                    f"version {version} is not newer than held version {max(self._registry)}",
                    version,
                    job.source,
                )
        self._registry[version] = result.model
        self._registry.move_to_end(version)
        if job.activate and version != self.active_version:
            self._make_active(version)
            message, changed = f"activated version {version}", True
        else:
            message, changed = f"loaded version {version}", False
        self._evict()
        return self._event(job.request_id, Action.LOAD, True, message, version, job.source, changed)

    def _make_active(self, version: int) -> None:
        """The swap itself: one reference assignment the next tick picks up."""
        self.previous_version = self.active_version
        self.active_version = version
        self.active = self._registry[version]

    def _evict(self) -> None:
        """Drop the oldest-loaded versions beyond ``registry_size``, never active or previous."""
        keep = {self.active_version, self.previous_version}
        for version in list(self._registry):
            if len(self._registry) <= self.registry_size:
                break
            if version not in keep:
                del self._registry[version]

    def _pinned_refusal(self, request_id: str, version: int | None) -> SwapEvent:
        return self._event(
            request_id,
            Action.LOAD,
            False,
            f"pinned at version {self.active_version}: learner bundles are refused until unpin",
            version,
            Source.LEARNER,
        )

    @staticmethod
    def _event(
        request_id: str,
        action: Action,
        accepted: bool,
        message: str,
        version: int | None,
        source: Source = Source.OPERATOR,
        changed: bool = False,
    ) -> SwapEvent:
        return SwapEvent(request_id, action, accepted, message, version, source, changed)
