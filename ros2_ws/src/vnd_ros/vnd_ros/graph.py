"""ROS 2 graph visibility for the dds backend, both directions.

Writing: :class:`DiscoveryInfoPublisher` publishes ``ros_discovery_info``
(rmw_dds_common/msg/ParticipantEntitiesInfo) the way rmw_cyclonedds does: reliable, transient
local, keep-last 1, listing every node of the participant with its reader and writer GIDs (the
16-byte DDS GUIDs, zero-padded to 24 bytes on Humble). Together with the participant's
``enclave=/;`` USER_DATA this is what ``ros2 node list`` needs.

Reading: :class:`GraphView` lists the nodes (from ``ros_discovery_info``) and the topics (from
the DCPS built-in publication/subscription topics) seen on the domain, in ROS names.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from cyclonedds.builtin import (
    BuiltinDataReader,
    BuiltinTopicDcpsParticipant,
    BuiltinTopicDcpsPublication,
    BuiltinTopicDcpsSubscription,
)
from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from vnd_ros.cyclone_compat import delete_entity
from vnd_ros.names import dds_topic_name, ros_topic_name, ros_type_name

DISCOVERY_TOPIC = "ros_discovery_info"
DISCOVERY_TYPE = "rmw_dds_common/msg/ParticipantEntitiesInfo"
GID_SIZE_BY_DISTRO = {"humble": 24, "jazzy": 16}
# Samples of ros_discovery_info kept by a GraphView between refreshes: the topic is keyless,
# so every participant's latest sample shares one history.
_VIEW_HISTORY_DEPTH = 1000
_ALIVE = SampleState.Any | ViewState.Any | InstanceState.Alive
# How long after a participant's ros_discovery_info writer is discovered its latest sample
# (transient local) is still expected.
ANNOUNCEMENT_WAIT_S = 0.5


def _discovery_qos(depth: int | None) -> Qos:
    history = Policy.History.KeepLast(depth) if depth else Policy.History.KeepAll
    return Qos(
        Policy.Reliability.Reliable(max_blocking_time=100_000_000),
        Policy.Durability.TransientLocal,
        history,
    )


class DiscoveryInfoPublisher:
    """Announces the nodes of one participant on ``ros_discovery_info``.

    Args:
        participant: the process's participant (its GUID is the participant GID).
        distro: 'jazzy' (16-byte Gid) or 'humble' (24-byte Gid).
    """

    def __init__(self, participant: DomainParticipant, distro: str) -> None:
        from vnd_ros.messages import get_message

        self._gid_size = GID_SIZE_BY_DISTRO[distro]
        self._info_cls = get_message(DISCOVERY_TYPE, distro=distro)
        self._node_cls = get_message("rmw_dds_common/msg/NodeEntitiesInfo", distro=distro)
        self._gid_cls = get_message("rmw_dds_common/msg/Gid", distro=distro)
        topic = Topic(participant, DISCOVERY_TOPIC, self._info_cls)
        self._writer: DataWriter | None = DataWriter(participant, topic, _discovery_qos(1))
        self._participant_gid = self._gid(participant.get_guid().bytes)

    def _gid(self, guid: bytes) -> Any:
        return self._gid_cls(data=guid.ljust(self._gid_size, b"\0"))

    def publish(self, nodes: list[Any]) -> None:
        """Publish the current node list (objects with get_name/get_namespace and entities)."""
        if self._writer is None:
            return
        infos = [
            self._node_cls(
                node_namespace=node.get_namespace(),
                node_name=node.get_name(),
                reader_gid_seq=[self._gid(sub.gid) for sub in node.subscriptions],
                writer_gid_seq=[self._gid(pub.gid) for pub in node.publishers],
            )
            for node in nodes
        ]
        msg = self._info_cls(gid=self._participant_gid, node_entities_info_seq=infos)
        self._writer.write(msg)

    def close(self) -> None:
        """Announce no nodes, then delete the writer."""
        if self._writer is not None:
            self.publish([])
            writer, self._writer = self._writer, None
            delete_entity(writer)


@dataclass(frozen=True)
class NodeInfo:
    """A ROS node seen on the domain."""

    name: str
    namespace: str
    reader_gids: tuple[bytes, ...] = ()  # 16-byte endpoint GUIDs of the node's readers
    writer_gids: tuple[bytes, ...] = ()  # 16-byte endpoint GUIDs of the node's writers

    @property
    def fully_qualified_name(self) -> str:
        """'/ns/name'."""
        return ("" if self.namespace == "/" else self.namespace) + "/" + self.name


@dataclass
class TopicInfo:
    """A ROS topic seen on the domain, with its endpoints."""

    name: str  # ROS name, e.g. '/odom'
    types: set[str] = field(default_factory=set)  # ROS type names, e.g. 'nav_msgs/msg/Odometry'
    publisher_count: int = 0
    subscriber_count: int = 0


@dataclass(frozen=True)
class NamespaceReaders:
    """The readers of one topic among the nodes of one namespace, as the graph shows them."""

    readers: set[str]  # fully qualified names of the nodes reading the topic
    nodes: set[str]  # fully qualified names of every node of the namespace
    endpoints_known: bool  # every reader those nodes announce is discovered
    all_announced: bool  # no participant that may still announce ROS nodes is waiting
    participants: frozenset[bytes] = frozenset()  # GUIDs of the live participants seen
    # node -> (reader GIDs, writer GIDs but its /rosout one) it announces: a change means it is
    # still creating entities
    entities: dict[str, tuple[tuple[bytes, ...], tuple[bytes, ...]]] = field(default_factory=dict)


class GraphView:
    """Nodes and topics of the ROS graph as seen from ``participant``.

    Cheap to query repeatedly: each call reads the built-in topics and the newly received
    discovery samples. Give discovery a moment (about 0.1-0.5 s) after creating the view.
    """

    def __init__(self, participant: DomainParticipant, distro: str | None = None) -> None:
        from vnd_ros.backend import ros_distro
        from vnd_ros.messages import get_message

        distro = distro or ros_distro()
        self._participants = BuiltinDataReader(participant, BuiltinTopicDcpsParticipant)
        self._publications = BuiltinDataReader(participant, BuiltinTopicDcpsPublication)
        self._subscriptions = BuiltinDataReader(participant, BuiltinTopicDcpsSubscription)
        self._alive = {
            reader: ReadCondition(reader, _ALIVE)
            for reader in (self._participants, self._publications, self._subscriptions)
        }
        info_cls = get_message(DISCOVERY_TYPE, distro=distro)
        topic = Topic(participant, DISCOVERY_TOPIC, info_cls)
        self._info = DataReader(participant, topic, _discovery_qos(_VIEW_HISTORY_DEPTH))
        self._nodes_by_participant: dict[bytes, list[NodeInfo]] = {}
        self._announcer_seen_s: dict[bytes, float] = {}  # participant -> when its writer showed

    def _read_alive(self, reader: BuiltinDataReader) -> list[Any]:
        return reader.read(N=100_000, condition=self._alive[reader])

    def participants(self) -> set[bytes]:
        """16-byte GUIDs of the participants currently alive on the domain."""
        return {sample.key.bytes for sample in self._read_alive(self._participants)}

    def nodes(self) -> list[NodeInfo]:
        """ROS nodes of live participants, sorted by fully qualified name."""
        for sample in self._info.take(N=_VIEW_HISTORY_DEPTH):
            if not hasattr(sample, "gid"):  # dispose notification: no data
                continue
            self._nodes_by_participant[bytes(sample.gid.data)[:16]] = [
                NodeInfo(
                    name=info.node_name,
                    namespace=info.node_namespace,
                    reader_gids=tuple(bytes(g.data)[:16] for g in info.reader_gid_seq),
                    writer_gids=tuple(bytes(g.data)[:16] for g in info.writer_gid_seq),
                )
                for info in sample.node_entities_info_seq
            ]
        alive = self.participants()
        nodes = [
            node
            for gid, infos in self._nodes_by_participant.items()
            if gid in alive
            for node in infos
        ]
        return sorted(nodes, key=lambda n: n.fully_qualified_name)

    def reader_topics(self) -> dict[bytes, str]:
        """16-byte GUID -> DDS topic name of every reader alive on the domain ('rt/x' for
        ROS topics; services and DDS-only topics keep their own names)."""
        return {e.key.bytes: e.topic_name for e in self._read_alive(self._subscriptions)}

    def readers_of(self, topic: str, namespace: str) -> NamespaceReaders:
        """Which nodes of ``namespace`` ('/vnd1') read ROS ``topic``, and how complete the
        view is (see :class:`NamespaceReaders`)."""
        # Announcement state first: a node list read after it can only be more complete.
        all_announced = not self.unannounced_participants()
        participants = frozenset(self.participants())
        nodes = [node for node in self.nodes() if node.namespace == namespace]
        readers = self.reader_topics()
        rosout = {  # every node writes /rosout from its first moment: not a sign of progress
            e.key.bytes for e in self._read_alive(self._publications) if e.topic_name == "rt/rosout"
        }
        dds_topic = dds_topic_name(topic)
        return NamespaceReaders(
            readers={
                node.fully_qualified_name
                for node in nodes
                if any(readers.get(gid) == dds_topic for gid in node.reader_gids)
            },
            nodes={node.fully_qualified_name for node in nodes},
            endpoints_known=all(gid in readers for node in nodes for gid in node.reader_gids),
            all_announced=all_announced,
            participants=participants,
            entities={
                n.fully_qualified_name: (
                    n.reader_gids,
                    tuple(gid for gid in n.writer_gids if gid not in rosout),
                )
                for n in nodes
            },
        )

    def unannounced_participants(self) -> set[bytes]:
        """Live participants that may still announce ROS nodes: none of their endpoints is
        discovered yet (endpoint discovery still running), or their ``ros_discovery_info``
        writer was discovered less than ``ANNOUNCEMENT_WAIT_S`` ago and its sample has not
        arrived (it follows the match within milliseconds). A participant whose writer has
        been known longer without a sample announces nothing yet (a process that created its
        participant but no node), and one whose endpoints are known without that writer is a
        plain DDS application: neither is waited for."""
        publications = self._read_alive(self._publications)
        endpoints = publications + self._read_alive(self._subscriptions)
        with_endpoints = {endpoint.participant_key.bytes for endpoint in endpoints}
        now = time.monotonic()
        for endpoint in publications:
            if endpoint.topic_name == DISCOVERY_TOPIC:
                self._announcer_seen_s.setdefault(endpoint.participant_key.bytes, now)
        self.nodes()  # take the announcements that arrived since the last call
        waiting = self.participants() - set(self._nodes_by_participant)
        return {
            gid
            for gid in waiting
            if gid not in with_endpoints
            or now - self._announcer_seen_s.get(gid, -float("inf")) < ANNOUNCEMENT_WAIT_S
        }

    def topics(self, include_hidden: bool = False) -> dict[str, TopicInfo]:
        """ROS topics by name. DDS-only topics (no 'rt/' prefix) only with ``include_hidden``."""
        topics: dict[str, TopicInfo] = {}
        for reader, is_writer in ((self._publications, True), (self._subscriptions, False)):
            for endpoint in self._read_alive(reader):
                name = ros_topic_name(endpoint.topic_name)
                if name is None:
                    if not include_hidden or endpoint.topic_name.startswith("DCPS"):
                        continue
                    name = endpoint.topic_name
                info = topics.setdefault(name, TopicInfo(name))
                info.types.add(ros_type_name(endpoint.type_name))
                if is_writer:
                    info.publisher_count += 1
                else:
                    info.subscriber_count += 1
        return dict(sorted(topics.items()))
