"""The checkpoint protocol shared by the encoder and policy nodes, on real bundles and real
vnd_msgs message classes (dds backend): addressing, immediate and deferred answers, learner
bundles and node-specific actions."""

from __future__ import annotations

import hashlib
import logging
import time

import pytest
from vnd_core.bundle import load_bundle, shipped_bundle_path
from vnd_core.units import NS_PER_S
from vnd_core.vehicle import load_vehicle
from vnd_core.wire import CheckpointAction
from vnd_flight.bundle_runtime import BundleRuntime, encoder_validator
from vnd_flight.checkpoint_endpoint import CheckpointEndpoint
from vnd_ros import dds_node
from vnd_ros.messages import get_message
from vnd_ros.qos import qos_profile_checkpoint_status

NODE = "/vnd1/encoder"
NOW_NS = 1_800_000_000 * NS_PER_S + 250
SHIPPED_VERSION = load_bundle(shipped_bundle_path()).version


class Node:
    """What a node hands the endpoint: its status publisher (here the list of sent messages),
    its clock and its logger."""

    def __init__(self, actions: dict | None = None) -> None:
        self.sent: list = []
        self.bundles = BundleRuntime(NODE, encoder_validator(load_vehicle("agile"), 100_000.0))
        self.endpoint = CheckpointEndpoint(
            self.bundles,
            get_message("vnd_msgs/msg/CheckpointStatus"),
            self.sent.append,
            lambda: NOW_NS,
            logging.getLogger("test_checkpoint_endpoint"),
            actions=actions,
        )

    def wait_answers(self, count: int, timeout_s: float = 30.0) -> None:
        """Poll until ``count`` answers were sent in all."""
        deadline = time.monotonic() + timeout_s
        while len(self.sent) < count:
            assert time.monotonic() < deadline, f"{len(self.sent)} answers, expected {count}"
            self.endpoint.poll()
            time.sleep(0.01)


@pytest.fixture
def node():
    made = Node()
    yield made
    made.bundles.close()


def command(action: int, request_id: str, target: str = "", path: str = "", version: int = 0):
    """A vnd_msgs/CheckpointCommand as an operator's CLI sends it."""
    return get_message("vnd_msgs/msg/CheckpointCommand")(
        request_id=request_id, action=int(action), target_node=target, path=path, version=version
    )


def test_requests_for_another_node_are_not_answered(node) -> None:
    assert not node.endpoint.on_command(command(CheckpointAction.LIST, "r1", "/vnd1/policy"))
    assert not node.endpoint.on_command(command(CheckpointAction.LIST, "r2", "policy"))
    assert node.sent == []


@pytest.mark.parametrize("target", ["", NODE, "encoder"])
def test_an_addressed_request_is_answered_at_once_stamped_and_logged(node, target, caplog):
    with caplog.at_level(logging.INFO, logger="test_checkpoint_endpoint"):
        assert node.endpoint.on_command(command(CheckpointAction.LIST, "r1", target))
    (status,) = node.sent
    assert type(status) is get_message("vnd_msgs/msg/CheckpointStatus")
    assert (status.request_id, status.node, status.accepted) == ("r1", NODE, True)
    assert (status.header.stamp.sec, status.header.stamp.nanosec) == (1_800_000_000, 250)
    assert status.active_version == 0 and list(status.available_versions) == []
    assert [record.levelname for record in caplog.records] == ["INFO"]
    assert "checkpoint 'r1'" in caplog.text


def test_a_load_is_answered_once_the_bundle_is_checked(node) -> None:
    path = str(shipped_bundle_path())
    node.endpoint.on_command(command(CheckpointAction.LOAD, "load-1", path=path))
    assert node.sent == []  # loading and checking happen off the callback thread
    node.wait_answers(1)
    (loaded,) = node.sent
    assert loaded.request_id == "load-1" and loaded.accepted, loaded.message
    assert list(loaded.available_versions) == [SHIPPED_VERSION] and loaded.active_version == 0
    node.endpoint.on_command(command(CheckpointAction.ACTIVATE, "act", version=SHIPPED_VERSION))
    activated = node.sent[-1]
    assert activated.accepted and activated.active_version == SHIPPED_VERSION
    assert node.bundles.active.version == SHIPPED_VERSION


