"""Learner node: replay topic -> on-disk replay store -> worker process -> new model bundles.

Parameters: the node's own (:class:`LearnerNodeConfig`) and every field of the continual
learner's :class:`~vnd_core.learner.LearnerConfig`, declared with its description under its
nested name (``min_new_ticks``, ``trainer.iterations``, ``validation.eval_rollouts``). The
``preset`` parameter picks the defaults from :data:`~vnd_core.learner.settings.LEARNER_PRESETS`;
parameters given explicitly replace the preset's values. The effective configuration goes to
the worker as a typed file, ``<run_dir>/learner_config.yaml``.

Subscribes ``vnd/replay`` (vnd_msgs/Transition, replay QoS: reliable, transient local,
keep-last 3000 = 60 s at 50 Hz) and writes every new tick record, as its CDR bytes, to the
replay store under ``<run_dir>/replay`` (rosbag2 MCAP segments) **before** counting it;
records already stored (same odometry stamp and tick counter) are dropped. Stored ticks are
forwarded to the continual learner running in a separate, niced worker process
(``vnd_learner.worker``), which decides when to update and returns a bundle or a rejection.
Every accepted bundle is saved to the registry ``<run_dir>/bundles`` (``v0001.safetensors`` +
``index.json``) and published on ``vnd/model`` (ModelBundle, reliable + transient local, depth
1). ``vnd/learner/status`` (LearnerStatus) goes out on every change and at 1 Hz.

Refusals: the flight nodes answer every learner bundle on ``vnd/checkpoint/status`` under
request id ``model:<version>`` (``vnd_flight.bundle_runtime.learner_request_id``). The
learner reads those answers: a refusal is logged and shows in LearnerStatus ``bundles_refused``,
``latest_refused`` (a node refused the newest published bundle for a reason other than its pin)
and ``refusal`` (which node, which version, why), which ``vnd status`` prints and
``vnd preflight`` fails on.

Restart: the store is reloaded (a segment truncated by SIGKILL is salvaged and says so in the
log), the newest registry bundle is published again and the worker continues from it; the
publisher's transient-local history re-delivers what the killed process had not made durable.
A worker that dies is reported on the status topic and restarted (with back-off), and it
re-ingests every stored tick.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vnd_core.bundle import read_metadata, shipped_bundle_path
from vnd_core.config_io import ConfigError
from vnd_core.learner.records import TickRecords
from vnd_core.learner.settings import (
    learner_preset,
    write_config_file,
)
from vnd_core.wire import LearnerState
from vnd_flight.bundle_runtime import learner_request_id
from vnd_flight.learner_store.ipc import Frame
from vnd_flight.learner_store.registry import BundleRegistry, RegistryEntry, RegistryError
from vnd_flight.learner_store.replay_store import ReplayStore, ReplayStoreError, StoreTopic
from vnd_flight.msgfields import set_stamp, stamp_ns
from vnd_ros.messages import get_message, message_definition, serialize, type_hash
from vnd_ros.params import ParameterError
from vnd_ros.qos import (
    qos_profile_checkpoint_status,
    qos_profile_model,
    qos_profile_replay,
    qos_profile_status,
)
from vnd_ros.ros_args import remove_ros_args
from vnd_ros.runtime import (
    Node,
    init,
    shutdown,
    spin_until_shutdown,
    start_node,
)

from vnd_learner.parameters import changed_fields, declare_learner_parameters, parameter_table
from vnd_learner.records import TRANSITION_TYPE, TickBuffer, key_of_cdr, records_from_cdr, tick_key
from vnd_learner.worker_client import WorkerClient, WorkerSpec

MAX_RESTART_BACKOFF_S = 30.0  # longest wait between worker restarts [s]
HISTORY_MAX_BATCHES = 256  # stored-tick batches kept before they are merged into one
# Start-up refusals printed as one 'cannot start' line (bad parameters, an unwritable run_dir).
STARTUP_ERRORS = (ParameterError, ConfigError, OSError)
DESCRIBE_FLAG = "--describe-parameters"  # print the parameter table instead of running
CONFIG_FILE = "learner_config.yaml"  # the worker's typed configuration, under run_dir

# LearnerStatus.STATE_* (vnd_core.wire.LearnerState)
STATE_COLLECTING = LearnerState.COLLECTING
STATE_FITTING = LearnerState.FITTING
STATE_TRAINING = LearnerState.TRAINING
STATE_VALIDATING = LearnerState.VALIDATING
STATE_ERROR = LearnerState.ERROR
_STAGE_TIMES = ("fit", "train", "validate", "total")  # timings of an update result [s]
_STAGE_STATES = (
    ("fit", STATE_FITTING),
    ("train", STATE_TRAINING),
    ("improve", STATE_TRAINING),  # a policy improvement round trains the policy too
    ("valid", STATE_VALIDATING),
)
KIND_POLICY = "policy"  # result kind of a policy improvement round (worker.py)


@dataclass(frozen=True)
class NodeAnswer:
    """A flight node's ``vnd_msgs/CheckpointStatus`` answer to one learner bundle."""

    node: str  # fully qualified name of the answering node
    version: int  # bundle version answered (from the request id 'model:<version>')
    accepted: bool  # the node took the bundle (or already flies it)
    message: str  # the node's reason
    pin: bool  # a refusal because the node is pinned (an operator's choice)

    @classmethod
    def of(cls, msg: Any) -> NodeAnswer | None:
        """The answer in ``msg``, or None when it answers no learner bundle."""
        request_id = str(msg.request_id)
        prefix = learner_request_id(0)[:-1]  # 'model:'
        if not request_id.startswith(prefix) or not request_id[len(prefix) :].isdigit():
            return None
        accepted, message = bool(msg.accepted), str(msg.message)
        return cls(
            node=str(msg.node),
            version=int(request_id[len(prefix) :]),
            accepted=accepted,
            message=message,
            pin=not accepted and bool(msg.pinned) and message.startswith("pinned"),
        )


