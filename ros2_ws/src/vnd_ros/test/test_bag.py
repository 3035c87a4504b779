"""Bags over real DDS: record from another process, read, inspect, play back and re-record.

Timing tolerance of the round trip (stated here, checked below): every inter-message interval
of the replayed stream, scaled by the playback rate, is within 30 ms of the recorded interval
and the median error is at most 6 ms (a shared 2-core machine schedules with jitter).
"""

from __future__ import annotations

import importlib.util
import itertools
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from mcap.reader import make_reader
from rosbags.highlevel import AnyReader
from vnd_ros import messages
from vnd_ros.bag import BagRecorder
from vnd_ros.bag_read import BagError, bag_info, read_messages, read_raw
from vnd_tools.cli import main as vnd_main

TEST_DIR = Path(__file__).parent
COUNT = 24  # messages per streamed topic
PLAY_RATE = 2.0
MAX_INTERVAL_ERROR_S = 0.030
MAX_MEDIAN_INTERVAL_ERROR_S = 0.006
TIMEOUT_S = 60.0

_spec = importlib.util.spec_from_file_location("bag_talker", TEST_DIR / "bag_talker.py")
talker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(talker)


def _topics(prefix: str) -> list[str]:
    return [f"{prefix}/chatter", f"{prefix}/pose", f"{prefix}/model"]


def _wait_line(proc: subprocess.Popen, prefix: str) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no '{prefix}' line from the talker; stderr: {proc.stderr.read()}")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A bag recorded in this process from a talker process: (bag path, topic prefix)."""
    prefix = f"/vnd_bag_test_{uuid.uuid4().hex[:8]}"
    bag = tmp_path_factory.mktemp("bags") / "recorded"
    proc = subprocess.Popen(
        [sys.executable, str(TEST_DIR / "bag_talker.py"), prefix, str(COUNT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)  # the latched model is published before the recorder starts
        recorder = BagRecorder(bag, _topics(prefix)).start()
        try:
            _wait_line(proc, "DONE")
            time.sleep(0.3)
        finally:
            counts = recorder.stop()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert counts == {topic: (1 if topic.endswith("model") else COUNT) for topic in _topics(prefix)}
    return bag, prefix


def _assert_content(bag: Path, prefix: str) -> None:
    by_topic: dict[str, list] = {}
    for topic, _msgtype, _stamp, msg in read_messages(bag):
        by_topic.setdefault(topic, []).append(msg)
    assert [m.data for m in by_topic[f"{prefix}/chatter"]] == [f"msg {i}" for i in range(COUNT)]
    poses = [messages.serialize(m) for m in by_topic[f"{prefix}/pose"]]
    assert poses == [messages.serialize(talker.expected_pose(i)) for i in range(COUNT)]
    [model] = by_topic[f"{prefix}/model"]
    assert messages.serialize(model) == messages.serialize(talker.expected_bundle())
    assert isinstance(model.payload, bytes) and len(model.payload) == 1024
    # the recorder stores the wire bytes as they came (never re-encoded): the canonical CDR
    stored = [data for *_, data in read_raw(bag, [f"{prefix}/pose"])]
    assert stored == [messages.serialize(talker.expected_pose(i)) for i in range(COUNT)]


def test_record_stores_every_message_including_the_latched_one(recorded):
    bag, prefix = recorded
    _assert_content(bag, prefix)  # model was published before recording: transient local


def test_bag_opens_with_rosbags_anyreader_and_mcap_with_schemas(recorded):
    bag, prefix = recorded
    with AnyReader([bag]) as reader:
        assert {c.topic: c.msgtype for c in reader.connections} == {
            f"{prefix}/chatter": "std_msgs/msg/String",
            f"{prefix}/pose": "geometry_msgs/msg/PoseStamped",
            f"{prefix}/model": "vnd_msgs/msg/ModelBundle",
        }
        chatter = [c for c in reader.connections if c.topic.endswith("chatter")]
        first = next(reader.messages(connections=chatter))
        assert reader.deserialize(first[2], first[0].msgtype).data == "msg 0"
    [mcap_file] = bag.glob("*.mcap")
    with mcap_file.open("rb") as stream:
        summary = make_reader(stream).get_summary()
    schemas = {schema.name: schema for schema in summary.schemas.values()}
    assert set(schemas) == {
        "std_msgs/msg/String",
        "geometry_msgs/msg/PoseStamped",
        "vnd_msgs/msg/ModelBundle",
    }
    assert all(schema.encoding == "ros2msg" for schema in schemas.values())
    assert b"uint8[] payload" in schemas["vnd_msgs/msg/ModelBundle"].data
    assert b"MSG: std_msgs/Header" in schemas["geometry_msgs/msg/PoseStamped"].data
    assert {channel.message_encoding for channel in summary.channels.values()} == {"cdr"}


def test_info_lists_counts_types_and_duration(recorded, capsys):
    bag, prefix = recorded
    info = bag_info(bag)
    assert info.storage == "mcap" and info.message_count == 2 * COUNT + 1
    assert 0.5 < info.duration_s < 30.0
    assert vnd_main(["bag", "info", str(bag)]) == 0
    out = capsys.readouterr().out
    assert f"{prefix}/pose" in out and "geometry_msgs/msg/PoseStamped  count: 24" in out


def test_read_errors_name_the_bag_and_topic(recorded, tmp_path):
    bag, _ = recorded
    with pytest.raises(BagError, match="has no topic /nope"):
        list(read_raw(bag, ["/nope"]))
    with pytest.raises(BagError, match="cannot open bag"):
        bag_info(tmp_path / "missing")


def _intervals(bag: Path, topic: str) -> list[float]:
    stamps = [stamp for _t, _m, stamp, _d in read_raw(bag, [topic])]
    return [(b - a) / 1e9 for a, b in itertools.pairwise(stamps)]


def test_play_round_trip_preserves_messages_and_timing(recorded, tmp_path):
    bag, prefix = recorded
    replayed = tmp_path / "replayed"
    recorder = BagRecorder(replayed, _topics(prefix), storage="sqlite3").start()
    try:
        command = [sys.executable, "-m", "vnd_tools.cli", "bag", "play", str(bag)]
        command += ["--rate", str(PLAY_RATE), "--wait-for-subscribers", str(TIMEOUT_S)]
        player = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        time.sleep(0.3)
    finally:
        recorder.stop()
    assert player.returncode == 0, player.stderr
    assert f"published {2 * COUNT + 1} messages" in player.stdout
    assert bag_info(replayed).storage == "sqlite3"
    _assert_content(replayed, prefix)
    original = _intervals(bag, f"{prefix}/chatter")
    played = _intervals(replayed, f"{prefix}/chatter")
    errors = [abs(p * PLAY_RATE - o) / PLAY_RATE for o, p in zip(original, played, strict=True)]
    assert max(errors) <= MAX_INTERVAL_ERROR_S, errors
    assert statistics.median(errors) <= MAX_MEDIAN_INTERVAL_ERROR_S, errors
    print(
        f"interval error: median {statistics.median(errors) * 1e3:.2f} ms, "
        f"max {max(errors) * 1e3:.2f} ms over {len(errors)} intervals"
    )


def test_recorder_refuses_an_existing_folder_and_empty_selection(tmp_path):
    with pytest.raises(BagError, match="already exists"):
        BagRecorder(tmp_path, ["/x"])
    with pytest.raises(BagError, match="nothing to record"):
        BagRecorder(tmp_path / "new", [])
