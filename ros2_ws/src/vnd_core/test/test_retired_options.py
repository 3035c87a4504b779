"""Options this version no longer has: a bundle whose model needs one is refused at load with a
message naming the option and what to do, a bundle that holds one at the value this version
computes loads, and a learner override naming one is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import safetensors.torch
import torch
from vnd_core.bundle import Bundle, BundleError, load_bundle, pack, read_metadata, save_bundle
from vnd_core.config_io import ConfigError, apply_overrides, load_dataclass
from vnd_core.learner import LearnerConfig
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import TransitionDataset, VNDModel, VNDModelConfig
from vnd_core.vnd.fit import FitConfig, fit_vnd
from vnd_core.vnd.synthetic import two_condition_segments

torch.set_num_threads(1)
VEHICLE = load_vehicle("agile")
WHAT_TO_DO = "train a new model with this version"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A learned bundle of this version (fitted model, policy), saved as a safetensors file."""
    torch.manual_seed(0)
    config = VNDModelConfig(context_len=8, encoder_hidden=16, residual_hidden=(32,))
    model = VNDModel(VEHICLE, config)
    segments = two_condition_segments(model.prior, (1.0, 0, 0), (0, -1.0, 0), 2, 60, seed=1)
    dataset = TransitionDataset(model.prior, segments, config.action_delay_ticks)
    fit_vnd(model, dataset, FitConfig(steps=5, batch_size=16, encode_after=False))
    policy = PolicyNet(VEHICLE, PolicyConfig(hidden=(16,)))
    bundle = Bundle(version=2, parent_version=1, policy=policy, vehicle=VEHICLE, model=model)
    return save_bundle(bundle, tmp_path_factory.mktemp("bundles") / "v0002.safetensors")


def rewritten(source: Path, target: Path, edit, extra: dict | None = None) -> Path:
    """``source`` re-packed to ``target`` with ``edit(model architecture)`` applied and the
    ``extra`` tensors added; the content hash is recomputed, so only the edit differs."""
    data = source.read_bytes()
    metadata = read_metadata(data)
    edit(metadata["architecture"]["model"])
    tensors = safetensors.torch.load(data) | (extra or {})
    target.write_bytes(pack(tensors, metadata))
    return target


def test_this_versions_bundles_load_and_say_what_they_compute(saved):
    arch = read_metadata(saved.read_bytes())["architecture"]["model"]
    assert arch["encoder_inputs"] == "prior_error" and arch["short_context_len"] == 0
    loaded = load_bundle(saved)
    assert loaded.model.encoder.input_dim == 12  # the prior error's components


def test_a_short_context_bundle_is_refused_naming_the_option(saved, tmp_path):
    def short(arch: dict) -> None:
        arch["short_context_len"] = 4

    switch = {"model.short_switch_distance": torch.full((1,), 0.5)}
    path = rewritten(saved, tmp_path / "short.safetensors", short, switch)
    with pytest.raises(BundleError, match="short_context_len = 4") as refused:
        load_bundle(path)
    assert WHAT_TO_DO in str(refused.value) and "shipped base bundle" in str(refused.value)


@pytest.mark.parametrize("stored", ["all", None])
def test_an_encoder_reading_every_feature_is_refused(saved, tmp_path, stored):
    """``encoder_inputs`` "all", or absent: written before the field existed, when every
    encoder read all 28 features."""

    def every_feature(arch: dict) -> None:
        if stored is None:
            del arch["encoder_inputs"]
        else:
            arch["encoder_inputs"] = stored

    path = rewritten(saved, tmp_path / "all.safetensors", every_feature)
    with pytest.raises(BundleError, match="encoder_inputs = 'all'") as refused:
        load_bundle(path)
    assert WHAT_TO_DO in str(refused.value)


def test_a_bundle_without_the_later_retired_field_loads(saved, tmp_path):
    """Written after ``encoder_inputs`` and before ``short_context_len`` existed."""

    def older(arch: dict) -> None:
        del arch["short_context_len"]

    path = rewritten(saved, tmp_path / "older.safetensors", older)
    assert load_bundle(path).model.context_len == 8


def test_an_unknown_model_field_is_still_named_first(saved, tmp_path):
    def misspelt(arch: dict) -> None:
        del arch["encoder_inputs"]
        arch["latent_size"] = 8

    path = rewritten(saved, tmp_path / "misspelt.safetensors", misspelt)
    with pytest.raises(BundleError, match="unknown field 'latent_size'"):
        load_bundle(path)


@pytest.mark.parametrize(
    "overrides, where",
    [
        ({"latent_pathway_only": True}, "LearnerConfig has no field 'latent_pathway_only'"),
        ({"model": {"short_context_len": 8}}, "LearnerConfig.model has no field 'short_context"),
        ({"model": {"encoder_inputs": "all"}}, "LearnerConfig.model has no field 'encoder_in"),
        ({"fit": {"splice_fraction": 0.1}}, "LearnerConfig.fit has no field 'splice_fraction'"),
        ({"fit": {"short_fraction": 0.25}}, "LearnerConfig.fit has no field 'short_fraction'"),
        ({"trainer": {"switch_fraction": 0.6}}, "LearnerConfig.trainer has no field 'switch_f"),
        ({"trainer": {"switch_lag_max_s": 0.6}}, "LearnerConfig.trainer has no field 'switch_l"),
    ],
)
def test_a_learner_override_of_a_retired_option_is_refused_naming_it(overrides, where):
    """What ``vnd eval --learner-overrides`` applies its JSON with."""
    with pytest.raises(ValueError, match=where):
        apply_overrides(LearnerConfig.standard(), overrides, "LearnerConfig")


def test_a_learner_config_file_naming_a_retired_option_is_refused(tmp_path):
    """A LearnerConfig read from YAML (as the worker reads its configuration) that still sets
    a removed field."""
    path = tmp_path / "learner.yaml"
    path.write_text("trainer: {iterations: 30, switch_fraction: 0.6}\n")
    with pytest.raises(ConfigError, match="trainer: unknown field 'switch_fraction'"):
        load_dataclass(LearnerConfig, path)
