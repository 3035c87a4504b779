"""ModelSwapper: off-thread loads, rejection with the reason, rollback, activate, pin."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest
from vnd_flight.hotswap import Action, ModelSwapper, Source, SwapEvent


@dataclass(frozen=True)
class FakeModel:
    """Stands in for a bundle: the swapper only needs a version."""

    version: int


def loader(version: int, delay_s: float = 0.0):
    def load() -> FakeModel:
        time.sleep(delay_s)
        return FakeModel(version)

    return load


def failing_loader(message: str):
    def load() -> FakeModel:
        raise ValueError(message)

    return load


@pytest.fixture
def swapper():
    swapper = ModelSwapper(lambda m: m.version, registry_size=3)
    yield swapper
    swapper.close()


def wait_events(swapper: ModelSwapper, n: int = 1, timeout_s: float = 5.0) -> list[SwapEvent]:
    """Poll like a 50 Hz control loop until ``n`` events came out."""
    events: list[SwapEvent] = []
    deadline = time.monotonic() + timeout_s
    while len(events) < n and time.monotonic() < deadline:
        events += swapper.poll()
        time.sleep(0.02)
    assert len(events) == n, events
    return events


def test_learner_bundle_is_loaded_off_thread_and_activated(swapper) -> None:
    main = threading.get_ident()
    seen = {}

    def load() -> FakeModel:
        seen["thread"] = threading.get_ident()
        return FakeModel(1)

    swapper.submit(load, Source.LEARNER)
    (event,) = wait_events(swapper)
    assert seen["thread"] != main
    assert event.accepted and event.changed and event.version == 1
    assert event.action == Action.LOAD and event.source == Source.LEARNER
    assert swapper.active == FakeModel(1) and swapper.active_version == 1


def test_slow_validator_does_not_block_poll(swapper) -> None:
    swapper.submit(loader(1), Source.LEARNER)
    wait_events(swapper)
    swapper.submit(loader(2, delay_s=0.5), Source.LEARNER, request_id="slow")
    worst_s = 0.0
    for _ in range(10):  # 10 ticks while the load runs
        start = time.perf_counter()
        assert swapper.poll() == []
        worst_s = max(worst_s, time.perf_counter() - start)
        assert swapper.active_version == 1  # the old model keeps flying meanwhile
        time.sleep(0.02)
    assert worst_s < 0.005
    (event,) = wait_events(swapper)
    assert event.request_id == "slow" and swapper.active_version == 2


def test_raising_validator_is_rejected_with_its_message(swapper) -> None:
    swapper.submit(loader(1), Source.LEARNER)
    wait_events(swapper)
    swapper.submit(failing_loader("weights contain NaN"), Source.OPERATOR, request_id="r7")
    (event,) = wait_events(swapper)
    assert not event.accepted and not event.changed
    assert "weights contain NaN" in event.message and event.request_id == "r7"
    assert swapper.active == FakeModel(1)
    assert swapper.available_versions() == [1]


def test_rollback_restores_the_previous_model(swapper) -> None:
    assert not swapper.rollback("r0").accepted  # nothing to roll back to yet
    for version in (1, 2):
        swapper.submit(loader(version), Source.LEARNER)
        wait_events(swapper)
    event = swapper.rollback("r1")
    assert event.accepted and event.changed and event.version == 1
    assert swapper.active == FakeModel(1) and swapper.previous_version == 2
    assert swapper.rollback("r2").version == 2  # rolling back twice returns


def test_operator_load_then_activate(swapper) -> None:
    swapper.submit(loader(1), Source.LEARNER)
    wait_events(swapper)
    swapper.submit(loader(7), Source.OPERATOR, request_id="load7")
    (event,) = wait_events(swapper)
    assert event.accepted and not event.changed and swapper.active_version == 1
    assert swapper.available_versions() == [1, 7]
    missing = swapper.activate(9, "a9")
    assert not missing.accepted and "not loaded" in missing.message
    event = swapper.activate(7, "a7")
    assert event.accepted and event.changed and swapper.active == FakeModel(7)


def test_pin_refuses_learner_but_not_operator(swapper) -> None:
    swapper.submit(loader(1), Source.LEARNER)
    wait_events(swapper)
    assert swapper.pin("p").accepted
    swapper.submit(loader(2), Source.LEARNER)
    (event,) = wait_events(swapper)
    assert not event.accepted and "pinned" in event.message and swapper.active_version == 1
    swapper.submit(loader(3), Source.OPERATOR, activate=True)
    (event,) = wait_events(swapper)
    assert event.accepted and swapper.active_version == 3
    swapper.unpin("u")
    swapper.submit(loader(4), Source.LEARNER)
    wait_events(swapper)
    assert swapper.active_version == 4


def test_pin_during_a_load_refuses_its_result(swapper) -> None:
    swapper.submit(loader(1, delay_s=0.2), Source.LEARNER)
    swapper.pin()
    (event,) = wait_events(swapper)
    assert not event.accepted and swapper.active is None


def test_stale_learner_version_is_refused(swapper) -> None:
    for version in (3, 2):
        swapper.submit(loader(version), Source.LEARNER)
    first, second = wait_events(swapper, n=2)
    assert first.accepted and not second.accepted and "not newer" in second.message
    swapper.submit(loader(3), Source.LEARNER)  # a re-delivery of the active bundle
    (again,) = wait_events(swapper)
    assert again.accepted and not again.changed


def test_registry_is_bounded_but_keeps_active_and_previous(swapper) -> None:
    for version in range(1, 7):
        swapper.submit(loader(version), Source.LEARNER)
        wait_events(swapper)
    assert swapper.available_versions() == [4, 5, 6]
    assert swapper.rollback().version == 5


def test_too_many_pending_loads_are_refused_as_busy(swapper) -> None:
    started, release = threading.Event(), threading.Event()

    def blocking() -> FakeModel:
        started.set()
        release.wait(5.0)
        return FakeModel(1)

    swapper.submit(blocking, Source.LEARNER)
    assert started.wait(5.0)  # the worker holds it; the queue is empty again
    for version in range(2, 7):  # 4 fit in the queue, the 5th does not
        swapper.submit(loader(version), Source.LEARNER, request_id=f"v{version}")
    (busy,) = swapper.poll()
    assert not busy.accepted and "busy" in busy.message and busy.request_id == "v6"
    assert swapper.pending == 5
    release.set()
    events = wait_events(swapper, n=5)
    assert swapper.pending == 0
    assert [e.version for e in events] == [1, 2, 3, 4, 5] and swapper.active_version == 5


SCHEDULING_PROBE = """
import os
from vnd_flight.hotswap import ModelSwapper
from vnd_flight.realtime import request_realtime

line = request_realtime(10)
if not line.startswith("SCHED_FIFO priority"):
    print("REFUSED", line)
    raise SystemExit(0)
swapper = ModelSwapper(lambda policy: 1)
swapper.submit(lambda: os.sched_getscheduler(0), "operator", "probe", activate=True)
while not (events := swapper.poll()):
    pass
print("CONTROL", os.sched_getscheduler(0) == os.SCHED_FIFO)
print("LOADER", swapper.active == os.SCHED_OTHER)
"""


def test_the_loader_thread_of_a_real_time_process_is_not_real_time() -> None:
    """A bundle load (CPU-bound for about a second) must not hold a core at FIFO priority."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", SCHEDULING_PROBE], capture_output=True, text=True, timeout=60
    ).stdout
    if out.startswith("REFUSED"):
        pytest.skip(f"no SCHED_FIFO on this machine: {out.strip()}")
    assert "CONTROL True" in out and "LOADER True" in out, out
