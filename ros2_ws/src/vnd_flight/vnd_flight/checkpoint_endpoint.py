"""A model-holding flight node's side of the checkpoint protocol, shared by the encoder and
policy nodes (the nodes create the topics and hand their callbacks to this class).

The protocol (docs/topics.md):

- ``vnd/checkpoint/command`` (``vnd_msgs/CheckpointCommand``): an operator request. A node
  answers only requests addressed to it: ``target_node`` empty (every node), its fully
  qualified name or its base name.
- ``vnd/checkpoint/status`` (``vnd_msgs/CheckpointStatus``): one answer per request, carrying
  the request's ``request_id`` and the node's bundle state after it. A load is answered when
  the bundle has been loaded and checked off the callback thread (:meth:`poll`), every other
  action at once. A node may add actions of its own (the policy node's arm and disarm).
- ``vnd/model`` (``vnd_msgs/ModelBundle``): a learner bundle, loaded and checked like an
  operator's; its swap or refusal is announced under
  :func:`~vnd_flight.bundle_runtime.learner_request_id`, which the learner reads.

Answers are volatile, and a writer sends only to the readers it has matched: a requester
whose answer reader the node has not matched yet (discovery across DDS vendors can lag the
request) resends the same request. A request id the node has answered is answered again
from memory, and one whose load is still running is not queued twice, so a resent request is
never carried out twice.

Messages are read and built by field name, so the class works with the message classes of
either backend and imports no middleware. All methods belong to the node's callback thread.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from vnd_flight.bundle_runtime import BundleRuntime, CheckpointReply
from vnd_flight.msgfields import set_stamp

STATUS_TOPIC = "vnd/checkpoint/status"  # relative: in the node's namespace
# A node-specific action: request_id -> the reply to publish.
ActionHandler = Callable[[str], CheckpointReply]
# Answered request ids kept for resent requests: far more than one requester resends while
# waiting, a few kilobytes.
REMEMBERED_ANSWERS = 64


class CheckpointEndpoint:
    """Answers checkpoint requests and learner bundles for one node's :class:`BundleRuntime`.

    Args:
        bundles: the node's bundles (its requests change them).
        status_cls: the ``vnd_msgs/CheckpointStatus`` class of the node's backend.
        publish: sends one status message (the node's ``vnd/checkpoint/status`` publisher's
            ``publish``).
        now_ns: the node's clock, nanoseconds (stamps the answers).
        logger: the node's logger (``info`` for carried-out requests, ``warning`` for refusals).
        actions: node-specific actions by ``CheckpointCommand.ACTION_*`` value, answered by the
            handler instead of the bundles.
    """

    def __init__(
        self,
        bundles: BundleRuntime,
        status_cls: type,
        publish: Callable[[Any], None],
        now_ns: Callable[[], int],
        logger: Any,
        actions: Mapping[int, ActionHandler] | None = None,
    ) -> None:
        self.bundles = bundles
        self._status_cls = status_cls
        self._publish = publish
        self._now_ns = now_ns
        self._logger = logger
        self._actions = dict(actions or {})
        self._answered: OrderedDict[str, CheckpointReply] = OrderedDict()
        self._pending: set[str] = set()  # loads queued, not answered yet

    @classmethod
    def for_node(
        cls,
        node: Any,
        bundles: BundleRuntime,
        status_cls: type,
        status_qos: Any,
        actions: Mapping[int, ActionHandler] | None = None,
    ) -> CheckpointEndpoint:
        """The endpoint of ``node`` (a Node of either backend): creates its
        ``vnd/checkpoint/status`` publisher with ``status_qos`` and answers on the node's clock
        and logger."""
        publisher = node.create_publisher(status_cls, STATUS_TOPIC, status_qos)
        return cls(
            bundles,
            status_cls,
            publisher.publish,
            lambda: node.get_clock().now().nanoseconds,
            node.get_logger(),
            actions=actions,
        )

    def on_command(self, msg: Any) -> bool:
        """Carry out one ``CheckpointCommand``; False when it is addressed to another node.

        A load is only queued here; its answer comes from :meth:`poll`. A request id seen
        before is not carried out again: its answer is sent again, or still to come."""
        if not self.bundles.addressed(msg.target_node):
            return False
        request_id = str(msg.request_id)
        if request_id in self._pending:
            return True
        if request_id in self._answered:
            self._send(self._answered[request_id])
            return True
        action = int(msg.action)
        handler = self._actions.get(action)
        reply: CheckpointReply | None
        if handler is not None:
            reply = handler(msg.request_id)
        else:
            reply = self.bundles.request(action, msg.request_id, msg.path, int(msg.version))
        if reply is not None:
            self.answer(reply)
        elif request_id:
            self._pending.add(request_id)
        return True

    def on_model(self, msg: Any) -> None:
        """Queue a learner ``ModelBundle`` for loading and checking; :meth:`poll` answers."""
        self.bundles.submit_learner(bytes(msg.payload), int(msg.version), msg.sha256)

    def poll(self) -> int:
        """Swap in the bundles whose load and checks finished and answer each (never waits);
        the number of answers sent."""
        replies = self.bundles.poll()
        for reply in replies:
            self.answer(reply)
        return len(replies)

    def answer(self, reply: CheckpointReply) -> None:
        """Publish ``reply`` as a ``CheckpointStatus`` stamped now; log what changed or why a
        request was refused."""
        self._send(reply)
        self._pending.discard(reply.request_id)
        if reply.request_id:
            self._answered[reply.request_id] = reply
            while len(self._answered) > REMEMBERED_ANSWERS:
                self._answered.popitem(last=False)
        log = self._logger.info if reply.accepted else self._logger.warning
        log(f"checkpoint '{reply.request_id}': {reply.message} ({self.bundles.describe()})")

    def _send(self, reply: CheckpointReply) -> None:
        """Publish ``reply`` as a ``CheckpointStatus`` stamped now."""
        status = self._status_cls(**reply.fields())
        set_stamp(status.header.stamp, self._now_ns())
        self._publish(status)
