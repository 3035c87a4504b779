"""Replay store, bundle registry and worker framing: the learner node's ROS-free parts."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from rosbags.highlevel import AnyReader
from vnd_flight.learner_store.ipc import FrameError, encode_frame, read_frame
from vnd_flight.learner_store.registry import BundleRegistry, RegistryError
from vnd_flight.learner_store.replay_store import ReplayStore, ReplayStoreError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_helpers import identity_key, string_cdr, string_topic

# ---------------------------------------------------------------------------------- framing


def test_frame_round_trip_keeps_arrays_blobs_and_meta() -> None:
    arrays = {
        "stamp_ns": np.arange(5, dtype=np.int64) * 20_000_000,
        "state": np.random.default_rng(0).normal(size=(5, 13)),
        "mode": np.array([1, 1, 2, 3, 4], dtype=np.uint8),
        "condition": np.array(["calm", "wind_a", "", "wind_b", "calm"]),
    }
    stream = io.BytesIO(
        encode_frame("ticks", meta={"n": 5}, arrays=arrays, blobs={"bundle": b"\x00\xff" * 9})
        + encode_frame("stop")
    )
    frame = read_frame(stream)
    assert frame is not None and frame.kind == "ticks" and frame.meta == {"n": 5}
    for name, array in arrays.items():
        assert frame.arrays[name].dtype == array.dtype
        np.testing.assert_array_equal(frame.arrays[name], array)
    assert frame.blobs == {"bundle": b"\x00\xff" * 9}
    stop = read_frame(stream)
    assert stop is not None and stop.kind == "stop" and not stop.arrays
    assert read_frame(stream) is None  # clean end of stream


def test_frame_refuses_objects_truncation_and_garbage() -> None:
    with pytest.raises(FrameError, match="no objects"):
        encode_frame("ticks", arrays={"bad": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(FrameError, match="JSON"):
        encode_frame("result", meta={"x": float("nan")})
    data = encode_frame("ticks", arrays={"a": np.ones(100)})
    with pytest.raises(FrameError, match="stream ended inside a frame body"):
        read_frame(io.BytesIO(data[:-10]))
    with pytest.raises(FrameError, match="magic"):
        read_frame(io.BytesIO(b"XXXX" + data[4:]))


# ---------------------------------------------------------------------------------- replay store


def _read_all(paths: list[Path]) -> list[tuple[int, bytes]]:
    with AnyReader(paths) as reader:
        return [(stamp, bytes(data)) for _, stamp, data in reader.messages()]


def test_store_rotates_dedups_and_reopens(tmp_path: Path) -> None:
    now = [0.0]
    store = ReplayStore(
        tmp_path / "replay",
        string_topic(),
        identity_key,
        segment_period_s=1.0,
        segment_max_messages=4,
        clock=lambda: now[0],
    )
    assert store.open()[0] == []
    written = [store.append(i * 1000, string_cdr(f"m{i}")) for i in range(10)]
    assert all(written)
    assert not store.append(5, string_cdr("m3")), "a stored key is not written twice"
    assert store.count == 10 and store.pending == 2  # two segments of 4 closed by count
    now[0] = 2.0
    assert store.rotate_if_due() and store.pending == 0  # closed by age
    store.append(10_000, string_cdr("m10"))
    store.close()
    paths = store.segment_paths()
    assert [p.name for p in paths] == [f"segment_00000{i}" for i in (1, 2, 3, 4)]
    assert [d for _, d in _read_all(paths)] == [string_cdr(f"m{i}") for i in range(11)]

    again = ReplayStore(tmp_path / "replay", string_topic(), identity_key)
    messages, report = again.open()
    assert [m.data for m in messages] == [string_cdr(f"m{i}") for i in range(11)]
    assert report.segments == 4 and report.messages == 11 and not report.salvaged
    assert not again.append(1, string_cdr("m0")) and again.append(11_000, string_cdr("new"))
    again.close()
    assert len(again.segment_paths()) == 5


_KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path[:0] = {paths!r}
    from store_helpers import identity_key, string_cdr, string_topic
    from vnd_flight.learner_store.replay_store import ReplayStore
    store = ReplayStore(
        sys.argv[1], string_topic(), identity_key, segment_max_messages=100_000,
        flush_period_s=1e6,  # chunks of flush_max_messages (1000) only: a known layout
    )
    store.open()
    for i in range(int(sys.argv[2])):
        store.append(i, string_cdr("x" * 300 + str(i)))
    if sys.argv[3] == "close":
        store.close()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _run_killed_writer(root: Path, count: int, close: bool) -> None:
    script = _KILLED_WRITER.format(paths=[str(Path(__file__).parent)])
    proc = subprocess.run(
        [sys.executable, "-c", script, str(root), str(count), "close" if close else "open"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -9, proc.stderr


def test_store_salvages_a_segment_left_by_sigkill(tmp_path: Path) -> None:
    root = tmp_path / "replay"
    _run_killed_writer(root, 200, close=True)  # one complete segment
    # keys 200-3999 are new: 3000 of them reach the disk in chunks of 1000, 800 are pending
    _run_killed_writer(root, 4000, close=False)
    broken = root / "segment_000002"
    assert broken.is_dir() and not (broken / "metadata.yaml").exists()
    mcap = broken / "segment_000002.mcap"
    with mcap.open("r+b") as stream:  # and cut the file inside its third chunk
        stream.truncate(int(mcap.stat().st_size * 0.8))

    store = ReplayStore(root, string_topic(), identity_key)
    messages, report = store.open()
    salvaged = report.salvaged["segment_000002"]
    assert salvaged == 2000, report.describe()  # every message of the two whole chunks
    assert "truncated segment segment_000002" in report.describe()
    assert "torn bytes at its end dropped" in report.describe()
    assert report.messages == len(messages) == 200 + salvaged  # keys 0-199 were not rewritten
    assert not broken.exists(), "the broken segment is replaced by a complete one"
    store.close()
    on_disk = _read_all(store.segment_paths())
    assert len(on_disk) == len(messages) and len({d for _, d in on_disk}) == len(on_disk)


_STREAMING_WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = {paths!r}
    from store_helpers import identity_key, string_cdr, string_topic
    from vnd_flight.learner_store.replay_store import ReplayStore
    store = ReplayStore(sys.argv[1], string_topic(), identity_key)  # the learner's defaults
    store.open()
    i = 0
    while True:  # 100 Hz ticks, rotated and flushed as the learner's timer does
        store.append(time.time_ns(), string_cdr(f"tick {{i}}"))
        store.rotate_if_due()
        print(i, flush=True)
        i += 1
        time.sleep(0.01)
    """
)


