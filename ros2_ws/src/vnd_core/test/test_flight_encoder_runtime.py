"""LatentEstimator: command/odometry pairing, validity, gaps and agreement with encode()."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vnd_core.latent_estimator import NON_FINITE_ODOM, UNPAIRED_COMMAND, LatentEstimator
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import VNDModel, VNDModelConfig

PERIOD_NS = 20_000_000
C = 4


def make_model(context_len: int = C, seed: int = 0, delay_ticks: int = 2) -> VNDModel:
    torch.manual_seed(seed)
    config = VNDModelConfig(
        context_len=context_len,
        encoder_hidden=8,
        residual_hidden=(16,),
        decoder_hidden=(16,),
        action_delay_ticks=delay_ticks,
    )
    model = VNDModel(load_vehicle("agile"), config).eval()
    with torch.no_grad():  # non-trivial weights so z depends on every input
        for p in model.encoder.parameters():
            p.normal_(0.0, 0.3)
    return model


def draw(k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random odometry state (13,) and the command (4,) answering it."""
    state = np.zeros(13)
    state[3] = 1.0
    state[:3], state[7:10], state[10:] = rng.normal(size=(3, 3)) * [[1.0], [1.0], [0.1]]
    action = np.array([7.0 + rng.normal(), *rng.normal(size=3)])
    return state, action


def feed(est: LatentEstimator, k: int, rng: np.random.Generator) -> bool:
    """Odometry k and the command answering it; returns whether the context advanced."""
    return push(est, k, *draw(k, rng))


def push(est: LatentEstimator, k: int, state: np.ndarray, action: np.ndarray) -> bool:
    """Odometry ``state`` at tick k, then the command ``action`` answering it."""
    stamp = 10**12 + k * PERIOD_NS
    est.add_odometry(stamp, state)
    return est.add_command(stamp, action)


@pytest.mark.parametrize("delay", [0, 2])
def test_latent_equals_encode_of_the_window(delay):
    rng = np.random.default_rng(1)
    model = make_model(delay_ticks=delay)
    est = LatentEstimator()
    est.set_model(model)
    valid, states, actions = [], [], []
    for k in range(3 * C):
        state, action = draw(k, rng)
        push(est, k, state, action)
        states.append(state)
        actions.append(action)
        valid.append(est.latent() is not None)
    # first command has no earlier action, the next d transitions have no delayed action yet;
    # then C rows make the window
    assert valid.index(True) == C + 1 + delay and all(valid[C + 1 + delay :])
    n = len(states)
    window_states = np.stack(states[n - C - 1 :])  # s_{n-C-1} .. s_{n-1}
    window_actions = np.stack(actions[n - C - 1 - delay : n - 1 - delay])  # a_{t-d} of each t
    with torch.inference_mode():
        expected = model.encode(
            torch.tensor(window_states, dtype=torch.float32)[None],
            torch.tensor(window_actions, dtype=torch.float32)[None],
        )[0].numpy()
    np.testing.assert_allclose(est.latent(), expected, atol=1e-6)


def flying_estimator(rng: np.random.Generator) -> LatentEstimator:
    """An estimator with a model and a full window: C + 5 ticks fed (45-ms gap limit)."""
    est = LatentEstimator(max_gap_ms=45.0)
    est.set_model(make_model())
    for k in range(C + 5):
        feed(est, k, rng)
    assert est.valid
    return est


def test_gap_and_unpaired_commands_break_the_context():
    rng = np.random.default_rng(2)
    est = flying_estimator(rng)
    last = est.newest_stamp_ns
    assert not est.break_on_gap(last + 40_000_000)
    assert not est.break_on_gap(last + 50_000_000) and est.valid  # may be our own lateness
    assert est.break_on_gap(last + 70_000_000) and not est.valid  # still nothing new: a gap
    assert est.add_command(123, np.ones(4)) is False
    assert est.counters.totals[UNPAIRED_COMMAND] == 1
    nan_state = np.full(13, np.nan)
    assert not est.add_odometry(1, nan_state)
    assert est.counters.totals[NON_FINITE_ODOM] == 1
    for k in range(C + 10, 2 * C + 14):  # refills after the gap (C + 1 + d entries)
        feed(est, k, rng)
    assert est.valid and est.all_counters()["gap"] == 1


def test_a_late_gap_check_keeps_the_window_the_waiting_messages_continue():
    rng = np.random.default_rng(3)
    est = flying_estimator(rng)
    # the process was held up for 60 ms: its timer runs before the messages that waited
    assert not est.break_on_gap(est.newest_stamp_ns + 60_000_000)
    for k in range(C + 5, C + 8):  # ... which continue the window, 20 ms apart
        feed(est, k, rng)
        assert est.valid
    assert not est.break_on_gap(est.newest_stamp_ns + 10_000_000)
    assert "gap" not in est.all_counters()


@pytest.mark.parametrize("new_len", [C, C + 2])
def test_model_swap(new_len):
    rng = np.random.default_rng(3)
    est = LatentEstimator()
    est.set_model(make_model())
    for k in range(C + 5):
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