class LearnerNode(Node):
    """vnd/replay -> replay store -> worker -> vnd/model, vnd/learner/status."""

    def __init__(self) -> None:
        super().__init__("learner")
        self.cfg, self.learner_config = declare_learner_parameters(self)
        self.ModelBundle = get_message("vnd_msgs/msg/ModelBundle")
        self.LearnerStatus = get_message("vnd_msgs/msg/LearnerStatus")
        self.state, self.message = STATE_COLLECTING, "starting"
        self.latest_version = 0
        self.updates_accepted = self.updates_rejected = 0
        self.improvements_accepted = 0  # policy-only versions between model updates
        self.last_update_duration_s = 0.0
        self.duplicates = 0
        self.store_failures = 0
        # newest answer of each flight node to a learner bundle: node -> NodeAnswer
        self.node_answers: dict[str, NodeAnswer] = {}
        self.refused: set[tuple[str, int]] = set()  # (node, version) refusals seen
        self.refusal = ""  # newest refusal, as LearnerStatus.refusal says it
        self.shutting_down = False
        root = Path(self.cfg.run_dir)
        self.config_path = write_config_file(
            root / CONFIG_FILE, self.learner_config, self.cfg.preset
        )
        changes = changed_fields(self.learner_config, learner_preset(self.cfg.preset))
        listed = ", ".join(f"{name}={value!r}" for name, value in changes.items()) or "none"
        self.get_logger().info(
            f"learner config {self.config_path}: preset {self.cfg.preset}, changed: {listed}"
        )
        self.history = self._open_store(root / "replay")
        self.registry = BundleRegistry(root / "bundles")
        self._open_registry()
        self.pending = TickBuffer()
        self.model_pub = self.create_publisher(self.ModelBundle, "vnd/model", qos_profile_model)
        self.status_pub = self.create_publisher(
            self.LearnerStatus, "vnd/learner/status", qos_profile_status
        )
        self._republish_latest()
        self.worker: WorkerClient | None = None
        self.restart_at_s = 0.0
        self.backoff_s = self.cfg.restart_backoff_s
        if self.cfg.learn:
            self._start_worker()
        else:
            self._set_state(STATE_COLLECTING, "learning disabled (learn:=false): recording only")
        self.create_subscription(
            get_message(TRANSITION_TYPE), "vnd/replay", self.on_replay, qos_profile_replay
        )
        self.create_subscription(
            get_message("vnd_msgs/msg/CheckpointStatus"),
            "vnd/checkpoint/status",
            self.on_checkpoint_status,
            qos_profile_checkpoint_status,
        )
        self.create_timer(self.cfg.forward_period_s, self.on_forward)
        self.create_timer(self.cfg.status_period_s, self.publish_status)
        self.get_logger().info(
            f"learner ready: {self.store.count} ticks stored in {self.store.root}, registry "
            f"{self.registry.root} (latest version {self.latest_version or 'none'})"
        )

    # ------------------------------------------------------------------ start-up
    def _open_store(self, path: Path) -> list[TickRecords]:
        """Open the replay store; the stored ticks as one batch (kept for worker restarts)."""
        topic_name = self.resolve_topic_name("vnd/replay")
        msgdef, _encoding = message_definition(TRANSITION_TYPE)
        topic = StoreTopic(topic_name, TRANSITION_TYPE, msgdef, type_hash(TRANSITION_TYPE))
        self.store = ReplayStore(
            path,
            topic,
            key_of_cdr,
            segment_period_s=self.cfg.segment_period_s,
            segment_max_messages=self.cfg.segment_max_ticks,
        )
        messages, report = self.store.open()
        log = self.get_logger()
        log.info(f"replay store {path}: {report.describe()}")
        if report.salvaged:
            log.warning(
                f"replay store {path}: recovered truncated segment(s) "
                f"{', '.join(report.salvaged)} left by an unclean exit"
            )
        return [records_from_cdr([m.data for m in messages])]

    def _open_registry(self) -> None:
        for note in self.registry.open():
            self.get_logger().warning(f"bundle registry {self.registry.root}: {note}")

    def _latest_entry(self) -> tuple[RegistryEntry, bytes] | None:
        """Newest registry bundle whose file matches the index (older ones as fallback)."""
        for entry in reversed(self.registry.entries):
            try:
                return entry, self.registry.read_payload(entry)
            except RegistryError as err:
                self.get_logger().error(f"skipping registry bundle v{entry.version}: {err}")
        return None

    def _republish_latest(self) -> None:
        """After a restart: the newest learned bundle goes out again for late joiners."""
        latest = self._latest_entry()
        if latest is not None:
            entry, payload = latest
            self._publish_bundle(payload, entry.version, entry.parent_version, entry.sha256)
            self.get_logger().info(f"resuming from registry bundle v{entry.version}")

    def _active_bundle_path(self) -> Path:
        latest = self._latest_entry()
        if latest is not None:
            return self.registry.path_of(latest[0])
        return Path(self.cfg.bundle) if self.cfg.bundle else shipped_bundle_path()

    # ------------------------------------------------------------------ replay records
    def on_replay(self, msg: Any) -> None:
        """Persist a new tick record, then count it and queue it for the worker."""
        key = tick_key(msg)
        if self.store.contains(key):
            self.duplicates += 1  # the transient-local backlog re-delivered after a restart
            self.get_logger().info(
                f"{self.duplicates} already stored ticks dropped so far",
                throttle_duration_sec=10.0,
            )
            return
        try:
            self.store.append(stamp_ns(msg.header.stamp), serialize(msg), key)
        except (ReplayStoreError, OSError) as err:
            self.store_failures += 1
            self.get_logger().error(
                f"replay store write failed ({self.store_failures} ticks lost so far): {err}",
                throttle_duration_sec=5.0,
            )
            self._set_state(STATE_ERROR, f"replay store write failed: {err}")
            return
        self.pending.add(msg)

    def on_forward(self) -> None:
        """Rotate the store segment, forward new ticks, handle worker frames and restarts."""
        self.store.rotate_if_due()
        batch = self.pending.take()
        if len(batch):
            self.history.append(batch)
            if len(self.history) > HISTORY_MAX_BATCHES:  # keep few large arrays, not many small
                self.history = [TickRecords.concat(self.history)]
            if self.worker is not None:
                self.worker.send_ticks(batch)
        if self.worker is None:
            return
        for frame in self.worker.poll():
            self._on_frame(frame)
        restart_due = time.monotonic() >= self.restart_at_s
        if not self.worker.running and not self.shutting_down and restart_due:
            self._start_worker()

    # ------------------------------------------------------------------ worker
    def _start_worker(self) -> None:
        path = self._active_bundle_path()
        if not path.is_file():
            self.worker = None
            self._set_state(STATE_ERROR, f"no bundle to learn from: {path} does not exist")
            self.get_logger().error(self.message)
            return
        spec = WorkerSpec(
            vehicle=self.cfg.vehicle,
            bundle_path=str(path),
            config_path=str(self.config_path),
            niceness=self.cfg.worker_niceness,
        )
        if self.worker is None:
            self.worker = WorkerClient(spec)
        self.worker.spec = spec
        self.worker.start()
        self.worker.send_ticks(TickRecords.concat(self.history))
        self._set_state(STATE_COLLECTING, f"worker pid {self.worker.pid} starting from {path}")
        self.get_logger().info(self.message)

    def _on_frame(self, frame: Frame) -> None:
        meta = frame.meta
        if frame.kind == "ready":
            self.backoff_s = self.cfg.restart_backoff_s
            self._set_state(STATE_COLLECTING, f"worker pid {meta.get('pid')} learning")
        elif frame.kind == "progress":
            stage = str(meta.get("stage", ""))
            state = next((s for word, s in _STAGE_STATES if word in stage.lower()), self.state)
            percent = 100.0 * float(meta.get("fraction", 0.0))
            if stage == "improve":
                self._set_state(state, f"improving the policy ({percent:.0f}% of the round)")
            else:
                self._set_state(state, f"updating: {stage} ({percent:.0f}% of the cycle)")
        elif frame.kind == "result":
            self._on_result(frame)
        elif frame.kind == "error":
            self._set_state(STATE_ERROR, f"worker: {meta.get('message', '')}")
            self.get_logger().error(self.message)
        elif frame.kind == "exited" and not self.shutting_down:
            self._on_worker_exit(int(meta.get("returncode", -1)), str(meta.get("note", "")))

    def _on_worker_exit(self, returncode: int, note: str) -> None:
        self.restart_at_s = time.monotonic() + self.backoff_s
        detail = f"worker exited with code {returncode}{'; ' + note if note else ''}"
        self._set_state(STATE_ERROR, f"{detail}; restarting in {self.backoff_s:.1f} s")
        self.get_logger().error(self.message)
        self.backoff_s = min(2.0 * self.backoff_s, MAX_RESTART_BACKOFF_S)

    def _on_result(self, frame: Frame) -> None:
        meta = frame.meta
        payload = frame.blobs.get("bundle")
        improvement = meta.get("kind") == KIND_POLICY
        if not improvement:
            self.last_update_duration_s = float(meta.get("total_s") or 0.0)
        if improvement and (not meta.get("accepted") or payload is None):
            # a round that found no better policy is routine, not a rejected update
            self._set_state(STATE_COLLECTING, str(meta.get("reason", "")))
            return
        if meta.get("preempted"):  # an update gave way to a new condition: not a rejection
            self._set_state(STATE_COLLECTING, str(meta.get("reason", "update preempted")))
            self.get_logger().info(self.message)
            return
        if not meta.get("accepted") or payload is None:
            self.updates_rejected += 1
            self._set_state(STATE_COLLECTING, f"update rejected: {meta.get('reason', '')}")
            self.get_logger().warning(self.message)
            return
        metrics = dict(meta.get("metrics") or {})
        metrics.setdefault("timing_s", {k: meta.get(f"{k}_s") for k in _STAGE_TIMES})
        try:
            entry = self.registry.add(
                payload, metrics=metrics, decided_wall_s=float(meta["decided_wall_s"])
            )
        except RegistryError as err:
            self.updates_rejected += 1
            self._set_state(STATE_ERROR, f"accepted bundle not registered: {err}")
            self.get_logger().error(self.message)
            return
        what = "policy improvement" if improvement else "update"
        if improvement:
            self.improvements_accepted += 1
        else:
            self.updates_accepted += 1
        self._publish_bundle(payload, entry.version, entry.parent_version, entry.sha256)
        took_s = float(meta.get("total_s") or 0.0)
        self._set_state(
            STATE_COLLECTING, f"published v{entry.version} ({what} took {took_s:.1f} s)"
        )
        self.get_logger().info(self.message)

    # ------------------------------------------------------------------ node answers
    def on_checkpoint_status(self, msg: Any) -> None:
        """A flight node's answer; those to learner bundles are kept, refusals reported."""
        answer = NodeAnswer.of(msg)
        if answer is None:
            return
        self.node_answers[answer.node] = answer
        if answer.accepted or (answer.node, answer.version) in self.refused:
            return
        self.refused.add((answer.node, answer.version))
        self.refusal = f"{answer.node} refused v{answer.version}: {answer.message}"
        self.get_logger().warning(f"bundle refused by a flight node: {self.refusal}")
        self.publish_status()

    def latest_refused(self) -> bool:
        """True while a flight node's answer to the newest published bundle is a refusal
        other than a pin (an operator's choice, reported as such by the node)."""
        return any(
            answer.version == self.latest_version and not answer.accepted and not answer.pin
            for answer in self.node_answers.values()
        )

    # ------------------------------------------------------------------ outputs
    def _publish_bundle(self, payload: bytes, version: int, parent: int, sha256: str) -> None:
        msg = self.ModelBundle(
            version=version,
            parent_version=parent,
            sha256=sha256 or hashlib.sha256(payload).hexdigest(),
            metadata_json=json.dumps(read_metadata(payload), sort_keys=True),
            payload=payload,
        )
        set_stamp(msg.header.stamp, self.get_clock().now().nanoseconds)
        self.model_pub.publish(msg)
        self.latest_version = max(self.latest_version, version)
        try:
            self.registry.mark_published(version)
        except RegistryError as err:
            self.get_logger().error(f"publication of v{version} not recorded: {err}")

    def _set_state(self, state: LearnerState, message: str) -> None:
        changed = (state, message) != (self.state, self.message)
        self.state, self.message = state, message
        if changed and hasattr(self, "status_pub"):
            self.publish_status()

    def publish_status(self) -> None:
        """vnd/learner/status: state, ticks stored, versions, update counters."""
        status = self.LearnerStatus(
            state=self.state,
            ticks_stored=self.store.count,
            latest_version=self.latest_version,
            updates_accepted=self.updates_accepted,
            updates_rejected=self.updates_rejected,
            last_update_duration_s=self.last_update_duration_s,
            message=self.message,
            bundles_refused=len(self.refused),
            latest_refused=self.latest_refused(),
            refusal=self.refusal,
            improvements_accepted=self.improvements_accepted,
        )
        set_stamp(status.header.stamp, self.get_clock().now().nanoseconds)
        self.status_pub.publish(status)

    def destroy_node(self) -> None:
        """Make the open store segment durable, stop the worker, then destroy the node."""
        self.shutting_down = True
        self.store.close()
        if self.worker is not None:
            self.worker.stop()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    """Run the learner node until Ctrl-C or SIGTERM.

    With ``--describe-parameters`` (before ``--ros-args``), declare the parameters only and
    print one JSON line per parameter (name, type, value, description), then exit.
    """
    argv = list(sys.argv if args is None else args)
    describe = DESCRIBE_FLAG in remove_ros_args(argv)
    init(args=[arg for arg in argv if arg != DESCRIBE_FLAG])
    if not describe:
        spin_until_shutdown(start_node(LearnerNode, STARTUP_ERRORS, "learner"))
        return
    node = Node("learner")
    start_node(lambda: declare_learner_parameters(node), STARTUP_ERRORS, "learner")
    for row in parameter_table(node):
        print(json.dumps(row), flush=True)
    node.destroy_node()
    shutdown()


if __name__ == "__main__":
    main()
