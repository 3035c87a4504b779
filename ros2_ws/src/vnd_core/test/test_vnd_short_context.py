"""The fast latent at a condition change: a short context trained beside the whole window, and
the deployed latent that switches to it when the two disagree (VNDModelConfig.short_context_len).

Synthetic conditions as in test_vnd_fit: force A pushes +x, force B pushes -y (1.2 N).
"""

import dataclasses

import pytest
import torch
from vnd_core.bundle import Bundle, bundle_to_bytes, load_bundle
from vnd_core.learner import LearnerConfig
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.state import POS, VEL
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import FitConfig, TransitionDataset, VNDModel, VNDModelConfig, fit_vnd
from vnd_core.vnd.synthetic import two_condition_segments

torch.set_num_threads(1)

FORCE_A_N = (1.2, 0.0, 0.0)
FORCE_B_N = (0.0, -1.2, 0.0)
CONTEXT_LEN, SHORT_LEN = 20, 6


@pytest.fixture(scope="module")
def vehicle():
    return load_vehicle("agile")


POS_NOISE_M, VEL_NOISE_MPS = 0.001, 0.04  # measurement noise, about the pose filter's


def condition_set(vehicle, segments: int, seed: int) -> TransitionDataset:
    """Flights of both conditions, measured with noise on position and velocity: a single
    transition then tells the force only roughly (1.2 N moves the velocity by 0.03 m/s per
    tick), so the whole window averages over many."""
    prior = VNDModel(vehicle).prior
    generator = torch.Generator().manual_seed(seed + 1000)
    noisy = []
    for segment in two_condition_segments(prior, FORCE_A_N, FORCE_B_N, segments, 100, seed=seed):
        states = torch.as_tensor(segment.states).clone()
        noise = torch.randn(states.shape[0], 6, generator=generator)
        states[:, POS] += POS_NOISE_M * noise[:, :3]
        states[:, VEL] += VEL_NOISE_MPS * noise[:, 3:]
        noisy.append(dataclasses.replace(segment, states=states))
    return TransitionDataset(prior, noisy)


def fit(vehicle, short_context_len: int) -> tuple[VNDModel, object]:
    """A model fitted on about 3000 noisy ticks, and its fit report."""
    torch.manual_seed(0)
    # the option was measured (and these figures taken) with the encoder reading every feature
    # of a 20-transition window
    config = VNDModelConfig(
        action_delay_ticks=0,
        short_context_len=short_context_len,
        encoder_inputs="all",
        context_len=CONTEXT_LEN,
    )
    model = VNDModel(vehicle, config)
    report = fit_vnd(model, condition_set(vehicle, 15, seed=0), FitConfig.quick(seed=0))
    return model, report


@pytest.fixture(scope="module")
def fitted(vehicle):
    return fit(vehicle, SHORT_LEN)


@pytest.fixture(scope="module")
def test_windows(vehicle):
    """Steady windows of A and of B, and windows whose newest 2 transitions are B after 18 of
    A (a change 2 ticks ago), from fresh flights."""
    data = condition_set(vehicle, 2, seed=7)
    starts = data.window_starts(CONTEXT_LEN, 0)
    labels = data.tensors()["labels"][starts + CONTEXT_LEN - 1]
    a, b = (data.context(starts[labels == k], CONTEXT_LEN) for k in (0, 1))
    count, recent = min(len(a), len(b)), 2
    changed = torch.cat([a[:count, : CONTEXT_LEN - recent], b[:count, CONTEXT_LEN - recent :]], 1)
    return a, b, changed


def way_to_b(model: VNDModel, windows, latent: torch.Tensor) -> float:
    """Mean fraction of the way from A's mean latent to B's (``windows`` = (a, b, changed))."""
    a, b, _ = windows
    with torch.no_grad():
        z_a, z_b = model.encoder(a).mean(0), model.encoder(b).mean(0)
    return float(((latent - z_a) @ (z_b - z_a)).mean() / (z_b - z_a).square().sum())


def test_trained_on_short_contexts_the_latent_follows_a_change_sooner(
    vehicle, fitted, test_windows
):
    """Two transitions after the change: measured 0.52 of the way to B against 0.34 for a
    model fitted without short contexts (the GRU learns to weigh the newest transitions)."""
    model, _ = fitted
    plain, _ = fit(vehicle, 0)
    changed = test_windows[2]
    with torch.no_grad():
        fast = way_to_b(model, test_windows, model.deployed_latent(changed))
        slow = way_to_b(plain, test_windows, plain.deployed_latent(changed))
    assert fast > slow + 0.1, (fast, slow)


def test_within_a_condition_the_whole_window_is_flown(fitted, test_windows):
    model, report = fitted
    a, b, _ = test_windows
    assert report.short_switch_distance == pytest.approx(float(model.short_switch_distance))
    assert 0 < report.short_switch_distance < float("inf")
    with torch.no_grad():
        steady = torch.cat([a, b])
        same = (model.deployed_latent(steady) == model.encoder(steady)).all(-1)
    assert same.float().mean() > 0.95  # the switch distance is the fit data's 0.99 quantile


def test_without_a_short_context_or_a_fitted_distance_the_whole_window_is_flown(
    vehicle, fitted, test_windows
):
    _, _, changed = test_windows
    plain = VNDModel(vehicle, VNDModelConfig(action_delay_ticks=0))
    assert not hasattr(plain, "short_switch_distance")
    with torch.no_grad():
        assert torch.equal(plain.deployed_latent(changed), plain.encoder(changed))
        model = VNDModel(vehicle, VNDModelConfig(action_delay_ticks=0, short_context_len=4))
        assert torch.equal(model.deployed_latent(changed), model.encoder(changed))  # inf
        model.short_switch_distance.fill_(0.0)  # always the short window
        assert torch.equal(model.deployed_latent(changed), model.encoder(changed[:, -4:]))


def test_the_switch_distance_travels_in_the_bundle(vehicle, fitted):
    model, _ = fitted
    bundle = Bundle(
        version=2,
        parent_version=1,
        policy=PolicyNet(vehicle, PolicyConfig(latent_dim=model.latent_dim)),
        vehicle=vehicle,
        model=model,
    )
    loaded = load_bundle(bundle_to_bytes(bundle))
    assert loaded.model.config.short_context_len == SHORT_LEN
    assert float(loaded.model.short_switch_distance) == float(model.short_switch_distance)


def test_short_context_settings_are_checked():
    with pytest.raises(ValueError, match="short_context_len"):
        VNDModelConfig(context_len=10, short_context_len=10).validate()
    with pytest.raises(ValueError, match="short_context_len"):  # before the first update
        LearnerConfig(model=VNDModelConfig(short_context_len=40)).validate()
    with pytest.raises(ValueError, match="short_fraction"):
        FitConfig(short_fraction=1.0).validate()
    with pytest.raises(ValueError, match="short_switch_quantile"):
        dataclasses.replace(FitConfig(), short_switch_quantile=0.0).validate()
