"""QoS profiles: values, validation, and real Cyclone DDS matching between two participants."""

from __future__ import annotations

import os
import time
import uuid
from xml.etree import ElementTree

import pytest
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from vnd_ros import messages, qos
from vnd_ros.paths import REPO_ROOT
from vnd_ros.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

# A domain of its own per test process so parallel test runs never see each other's samples.
DOMAIN_ID = 150 + os.getpid() % 70
MATCH_TIMEOUT_S = 3.0


def test_named_profiles_follow_rclpy_and_the_design() -> None:
    assert qos.qos_profile_sensor_data == QoSProfile(
        ReliabilityPolicy.BEST_EFFORT, DurabilityPolicy.VOLATILE, HistoryPolicy.KEEP_LAST, 5
    )
    assert qos.qos_profile_default == QoSProfile(
        ReliabilityPolicy.RELIABLE, DurabilityPolicy.VOLATILE, HistoryPolicy.KEEP_LAST, 10
    )
    for profile, depth in (
        (qos.qos_profile_model, 1),
        (qos.qos_profile_replay, 3000),
        (qos.qos_profile_status, 1),
    ):
        assert profile.reliability is ReliabilityPolicy.RELIABLE
        assert profile.durability is DurabilityPolicy.TRANSIENT_LOCAL
        assert (profile.history, profile.depth) == (HistoryPolicy.KEEP_LAST, depth)


def test_int_depth_means_reliable_volatile_keep_last() -> None:
    assert qos.as_profile(7) == QoSProfile(depth=7)
    assert qos.to_cyclone_qos(7) == qos.to_cyclone_qos(QoSProfile(depth=7))
    with pytest.raises(TypeError, match="QoSProfile or an int"):
        qos.as_profile(True)
    with pytest.raises(TypeError, match="QoSProfile or an int"):
        qos.as_profile("10")
    with pytest.raises(ValueError, match="depth=0"):
        qos.as_profile(0)
    with pytest.raises(TypeError, match="reliability"):
        QoSProfile(reliability="reliable")  # type: ignore[arg-type]


def test_cyclone_mapping_matches_rmw_cyclonedds() -> None:
    sensor = qos.to_cyclone_qos(qos.qos_profile_sensor_data)
    assert sensor[Policy.Reliability] == Policy.Reliability.BestEffort
    assert sensor[Policy.Durability] == Policy.Durability.Volatile
    assert sensor[Policy.History] == Policy.History.KeepLast(5)
    assert sensor[Policy.DataRepresentation] == Policy.DataRepresentation(
        use_cdrv0_representation=True
    )
    model = qos.to_cyclone_qos(qos.qos_profile_model)
    assert isinstance(model[Policy.Reliability], Policy.Reliability.Reliable)
    assert model[Policy.Durability] == Policy.Durability.TransientLocal
    service = model[Policy.DurabilityService]
    assert service.history == Policy.History.KeepLast(1)
    assert (service.max_samples, service.max_instances) == (-1, -1)
    keep_all = qos.to_cyclone_qos(QoSProfile(history=HistoryPolicy.KEEP_ALL, depth=0))
    assert keep_all[Policy.History] == Policy.History.KeepAll


def test_to_rclpy_qos_needs_rclpy() -> None:
    try:
        from rclpy import qos as rclpy_qos
    except ImportError:
        pytest.skip("rclpy does not import here: no ROS 2 install to compare against")
    converted = qos.to_rclpy_qos(qos.qos_profile_model)
    assert converted.durability == rclpy_qos.DurabilityPolicy.TRANSIENT_LOCAL
    assert converted.depth == 1


@pytest.fixture(scope="module")
def participants():
    """Two participants on one domain (the loopback configuration from conftest)."""
    first, second = DomainParticipant(DOMAIN_ID), DomainParticipant(DOMAIN_ID)
    yield first, second


def _topic_pair(participants, type_name: str):
    name = f"rt/vnd_test/qos_{uuid.uuid4().hex[:8]}"
    cls = messages.get_message(type_name)
    return Topic(participants[0], name, cls), Topic(participants[1], name, cls), cls


