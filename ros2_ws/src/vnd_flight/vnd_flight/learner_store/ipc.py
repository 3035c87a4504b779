"""Pickle-free message framing between the learner node and its worker process.

A frame on a byte stream (a pipe) is::

    magic b"VNDF" | uint32 header_len | uint64 body_len | header (UTF-8 JSON) | body

all little endian. The header is ``{"kind": str, "meta": {...}, "arrays": [...], "blobs":
[...]}``; every array entry gives ``name``, ``dtype`` (numpy ``dtype.str``), ``shape``,
``offset`` and ``nbytes`` into the body, every blob entry ``name``, ``offset`` and ``nbytes``.
Arrays are plain numeric (or fixed-width string) buffers: object arrays are refused, so
nothing on either side ever unpickles. Bundles travel as blobs (safetensors bytes).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO

import numpy as np

MAGIC = b"VNDF"
_PREFIX = struct.Struct("<4sIQ")  # magic, header length [bytes], body length [bytes]
MAX_HEADER_BYTES = 16 * 2**20  # a header larger than this is a corrupted stream
MAX_BODY_BYTES = 4 * 2**30  # a body larger than this is a corrupted stream
_ALLOWED_KINDS = "biufU"  # bool, signed, unsigned, float, fixed-width unicode


class FrameError(RuntimeError):
    """A frame is malformed, truncated or cannot be encoded (says which and why)."""


@dataclass
class Frame:
    """One decoded frame."""

    kind: str  # what the frame is ("ticks", "result", ...)
    meta: dict[str, Any] = field(default_factory=dict)  # JSON-able fields
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # numeric buffers by name
    blobs: dict[str, bytes] = field(default_factory=dict)  # raw byte strings by name


def encode_frame(
    kind: str,
    meta: Mapping[str, Any] | None = None,
    arrays: Mapping[str, np.ndarray] | None = None,
    blobs: Mapping[str, bytes] | None = None,
) -> bytes:
    """The bytes of one frame; FrameError for an object array or non-JSON ``meta``."""
    parts: list[bytes] = []
    offset = 0
    array_entries = []
    for name, value in (arrays or {}).items():
        array = np.ascontiguousarray(value)
        if array.dtype.kind not in _ALLOWED_KINDS:
            raise FrameError(f"array '{name}': dtype {array.dtype} cannot be framed (no objects)")
        data = array.tobytes()
        array_entries.append(
            {
                "name": name,
                "dtype": array.dtype.str,
                "shape": list(array.shape),
                "offset": offset,
                "nbytes": len(data),
            }
        )
        parts.append(data)
        offset += len(data)
    blob_entries = []
    for name, blob in (blobs or {}).items():
        data = bytes(blob)
        blob_entries.append({"name": name, "offset": offset, "nbytes": len(data)})
        parts.append(data)
        offset += len(data)
    header = {
        "kind": kind,
        "meta": dict(meta or {}),
        "arrays": array_entries,
        "blobs": blob_entries,
    }
    try:
        header_bytes = json.dumps(header, allow_nan=False).encode()
    except (TypeError, ValueError) as err:
        raise FrameError(f"frame '{kind}': meta is not JSON-serialisable ({err})") from err
    return _PREFIX.pack(MAGIC, len(header_bytes), offset) + header_bytes + b"".join(parts)


def write_frame(
    stream: BinaryIO,
    kind: str,
    meta: Mapping[str, Any] | None = None,
    arrays: Mapping[str, np.ndarray] | None = None,
    blobs: Mapping[str, bytes] | None = None,
) -> None:
    """Encode a frame (see :func:`encode_frame`), write it to ``stream`` and flush."""
    stream.write(encode_frame(kind, meta=meta, arrays=arrays, blobs=blobs))
    stream.flush()


def _read_exact(stream: IO[bytes], size: int, what: str) -> bytes:
    chunks = []
    remaining = size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            got = size - remaining
            raise FrameError(f"stream ended inside a frame {what} ({got}/{size} bytes)")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: IO[bytes]) -> Frame | None:
    """The next frame of ``stream``; None at a clean end of stream; FrameError when corrupt."""
    first = stream.read(_PREFIX.size)
    if not first:
        return None
    if len(first) < _PREFIX.size:
        first += _read_exact(stream, _PREFIX.size - len(first), "prefix")
    magic, header_len, body_len = _PREFIX.unpack(first)
    if magic != MAGIC:
        raise FrameError(f"bad frame magic {magic!r} (expected {MAGIC!r}): stream out of sync")
    if header_len > MAX_HEADER_BYTES or body_len > MAX_BODY_BYTES:
        raise FrameError(f"implausible frame sizes: header {header_len} B, body {body_len} B")
    header_bytes = _read_exact(stream, header_len, "header")
    body = _read_exact(stream, body_len, "body")
    return decode_frame(header_bytes, body)


def decode_frame(header_bytes: bytes, body: bytes) -> Frame:
    """A Frame from its JSON header and body bytes; FrameError when they disagree."""
    try:
        header = json.loads(header_bytes)
        kind = str(header["kind"])
        meta = dict(header["meta"])
        array_entries = list(header["arrays"])
        blob_entries = list(header["blobs"])
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise FrameError(f"corrupted frame header: {err}") from err
    frame = Frame(kind, meta)
    for entry in array_entries:
        data = _slice(body, entry, kind)
        dtype = np.dtype(entry["dtype"])
        if dtype.kind not in _ALLOWED_KINDS:
            raise FrameError(f"frame '{kind}': array '{entry['name']}' has dtype {dtype}")
        try:
            array = np.frombuffer(data, dtype=dtype).reshape(entry["shape"]).copy()
        except ValueError as err:
            raise FrameError(f"frame '{kind}': array '{entry['name']}': {err}") from err
        frame.arrays[entry["name"]] = array
    for entry in blob_entries:
        frame.blobs[entry["name"]] = _slice(body, entry, kind)
    return frame


def _slice(body: bytes, entry: dict, kind: str) -> bytes:
    start, size = int(entry["offset"]), int(entry["nbytes"])
    if start < 0 or size < 0 or start + size > len(body):
        raise FrameError(f"frame '{kind}': '{entry.get('name')}' lies outside the frame body")
    return body[start : start + size]
