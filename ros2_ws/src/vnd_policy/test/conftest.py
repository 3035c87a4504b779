"""Fixtures of the policy node tests: the flight harness module and a set of test bundles."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

HARNESS_FILE = Path(__file__).resolve().parent / "flight_harness.py"


def load_harness() -> ModuleType:
    """flight_harness.py as a module (test directories are not packages)."""
    name = "vnd_flight_harness"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HARNESS_FILE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def harness() -> ModuleType:
    """The shared flight-node test harness."""
    return load_harness()


@pytest.fixture(scope="session")
def bundles(harness, tmp_path_factory) -> dict[str, Path]:
    """Good and bad bundle files by name (see flight_harness.make_bundles)."""
    torch.set_num_threads(1)
    return harness.make_bundles(tmp_path_factory.mktemp("bundles"))


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """The machine is shared: tests use one torch thread."""
    torch.set_num_threads(1)
