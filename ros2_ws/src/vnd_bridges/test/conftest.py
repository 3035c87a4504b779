"""Shared helpers of the vnd_bridges tests."""

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
