"""Node processes on both backends: matching, QoS, late joiners, signals, bad samples.

Exchange and late-joiner tests run each pair of backends, mixed graphs included (an rclpy node
on Fast DDS and a dds-backend node on Cyclone DDS in one domain); the participant and
malformed-sample checks reach into Cyclone DDS and stay on the dds backend."""

from __future__ import annotations

import signal
import time

import pytest
from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsParticipant
from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.topic import Topic
from vnd_ros.cyclone_compat import write_cdr
from vnd_ros.messages import get_message, serialize
from vnd_ros.qos import qos_profile_default, to_cyclone_qos

pytestmark = pytest.mark.slow


def _received(peer, n: int, timeout_s: float = 10.0) -> list[int]:
    """Sequence numbers of the next ``n`` 'RECV msg <i>' lines."""
    return [int(peer.wait_line("RECV", timeout_s).split()[2]) for _ in range(n)]


def _assert_in_order(seqs: list[int]) -> None:
    assert seqs == sorted(seqs), f"messages arrived out of order: {seqs}"
    assert len(set(seqs)) == len(seqs), f"duplicate deliveries: {seqs}"


PAIRS = [("dds", "dds"), ("rclpy", "rclpy"), ("rclpy", "dds"), ("dds", "rclpy")]


def _skip_without_rclpy(*backends: str) -> None:
    import importlib.util

    if "rclpy" in backends and importlib.util.find_spec("rclpy") is None:
        pytest.skip("rclpy is not installed: run `make ros`")


@pytest.mark.parametrize(("listener_mw", "talker_mw"), PAIRS)
def test_two_processes_exchange_reliable_messages(spawn_peer, listener_mw, talker_mw):
    _skip_without_rclpy(listener_mw, talker_mw)
    listener = spawn_peer(["-p", "role:=listener", "-p", "reliable:=true"], listener_mw)
    talker = spawn_peer(
        ["-p", "role:=talker", "-p", "period_s:=0.005", "-p", "reliable:=true"], talker_mw
    )
    talker.wait_line("READY")
    listener.wait_line("READY")
    _assert_in_order(_received(listener, 20))


def test_best_effort_writer_matches_best_effort_reader_only(spawn_peer):
    best_effort = spawn_peer(["-p", "role:=listener", "-p", "reliable:=false"])
    reliable = spawn_peer(["-p", "role:=listener", "-p", "reliable:=true"])
    talker = spawn_peer(["-p", "role:=talker", "-p", "reliable:=false", "-p", "period_s:=0.005"])
    for peer in (best_effort, reliable, talker):
        peer.wait_line("READY")
    _assert_in_order(_received(best_effort, 20))  # discovery is complete by now
    time.sleep(0.3)
    assert not [line for line in reliable.drain() if line.startswith("RECV")], (
        "a reliable reader matched a best-effort writer"
    )


@pytest.mark.parametrize(("publisher_mw", "late_mw"), PAIRS)
def test_transient_local_late_joiner_gets_last_bundle(spawn_peer, publisher_mw, late_mw):
    _skip_without_rclpy(publisher_mw, late_mw)
    publisher = spawn_peer(["-p", "role:=bundle", "-p", "topic:=vnd/model"], publisher_mw)
    publisher.wait_line("READY")
    late = spawn_peer(["-p", "role:=bundle_listener", "-p", "topic:=vnd/model"], late_mw)
    line = late.wait_line("BUNDLE")
    assert line == "BUNDLE 2 1000000 True"  # only the last of versions 1, 2; payload intact
    time.sleep(0.5)
    assert not [x for x in late.drain() if x.startswith("BUNDLE")], "more than one bundle"


def _alive_participants(reader, condition) -> set[str]:
    return {sample.key.bytes.hex() for sample in reader.read(N=1000, condition=condition)}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_exits_cleanly_and_deletes_participant(spawn_peer, signum):
    observer = DomainParticipant(0)
    reader = BuiltinDataReader(observer, BuiltinTopicDcpsParticipant)
    alive = ReadCondition(reader, SampleState.Any | ViewState.Any | InstanceState.Alive)
    node = spawn_peer(["-p", "role:=listener"])
    guid = node.wait_line("READY").split()[1]
    deadline = time.monotonic() + 5
    while guid not in _alive_participants(reader, alive):
        assert time.monotonic() < deadline, "observer never discovered the node's participant"
        time.sleep(0.05)
    sent_at = time.monotonic()
    node.send_signal(signum)
    assert node.wait_exit(5) == 0, "\n".join(node.stderr_lines)
    assert node.wait_line("EXIT", 1) == "EXIT clean"
    exit_s = time.monotonic() - sent_at
    while guid in _alive_participants(reader, alive):
        # a participant that vanished without deleting itself stays alive for its 10 s lease
        assert time.monotonic() - sent_at < 3, "participant not deleted on shutdown"
        time.sleep(0.05)
    assert exit_s < 5
    assert not [x for x in node.stderr_lines if "Traceback" in x]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_rclpy_node_exits_cleanly_on_signals(spawn_peer, signum):
    """rclpy turns SIGINT and SIGTERM into a context shutdown (ExternalShutdownException out
    of spin): the node must destroy itself and exit 0 without a traceback."""
    _skip_without_rclpy("rclpy")
    node = spawn_peer(["-p", "role:=listener"], "rclpy")
    assert node.wait_line("READY").split()[1] == "rclpy"
    sent_at = time.monotonic()
    node.send_signal(signum)
    assert node.wait_exit(5) == 0, "\n".join(node.stderr_lines)
    assert node.wait_line("EXIT", 1) == "EXIT clean"
    assert time.monotonic() - sent_at < 5
    assert not [x for x in node.stderr_lines if "Traceback" in x], node.stderr_lines


def test_malformed_sample_is_counted_and_dropped(spawn_peer):
    string_cls = get_message("std_msgs/msg/String")
    listener = spawn_peer(["-p", "role:=listener", "-p", "topic:=garbled"])
    listener.wait_line("READY")
    participant = DomainParticipant(0)
    topic = Topic(participant, "rt/garbled", string_cls)
    writer = DataWriter(participant, topic, to_cyclone_qos(qos_profile_default))
    deadline = time.monotonic() + 5
    while not writer.get_matched_subscriptions():
        assert time.monotonic() < deadline, "test writer never matched the listener"
        time.sleep(0.05)
    # Cyclone itself rejects truncated CDR; what reaches Python intact but fails to decode is
    # e.g. a string that is not UTF-8 (as a C++ node may send): header, length 3, 0xff 0xfe.
    assert write_cdr(writer, b"\x00\x01\x00\x00\x03\x00\x00\x00\xff\xfe\x00\x00") >= 0
    good = serialize(string_cls(data="after"))
    assert write_cdr(writer, good.ljust((len(good) + 3) & ~3, b"\0")) >= 0
    assert listener.wait_line("RECV") == "RECV after malformed=1"
    assert listener.proc.poll() is None, "listener died on a malformed sample"


def test_a_crash_in_c_code_leaves_the_python_stack(spawn_peer):
    peer = spawn_peer(["-p", "role:=crash"])
    peer.wait_line("READY")
    assert peer.wait_exit(timeout_s=10.0) == -signal.SIGSEGV
    trace = "\n".join(peer.stderr_lines)
    assert "Fatal Python error: Segmentation fault" in trace
    assert "_crash_in_c" in trace  # the callback that crashed, named in the dump