def test_store_of_a_killed_writer_loses_at_most_one_flush_period(tmp_path: Path) -> None:
    """A real writer process appending at 100 Hz, SIGKILLed after a few seconds (mid-segment:
    segments close every 10 s): reopening returns every tick up to about 1 s before the kill."""
    import signal
    import time

    root = tmp_path / "replay"
    script = _STREAMING_WRITER.format(paths=[str(Path(__file__).parent)])
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, text=True
    )
    appended = -1
    started = None
    try:
        for line in proc.stdout:
            appended = int(line)
            started = started or time.monotonic()
            if time.monotonic() - started > 4.0:
                break
        proc.send_signal(signal.SIGKILL)
        killed_ns = time.time_ns()
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert appended > 100, "the writer did not get going"
    messages, report = ReplayStore(root, string_topic(), identity_key).open()
    texts = [m.data for m in messages]
    assert texts == [string_cdr(f"tick {i}") for i in range(len(texts))], "a gap or a repeat"
    assert report.salvaged, report.describe()  # the open segment had no metadata
    loss_s = (killed_ns - messages[-1].stamp_ns) / 1e9
    print(
        f"\nreplay store: {len(texts)} of >= {appended + 1} ticks recovered; the last one was "
        f"appended {loss_s:.3f} s before the SIGKILL"
    )
    assert loss_s <= 1.0 + 0.5  # flush period + scheduling slack on a loaded machine


def test_store_refuses_an_unreadable_complete_segment(tmp_path: Path) -> None:
    store = ReplayStore(tmp_path, string_topic(), identity_key)
    store.open()
    store.append(1, string_cdr("a"))
    store.close()
    segment = store.segment_paths()[0]
    (segment / f"{segment.name}.mcap").write_bytes(b"garbage")
    with pytest.raises(ReplayStoreError, match="cannot read replay segment"):
        ReplayStore(tmp_path, string_topic(), identity_key).open()


# ---------------------------------------------------------------------------------- registry


def _bundle_bytes(version: int, parent: int) -> bytes:
    from vnd_core.bundle import Bundle, bundle_to_bytes
    from vnd_core.policy import PolicyConfig, PolicyNet
    from vnd_core.vehicle import load_vehicle

    policy = PolicyNet(load_vehicle("agile"), PolicyConfig(hidden=(8,)))
    return bundle_to_bytes(Bundle(version, parent, policy, policy.vehicle))


