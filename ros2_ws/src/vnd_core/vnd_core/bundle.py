"""Versioned model bundles: one safetensors file, JSON metadata, sha256, strict validation.

Layout of a bundle file (docs/architecture.md, "Checkpoints"):

- tensors: the policy's ``state_dict`` under ``policy.`` (weights and the observation normaliser
  buffers) and, optionally, a VND model's ``state_dict`` under ``model.``;
- safetensors metadata (str -> str) holds one key, ``vnd_bundle``, whose value is a JSON object:
  ``format_version``, ``version``, ``parent_version``, ``created_utc``, ``vehicle`` (parameters),
  ``architecture`` (``policy``: config, observation layout, action scale; optional ``model``),
  ``summary`` (training summary) and ``sha256``; optional (bundles written before them load
  with ``""``): ``parent_sha256`` (the parent bundle's ``sha256``: lineage by content) and
  ``lineage`` (id of the learner run the bundle descends from, see
  :mod:`vnd_flight.hotswap` for how nodes order learner bundles by it).

Identity: a bundle is its ``sha256``. ``version`` is a per-run counter and label: two runs
both have a "version 10", and nothing may assume a version number names one bundle.

``sha256`` covers every tensor (name, dtype, shape, bytes, in sorted name order) and the metadata
itself without the ``sha256`` field, so neither weights nor architecture can change unnoticed.
Loading never unpickles anything: safetensors and JSON only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import struct
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import safetensors.torch
import torch
from safetensors import SafetensorError

from vnd_core.config_io import ConfigError, from_mapping
from vnd_core.policy import PolicyConfig, PolicyNet, PolicyRunner
from vnd_core.reference import ReferenceSpec
from vnd_core.state import POS, VEL, hover_state
from vnd_core.vehicle import VehicleParams

if TYPE_CHECKING:
    from vnd_core.vnd.model import VNDModel

FORMAT_VERSION = 1
METADATA_KEY = "vnd_bundle"
POLICY_PREFIX = "policy."
MODEL_PREFIX = "model."
SHIPPED_BUNDLE = "base_agile.safetensors"  # file name of the base bundle in vnd_core/data
# the force-observer start bundle (vnd train-observer from the base bundle), in vnd_core/data
OBSERVER_BUNDLE = "observer_agile.safetensors"
_OPTIONAL_TEXT_FIELDS = ("parent_sha256", "lineage")  # absent in older bundles: ""
_REQUIRED_FIELDS = {
    "format_version": int,
    "version": int,
    "parent_version": int,
    "created_utc": str,
    "vehicle": dict,
    "architecture": dict,
    "summary": dict,
    "sha256": str,
}


class BundleError(ValueError):
    """A bundle is malformed, corrupted or inconsistent; the message names what is wrong."""


def shipped_bundle_path() -> Path:
    """Path of the base bundle shipped as package data of vnd_core (what the flight nodes
    start on when no bundle is configured)."""
    return Path(str(resources.files("vnd_core") / "data" / SHIPPED_BUNDLE))


def shipped_observer_bundle_path() -> Path:
    """Path of the shipped force-observer start bundle: the base policy fine-tuned with domain
    randomisation and then with the observer's force as an input (``vnd train-observer``)."""
    return Path(str(resources.files("vnd_core") / "data" / OBSERVER_BUNDLE))


@dataclass
class Bundle:
    """Everything one deployed model version consists of."""

    version: int  # model version, >= 1, strictly increasing along a lineage
    parent_version: int  # version this one was trained from (0 = from scratch)
    policy: PolicyNet  # pi(obs, z) with its normalisation buffers
    vehicle: VehicleParams  # vehicle the bundle was trained for
    model: Any = None  # optional VNDModel (encoder, residual, decoder)
    summary: dict = field(default_factory=dict)  # training summary (JSON-able)
    created_utc: str = ""  # ISO-8601 creation time; filled in on save when empty
    sha256: str = ""  # content hash (the bundle's identity); filled in on save, checked on load
    parent_sha256: str = ""  # content hash of the bundle this one was trained from ("" = none)
    lineage: str = ""  # id of the learner run this bundle descends from ("" = none)


