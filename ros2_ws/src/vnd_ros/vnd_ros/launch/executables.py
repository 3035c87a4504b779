"""Turn a node's (pkg, exec) into a command line and its parameters into ROS arguments."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path
from typing import Any

import yaml

_YAML_DOCUMENT_END = "...\n"  # safe_dump appends it after a bare scalar


def node_command(package: str, executable: str) -> list[str]:
    """Command that runs ``executable`` of ``package``, like ``ros2 run`` would.

    Looks first for a ``console_scripts`` entry point named ``executable`` in the Python
    distribution named ``package`` (how our packages install with pip), run with this
    interpreter; then for ``lib/<package>/<executable>`` under AMENT_PREFIX_PATH (a ROS
    install). Raises LookupError naming what was searched.
    """
    entry_points = _console_scripts(package)
    if executable in entry_points:
        module, _, attribute = entry_points[executable].partition(":")
        head = attribute.split(".")[0]
        code = f"import sys; from {module} import {head}; sys.exit({attribute}())"
        return [sys.executable, "-c", code]
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        candidate = Path(prefix) / "lib" / package / executable
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return [str(candidate)]
    known = ", ".join(sorted(entry_points)) or "none"
    raise LookupError(
        f"executable '{executable}' not found in package '{package}' "
        f"(console_scripts of the Python distribution: {known}; "
        "and no lib/<pkg>/<exec> under AMENT_PREFIX_PATH)"
    )


def _console_scripts(package: str) -> dict[str, str]:
    try:
        distribution = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return {}
    return {ep.name: ep.value for ep in distribution.entry_points if ep.group == "console_scripts"}


def flatten_params(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested parameter dicts to dotted names, as ROS 2 names nested parameters."""
    flat: dict[str, Any] = {}
    for name, value in params.items():
        full = f"{prefix}{name}"
        if isinstance(value, dict):
            flat.update(flatten_params(value, full + "."))
        else:
            flat[full] = value
    return flat


def param_argument(name: str, value: Any) -> str:
    """``name:=value`` for ``-p``, the value as YAML so its type survives (ROS reads it so)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30)
    return f"{name}:={text.removesuffix(_YAML_DOCUMENT_END).strip()}"


def typed_param(text: str) -> Any:
    """A substituted parameter string typed the way launch_ros types it (YAML scalar or list)."""
    if text == "":
        return ""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, dict) or value is None:
        return text
    return value
