"""BundleRuntime: start-up load, operator requests, learner pushes and every refusal reason."""

from __future__ import annotations

import copy
import hashlib
import time

import pytest
import torch
from vnd_core.bundle import (
    Bundle,
    BundleError,
    bundle_to_bytes,
    load_bundle,
    save_bundle,
    shipped_bundle_path,
)
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import VNDModel, VNDModelConfig
from vnd_flight.bundle_runtime import (
    ACTION_ACTIVATE,
    ACTION_ARM,
    ACTION_DISARM,
    ACTION_LIST,
    ACTION_LOAD,
    ACTION_PIN,
    ACTION_ROLLBACK,
    ACTION_UNPIN,
    BundleRuntime,
    encoder_smoke_test,
    encoder_validator,
    policy_validator,
)

SMALL_POLICY = PolicyConfig(hidden=(16, 16))
SMALL_MODEL = VNDModelConfig(
    context_len=4, encoder_hidden=8, residual_hidden=(16,), decoder_hidden=(16,)
)


SHIPPED = load_bundle(shipped_bundle_path())  # its policy is trained: it flies


def make_bundle(version: int, vehicle_name: str = "agile", latent_dim: int = 8) -> Bundle:
    """The shipped policy (it passes the behavioural check) with a small untrained model; for
    another vehicle or latent size a small untrained policy (refused before that check)."""
    torch.manual_seed(version)
    vehicle = load_vehicle(vehicle_name)
    if vehicle_name == "agile" and latent_dim == SHIPPED.policy.latent_dim:
        policy = copy.deepcopy(SHIPPED.policy)
    else:
        policy = PolicyNet(vehicle, PolicyConfig(hidden=(16, 16), latent_dim=latent_dim))
    model = VNDModel(vehicle, SMALL_MODEL)
    return Bundle(version, version - 1, policy, vehicle, model=model)


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("bundles")
    out = {v: save_bundle(make_bundle(v), root / f"v{v}.safetensors") for v in (1, 2)}
    out["small"] = save_bundle(make_bundle(5, "small"), root / "small.safetensors")
    out["latent"] = save_bundle(make_bundle(6, latent_dim=4), root / "latent.safetensors")
    data = out[2].read_bytes()
    (root / "truncated.safetensors").write_bytes(data[: len(data) // 2])
    out["truncated"] = root / "truncated.safetensors"
    return out


@pytest.fixture
def runtime():
    rt = BundleRuntime("/vnd1/policy", policy_validator(load_vehicle("agile"), 50_000.0))
    yield rt
    rt.close()


def wait_replies(rt: BundleRuntime, n: int = 1, timeout_s: float = 20.0) -> list:
    replies: list = []
    deadline = time.monotonic() + timeout_s
    while len(replies) < n:
        assert time.monotonic() < deadline, "no reply from the loader"
        replies += rt.poll()
        time.sleep(0.01)
    return replies


def test_startup_then_load_activate_rollback(runtime, paths):
    reply = runtime.load_startup(paths[1])
    assert reply.accepted and runtime.active_version == 1 and runtime.active.version == 1
    assert runtime.request(ACTION_LOAD, "r1", str(paths[2])) is None  # answered by poll()
    (loaded,) = wait_replies(runtime)
    assert (loaded.request_id, loaded.accepted) == ("r1", True)
    assert loaded.available_versions == [1, 2] and loaded.active_version == 1
    activated = runtime.request(ACTION_ACTIVATE, "r2", version=2)
    assert activated.accepted and activated.active_version == 2 and runtime.previous_version == 1
    rolled = runtime.request(ACTION_ROLLBACK, "r3")
    assert rolled.accepted and rolled.active_version == 1
    missing = runtime.request(ACTION_ACTIVATE, "r4", version=7)
    assert not missing.accepted and "not loaded" in missing.message
    listed = runtime.request(ACTION_LIST, "r5")
    assert listed.accepted and "active 1" in listed.message
    assert listed.fields()["node"] == "/vnd1/policy"


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("truncated", "corrupted bundle tensors"),
        ("small", "vehicle 'small'"),
        ("latent", "latent size"),
    ],
)
def test_bad_bundles_are_refused_with_a_reason(runtime, paths, key, reason):
    runtime.load_startup(paths[1])
    runtime.request(ACTION_LOAD, "bad", str(paths[key]))
    (reply,) = wait_replies(runtime)
    assert not reply.accepted and reason in reply.message, reply.message
    assert runtime.active_version == 1 and runtime.rejections == 1


def test_missing_file_and_bad_startup(runtime, paths, tmp_path):
    with pytest.raises(BundleError, match="cannot read"):
        runtime.load_startup(tmp_path / "nope.safetensors")
    assert not runtime.request(ACTION_LOAD, "x", "").accepted


def test_learner_bundles_pin_and_checks(runtime, paths):
    runtime.load_startup(paths[1])
    data = bundle_to_bytes(make_bundle(3))
    sha = hashlib.sha256(data).hexdigest()
    runtime.submit_learner(data, 3, sha)
    (reply,) = wait_replies(runtime)
    assert reply.accepted and reply.request_id == "model:3" and runtime.active_version == 3
    assert runtime.request(ACTION_PIN, "p").pinned
    runtime.submit_learner(bundle_to_bytes(make_bundle(4)), 4, "")
    (refused,) = wait_replies(runtime)
    assert not refused.accepted and "pinned" in refused.message and runtime.active_version == 3
    assert not runtime.request(ACTION_UNPIN, "u").pinned
    runtime.submit_learner(data, 9, sha)  # message version differs from the bundle's
    runtime.submit_learner(data, 3, "0" * 64)  # transport hash differs
    first, second = wait_replies(runtime, 2)
    assert "bundle is version 3" in first.message and "sha256" in second.message


