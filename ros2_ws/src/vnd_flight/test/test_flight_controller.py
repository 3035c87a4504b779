"""PolicyController: latent gating by version, references, swaps and faults of one tick, and
the tick rehearsal (cache warming) that must leave no trace."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import transforms3d
from vnd_core.bundle import Bundle
from vnd_core.policy import PolicyConfig, PolicyNet, PolicyRunner, _attitude_columns
from vnd_core.reference import ReferenceSpec
from vnd_core.vehicle import load_vehicle
from vnd_core.wire import Mode
from vnd_flight.controller import (
    LATENT_INVALID,
    LATENT_MISMATCH,
    LATENT_STALE,
    ExternalReference,
    LatentSample,
    PolicyController,
    ReferenceRunner,
)
from vnd_flight.rehearsal import StateSnapshot
from vnd_flight.safety_config import SafetyConfig

PERIOD_NS = 20_000_000
T0_NS = 1_000_000_000_000


@pytest.fixture(scope="module")
def vehicle():
    return load_vehicle("agile")


def bundle_of(vehicle, version: int, force_dim: int = 0) -> Bundle:
    torch.manual_seed(version)
    config = PolicyConfig(hidden=(16, 16), out_gain=1.0, force_dim=force_dim)
    policy = PolicyNet(vehicle, config).eval()
    with torch.no_grad():  # a policy trained with latents reads z (a new one ignores it)
        policy.net[0].weight[:, -policy.condition_dim :].normal_(0.0, 0.5)
    return Bundle(version, 0, policy, vehicle)


def hover_state(z_m: float = 1.0) -> np.ndarray:
    state = np.zeros(13)
    state[2], state[3] = z_m, 1.0
    return state


def controller(vehicle, **reference) -> PolicyController:
    return PolicyController.create(vehicle, SafetyConfig(), ReferenceSpec(**reference))


def test_reference_runner_matches_policy_runner(vehicle):
    policy = bundle_of(vehicle, 1).policy
    spec = ReferenceSpec(kind="figure8")
    state = hover_state()
    state[7:10] = (0.3, -0.2, 0.1)
    z = np.linspace(-1, 1, 8).astype(np.float32)
    ours, theirs = ReferenceRunner(policy, spec), PolicyRunner(policy, spec)
    np.testing.assert_array_equal(ours.observe(state, 1.3, z), theirs.observe(state, 1.3, z))
    # an external sample standing still at the hover point equals the hover reference
    hover = PolicyRunner(policy, ReferenceSpec(kind="hover", center_m=(0.5, 0.0, 1.2)))
    ours.external = ExternalReference(0, np.array([0.5, 0.0, 1.2]), np.zeros(3), np.zeros(3))
    np.testing.assert_allclose(ours.observe(state, 7.0, z), hover.observe(state, 7.0, z))


def test_external_reference_is_extrapolated(vehicle):
    runner = ReferenceRunner(bundle_of(vehicle, 1).policy, ReferenceSpec())
    runner.external = ExternalReference(0, np.zeros(3), np.array([1.0, 0, 0]), np.zeros(3))
    runner.external_age_s = 0.5
    ref = runner.reference_at(0.0)
    assert ref[0, 0, 0] == pytest.approx(0.5)  # now: 0.5 s after the sample at 1 m/s
    assert ref[0, -1, 0] == pytest.approx(0.5 + runner._offsets_s[-1])


def test_latent_used_only_when_version_matches(vehicle):
    ctl = controller(vehicle)
    bundle = bundle_of(vehicle, 3)
    z = np.full(8, 0.5, dtype=np.float32)
    records = []
    latents = [
        LatentSample(T0_NS, 3, True, z),  # matching
        LatentSample(T0_NS, 2, True, z),  # another version
        LatentSample(T0_NS, 3, False, z),  # not valid
        LatentSample(T0_NS - 10**9, 3, True, z),  # stale
    ]
    for k, latent in enumerate(latents):
        now = T0_NS + k * PERIOD_NS
        records.append(ctl.tick(now, hover_state(), now, bundle, latent))
    assert records[0].z_valid and np.array_equal(records[0].z, z)
    for record in records[1:]:
        assert not record.z_valid and not record.z.any()
    assert [r.encoder_version for r in records] == [3, 2, 3, 3]
    counts = ctl.counters.totals
    assert counts[LATENT_MISMATCH] == counts[LATENT_INVALID] == counts[LATENT_STALE] == 1
    # the latent changes the action: z is really part of the observation
    again = controller(vehicle).tick(T0_NS, hover_state(), T0_NS, bundle, None)
    assert not np.allclose(again.action, records[0].action)


def test_tick_record_and_policy_mode(vehicle):
    ctl = controller(vehicle, kind="circle")
    bundle = bundle_of(vehicle, 1)
    for k in range(3):
        now = T0_NS + k * PERIOD_NS
        record = ctl.tick(now, hover_state(), now, bundle, None)
    assert record.mode == Mode.POLICY and record.policy_version == 1
    assert record.reference.shape == (9,) and record.reference[0] != 0.0  # circle: x = radius
    assert np.isfinite(record.action).all() and record.z.shape == (8,)


def test_nan_action_and_stale_odometry_fall_back(vehicle):
    ctl = controller(vehicle)
    bundle = bundle_of(vehicle, 1)
    state = hover_state()
    ctl.tick(T0_NS, state, T0_NS, bundle, None)
    broken = bundle_of(vehicle, 5)
    with torch.no_grad():
        broken.policy.net[-1].bias.fill_(float("nan"))
    ctl_nan = ctl.tick(T0_NS + PERIOD_NS, state, T0_NS + PERIOD_NS, broken, None)
    assert ctl_nan.mode == Mode.FALLBACK_HOLD and np.isfinite(ctl_nan.action).all()
    assert "action_non_finite" in ctl_nan.reasons
    fresh = controller(vehicle)
    good = bundle_of(vehicle, 2)
    fresh.tick(T0_NS, state, T0_NS, good, None)
    stale = fresh.tick(T0_NS + 6 * PERIOD_NS, state, T0_NS, good, None)  # 120 ms old
    assert stale.mode == Mode.FALLBACK_HOLD and "odom_stale" in stale.reasons


def test_swap_keeps_previous_actions(vehicle):
    ctl = controller(vehicle)
    first, second = bundle_of(vehicle, 1), bundle_of(vehicle, 2)
    ctl.tick(T0_NS, hover_state(), T0_NS, first, None)
    before = [a.copy() for a in ctl._runner.prev_actions]
    record = ctl.tick(T0_NS + PERIOD_NS, hover_state(), T0_NS + PERIOD_NS, second, None)
    assert record.policy_version == 2
    np.testing.assert_array_equal(ctl._runner.prev_actions[1], before[0])
    np.testing.assert_array_equal(ctl._runner.prev_actions[0], record.action)


def test_rearm_starts_over_like_a_restarted_node(vehicle):
    ctl = controller(vehicle, kind="circle")
    bundle = bundle_of(vehicle, 1)
    for k in range(3):
        now = T0_NS + k * PERIOD_NS
        ctl.tick(now, hover_state(), now, bundle, None)
    assert not ctl.arm(now, (hover_state(), now)).accepted  # flying: nothing restarts
    assert ctl.disarm(now).accepted
    for k in range(3, 60):  # disarmed on the floor: zero commands become the history
        now = T0_NS + k * PERIOD_NS
        assert ctl.tick(now, hover_state(0.0), now, bundle, None).mode == Mode.DISARMED
    assert not ctl._runner.prev_actions[0].any()
    assert ctl.arm(now, (hover_state(0.0), now)).accepted
    now += PERIOD_NS
    record = ctl.tick(now, hover_state(0.0), now, bundle, None)
    fresh = controller(vehicle, kind="circle").tick(now, hover_state(0.0), now, bundle, None)
    assert record.mode == fresh.mode == Mode.POLICY
    np.testing.assert_array_equal(record.reference, fresh.reference)  # reference time 0 again
    np.testing.assert_array_equal(record.action, fresh.action)  # same history: hover


def test_the_reference_waits_at_its_start_until_the_policy_flies(vehicle):
    # Odometry flows for 2 s while the vehicle stays IDLE (no bundle yet): the figure-eight
    # must start where the policy takes over, not 2 s along (about 1.6 m away).
    ctl = controller(vehicle, kind="figure8")
    for k in range(100):
        now = T0_NS + k * PERIOD_NS
        assert ctl.tick(now, hover_state(), now, None, None).mode == Mode.IDLE
    now += PERIOD_NS
    bundle = bundle_of(vehicle, 1)
    record = ctl.tick(now, hover_state(), now, bundle, None)
    fresh = controller(vehicle, kind="figure8").tick(now, hover_state(), now, bundle, None)
    assert record.mode == fresh.mode == Mode.POLICY
    np.testing.assert_array_equal(record.reference, fresh.reference)
    later = ctl.tick(now + 25 * PERIOD_NS, hover_state(), now + 25 * PERIOD_NS, bundle, None)
    assert not np.array_equal(later.reference, record.reference)  # flying: the clock runs


def test_the_policy_takes_off_on_a_reference_that_starts_at_the_vehicle(vehicle):
    # On the stand at rest at the figure-eight's start point, the scheduled reference already
    # moves at about 1.6 m/s: the policy must start on a reference at rest at the vehicle and
    # converge onto the schedule, not answer a velocity step with its largest rates.
    ctl = controller(vehicle, kind="figure8")
    bundle = bundle_of(vehicle, 1)
    now = T0_NS
    record = ctl.tick(now, hover_state(), now, None, None)
    assert record.mode == Mode.IDLE
    scheduled = record.reference
    at_rest = hover_state()
    at_rest[0:3] = scheduled[0:3]  # on the stand at the start point
    assert np.linalg.norm(scheduled[3:6]) > 1.0  # the schedule starts moving
    now += PERIOD_NS
    record = ctl.tick(now, at_rest, now, bundle, None)
    assert record.mode == Mode.POLICY
    np.testing.assert_allclose(ctl.tracked_reference[0], at_rest[0:3], atol=1e-9)
    np.testing.assert_allclose(ctl.tracked_reference[1], 0.0, atol=1e-9)  # at rest
    settle_s = 8.0 * SafetyConfig().rejoin_time_constant_s + 0.1
    follower = at_rest.copy()
    for _ in range(round(settle_s * 1e9 / PERIOD_NS)):  # a vehicle that tracks perfectly
        follower[0:3], follower[7:10] = ctl.tracked_reference[0], ctl.tracked_reference[1]
        now += PERIOD_NS
        record = ctl.tick(now, follower, now, bundle, None)
        assert record.mode == Mode.POLICY, record.reasons
    np.testing.assert_allclose(ctl.tracked_reference[0], record.reference[0:3], atol=1e-9)


# ---------------------------------------------------------------- rehearsal (cache warming)


def flight_inputs(n_ticks: int, seed: int) -> list[tuple[int, np.ndarray, int]]:
    """(now, state, stamp) per tick: a wobbling hover with a NaN sample, a stretch of stale
    odometry (fallback hold, then landing after the short hold timeout) and a fence breach."""
    rng = np.random.default_rng(seed)
    inputs, stamp = [], T0_NS
    for k in range(n_ticks):
        now = T0_NS + k * PERIOD_NS
        state = hover_state(1.0 + 0.05 * math.sin(0.3 * k))
        state[:3] += 0.02 * rng.standard_normal(3)
        state[7:10] = 0.1 * rng.standard_normal(3)
        if 60 <= k < 75:
            state[0] = 9.0  # outside the geofence
        if k == 20:
            state[5] = float("nan")
        if not 120 <= k < 260:  # odometry stops for 2.8 s: hold, then land blind
            stamp = now
        inputs.append((now, state, stamp))
    return inputs


def fly(
    vehicle, rehearse: bool, seed: int = 0, force_dim: int = 0
) -> tuple[list, dict, PolicyController]:
    config = SafetyConfig(hold_timeout_s=1.0, recovery_s=0.2)
    ctl = PolicyController.create(vehicle, config, ReferenceSpec(kind="figure8"))
    bundle = bundle_of(vehicle, 4, force_dim)
    z = np.linspace(-0.5, 0.5, 8).astype(np.float32)
    records = []
    for k, (now, state, stamp) in enumerate(flight_inputs(320, seed)):
        latent = LatentSample(now, 4, k % 7 != 0, z)
        if rehearse:  # as the node does: on the previous sample, shortly before the tick
            ctl.rehearse(now - 2_500_000, state, stamp, bundle, latent)
        records.append(ctl.tick(now, state, stamp, bundle, latent))
        ctl.after_publish()
    return records, ctl.all_counters(), ctl


@pytest.mark.parametrize("force_dim", [0, 3], ids=["z", "z_and_force"])
def test_rehearsal_changes_nothing_through_faults_hold_and_landing(vehicle, force_dim):
    plain, plain_counts, plain_ctl = fly(vehicle, rehearse=False, force_dim=force_dim)
    rehearsed, rehearsed_counts, rehearsed_ctl = fly(vehicle, rehearse=True, force_dim=force_dim)
    modes = {r.mode for r in plain}
    assert {Mode.POLICY, Mode.FALLBACK_HOLD, Mode.FALLBACK_LAND} <= modes  # the path is covered
    for a, b in zip(plain, rehearsed, strict=True):
        assert a.mode == b.mode and a.reasons == b.reasons
        np.testing.assert_array_equal(a.action, b.action)
        np.testing.assert_array_equal(a.z, b.z)
    assert plain_counts == rehearsed_counts
    prev_plain = plain_ctl._runner.prev_actions
    prev_rehearsed = rehearsed_ctl._runner.prev_actions
    for a, b in zip(prev_plain, prev_rehearsed, strict=True):
        np.testing.assert_array_equal(a, b)


def test_rehearsal_returns_the_tick_it_would_run(vehicle):
    ctl = PolicyController.create(vehicle, SafetyConfig(), ReferenceSpec(kind="circle"))
    bundle = bundle_of(vehicle, 1)
    assert ctl.rehearse(T0_NS, hover_state(), T0_NS, bundle, None) is None  # not flying it yet
    ctl.tick(T0_NS, hover_state(), T0_NS, bundle, None)
    now = T0_NS + PERIOD_NS
    rehearsed = ctl.rehearse(now, hover_state(1.1), now, bundle, None)
    real = ctl.tick(now, hover_state(1.1), now, bundle, None)
    np.testing.assert_array_equal(rehearsed.action, real.action)
    assert ctl.rehearse(now, hover_state(), now, bundle_of(vehicle, 2), None) is None  # swap


def test_snapshot_restores_nested_containers_and_removes_added_attributes():
    class Thing:
        def __init__(self):
            self.array = np.zeros(3)
            self.items = [1, 2]
            self.table = {"a": 1}

    thing = Thing()
    snapshot = StateSnapshot([thing])
    thing.array[0] = 5.0
    thing.items.append(3)
    thing.table["b"] = 2
    thing.extra = "new"
    snapshot.restore()
    assert not thing.array.any() and thing.items == [1, 2] and thing.table == {"a": 1}
    assert not hasattr(thing, "extra")
    thing.array[1] = 1.0  # the snapshot keeps its own copy: a second restore still works
    snapshot.restore()
    assert not thing.array.any()


@pytest.mark.parametrize("seed", range(5))
def test_attitude_columns_match_quat2mat(seed):
    quat = np.random.default_rng(seed).standard_normal(4) * 3.0  # not normalised
    expected = transforms3d.quaternions.quat2mat(quat / np.linalg.norm(quat))
    np.testing.assert_allclose(
        _attitude_columns(quat), np.concatenate([expected[:, 0], expected[:, 1]]), atol=1e-12
    )
    assert np.isnan(_attitude_columns(np.zeros(4))).all()


def test_a_policy_resuming_after_a_fallback_rejoins_the_reference_from_the_vehicle(vehicle):
    ctl = controller(vehicle, kind="hover", center_m=(0.0, 0.0, 1.0))
    bundle = bundle_of(vehicle, 1)
    now = T0_NS
    ctl.tick(now, hover_state(), now, bundle, None)
    now += 6 * PERIOD_NS  # odometry late: the fallback holds
    assert ctl.tick(now, hover_state(), T0_NS, bundle, None).mode == Mode.FALLBACK_HOLD
    moved = hover_state()
    moved[0] = 1.0  # odometry back, the vehicle a metre off the reference
    rng = np.random.default_rng(0)

    def sample() -> np.ndarray:  # motion capture never repeats a pose to the last bit
        noisy = moved.copy()
        noisy[2] += 1e-6 * rng.standard_normal()
        return noisy

    records = []
    for _ in range(200):
        now += PERIOD_NS
        state = sample()
        records.append(ctl.tick(now, state, now, bundle, None))
        if records[-1].mode == Mode.POLICY:
            break
    assert records[-1].mode == Mode.POLICY, [r.reasons for r in records[-3:]]
    # the first policy tick tracks a reference at the vehicle, not the 1 m step; the record
    # keeps the scheduled one (the flight report measures the error against it)
    np.testing.assert_allclose(ctl.tracked_reference[0], state[0:3], atol=1e-9)
    np.testing.assert_allclose(records[-1].reference[0:3], [0.0, 0.0, 1.0], atol=1e-9)
    settle_s = 8.0 * SafetyConfig().rejoin_time_constant_s + 0.1
    for _ in range(round(settle_s * 1e9 / PERIOD_NS)):
        now += PERIOD_NS
        record = ctl.tick(now, sample(), now, bundle, None)
    np.testing.assert_allclose(record.reference[0:3], [0.0, 0.0, 1.0], atol=1e-9)
