"""Messages per second a bag writer sustains: rosbags' plain MCAP Writer (chunks only when 1 MiB
is full, nothing on disk before that) against :class:`vnd_core.bagfile.DurableBagWriter` (a
chunk written and fsync'ed every second or 1000 messages), in one run on the same disk.

    .venv/bin/python benchmarks/bag_write_throughput.py [--messages 200000] [--size 300]
        [--rate-hz 0] [--dir DIR]

Writes ``--messages`` std_msgs/String messages of ``--size`` bytes as fast as possible (or
paced at ``--rate-hz``), alternating the writers three times; reports the median rate of each
and the durable writer's flush count and mean flush time. Progress goes to stderr; the last
stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore
from vnd_core.bagfile import BAG_FORMAT_VERSION, DurableBagWriter

STORE = get_typestore(Stores.ROS2_JAZZY)
MSGTYPE = "std_msgs/msg/String"
MSGDEF, _ = STORE.generate_msgdef(MSGTYPE, ros_version=2)
RIHS = STORE.hash_rihs01(MSGTYPE)


def _cdr(size_bytes: int) -> bytes:
    raw = b"x" * (size_bytes - 1) + b"\0"
    return b"\x00\x01\x00\x00" + len(raw).to_bytes(4, "little") + raw


def _run(kind: str, path: Path, count: int, data: bytes, rate_hz: float) -> dict:
    if kind == "plain":
        writer = Writer(path, version=BAG_FORMAT_VERSION, storage_plugin=StoragePlugin.MCAP)
        writer.open()
    else:
        writer = DurableBagWriter(path).open()
    connection = writer.add_connection("/bench", MSGTYPE, msgdef=MSGDEF, rihs01=RIHS)
    flush_s: list[float] = []
    start = time.perf_counter()
    for i in range(count):
        if rate_hz:
            due = start + i / rate_hz
            while time.perf_counter() < due:
                time.sleep(max(due - time.perf_counter(), 0.0))
        before = writer.flushes if kind == "durable" else 0
        t0 = time.perf_counter()
        writer.write(connection, time.time_ns(), data)
        if kind == "durable" and writer.flushes != before:
            flush_s.append(time.perf_counter() - t0)
    elapsed_s = time.perf_counter() - start
    writer.close()
    result = {"rate_msgs_per_s": count / elapsed_s}
    if kind == "durable":
        result.update(flushes=len(flush_s), flush_mean_ms=1e3 * statistics.fmean(flush_s or [0]))
    return result


def main() -> int:
    """Measure both writers; print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=300, help="payload bytes per message")
    parser.add_argument("--rate-hz", type=float, default=0.0, help="pace the writes (0: flat out)")
    parser.add_argument("--dir", type=Path, default=None, help="where the bags go (default tmp)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bagbench_", dir=args.dir))
    data = _cdr(args.size)
    runs: dict[str, list[dict]] = {"plain": [], "durable": []}
    try:
        for repeat in range(3):
            for kind in ("plain", "durable"):
                result = _run(kind, root / f"{kind}{repeat}", args.messages, data, args.rate_hz)
                runs[kind].append(result)
                print(f"{kind} #{repeat}: {result}", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = {
        "messages": args.messages,
        "size_bytes": args.size,
        "rate_hz": args.rate_hz,
        "plain_msgs_per_s": statistics.median(r["rate_msgs_per_s"] for r in runs["plain"]),
        "durable_msgs_per_s": statistics.median(r["rate_msgs_per_s"] for r in runs["durable"]),
        "durable_flushes": runs["durable"][0]["flushes"],
        "durable_flush_mean_ms": statistics.median(r["flush_mean_ms"] for r in runs["durable"]),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
