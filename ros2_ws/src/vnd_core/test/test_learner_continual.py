"""End to end: the continual loop flies, learns and flies the new bundles on the true plant.

Closed loop in simulated time on ``hover_wind_large`` (a steady 5 m/s wind from t = 3 s): the
shipped base bundle flies first; then three times the learner ingests the tick records, decides
to update, updates, and the next chunk is flown with the active bundle's policy and encoder
(latent from the recent window each tick, as the encoder node computes it). Quick preset, seeded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from vnd_core.bundle import load_bundle
from vnd_core.commands.sim import shipped_bundle_path
from vnd_core.learner import ContinualLearner, LearnerConfig, SimulatedFlight
from vnd_core.scenario import load_scenario

pytestmark = pytest.mark.slow

CHUNK_S = 8.0  # flight between updates
SETTLE_TICKS = 100  # 2 s ignored at the start of each chunk (bundle swap transient)


@dataclass
class LoopRun:
    base_version: int
    base_error_m: float  # base policy, steady wind
    errors_m: list[float]  # after each update, steady part of the next chunk
    results: list  # UpdateResult of each update
    chunks: list  # FlightChunk after each update
    versions: list[int]  # active version flown in each chunk


@pytest.fixture(scope="module")
def loop_run() -> LoopRun:
    path = shipped_bundle_path()
    if not path.exists():
        pytest.skip(f"shipped base bundle {path} is not built yet")
    import torch

    torch.set_num_threads(1)
    base = load_bundle(path)
    flight = SimulatedFlight(load_scenario("hover_wind_large"), base, seed=0)
    learner = ContinualLearner(
        base.vehicle, LearnerConfig.quick(min_new_ticks=300, min_interval_s=CHUNK_S), base
    )
    first = flight.fly(CHUNK_S + 2.0)  # wind from 3 s; steady from about 5 s
    learner.ingest(first.records)
    run = LoopRun(base.version, float(np.mean(first.error_m[250:])), [], [], [], [])
    for _ in range(3):
        assert learner.should_update(flight.time_s)
        run.results.append(learner.update())
        flight.use(learner.active)
        chunk = flight.fly(CHUNK_S)
        assert learner.ingest(chunk.records) == len(chunk.records)
        run.chunks.append(chunk)
        run.versions.append(learner.active.version)
        run.errors_m.append(float(np.mean(chunk.error_m[SETTLE_TICKS:])))
    return run


def test_loop_emits_versions_and_flies_them_safely(loop_run):
    accepted = [r for r in loop_run.results if r.accepted]
    assert accepted, [r.reason for r in loop_run.results]
    for result in loop_run.results:  # every cycle ends in a bundle or a reason
        assert result.accepted == (result.bundle is not None) and (result.accepted or result.reason)
    assert loop_run.versions == sorted(loop_run.versions)
    assert loop_run.versions[-1] == loop_run.base_version + len(accepted)
    for chunk, version in zip(loop_run.chunks, loop_run.versions, strict=True):
        assert not chunk.crashed
        assert set(chunk.records.policy_version) == {version}
        if version > loop_run.base_version:  # a learned bundle: its encoder feeds the policy
            assert chunk.latent_valid[-1] and set(chunk.records.encoder_version[-10:]) == {version}
    # The gates keep new versions sane (no crash above, hovering within half a metre); they
    # do not yet guarantee they fly better than the base: see the xfail test below.
    assert max(loop_run.errors_m) < 0.5, loop_run


@pytest.mark.xfail(
    reason="known gap: quick-preset updates do not yet reduce true-plant tracking error under "
    "steady wind (learned-model cost improves, flight does not); see the learner report",
    strict=False,
)
def test_three_updates_reduce_tracking_error_under_wind(loop_run):
    assert loop_run.errors_m[-1] < 0.8 * loop_run.base_error_m, loop_run
