"""Options this version no longer has: a bundle whose model needs one is refused at load with a
message naming the option and what to do, a bundle that holds one at the value this version
computes loads, and a learner setting naming one is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import safetensors.torch
import torch
import yaml
from vnd_core.bundle import Bundle, BundleError, load_bundle, pack, read_metadata, save_bundle
from vnd_core.config_io import ConfigError
from vnd_core.learner import LearnerConfig
from vnd_core.learner.settings import read_config_file, with_overrides, write_config_file
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
    "name, value",
    [
        ("latent_pathway_only", True),
        ("model.short_context_len", 8),
        ("model.encoder_inputs", "all"),
        ("fit.splice_fraction", 0.1),
        ("fit.splice_max_recent", 10),
        ("fit.short_fraction", 0.25),
        ("fit.short_switch_quantile", 0.99),
        ("trainer.switch_fraction", 0.6),
        ("trainer.switch_lag_max_s", 0.6),
    ],
)
def test_a_learner_setting_of_a_retired_option_is_refused_naming_it(name, value):
    """Learner settings by dotted name, as the learner's parameters and ``vnd eval
    --learner-param`` give them."""
    with pytest.raises(ConfigError, match=f"LearnerConfig has no field '{name}'"):
        with_overrides(LearnerConfig.standard(), {name: value}, "learner parameters")


def test_a_learner_config_file_naming_a_retired_option_is_refused(tmp_path):
    """The worker's configuration file, written by an earlier version with a removed field."""
    path = write_config_file(tmp_path / "learner_config.yaml", LearnerConfig.standard(), "standard")
    document = yaml.safe_load(path.read_text())
    document["learner"]["trainer"]["switch_fraction"] = 0.0
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match="trainer: unknown field 'switch_fraction'"):
        read_config_file(path)
