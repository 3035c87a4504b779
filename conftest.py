"""Workspace-wide pytest setup: every DDS participant a test starts stays on loopback."""

import os
from pathlib import Path

_ROOT = Path(__file__).resolve().parent
os.environ.setdefault("CYCLONEDDS_URI", f"file://{_ROOT / 'config' / 'cyclonedds_loopback.xml'}")
os.environ.setdefault("VND_MIDDLEWARE", "dds")
os.environ.setdefault("OMP_NUM_THREADS", "1")
