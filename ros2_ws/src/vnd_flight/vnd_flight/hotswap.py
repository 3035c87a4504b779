"""Live model swaps: load and validate off the control thread, swap between ticks, roll back.

Generic over the model object: the caller passes a ``loader_fn`` that loads *and* validates
(raising with a readable message on any problem) and ``version_of`` / ``identity_of`` /
``lineage_of`` functions, so this module knows nothing about bundles.

Identity and ordering. A held model is identified by ``identity_of`` (for bundles: the content
hash), not by its version number: two runs' "version 10" are different models, and the number
is only the label operators use. Ordering is decided per source:

- learner models are ordered among themselves, per lineage (``lineage_of``: the learner run a
  bundle descends from): one is accepted only when its version is above every version accepted
  from the learner for the same lineage (a re-delivered or older learner model is refused; a
  learner starting a new lineage starts a new count);
- operator loads are always considered and never raise the learner's bar: loading another
  run's v0010 does not make the learner's v0005 "old".

A learner model that arrives while an operator-loaded model is active takes over (pin to keep
the operator's choice). Threading contract: :meth:`ModelSwapper.submit` may be called from
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

from vnd_flight.realtime import leave_realtime

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
    key: str = ""  # identity of the model
    lineage: str = ""  # lineage of the model


class ModelSwapper(Generic[T]):
    """Holds the active model, the previous one (for rollback) and a small registry of loaded
    versions; loads new ones on a background worker thread."""

    def __init__(
        self,
        version_of: Callable[[T], int],
        registry_size: int = 4,
        max_pending: int = 4,
        name: str = "model",
        identity_of: Callable[[T], str] | None = None,
        lineage_of: Callable[[T], str] | None = None,
    ) -> None:
        """``identity_of`` defaults to the version number (models without a content identity),
        ``lineage_of`` to one shared lineage."""
        if registry_size < 2:
            raise ValueError(f"registry_size must be >= 2 (active + previous), got {registry_size}")
        self.version_of = version_of
        self.identity_of = identity_of or (lambda model: str(version_of(model)))
        self.lineage_of = lineage_of or (lambda model: "")
        self.registry_size = registry_size
        self.name = name
        self.active: T | None = None  # the model the control loop uses this tick
        self.active_key: str | None = None  # identity of the active model
        self.previous_key: str | None = None  # identity of the model a rollback restores
        self.pinned = False
        self._registry: OrderedDict[str, T] = OrderedDict()  # identity -> model, oldest first
        self._versions: dict[str, int] = {}  # identity -> version number
        self.learner_bar: dict[str, int] = {}  # lineage -> newest learner version accepted
        self._lock = threading.Lock()  # guards _pending (submit may run on any thread)
        self._pending = 0
        self._jobs: queue.Queue[_Job[T] | None] = queue.Queue(maxsize=max_pending)
        self._results: queue.Queue[_Result[T] | SwapEvent] = queue.Queue()
        self._worker = threading.Thread(target=self._work, name=f"{name}-loader", daemon=True)
        self._worker.start()

    @property
    def active_version(self) -> int | None:
        """Version number of the active model (None before the first one)."""
        return self._versions.get(self.active_key) if self.active_key is not None else None

    @property
    def previous_version(self) -> int | None:
        """Version number of the model a rollback restores (None: none)."""
        return self._versions.get(self.previous_key) if self.previous_key is not None else None

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
                version, key = int(self.version_of(model)), str(self.identity_of(model))
                result = _Result(job, model, version, None, key, str(self.lineage_of(model)))
            except Exception as err:  # any failure of a load is a rejection, not a crash
                result = _Result(job, None, None, str(err) or type(err).__name__)
            self._results.put(result)

    # ------------------------------------------------------------------ control thread

    def poll(self) -> list[SwapEvent]:
        """Apply every finished load (never waits) and return the events, oldest first."""
        events: list[SwapEvent] = []
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
        """Version numbers held and ready to activate, ascending (a number appears twice only
        while two models of that number from different runs are active and previous)."""
        return sorted(self._versions[key] for key in self._registry)

    def activate(self, version: int, request_id: str = "") -> SwapEvent:
        """Make a held ``version`` active now (operator request); of two held models with that
        number, the one not active (the most recently loaded otherwise)."""
        keys = [key for key in self._registry if self._versions[key] == version]
        if not keys:
            held = ", ".join(map(str, self.available_versions())) or "none"
            return self._event(
                request_id,
                Action.ACTIVATE,
                False,
                f"version {version} is not loaded (held: {held})",
                version,
            )
        others = [key for key in keys if key != self.active_key]
        if not others:
            return self._event(
                request_id, Action.ACTIVATE, True, f"version {version} is already active", version
            )
        self._make_active(others[-1])
        return self._event(
            request_id, Action.ACTIVATE, True, f"activated version {version}", version, changed=True
        )

    def rollback(self, request_id: str = "") -> SwapEvent:
        """Swap back to the previously active version."""
        previous = self.previous_version
        if self.previous_key is None or self.previous_key not in self._registry:
            return self._event(
                request_id, Action.ROLLBACK, False, "no previous version to roll back to", previous
            )
        self._make_active(self.previous_key)
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
        job, version, key = result.job, result.version, result.key
        if result.error is not None:
            return self._event(
                job.request_id, Action.LOAD, False, f"rejected: {result.error}", None, job.source
            )
        model = result.model
        assert model is not None and version is not None  # a load without an error has both
        if job.source == Source.LEARNER:
            if self.pinned:
                return self._pinned_refusal(job.request_id, version)
            if key == self.active_key:
                return self._event(
                    job.request_id,
                    Action.LOAD,
                    True,
                    f"version {version} is already active",
                    version,
                    job.source,
                )
            bar = self.learner_bar.get(result.lineage, 0)
            if version <= bar:
                return self._event(
                    job.request_id,
                    Action.LOAD,
                    False,
                    f"version {version} is not newer than learner version {bar} already "
                    f"accepted from {_lineage_name(result.lineage)}",
                    version,
                    job.source,
                )
            self.learner_bar[result.lineage] = version
        replaced = self._insert(key, version, model)
        if job.activate and key != self.active_key:
            self._make_active(key)
            message, changed = f"activated version {version}", True
        else:
            message, changed = f"loaded version {version}", False
        if replaced:
            message += f" (replaces the held version {version} of other content)"
        self._evict()
        return self._event(job.request_id, Action.LOAD, True, message, version, job.source, changed)

    def _insert(self, key: str, version: int, model: T) -> bool:
        """Hold ``model``; drop a held model of the same version number and other content
        unless it is active or previous (one number, one model, wherever possible). True when
        one was dropped."""
        keep = {self.active_key, self.previous_key, key}
        clashing = [k for k, v in self._versions.items() if v == version and k not in keep]
        for other in clashing:
            del self._registry[other]
            del self._versions[other]
        self._registry[key] = model
        self._versions[key] = version
        self._registry.move_to_end(key)
        return bool(clashing)

    def _make_active(self, key: str) -> None:
        """The swap itself: one reference assignment the next tick picks up."""
        self.previous_key = self.active_key
        self.active_key = key
        self.active = self._registry[key]

    def _evict(self) -> None:
        """Drop the oldest-loaded models beyond ``registry_size``, never active or previous."""
        keep = {self.active_key, self.previous_key}
        for key in list(self._registry):
            if len(self._registry) <= self.registry_size:
                break
            if key not in keep:
                del self._registry[key]
                del self._versions[key]

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


def _lineage_name(lineage: str) -> str:
    """How a lineage is named in messages."""
    return f"lineage {lineage[:12]}" if lineage else "the learner (bundles without lineage)"
