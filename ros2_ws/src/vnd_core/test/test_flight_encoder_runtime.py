"""LatentEstimator: command/odometry pairing, validity, gaps and agreement with encode()."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vnd_core.flight.encoder_runtime import NON_FINITE_ODOM, UNPAIRED_COMMAND, LatentEstimator
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import VNDModel, VNDModelConfig

PERIOD_NS = 20_000_000
C = 4


def make_model(context_len: int = C, seed: int = 0) -> VNDModel:
    torch.manual_seed(seed)
    config = VNDModelConfig(
        context_len=context_len, encoder_hidden=8, residual_hidden=(16,), decoder_hidden=(16,)
    )
    model = VNDModel(load_vehicle("agile"), config).eval()
    with torch.no_grad():  # non-trivial weights so z depends on every input
        for p in model.encoder.parameters():
            p.normal_(0.0, 0.3)
    return model


def feed(est: LatentEstimator, k: int, rng: np.random.Generator) -> bool:
    """Odometry k and the command answering it; returns whether the context advanced."""
    stamp = 10**12 + k * PERIOD_NS
    state = np.zeros(13)
    state[3] = 1.0
    state[:3], state[7:10], state[10:] = rng.normal(size=(3, 3)) * [[1.0], [1.0], [0.1]]
    est.add_odometry(stamp, state)
    action = np.array([7.0 + rng.normal(), *rng.normal(size=3)])
    return est.add_command(stamp, action)


def test_latent_equals_encode_of_the_window():
    rng = np.random.default_rng(1)
    model = make_model()
    est = LatentEstimator()
    est.set_model(model)
    valid = []
    for k in range(3 * C):
        feed(est, k, rng)
        valid.append(est.latent() is not None)
    # first command has no earlier action; then C + 1 entries make the window
    assert valid.index(True) == C + 1 and all(valid[C + 1 :])
    states, actions = est.buffer.window()
    with torch.inference_mode():
        expected = model.encode(
            torch.tensor(states, dtype=torch.float32)[None],
            torch.tensor(actions, dtype=torch.float32)[None],
        )[0].numpy()
    np.testing.assert_allclose(est.latent(), expected, atol=1e-6)


def test_gap_and_unpaired_commands_break_the_context():
    rng = np.random.default_rng(2)
    est = LatentEstimator(max_gap_ms=45.0)
    est.set_model(make_model())
    for k in range(C + 3):
        feed(est, k, rng)
    assert est.valid
    last = est.newest_stamp_ns
    assert not est.break_on_gap(last + 40_000_000)
    assert est.break_on_gap(last + 50_000_000) and not est.valid
    assert est.add_command(123, np.ones(4)) is False
    assert est.counters.totals[UNPAIRED_COMMAND] == 1
    nan_state = np.full(13, np.nan)
    assert not est.add_odometry(1, nan_state)
    assert est.counters.totals[NON_FINITE_ODOM] == 1
    for k in range(C + 10, 2 * C + 12):  # refills after the gap
        feed(est, k, rng)
    assert est.valid and est.all_counters()["gap"] == 1


@pytest.mark.parametrize("new_len", [C, C + 2])
def test_model_swap(new_len):
    rng = np.random.default_rng(3)
    est = LatentEstimator()
    est.set_model(make_model())
    for k in range(C + 3):
        feed(est, k, rng)
    est.set_model(make_model(new_len, seed=1))
    assert est.valid == (new_len == C)  # same length: the window is kept and re-encoded
    est.set_model(None)
    assert est.latent() is None


def test_command_that_overtook_its_odometry_waits_for_it():
    rng = np.random.default_rng(4)
    est = LatentEstimator()
    est.set_model(make_model())
    for k in range(3):
        feed(est, k, rng)
    stamp = 10**12 + 3 * PERIOD_NS
    assert not est.add_command(stamp, np.array([7.0, 0.0, 0.0, 0.0]))  # odometry not here yet
    assert est.add_odometry(stamp, np.eye(13)[3])  # now it is: the context advances
    assert est.newest_stamp_ns == stamp
    lost = stamp + PERIOD_NS  # its odometry is never delivered
    assert not est.add_command(lost, np.array([7.0, 0.0, 0.0, 0.0]))
    assert not est.add_odometry(lost + PERIOD_NS, np.eye(13)[3])
    assert est.counters.totals[UNPAIRED_COMMAND] == 1 and est.newest_stamp_ns == stamp