def _wait_matched(writer: DataWriter, timeout_s: float = MATCH_TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if writer.get_publication_matched_status().current_count > 0:
            return True
        time.sleep(0.01)
    return False


def _take_within(reader: DataReader, count: int, timeout_s: float = MATCH_TIMEOUT_S) -> list:
    samples: list = []
    deadline = time.monotonic() + timeout_s
    while len(samples) < count and time.monotonic() < deadline:
        samples += reader.take(N=count)
        time.sleep(0.005)
    return samples


def test_best_effort_writer_does_not_match_reliable_reader(participants) -> None:
    writer_topic, reader_topic, _ = _topic_pair(participants, "vnd_msgs/msg/CtbrCommand")
    writer = DataWriter(
        participants[0], writer_topic, qos.to_cyclone_qos(qos.qos_profile_sensor_data)
    )
    reader = DataReader(participants[1], reader_topic, qos.to_cyclone_qos(qos.qos_profile_default))
    assert not _wait_matched(writer, timeout_s=0.5)
    assert reader.get_requested_incompatible_qos_status().total_count >= 1


def test_reliable_writer_and_reader_exchange_in_order(participants) -> None:
    writer_topic, reader_topic, cls = _topic_pair(participants, "vnd_msgs/msg/Transition")
    writer = DataWriter(participants[0], writer_topic, qos.to_cyclone_qos(qos.qos_profile_default))
    reader = DataReader(participants[1], reader_topic, qos.to_cyclone_qos(10))
    assert _wait_matched(writer)
    sent = [cls(tick=i, z=[0.5 * i], z_valid=True, mode=cls.MODE_POLICY) for i in range(5)]
    for sample in sent:
        writer.write(sample)
    assert _take_within(reader, len(sent)) == sent


def test_best_effort_reader_receives_from_reliable_writer(participants) -> None:
    writer_topic, reader_topic, cls = _topic_pair(participants, "nav_msgs/msg/Odometry")
    writer = DataWriter(participants[0], writer_topic, qos.to_cyclone_qos(qos.qos_profile_default))
    reader = DataReader(
        participants[1], reader_topic, qos.to_cyclone_qos(qos.qos_profile_sensor_data)
    )
    assert _wait_matched(writer)
    sample = cls(child_frame_id="base_link")
    writer.write(sample)
    assert _take_within(reader, 1) == [sample]


def test_transient_local_late_joiner_receives_last_bundle(participants) -> None:
    writer_topic, reader_topic, cls = _topic_pair(participants, "vnd_msgs/msg/ModelBundle")
    writer = DataWriter(participants[0], writer_topic, qos.to_cyclone_qos(qos.qos_profile_model))
    for version in (1, 2, 3):
        writer.write(
            cls(version=version, parent_version=version - 1, payload=bytes([version]) * 64)
        )
    late = DataReader(participants[1], reader_topic, qos.to_cyclone_qos(qos.qos_profile_model))
    received = _take_within(late, 2, timeout_s=1.5)
    assert [bundle.version for bundle in received] == [3]
    assert received[0].payload == b"\x03" * 64


# --- the Cyclone configurations ------------------------------------------------------------------

CONFIG_DIR = REPO_ROOT / "config"
CYCLONE_NS = {"c": "https://cdds.io/config"}


def test_loopback_configuration_keeps_traffic_on_127_0_0_1() -> None:
    root = ElementTree.parse(CONFIG_DIR / "cyclonedds_loopback.xml").getroot()
    domain = root.find("c:Domain", CYCLONE_NS)
    interfaces = domain.findall("c:General/c:Interfaces/c:NetworkInterface", CYCLONE_NS)
    assert [(i.get("address"), i.get("multicast")) for i in interfaces] == [("127.0.0.1", "false")]
    assert domain.findtext("c:General/c:AllowMulticast", namespaces=CYCLONE_NS) == "false"
    peers = domain.findall("c:Discovery/c:Peers/c:Peer", CYCLONE_NS)
    assert [peer.get("address") for peer in peers] == ["127.0.0.1"]


def test_network_template_takes_the_interface_from_the_environment() -> None:
    root = ElementTree.parse(CONFIG_DIR / "cyclonedds_network.xml").getroot()
    interface = root.find("c:Domain/c:General/c:Interfaces/c:NetworkInterface", CYCLONE_NS)
    assert interface.get("name") == "${VND_DDS_INTERFACE}"
    assert interface.get("presence_required") == "true"
