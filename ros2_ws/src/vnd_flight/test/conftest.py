"""Fixtures of the vnd_flight tests: the ones of ``vnd_core/test/conftest.py``, loaded by path
because test directories are not packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

_SRC = Path(__file__).resolve().parents[2]  # ros2_ws/src


def _load(package: str) -> ModuleType:
    """The conftest of ``package``'s test folder, as a module of its own."""
    path = _SRC / package / "test" / "conftest.py"
    spec = importlib.util.spec_from_file_location(f"{package}_test_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_vnd_core = _load("vnd_core")

# pytest finds fixtures by name in this module
_one_torch_thread = _vnd_core._one_torch_thread
tracking_controller = _vnd_core.tracking_controller