def test_addressing(runtime):
    assert runtime.addressed("") and runtime.addressed("/vnd1/policy")
    assert runtime.addressed("policy") and not runtime.addressed("/vnd1/encoder")


def test_encoder_checks(paths):
    bundle = make_bundle(1)
    assert encoder_smoke_test(bundle, budget_us=1e6)["median_us"] > 0
    with pytest.raises(BundleError, match="budget"):
        encoder_smoke_test(bundle, budget_us=1e-3)
    rt = BundleRuntime("/vnd1/encoder", encoder_validator(load_vehicle("agile"), 1e6))
    try:
        assert rt.load_startup(paths[1]).active_version == 1
    finally:
        rt.close()


def test_arming_actions_are_refused_with_the_node_that_takes_them(runtime):
    """An encoder asked to arm (a request without target_node) says who arms instead."""
    reply = runtime.request(ACTION_ARM, "a")
    assert not reply.accepted and reply.message == "arm is for the policy node"
    assert runtime.request(ACTION_DISARM, "d").message == "disarm is for the policy node"


def lineage_bundle(version: int, lineage: str, seed: int = 0) -> Bundle:
    """A flyable bundle of learner lineage ``lineage`` (model weights seeded: distinct content)."""
    bundle = make_bundle(version + 100 * seed)
    bundle.version, bundle.parent_version, bundle.lineage = version, version - 1, lineage
    return bundle


def learner_push(rt: BundleRuntime, bundle: Bundle | bytes, version: int | None = None):
    """Submit ``bundle`` (or its bytes, with ``version``) as the learner would; the reply."""
    data = bundle if isinstance(bundle, bytes) else bundle_to_bytes(bundle)
    version = bundle.version if version is None else version
    rt.submit_learner(data, version, hashlib.sha256(data).hexdigest())
    (reply,) = wait_replies(rt)
    return reply


def test_operator_load_of_another_runs_bundle_never_blocks_the_learner(runtime, tmp_path):
    runtime.load_startup(save_bundle(lineage_bundle(1, ""), tmp_path / "base.safetensors"))
    assert learner_push(runtime, lineage_bundle(2, "run-a")).accepted
    # the operator loads and activates another run's v10 (a different lineage)
    other = save_bundle(lineage_bundle(10, "run-b", seed=1), tmp_path / "v0010.safetensors")
    runtime.request(ACTION_LOAD, "load-10", str(other))
    (loaded,) = wait_replies(runtime)
    assert loaded.accepted and 10 in loaded.available_versions
    assert runtime.request(ACTION_ACTIVATE, "act-10", version=10).active_version == 10
    # the learner's next bundles are accepted and fly: operator loads do not raise its bar
    for version in (3, 4):
        reply = learner_push(runtime, lineage_bundle(version, "run-a"))
        assert reply.accepted and reply.active_version == version, reply.message
    # ... while its own older bundles still count: a re-delivered v3 is refused, saying why
    stale = learner_push(runtime, lineage_bundle(3, "run-a"))
    assert not stale.accepted and runtime.active_version == 4
    assert "not newer than learner version 4 already accepted from lineage run-a" in stale.message
    # a learner that starts a new lineage (a new run) starts a new count
    assert learner_push(runtime, lineage_bundle(2, "run-c")).accepted


def test_same_version_number_different_content_is_told_apart(runtime, tmp_path):
    runtime.load_startup(save_bundle(lineage_bundle(1, ""), tmp_path / "base.safetensors"))
    theirs = save_bundle(lineage_bundle(5, "run-b", seed=1), tmp_path / "theirs.safetensors")
    runtime.request(ACTION_LOAD, "load-5", str(theirs))
    assert wait_replies(runtime)[0].accepted
    # the learner's own v5 is another bundle: not "already active" or "held", it replaces it
    # one serialisation, pushed twice below: its creation time is part of the bytes
    ours = bundle_to_bytes(lineage_bundle(5, "run-a"))
    mine = learner_push(runtime, ours, version=5)
    assert mine.accepted and mine.active_version == 5, mine.message
    assert "replaces the held version 5 of other content" in mine.message
    assert runtime.active.lineage == "run-a" and mine.available_versions == [1, 5]
    # the identical bundle again is the active one
    assert "already active" in learner_push(runtime, ours, version=5).message


def test_bundles_without_lineage_metadata_still_load_and_order(runtime, tmp_path):
    """A bundle written before parent_sha256 / lineage existed: same metadata minus the keys."""
    import safetensors.torch
    from vnd_core.bundle import pack, read_metadata

    def legacy(version: int) -> bytes:
        data = bundle_to_bytes(lineage_bundle(version, ""))
        metadata = read_metadata(data)
        for key in ("parent_sha256", "lineage"):
            del metadata[key]
        return pack(dict(safetensors.torch.load(data)), metadata)

    old = load_bundle(legacy(1))
    assert (old.parent_sha256, old.lineage, old.version) == ("", "", 1)
    runtime.load_startup(save_bundle(old, tmp_path / "old.safetensors"))
    for version, accepted in ((3, True), (2, False), (4, True)):
        data = legacy(version)
        runtime.submit_learner(data, version, hashlib.sha256(data).hexdigest())
        (reply,) = wait_replies(runtime)
        assert reply.accepted is accepted, reply.message
    assert runtime.active_version == 4