def test_a_resent_request_is_answered_again_and_not_carried_out_twice(node) -> None:
    # A requester resends a request whose answer it missed; a load must not be queued twice
    # and an action must not run twice, but the answer must go out again.
    path = str(shipped_bundle_path())
    load = command(CheckpointAction.LOAD, "load-1", path=path)
    node.endpoint.on_command(load)
    node.endpoint.on_command(load)  # resent while the first is still loading
    node.wait_answers(1)
    time.sleep(0.2)
    assert node.endpoint.poll() == 0  # one load queued, one answer
    node.endpoint.on_command(load)  # resent after the answer
    assert [s.request_id for s in node.sent] == ["load-1", "load-1"]
    assert node.sent[0].message == node.sent[1].message
    calls: list[str] = []

    def arm(request_id: str):
        calls.append(request_id)
        return armed.bundles.reply(request_id, True, f"armed {len(calls)}")

    armed = Node(actions={CheckpointAction.ARM: arm})
    try:
        for _ in range(3):
            armed.endpoint.on_command(command(CheckpointAction.ARM, "arm-1"))
        armed.endpoint.on_command(command(CheckpointAction.ARM, "arm-2"))
        assert calls == ["arm-1", "arm-2"]
        assert [s.message for s in armed.sent] == ["armed 1"] * 3 + ["armed 2"]
    finally:
        armed.bundles.close()


def test_a_learner_bundle_with_a_wrong_hash_is_refused_under_its_request_id(node, caplog):
    payload = shipped_bundle_path().read_bytes()
    bundle_msg = get_message("vnd_msgs/msg/ModelBundle")(
        payload=payload, version=SHIPPED_VERSION, sha256=hashlib.sha256(b"other").hexdigest()
    )
    with caplog.at_level(logging.WARNING, logger="test_checkpoint_endpoint"):
        node.endpoint.on_model(bundle_msg)
        node.wait_answers(1)
    (refused,) = node.sent
    assert refused.request_id == f"model:{SHIPPED_VERSION}" and not refused.accepted
    assert "sha256" in refused.message and "sha256" in caplog.text
    assert node.bundles.rejections == 1


def test_node_actions_are_answered_by_the_node(node) -> None:
    # The encoder has no arming: its endpoint refuses, naming the node that arms.
    node.endpoint.on_command(command(CheckpointAction.ARM, "arm-1"))
    assert not node.sent[-1].accepted and "policy node" in node.sent[-1].message
    calls: list[str] = []

    def arm(request_id: str):
        calls.append(request_id)
        return armed.bundles.reply(request_id, True, "armed")

    armed = Node(actions={CheckpointAction.ARM: arm})
    try:
        assert armed.endpoint.on_command(command(CheckpointAction.ARM, "arm-2"))
        assert calls == ["arm-2"]
        (status,) = armed.sent
        assert (status.request_id, status.accepted, status.message) == ("arm-2", True, "armed")
    finally:
        armed.bundles.close()


def test_for_node_answers_on_the_nodes_status_topic_over_dds() -> None:
    context = dds_node.Context()
    context.init([], None)
    bundles = BundleRuntime(NODE, encoder_validator(load_vehicle("agile"), 100_000.0))
    try:
        node = dds_node.Node("encoder", namespace="vnd1", context=context)
        status_cls = get_message("vnd_msgs/msg/CheckpointStatus")
        endpoint = CheckpointEndpoint.for_node(
            node, bundles, status_cls, qos_profile_checkpoint_status
        )
        listener = dds_node.Node("operator", namespace="vnd1", context=context)
        received: list = []
        listener.create_subscription(
            status_cls, "vnd/checkpoint/status", received.append, qos_profile_checkpoint_status
        )
        executor = dds_node.SingleThreadedExecutor(context=context)
        executor.add_node(listener)
        before_ns = node.get_clock().now().nanoseconds
        deadline = time.monotonic() + 10.0
        while not received:  # a volatile answer reaches only a matched reader: resend
            assert time.monotonic() < deadline, "no CheckpointStatus on /vnd1/vnd/checkpoint/status"
            endpoint.on_command(command(CheckpointAction.LIST, "over-dds", "encoder"))
            executor.spin_once(timeout_sec=0.1)
        status = received[0]
        assert (status.request_id, status.node, status.accepted) == ("over-dds", NODE, True)
        stamp_ns = status.header.stamp.sec * NS_PER_S + status.header.stamp.nanosec
        assert before_ns <= stamp_ns <= node.get_clock().now().nanoseconds
    finally:
        bundles.close()
        context.shutdown()
