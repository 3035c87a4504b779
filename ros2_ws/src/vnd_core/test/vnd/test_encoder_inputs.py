"""What the encoder reads of each context transition: the prior error, not how it was flown."""

import torch
from vnd_core.bundle import Bundle, bundle_to_bytes, load_bundle
from vnd_core.policy import PolicyNet
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import TransitionDataset, VNDModel, VNDModelConfig
from vnd_core.vnd.features import CONTEXT_FEATURE_DIM, INPUT_DIM, RESIDUAL_DIM
from vnd_core.vnd.fit import FitConfig, fit_vnd
from vnd_core.vnd.synthetic import two_condition_segments

torch.set_num_threads(1)
VEHICLE = load_vehicle("agile")
SMALL = dict(
    context_len=8, encoder_hidden=16, residual_hidden=(32,), decoder_hidden=(16,),
    action_delay_ticks=0,
)  # fmt: skip


def windy(model: VNDModel) -> TransitionDataset:
    """Labelled segments under +x / -y forces, the model's normalisers fitted on them."""
    segments = two_condition_segments(model.prior, (1.0, 0, 0), (0, -1.0, 0), 3, 60, seed=1)
    dataset = TransitionDataset(model.prior, segments)
    model.fit_normalizers(dataset)
    return dataset


def test_a_prior_error_encoder_ignores_how_the_vehicle_was_flown():
    torch.manual_seed(0)
    model = VNDModel(VEHICLE, VNDModelConfig(**SMALL))
    dataset = windy(model)
    assert model.encoder.input_dim == CONTEXT_FEATURE_DIM - INPUT_DIM
    assert model.decoder.feature_dim == model.encoder.input_dim
    context = dataset.context(dataset.window_starts(8, 0)[:16], 8)
    flown_otherwise = context.clone()
    flown_otherwise[..., :INPUT_DIM] += 3.0 * torch.randn(flown_otherwise[..., :INPUT_DIM].shape)
    with torch.no_grad():
        assert torch.equal(model.encoder(context), model.encoder(flown_otherwise))
        wind_changed = context.clone()
        wind_changed[..., INPUT_DIM:] += 1.0
        assert not torch.allclose(model.encoder(context), model.encoder(wind_changed))


def test_a_prior_error_encoder_fits_and_round_trips_through_a_bundle():
    torch.manual_seed(0)
    model = VNDModel(VEHICLE, VNDModelConfig(**SMALL))
    dataset = windy(model)
    fit_vnd(model, dataset, FitConfig(steps=20, batch_size=16, encode_after=False))
    policy = PolicyNet(VEHICLE)
    bundle = Bundle(version=2, parent_version=1, policy=policy, vehicle=VEHICLE, model=model)
    loaded = load_bundle(bundle_to_bytes(bundle))
    assert loaded.model.encoder.input_dim == RESIDUAL_DIM
    context = dataset.context(dataset.window_starts(8, 0)[:4], 8)
    with torch.no_grad():
        assert torch.allclose(loaded.model.encoder(context), model.encoder(context))