# ---------------------------------------------------------------------------------- writing
def _tensors_of(bundle: Bundle) -> dict[str, torch.Tensor]:
    tensors = {POLICY_PREFIX + k: v for k, v in bundle.policy.state_dict().items()}
    if bundle.model is not None:
        tensors |= {MODEL_PREFIX + k: v for k, v in bundle.model.state_dict().items()}
    return {k: v.detach().contiguous().cpu() for k, v in tensors.items()}


def _metadata_of(bundle: Bundle) -> dict:
    architecture = {"policy": bundle.policy.architecture()}
    if bundle.model is not None:
        architecture["model"] = bundle.model.architecture()
    return {
        "format_version": FORMAT_VERSION,
        "version": int(bundle.version),
        "parent_version": int(bundle.parent_version),
        "created_utc": bundle.created_utc
        or datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "vehicle": dataclasses.asdict(bundle.vehicle),
        "architecture": architecture,
        "summary": bundle.summary,
        "parent_sha256": bundle.parent_sha256,
        "lineage": bundle.lineage,
    }


def content_sha256(tensors: dict[str, torch.Tensor], metadata: dict) -> str:
    """Hex sha256 of ``tensors`` in sorted-name order and of ``metadata`` minus its sha256."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous().cpu()
        digest.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    meta = {k: v for k, v in metadata.items() if k != "sha256"}
    digest.update(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())
    return digest.hexdigest()


def pack(tensors: dict[str, torch.Tensor], metadata: dict) -> bytes:
    """Serialise ``tensors`` and ``metadata`` (sha256 recomputed) to safetensors bytes."""
    metadata = dict(metadata, sha256=content_sha256(tensors, metadata))
    text = json.dumps(metadata, sort_keys=True, allow_nan=False)
    return safetensors.torch.save(tensors, metadata={METADATA_KEY: text})


def bundle_to_bytes(bundle: Bundle) -> bytes:
    """The bundle as safetensors bytes (what ``save_bundle`` writes and the wire carries)."""
    metadata = _metadata_of(bundle)
    tensors = _tensors_of(bundle)
    bundle.created_utc = metadata["created_utc"]
    bundle.sha256 = content_sha256(tensors, metadata)
    return pack(tensors, metadata)


def save_bundle(bundle: Bundle, path: str | Path) -> Path:
    """Write ``bundle`` to ``path`` atomically (temporary file + rename); returns the path."""
    path = Path(path)
    data = bundle_to_bytes(bundle)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


# ---------------------------------------------------------------------------------- reading
def read_metadata(data: bytes) -> dict:
    """Parse the JSON metadata of safetensors ``data`` without touching the tensors."""
    if len(data) < 8:
        raise BundleError(f"not a bundle: {len(data)} bytes is shorter than a safetensors header")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > len(data) - 8:
        raise BundleError(
            f"truncated or corrupted bundle: header claims {header_len} bytes, "
            f"file has {len(data) - 8}"
        )
    try:
        header = json.loads(data[8 : 8 + header_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BundleError(f"corrupted bundle: header is not valid JSON ({err})") from err
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict) or METADATA_KEY not in meta:
        raise BundleError(f"not a VND bundle: safetensors metadata has no '{METADATA_KEY}' key")
    try:
        metadata = json.loads(meta[METADATA_KEY])
    except json.JSONDecodeError as err:
        raise BundleError(f"corrupted bundle metadata: {err}") from err
    if not isinstance(metadata, dict):
        raise BundleError("corrupted bundle metadata: expected a JSON object")
    return metadata


def _check_fields(metadata: dict) -> None:
    version = metadata.get("format_version")
    if version != FORMAT_VERSION:
        raise BundleError(
            f"unsupported bundle format_version {version!r} (this build reads {FORMAT_VERSION})"
        )
    for name, kind in _REQUIRED_FIELDS.items():
        if name not in metadata:
            raise BundleError(f"bundle metadata is missing field '{name}'")
        if not isinstance(metadata[name], kind) or isinstance(metadata[name], bool):
            raise BundleError(f"bundle metadata field '{name}' must be {kind.__name__}")
    if metadata["version"] < 1 or metadata["parent_version"] < 0:
        raise BundleError("bundle version must be >= 1 and parent_version >= 0")
    if "policy" not in metadata["architecture"]:
        raise BundleError("bundle architecture has no 'policy' component")
    for name in _OPTIONAL_TEXT_FIELDS:
        if not isinstance(metadata.get(name, ""), str):
            raise BundleError(f"bundle metadata field '{name}' must be str")


def _load_tensors(data: bytes) -> dict[str, torch.Tensor]:
    try:
        return safetensors.torch.load(data)
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise BundleError(f"corrupted bundle tensors: {err}") from err


def _fill_module(
    module: torch.nn.Module, tensors: dict[str, torch.Tensor], prefix: str, what: str
) -> None:
    """Check that ``tensors[prefix*]`` match ``module``'s state exactly, then load them."""
    expected = module.state_dict()
    present = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
    for name, ref in expected.items():
        if name not in present:
            raise BundleError(f"{what}: missing tensor '{prefix}{name}'")
        got = present[name]
        if got.shape != ref.shape:
            raise BundleError(
                f"{what}: tensor '{prefix}{name}' has shape {list(got.shape)}, "
                f"the architecture needs {list(ref.shape)}"
            )
        if got.dtype != ref.dtype:
            raise BundleError(
                f"{what}: tensor '{prefix}{name}' has dtype {got.dtype}, expected {ref.dtype}"
            )
        if got.is_floating_point() and not bool(torch.isfinite(got).all()):
            raise BundleError(f"{what}: tensor '{prefix}{name}' has non-finite values")
    module.load_state_dict(present, strict=True)


