"""Bundle registry: every bundle the learner accepted, as files plus an ``index.json``.

Layout::

    <root>/v0001.safetensors
    <root>/v0002.safetensors
    <root>/index.json        {"format_version": 1, "bundles": [entry, ...]} in version order

An entry holds ``version``, ``parent_version``, ``file``, ``sha256`` (of the file bytes, what
``ModelBundle.sha256`` carries), ``content_sha256`` (the bundle's own hash), ``created_utc``,
``metrics``, ``decided_wall_s`` (when the learner accepted it) and ``published_wall_s`` (when
it went out on the model topic; null until then), ``parent_sha256`` and ``lineage`` (the
bundle's lineage metadata; empty for bundles without it). Files and the index are written
atomically (temporary file + rename), bundle file first: a process killed in between leaves a bundle
file the index does not list yet, which :meth:`BundleRegistry.open` adopts.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vnd_core.bundle import BundleError, read_metadata

INDEX_NAME = "index.json"
INDEX_FORMAT_VERSION = 1


class RegistryError(RuntimeError):
    """The registry cannot be read or written, or a bundle does not fit it (says why)."""


@dataclass
class RegistryEntry:
    """One registered bundle."""

    version: int  # bundle version
    parent_version: int  # version it was trained from
    file: str  # file name inside the registry directory
    sha256: str  # hex SHA-256 of the file bytes
    content_sha256: str  # the bundle's own content hash (from its metadata)
    created_utc: str  # bundle creation time (from its metadata)
    metrics: dict[str, Any] = field(default_factory=dict)  # validation metrics and timings
    decided_wall_s: float | None = None  # wall time the learner accepted it [s since epoch]
    published_wall_s: float | None = None  # wall time it was published [s since epoch]
    parent_sha256: str = ""  # the parent bundle's content hash ("" in older bundles)
    lineage: str = ""  # learner lineage id from the bundle's metadata ("" in older bundles)


def file_name(version: int) -> str:
    """Registry file name of ``version``: ``v0001.safetensors``."""
    return f"v{version:04d}.safetensors"


class BundleRegistry:
    """The registry directory ``root`` (created on :meth:`open`)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._entries: dict[int, RegistryEntry] = {}

    def open(self) -> list[str]:
        """Read the index, adopt unlisted bundle files; returns notes worth a log line."""
        notes: list[str] = []
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise RegistryError(f"cannot create bundle registry {self.root}: {err}") from err
        self._entries = self._read_index(notes)
        listed = {entry.file for entry in self._entries.values()}
        for path in sorted(self.root.glob("v*.safetensors")):
            if path.name not in listed:
                notes.append(self._adopt(path))
        for version, entry in list(self._entries.items()):
            if not (self.root / entry.file).is_file():
                notes.append(f"index lists {entry.file} but the file is missing: dropped")
                del self._entries[version]
        if notes:
            self._write_index()
        return notes

    @property
    def entries(self) -> list[RegistryEntry]:
        """Registered bundles in version order."""
        return [self._entries[v] for v in sorted(self._entries)]

    def latest(self) -> RegistryEntry | None:
        """The newest registered bundle (None when empty)."""
        return self._entries[max(self._entries)] if self._entries else None

    def path_of(self, entry: RegistryEntry) -> Path:
        """File path of ``entry``."""
        return self.root / entry.file

    def read_payload(self, entry: RegistryEntry) -> bytes:
        """The bundle bytes of ``entry``, verified against its recorded sha256."""
        try:
            data = self.path_of(entry).read_bytes()
        except OSError as err:
            raise RegistryError(f"cannot read {self.path_of(entry)}: {err.strerror}") from err
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry.sha256:
            raise RegistryError(
                f"{self.path_of(entry)}: sha256 {digest[:16]}... differs from the index "
                f"({entry.sha256[:16]}...): file corrupted or replaced"
            )
        return data

    def add(
        self, payload: bytes, *, metrics: dict[str, Any], decided_wall_s: float
    ) -> RegistryEntry:
        """Register bundle bytes; the version must be newer than every registered one."""
        try:
            metadata = read_metadata(payload)
        except BundleError as err:
            raise RegistryError(f"refusing to register a malformed bundle: {err}") from err
        version = int(metadata.get("version", 0))
        newest = max(self._entries, default=0)
        if version <= newest:
            raise RegistryError(
                f"refusing bundle version {version}: the registry already holds {newest}"
            )
        entry = _entry_from(payload, metadata, file_name(version))
        entry.metrics = dict(metrics)
        entry.decided_wall_s = decided_wall_s
        _write_atomic(self.root / entry.file, payload)
        self._entries[version] = entry
        self._write_index()
        return entry

    def mark_published(self, version: int, wall_s: float | None = None) -> None:
        """Record when ``version`` was published (now by default)."""
        entry = self._entries.get(version)
        if entry is None:
            raise RegistryError(f"no bundle version {version} in {self.root}")
        entry.published_wall_s = time.time() if wall_s is None else wall_s
        self._write_index()

    # ------------------------------------------------------------------ internals
    def _read_index(self, notes: list[str]) -> dict[int, RegistryEntry]:
        path = self.root / INDEX_NAME
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text())
            entries = [RegistryEntry(**item) for item in data["bundles"]]
        except (OSError, ValueError, KeyError, TypeError) as err:
            notes.append(f"{path} unreadable ({err}); rebuilding it from the bundle files")
            return {}
        return {entry.version: entry for entry in entries}

    def _adopt(self, path: Path) -> str:
        """Register an unlisted bundle file (killed before the index write), or say why not."""
        try:
            payload = path.read_bytes()
            metadata = read_metadata(payload)
        except (OSError, BundleError) as err:
            return f"ignored {path.name}: not a readable bundle ({err})"
        entry = _entry_from(payload, metadata, path.name)
        if entry.version in self._entries:
            return f"ignored {path.name}: version {entry.version} is already registered"
        self._entries[entry.version] = entry
        return f"adopted {path.name} (version {entry.version}) missing from the index"

    def _write_index(self) -> None:
        document = {
            "format_version": INDEX_FORMAT_VERSION,
            "bundles": [asdict(entry) for entry in self.entries],
        }
        _write_atomic(self.root / INDEX_NAME, json.dumps(document, indent=2).encode())


def _entry_from(payload: bytes, metadata: dict, name: str) -> RegistryEntry:
    return RegistryEntry(
        version=int(metadata.get("version", 0)),
        parent_version=int(metadata.get("parent_version", 0)),
        file=name,
        sha256=hashlib.sha256(payload).hexdigest(),
        content_sha256=str(metadata.get("sha256", "")),
        created_utc=str(metadata.get("created_utc", "")),
        parent_sha256=str(metadata.get("parent_sha256", "")),
        lineage=str(metadata.get("lineage", "")),
    )


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        tmp.replace(path)
    except OSError as err:
        raise RegistryError(f"cannot write {path}: {err.strerror}") from err
