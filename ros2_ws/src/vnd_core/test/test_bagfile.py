"""Crash-safe bag files on real MCAP files: chunks on disk while the writer is open, torn files
closed after their last complete record (the cut-off bytes kept), metadata.yaml rebuilt from
the records alone, and clear refusals of what cannot be recovered."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rosbags.rosbag2 import Reader
from rosbags.typesys import Stores, get_typestore
from vnd_core.bagfile import (
    BagFileError,
    DurableBagWriter,
    FlushPolicy,
    needs_recovery,
    recover_bag,
    scan_file,
)

STORE = get_typestore(Stores.ROS2_JAZZY)
MSGDEF, _ = STORE.generate_msgdef("std_msgs/msg/String", ros_version=2)
RIHS = STORE.hash_rihs01("std_msgs/msg/String")


def _cdr(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return b"\x00\x01\x00\x00" + len(raw).to_bytes(4, "little") + raw


def _open(path: Path, policy: FlushPolicy, now: list[float]) -> tuple[DurableBagWriter, object]:
    writer = DurableBagWriter(path, policy, clock=lambda: now[0]).open()
    connection = writer.add_connection(
        "/chatter", "std_msgs/msg/String", msgdef=MSGDEF, rihs01=RIHS
    )
    return writer, connection


def _messages_on_disk(bag: Path) -> int:
    """Messages a reader finds in the bag's file as it is on disk now (a recovered copy)."""
    copies = len(list(bag.parent.glob(bag.name + "_copy*")))
    copy = bag.with_name(f"{bag.name}_copy{copies}")
    copy.mkdir()
    (copy / f"{copy.name}.mcap").write_bytes((bag / f"{bag.name}.mcap").read_bytes())
    return recover_bag(copy).message_count


def test_chunks_reach_the_disk_by_count_and_by_age_while_open(tmp_path):
    now = [0.0]
    writer, connection = _open(tmp_path / "open", FlushPolicy(period_s=1.0, max_messages=10), now)
    for i in range(25):
        writer.write(connection, 1_000 + i, _cdr(f"m{i}"))
    assert writer.pending == 5 and _messages_on_disk(tmp_path / "open") == 20  # two by count
    assert not writer.flush_if_due()  # the oldest pending message is not a second old yet
    now[0] = 1.0
    assert writer.flush_if_due() and writer.pending == 0
    assert _messages_on_disk(tmp_path / "open") == 25
    writer.close()
    with Reader(tmp_path / "open") as reader:
        assert reader.message_count == 25


_KILLED = """
import os, signal, sys
sys.path.insert(0, {test_dir!r})
from pathlib import Path
from test_bagfile import FlushPolicy, _cdr, _open
writer, connection = _open(Path(sys.argv[1]), FlushPolicy(max_messages=100), [0.0])
for i in range(300):
    writer.write(connection, 10_000 + i, _cdr(f"m{{i}}"))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_torn_file_is_closed_after_its_last_complete_record(tmp_path):
    bag = tmp_path / "torn"
    script = _KILLED.format(test_dir=str(Path(__file__).parent))
    killed = subprocess.run([sys.executable, "-c", script, str(bag)], timeout=60)
    assert killed.returncode == -signal.SIGKILL
    mcap = bag / "torn.mcap"
    data = mcap.read_bytes()  # three flushed chunks, no summary, no footer
    cut = len(data) - 100  # inside the message index behind the third chunk (1615 bytes)
    mcap.write_bytes(data[:cut])
    assert needs_recovery(bag) and not scan_file(mcap).complete

    report = recover_bag(bag)
    assert report.message_count == 300 and report.repaired["torn.mcap"] > 0
    torn = (bag / "torn.mcap.torn").read_bytes()
    assert data[:cut].endswith(torn)  # the cut-off bytes are kept, not dropped silently
    assert scan_file(mcap).complete and not needs_recovery(bag)
    with Reader(bag) as reader:
        stamps = [stamp for _, stamp, _ in reader.messages()]
        assert stamps == [10_000 + i for i in range(300)]
        assert reader.topics["/chatter"].msgcount == 300

    mcap.write_bytes(data[: len(data) // 2])  # inside the second chunk this time
    assert recover_bag(bag).message_count == 100


def test_reindex_of_a_complete_bag_reproduces_its_metadata(tmp_path):
    bag = tmp_path / "clean"
    writer, connection = _open(bag, FlushPolicy(), [0.0])
    for i in range(50):
        writer.write(connection, 5_000 + 7 * i, _cdr(f"m{i}"))
    writer.close()
    written = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    (bag / "metadata.yaml").unlink()
    assert needs_recovery(bag)
    report = recover_bag(bag)
    assert not report.repaired  # the file had its footer: left as it was
    rebuilt = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    for key in ("message_count", "starting_time", "duration", "relative_file_paths"):
        assert rebuilt[key] == written[key], key
    assert rebuilt["topics_with_message_count"][0]["message_count"] == 50
    assert rebuilt["topics_with_message_count"][0]["topic_metadata"]["type"] == (
        "std_msgs/msg/String"
    )


def test_recovery_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(BagFileError, match="not a bag folder"):
        recover_bag(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BagFileError, match=r"no \.mcap file"):
        recover_bag(tmp_path / "empty")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "junk.mcap").write_bytes(b"not an mcap file at all")
    with pytest.raises(BagFileError, match=r"junk\.mcap is not an MCAP file"):
        recover_bag(tmp_path / "junk")
    writer, _ = _open(tmp_path / "live", FlushPolicy(), [0.0])
    with pytest.raises(BagFileError, match="being written by a live process"):
        recover_bag(tmp_path / "live")
    writer.close()
