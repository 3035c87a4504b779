"""A ``vnd bag record`` process killed with SIGKILL keeps what it had flushed: a real talker
process (100 Hz, reliable), a real recorder process, SIGKILL, then ``vnd bag reindex`` and
``vnd bag info`` rebuild the bag from the MCAP alone, and rosbags reads it back: every message
from the first recorded one on, without a gap, up to at most one flush period before the kill,
and metadata.yaml's counts equal what is in the file."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml
from rosbags.highlevel import AnyReader
from vnd_core.bagfile import LOCK_NAME, FlushPolicy

TALKER_PERIOD_S = 0.01
RECORD_S = 4.0  # recording time before the kill
SLACK_S = 0.5  # executor step (50 ms) and scheduling on a loaded 2-core machine
LOSS_BOUND_S = FlushPolicy().period_s + SLACK_S
CLI_TIMEOUT_S = 60.0
TEST_DIR = Path(__file__).resolve().parent


def _vnd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vnd_tools.cli", "bag", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def _read_back(bag: Path) -> tuple[list[int], list[int]]:
    """(talker indices, log times [ns]) of the chatter messages, in file order."""
    indices, stamps = [], []
    with AnyReader([bag]) as reader:
        for connection, stamp_ns, data in reader.messages():
            text = reader.deserialize(data, connection.msgtype).data
            indices.append(int(re.fullmatch(r"msg (\d+)", text).group(1)))
            stamps.append(stamp_ns)
    return indices, stamps


def test_sigkilled_recording_is_recovered_up_to_the_last_flush(tmp_path, spawn_peer):
    topic = f"/crash_{uuid.uuid4().hex[:8]}/chatter"
    talker = spawn_peer(
        ["-p", "role:=talker", "-p", f"topic:={topic}", "-p", f"period_s:={TALKER_PERIOD_S}"]
    )
    talker.wait_line("READY")
    bag = tmp_path / "killed"
    recorder = subprocess.Popen(
        [sys.executable, "-m", "vnd_tools.cli", "bag", "record", "-o", str(bag), topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        mcap = bag / "killed.mcap"
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while not (mcap.exists() and mcap.stat().st_size > 1000):  # a first chunk on disk
            assert time.monotonic() < deadline, "the recorder flushed no chunk"
            assert recorder.poll() is None, recorder.stderr.read().decode()
            time.sleep(0.05)
        time.sleep(RECORD_S)
        os.kill(recorder.pid, signal.SIGKILL)
        killed_ns = time.time_ns()
        assert recorder.wait(timeout=10) == -signal.SIGKILL
    finally:
        if recorder.poll() is None:
            recorder.kill()
            recorder.wait()
    assert not (bag / "metadata.yaml").exists()  # what a killed recorder leaves

    untouched = tmp_path / "killed_info"
    shutil.copytree(bag, untouched)
    untouched.joinpath("killed.mcap").rename(untouched / "killed_info.mcap")

    reindex = _vnd("reindex", str(bag))
    assert reindex.returncode == 0, reindex.stderr
    assert "no footer (writer killed)" in reindex.stdout
    assert not (bag / LOCK_NAME).exists()

    indices, stamps = _read_back(bag)
    assert len(indices) >= RECORD_S / TALKER_PERIOD_S / 2, "far fewer messages than sent"
    assert indices == list(range(indices[0], indices[0] + len(indices))), "a gap or a repeat"
    assert stamps == sorted(stamps)
    loss_s = (killed_ns - stamps[-1]) / 1e9
    print(
        f"\nrecorded {len(indices)} messages; the last recorded one arrived {loss_s:.3f} s "
        f"before the SIGKILL (about {loss_s / TALKER_PERIOD_S:.0f} messages at 100 Hz lost)"
    )
    assert 0 <= loss_s <= LOSS_BOUND_S

    info = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["message_count"] == len(indices)
    (entry,) = info["topics_with_message_count"]
    assert entry["topic_metadata"]["name"] == topic and entry["message_count"] == len(indices)
    assert entry["topic_metadata"]["type"] == "std_msgs/msg/String"
    assert entry["topic_metadata"]["type_description_hash"].startswith("RIHS01_")
    assert entry["topic_metadata"]["offered_qos_profiles"][0]["reliability"] == "reliable"
    assert info["starting_time"]["nanoseconds_since_epoch"] == stamps[0]

    # vnd bag info on a killed bag recovers it first, and counts the same messages
    shown = _vnd("info", str(untouched))
    assert shown.returncode == 0, shown.stderr
    assert "recovering it" in shown.stderr
    assert f"Messages:         {len(indices)}" in shown.stdout
    assert f"count: {len(indices)}" in shown.stdout
    assert _read_back(untouched)[0] == indices


def test_reindex_refuses_a_bag_being_recorded(tmp_path, spawn_peer):
    topic = f"/live_{uuid.uuid4().hex[:8]}/chatter"
    talker = spawn_peer(["-p", "role:=talker", "-p", f"topic:={topic}"])
    talker.wait_line("READY")
    bag = tmp_path / "live"
    recorder = subprocess.Popen(
        [sys.executable, "-m", "vnd_tools.cli", "bag", "record", "-o", str(bag), topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while not (bag / LOCK_NAME).exists():
            assert time.monotonic() < deadline and recorder.poll() is None
            time.sleep(0.05)
        result = _vnd("reindex", str(bag))
        assert result.returncode == 1
        assert "being written by a live process" in result.stderr
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=CLI_TIMEOUT_S)
    assert (bag / "metadata.yaml").is_file() and not (bag / LOCK_NAME).exists()