def test_registry_adds_indexes_and_recovers(tmp_path: Path) -> None:
    registry = BundleRegistry(tmp_path)
    assert registry.open() == [] and registry.latest() is None
    first = _bundle_bytes(2, 1)
    entry = registry.add(first, metrics={"loss": 0.5}, decided_wall_s=100.0)
    assert entry.file == "v0002.safetensors" and entry.parent_version == 1
    assert entry.sha256 == hashlib.sha256(first).hexdigest()
    registry.mark_published(2, wall_s=101.0)
    with pytest.raises(RegistryError, match="already holds 2"):
        registry.add(first, metrics={}, decided_wall_s=102.0)
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["bundles"][0]["published_wall_s"] == 101.0
    assert index["bundles"][0]["metrics"] == {"loss": 0.5}

    (tmp_path / "v0003.safetensors").write_bytes(_bundle_bytes(3, 2))  # killed before indexing
    (tmp_path / "v0009.safetensors").write_bytes(b"not a bundle")
    reopened = BundleRegistry(tmp_path)
    notes = reopened.open()
    assert any("adopted v0003" in n for n in notes) and any("ignored v0009" in n for n in notes)
    assert [e.version for e in reopened.entries] == [2, 3]
    assert reopened.read_payload(reopened.entries[0]) == first
    latest = reopened.latest()
    assert latest is not None and latest.version == 3

    path = reopened.path_of(latest)
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    with pytest.raises(RegistryError, match="sha256"):
        reopened.read_payload(latest)
    os.remove(reopened.path_of(reopened.entries[0]))
    assert any("missing" in n for n in BundleRegistry(tmp_path).open())


def test_dotted_learner_params_reach_nested_fields_and_name_unknown_ones() -> None:
    from vnd_core.config_io import ConfigError
    from vnd_core.learner.settings import learner_preset, parse_assignments, with_overrides

    changes = parse_assignments(["min_new_ticks=7", "fit.steps=3", "fit.lr=1"])
    config = with_overrides(learner_preset("quick"), changes, "--learner-param")
    assert (config.min_new_ticks, config.fit.steps, config.fit.lr) == (7, 3, 1.0)
    assert config.fit.batch_size == learner_preset("quick").fit.batch_size
    with pytest.raises(ConfigError, match=r"LearnerConfig has no field 'fit\.stepz'"):
        with_overrides(learner_preset("quick"), {"fit.stepz": 3}, "--learner-param")
    with pytest.raises(ValueError, match=r"'fit\.steps': expected NAME=VALUE"):
        parse_assignments(["fit.steps"])


@pytest.mark.parametrize("frame_id", ["", "w", "world", "abcdefg", "a_longer_frame_name"])
def test_fast_tick_key_matches_the_full_decoder(frame_id: str) -> None:
    from vnd_learner.records import key_of_cdr, tick_key
    from vnd_ros.messages import deserialize, get_message, serialize

    cls = get_message("vnd_msgs/msg/Transition")
    msg = cls(tick=2**40 + 7, state=[1.0] * 13, mode=1)
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1_790_000_000, 999_999_999
    msg.header.frame_id = frame_id
    data = serialize(msg)
    expected = (1_790_000_000_999_999_999, 2**40 + 7)
    assert key_of_cdr(data) == tick_key(deserialize(cls, data)) == expected
    with pytest.raises(ValueError, match="CDR"):
        key_of_cdr(b"\x00\x00" + data[2:])


def test_registry_records_lineage_and_reads_an_index_written_before_it(tmp_path: Path) -> None:
    import json

    from vnd_core.bundle import Bundle, bundle_to_bytes
    from vnd_core.policy import PolicyConfig, PolicyNet
    from vnd_core.vehicle import load_vehicle

    policy = PolicyNet(load_vehicle("agile"), PolicyConfig(hidden=(8,)))
    payload = bundle_to_bytes(
        Bundle(2, 1, policy, policy.vehicle, parent_sha256="ab" * 32, lineage="run-a")
    )
    registry = BundleRegistry(tmp_path)
    registry.open()
    entry = registry.add(payload, metrics={}, decided_wall_s=1.0)
    assert (entry.parent_sha256, entry.lineage) == ("ab" * 32, "run-a")
    # an index from before the lineage fields: the entries load, with empty lineage
    index = tmp_path / "index.json"
    document = json.loads(index.read_text())
    for item in document["bundles"]:
        del item["parent_sha256"], item["lineage"]
    index.write_text(json.dumps(document))
    reopened = BundleRegistry(tmp_path)
    assert reopened.open() == []
    assert [(e.version, e.lineage, e.parent_sha256) for e in reopened.entries] == [(2, "", "")]
