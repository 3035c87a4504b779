"""Fixtures of the encoder and pose filter node tests: the policy node tests' own (the shared
flight harness and its test bundles), loaded from ``vnd_policy/test/conftest.py`` by path
because test directories are not packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_POLICY_CONFTEST = Path(__file__).resolve().parents[2] / "vnd_policy" / "test" / "conftest.py"
_spec = importlib.util.spec_from_file_location("vnd_policy_test_conftest", _POLICY_CONFTEST)
_shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shared)

# pytest finds fixtures by name in this module
harness = _shared.harness
bundles = _shared.bundles
_one_torch_thread = _shared._one_torch_thread
