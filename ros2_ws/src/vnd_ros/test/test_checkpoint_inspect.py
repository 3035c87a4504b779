"""``vnd checkpoint inspect`` on invalid bundle files: a real ``vnd`` process, real safetensors
files damaged three ways (torn bytes, bad metadata, content that no longer matches its sha256).
Each must exit non-zero and name what is wrong on stderr; a valid file exits 0."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from vnd_core.bundle import METADATA_KEY, Bundle, bundle_to_bytes
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.vehicle import load_vehicle

CLI_TIMEOUT_S = 120.0  # torch import on a busy 2-core machine


def _valid_bytes() -> bytes:
    torch.manual_seed(3)
    vehicle = load_vehicle("agile")
    policy = PolicyNet(vehicle, PolicyConfig(hidden=(8, 8)))
    return bundle_to_bytes(Bundle(3, 2, policy, vehicle, summary={"t": 3}))


def _with_metadata(data: bytes, edit) -> bytes:
    """``data`` with its bundle metadata passed through ``edit`` (tensors untouched); the
    header keeps its length (padded with JSON whitespace) so the tensor offsets stay valid."""
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    metadata = json.loads(header["__metadata__"][METADATA_KEY])
    header["__metadata__"][METADATA_KEY] = json.dumps(edit(metadata), separators=(",", ":"))
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= header_len, "edited header must not grow"
    return data[:8] + text.ljust(header_len) + data[8 + header_len :]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("inspect")
    data = _valid_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    tampered = bytearray(data)
    tampered[8 + header_len] ^= 0x01  # one bit of the first weight: same shapes, other content
    variants = {
        "valid": data,
        "truncated": data[: len(data) // 2],
        "garbage": b"\x00\x17not a safetensors file at all" * 4,
        "no_version": _with_metadata(data, lambda m: {k: m[k] for k in m if k != "version"}),
        "tampered": bytes(tampered),
    }
    paths = {}
    for name, content in variants.items():
        paths[name] = root / f"{name}.safetensors"
        paths[name].write_bytes(content)
    return paths


def _inspect(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vnd_tools.cli", "checkpoint", "inspect", str(path)],
        capture_output=True,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=CLI_TIMEOUT_S,
    )


def test_valid_bundle_exits_zero(files):
    result = _inspect(files["valid"])
    assert result.returncode == 0, result.stderr
    assert "check:           loads" in result.stdout


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("truncated", "corrupted bundle tensors"),
        ("garbage", "truncated or corrupted bundle"),
        ("no_version", "missing field 'version'"),
        ("tampered", "sha256 mismatch"),
    ],
)
def test_invalid_bundle_exits_nonzero_naming_the_problem(files, name, reason):
    result = _inspect(files[name])
    assert result.returncode == 1, result.stdout + result.stderr
    assert "invalid bundle" in result.stderr
    assert reason in result.stderr
    assert str(files[name]) in result.stderr
    assert "INVALID" in result.stdout
