"""Shared setup of the vnd_sim tests: import the package from source until it is installed."""

import importlib.util
import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]

# Until the workspace's `make setup` installs vnd_sim (editable), import it from source.
if importlib.util.find_spec("vnd_sim") is None:
    sys.path.insert(0, str(PACKAGE_ROOT))
