"""Bundles: round trip, and every kind of corruption or mismatch refused with a clear message."""

from __future__ import annotations

import json

import pytest
import torch
from vnd_core.bundle import (
    Bundle,
    BundleError,
    bundle_to_bytes,
    load_bundle,
    pack,
    read_metadata,
    save_bundle,
    smoke_test,
)
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.reference import ReferenceSpec, Trajectory
from vnd_core.state import hover_state
from vnd_core.vehicle import load_vehicle

SMALL = PolicyConfig(hidden=(16, 16))


@pytest.fixture(scope="module")
def bundle() -> Bundle:
    torch.manual_seed(0)
    policy = PolicyNet(load_vehicle("agile"), SMALL)
    return Bundle(3, 2, policy, policy.vehicle, summary={"note": "test"})


@pytest.fixture(scope="module")
def data(bundle) -> bytes:
    return bundle_to_bytes(bundle)


def actions_of(policy: PolicyNet) -> torch.Tensor:
    gen = torch.Generator().manual_seed(5)
    state = hover_state((16,)) + 0.2 * torch.randn(16, 13, generator=gen)
    with torch.no_grad():
        return policy(
            policy.observation.build_from(
                state,
                Trajectory.from_spec(ReferenceSpec(kind="circle"), 16),
                torch.rand(16, generator=gen),
                policy.action_offset.expand(16, 2, 4),
                torch.randn(16, policy.latent_dim, generator=gen),
            )
        )


def parts(data: bytes) -> tuple[dict, dict]:
    import safetensors.torch

    return dict(safetensors.torch.load(data)), read_metadata(data)


def test_save_load_gives_identical_actions(bundle, tmp_path):
    path = save_bundle(bundle, tmp_path / "b.safetensors")
    loaded = load_bundle(path)
    assert torch.equal(actions_of(loaded.policy), actions_of(bundle.policy))
    assert (loaded.version, loaded.parent_version) == (3, 2)
    assert loaded.summary == {"note": "test"}
    assert loaded.vehicle == bundle.vehicle
    assert loaded.sha256 == bundle.sha256 and len(loaded.sha256) == 64
    assert torch.equal(loaded.policy.normalizer.std, bundle.policy.normalizer.std)


def test_metadata_fields(data):
    meta = read_metadata(data)
    for key in ("format_version", "version", "parent_version", "created_utc", "vehicle"):
        assert key in meta
    assert meta["architecture"]["policy"]["config"]["hidden"] == [16, 16]
    assert meta["architecture"]["policy"]["observation_layout"][0] == ["pos_error", 3]


def test_flipped_byte_in_weights_refused(data):
    corrupt = bytearray(data)
    corrupt[-10] ^= 0x40
    with pytest.raises(BundleError, match="sha256 mismatch"):
        load_bundle(bytes(corrupt))


def test_truncated_file_refused(data, tmp_path):
    with pytest.raises(BundleError, match=r"corrupted|truncated"):
        load_bundle(data[: len(data) - 100])
    with pytest.raises(BundleError, match="shorter than"):
        load_bundle(data[:5])
    (tmp_path / "half").write_bytes(data[: len(data) // 2])
    with pytest.raises(BundleError):
        load_bundle(tmp_path / "half")


def test_missing_file_named(tmp_path):
    with pytest.raises(BundleError, match="cannot read"):
        load_bundle(tmp_path / "nope.safetensors")


def test_wrong_sha_refused(data):
    import safetensors.torch

    tensors, meta = parts(data)
    meta["sha256"] = "0" * 64
    edited = safetensors.torch.save(tensors, metadata={"vnd_bundle": json.dumps(meta)})
    with pytest.raises(BundleError, match="sha256 mismatch"):
        load_bundle(edited)


def test_missing_tensor_refused(data):
    tensors, meta = parts(data)
    del tensors["policy.net.2.weight"]
    with pytest.raises(BundleError, match=r"missing tensor 'policy\.net\.2\.weight'"):
        load_bundle(pack(tensors, meta))


def test_extra_tensor_refused(data):
    tensors, meta = parts(data)
    tensors["policy.sneaky"] = torch.zeros(3)
    with pytest.raises(BundleError, match=r"unexpected tensor 'policy\.sneaky'"):
        load_bundle(pack(tensors, meta))


def test_wrong_shape_refused(data):
    tensors, meta = parts(data)
    tensors["policy.net.0.bias"] = torch.zeros(17)
    with pytest.raises(BundleError, match=r"'policy.net.0.bias' has shape \[17\]"):
        load_bundle(pack(tensors, meta))


def test_wrong_dtype_refused(data):
    tensors, meta = parts(data)
    tensors["policy.net.0.bias"] = tensors["policy.net.0.bias"].double()
    with pytest.raises(BundleError, match="dtype"):
        load_bundle(pack(tensors, meta))


def test_non_finite_weight_refused(data):
    tensors, meta = parts(data)
    tensors["policy.net.0.weight"] = tensors["policy.net.0.weight"].clone()
    tensors["policy.net.0.weight"][0, 0] = float("nan")
    with pytest.raises(BundleError, match="non-finite"):
        load_bundle(pack(tensors, meta))


def test_unknown_format_version_refused(data):
    tensors, meta = parts(data)
    meta["format_version"] = 99
    with pytest.raises(BundleError, match="unsupported bundle format_version 99"):
        load_bundle(pack(tensors, meta))


def test_missing_field_and_bad_architecture_refused(data):
    tensors, meta = parts(data)
    no_version = {k: v for k, v in meta.items() if k != "version"}
    with pytest.raises(BundleError, match="missing field 'version'"):
        load_bundle(pack(tensors, no_version))
    meta["architecture"]["policy"]["config"]["hidden"] = [32, 16]
    with pytest.raises(BundleError, match=r"'policy.net.0.weight' has shape \[16, \d+\]"):
        load_bundle(pack(tensors, meta))
    meta["architecture"]["policy"]["config"]["bogus"] = 1
    with pytest.raises(BundleError, match="cannot be rebuilt"):
        load_bundle(pack(tensors, meta))


def test_bad_vehicle_refused(data):
    tensors, meta = parts(data)
    meta["vehicle"]["mass_kg"] = -1.0
    with pytest.raises(BundleError, match="mass_kg"):
        load_bundle(pack(tensors, meta))


def test_not_a_bundle_refused():
    import safetensors.torch

    plain = safetensors.torch.save({"x": torch.zeros(2)})
    with pytest.raises(BundleError, match="not a VND bundle"):
        load_bundle(plain)


def test_smoke_test_passes_and_enforces_budget(bundle):
    report = smoke_test(bundle, budget_us=100_000.0)
    assert 0 < report["median_us"] <= report["max_us"]
    with pytest.raises(BundleError, match="budget"):
        smoke_test(bundle, budget_us=0.001)


def test_model_component_round_trip():
    from vnd_core.vnd.model import VNDModel, VNDModelConfig

    torch.manual_seed(1)
    vehicle = load_vehicle("agile")
    model = VNDModel(vehicle, VNDModelConfig(latent_dim=8))
    policy = PolicyNet(vehicle, SMALL)
    loaded = load_bundle(bundle_to_bytes(Bundle(2, 1, policy, vehicle, model=model)))
    assert isinstance(loaded.model, VNDModel)
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], value), name
    assert read_metadata(bundle_to_bytes(loaded))["architecture"]["model"] == model.architecture()
    assert smoke_test(loaded, budget_us=100_000.0)["median_us"] > 0