def _build_policy(arch: dict, vehicle: VehicleParams) -> PolicyNet:
    try:
        config = PolicyConfig.from_dict(arch["config"])
        policy = PolicyNet(vehicle, config)
    except (KeyError, TypeError, ValueError) as err:
        raise BundleError(f"policy architecture cannot be rebuilt: {err!r}") from err
    layout = policy.observation.layout.to_list()
    if arch.get("observation_layout") != layout:
        raise BundleError(
            f"policy observation layout {arch.get('observation_layout')} does not match what "
            f"this build constructs from its config ({layout})"
        )
    return policy


def _build_model(arch: dict, vehicle: VehicleParams) -> VNDModel:
    """The VND model of a bundle's architecture record (weights loaded afterwards)."""
    from vnd_core.vnd.model import VNDModel  # imported only for bundles that carry a model

    try:
        return VNDModel.from_architecture(arch, vehicle)
    except (ConfigError, TypeError, ValueError) as err:
        raise BundleError(f"model architecture cannot be rebuilt: {err}") from err


def load_bundle(source: str | Path | bytes) -> Bundle:
    """Read and validate a bundle from a path or from bytes; raises :class:`BundleError`.

    Checks: safetensors structure, metadata fields and format version, sha256 of the content,
    vehicle parameters, architecture rebuildable, every tensor present with the right shape and
    dtype, no extra tensor, all weights finite.
    """
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as err:
            raise BundleError(f"{source}: cannot read bundle: {err.strerror}") from err
    metadata = read_metadata(data)
    _check_fields(metadata)
    tensors = _load_tensors(data)
    actual = content_sha256(tensors, metadata)
    if actual != metadata["sha256"]:
        raise BundleError(
            f"sha256 mismatch: metadata says {metadata['sha256'][:16]}..., "
            f"content hashes to {actual[:16]}... (corrupted or edited bundle)"
        )
    try:
        vehicle = from_mapping(VehicleParams, metadata["vehicle"], "bundle vehicle")
    except ConfigError as err:
        raise BundleError(str(err)) from err
    arch = metadata["architecture"]
    policy = _build_policy(arch["policy"], vehicle)
    model = _build_model(arch["model"], vehicle) if "model" in arch else None
    known = {POLICY_PREFIX + k for k in policy.state_dict()}
    if model is not None:
        known |= {MODEL_PREFIX + k for k in model.state_dict()}
    extra = sorted(set(tensors) - known)
    if extra:
        raise BundleError(f"unexpected tensor '{extra[0]}' ({len(extra)} not in the architecture)")
    _fill_module(policy, tensors, POLICY_PREFIX, "policy")
    if model is not None:
        _fill_module(model, tensors, MODEL_PREFIX, "model")
    return Bundle(
        version=metadata["version"],
        parent_version=metadata["parent_version"],
        policy=policy.eval(),
        vehicle=vehicle,
        model=model.eval() if model is not None else None,
        summary=metadata["summary"],
        created_utc=metadata["created_utc"],
        sha256=metadata["sha256"],
        parent_sha256=metadata.get("parent_sha256", ""),
        lineage=metadata.get("lineage", ""),
    )


