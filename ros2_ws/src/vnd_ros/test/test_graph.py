"""Graph visibility: ros_discovery_info, USER_DATA as ROS 2 tools expect, and GraphView."""

from __future__ import annotations

import time

import pytest
from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsSubscription
from cyclonedds.domain import DomainParticipant
from cyclonedds.qos import Policy
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from vnd_ros.graph import DISCOVERY_TOPIC, DISCOVERY_TYPE, DiscoveryInfoPublisher, GraphView
from vnd_ros.messages import get_message


def _wait_for(predicate, timeout_s: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _user_data(qos) -> bytes:
    policy = qos[Policy.Userdata]
    return b"" if policy is None else policy.data


@pytest.mark.slow
def test_remote_node_is_visible_with_gids_and_user_data(spawn_peer):
    observer = DomainParticipant(0)
    view = GraphView(observer, "jazzy")
    peer = spawn_peer(["-p", "role:=listener", "-r", "__ns:=/uav1", "-r", "__node:=watcher"])
    _, guid_hex, fqn, topic = peer.wait_line("READY").split()
    assert (fqn, topic) == ("/uav1/watcher", "/uav1/chatter")

    # The graph is eventually consistent: the node may be announced before its reader is.
    nodes = _wait_for(
        lambda: [n for n in view.nodes() if n.fully_qualified_name == fqn and n.reader_gids],
        what="node with its reader in graph",
    )
    topics = _wait_for(lambda: view.topics().get(topic), what="topic in graph")
    assert topics.types == {"std_msgs/msg/String"} and topics.subscriber_count == 1

    # the reader GID announced for the node is the GUID of its DDS reader
    subs = BuiltinDataReader(observer, BuiltinTopicDcpsSubscription)
    endpoint = _wait_for(
        lambda: [s for s in subs.read(N=1000) if s.topic_name == "rt/uav1/chatter"],
        what="subscription endpoint",
    )[0]
    assert nodes[0].reader_gids == (endpoint.key.bytes,)
    assert endpoint.participant_key.bytes.hex() == guid_hex
    assert _user_data(endpoint.qos).startswith(b"typehash=RIHS01_")
    assert _user_data(endpoint.qos).endswith(b";")

    participants = BuiltinDataReader(observer, view._participants.topic)
    mine = [p for p in participants.read(N=1000) if p.key.bytes.hex() == guid_hex]
    assert _user_data(mine[0].qos) == b"enclave=/;"

    peer.stop()
    _wait_for(
        lambda: all(n.fully_qualified_name != fqn for n in view.nodes()),
        what="node to leave the graph",
    )


@pytest.mark.parametrize(("distro", "gid_size"), [("jazzy", 16), ("humble", 24)])
def test_discovery_info_gid_size_per_distro(distro, gid_size):
    participant = DomainParticipant(0)
    publisher = DiscoveryInfoPublisher(participant, distro)
    info_cls = get_message(DISCOVERY_TYPE, distro=distro)
    reader = DataReader(participant, Topic(participant, DISCOVERY_TOPIC, info_cls))

    class FakeNode:  # the attributes DiscoveryInfoPublisher reads from a node
        def __init__(self):
            self.subscriptions = [type("S", (), {"gid": bytes(range(16))})()]
            self.publishers = []

        def get_name(self):
            return "n"

        def get_namespace(self):
            return "/"

    publisher.publish([FakeNode()])
    sample = _wait_for(lambda: reader.take(N=10), what="discovery sample")[-1]
    assert len(sample.gid.data) == gid_size
    assert bytes(sample.gid.data)[:16] == participant.get_guid().bytes
    assert bytes(sample.gid.data)[16:] == bytes(gid_size - 16)
    node_info = sample.node_entities_info_seq[0]
    assert (node_info.node_namespace, node_info.node_name) == ("/", "n")
    assert bytes(node_info.reader_gid_seq[0].data) == bytes(range(16)).ljust(gid_size, b"\0")
    publisher.close()