def content_id(bundle: Bundle) -> str:
    """The bundle's content hash (its identity), computed (and stored, with the creation time)
    when it was never saved."""
    if not bundle.sha256:
        bundle_to_bytes(bundle)
    return bundle.sha256


# ---------------------------------------------------------------------------------- smoke test
def _canned_states() -> torch.Tensor:
    """A few states (N, 13): hover at the reference, offset, moving fast, tilted and spinning."""
    states = hover_state((5,), position_m=(0.0, 0.0, 1.0))
    states[1, POS] = torch.tensor([0.5, -0.5, 0.5])
    states[2, VEL] = torch.tensor([3.0, -2.0, 1.0])
    states[3, 3:7] = torch.tensor([0.9239, 0.3827, 0.0, 0.0])  # 45 deg roll
    states[4, 10:13] = torch.tensor([4.0, -4.0, 2.0])
    return states


def smoke_test(bundle: Bundle, budget_us: float = 1000.0, repeats: int = 50) -> dict:
    """Check a freshly loaded bundle before it is swapped in; raises :class:`BundleError`.

    Canned states must give finite commands within the vehicle limits, the exported control-loop
    network must agree with the torch module, a carried VND model must encode a canned window to
    a finite latent, and batch-1 inference (observation + forward, as the control loop runs it)
    must take a median of at most ``budget_us``. Returns ``median_us`` and ``max_us``.
    """
    policy, vehicle = bundle.policy, bundle.vehicle
    runner = PolicyRunner(policy, ReferenceSpec(kind="figure8", center_m=(0.0, 0.0, 1.0)))
    low = np.array([vehicle.thrust_min_n, *[-r for r in vehicle.body_rate_max_radps]]) - 1e-4
    high = np.array([vehicle.thrust_max_n, *vehicle.body_rate_max_radps]) + 1e-4
    states = _canned_states().double().numpy()
    durations = []
    for i in range(repeats):
        state = states[i % len(states)]
        start = time.perf_counter()
        action = runner.act(state, t_s=0.02 * i)
        durations.append(time.perf_counter() - start)
        if not np.all(np.isfinite(action)):
            raise BundleError(f"smoke test: non-finite command {action.tolist()}")
        if np.any(action < low) or np.any(action > high):
            raise BundleError(f"smoke test: command {action.tolist()} outside the vehicle limits")
    obs = runner.observe(states[2], t_s=0.5)
    with torch.inference_mode():
        expected = policy(torch.from_numpy(obs).float().unsqueeze(0))[0].double().numpy()
    if not np.allclose(runner.forward(obs), expected, atol=1e-3):
        raise BundleError("smoke test: exported control-loop network disagrees with the policy")
    if bundle.model is not None:
        _smoke_model(bundle.model)
    median_us = float(np.median(durations) * 1e6)
    if median_us > budget_us or not math.isfinite(median_us):
        raise BundleError(
            f"smoke test: inference takes {median_us:.0f} us (median), budget {budget_us:.0f} us"
        )
    return {"median_us": median_us, "max_us": float(max(durations) * 1e6)}


def _smoke_model(model: VNDModel) -> None:
    """A hovering context window must encode to a finite latent of the model's size."""
    context = model.context_len
    states = hover_state((1, context + 1))
    actions = torch.zeros(1, context, 4)
    actions[..., 0] = model.vehicle.hover_thrust_n
    with torch.inference_mode():
        z = model.encode(states, actions)
    if z.shape != (1, model.latent_dim) or not bool(torch.isfinite(z).all()):
        raise BundleError(f"smoke test: model encodes a canned window to {z.tolist()}")
