"""The model bundles a flight node holds: start-up load, learner pushes, operator checkpoint
requests, all validated off the control thread by :class:`~vnd_flight.hotswap.ModelSwapper`.

A node feeds this plain values taken from ``vnd_msgs/ModelBundle`` and
``vnd_msgs/CheckpointCommand`` and publishes each :class:`CheckpointReply` as a
``vnd_msgs/CheckpointStatus`` (the reply's fields are named like the message's). The node's
``validate`` callable runs on the loader thread after ``load_bundle``: it raises
:class:`~vnd_core.bundle.BundleError` for a bundle this node cannot fly (wrong vehicle, wrong
architecture, failed smoke test, and for the policy node a failed behavioural check:
``vnd_core.behaviour``).

Bundles are held by content hash: an operator may load another run's bundle whatever its
version number, and it never blocks the learner's later bundles (ordering rule:
:mod:`vnd_flight.hotswap`). A refused learner bundle is answered on
``vnd/checkpoint/status`` under :func:`learner_request_id`, which the learner node reads.

Threading: construct, :meth:`BundleRuntime.request`, :meth:`BundleRuntime.poll` and the
properties belong to the node's callback thread; loads run on the swapper's worker.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from vnd_core.behaviour import BehaviourCheckConfig, behaviour_check
from vnd_core.bundle import Bundle, BundleError, load_bundle, smoke_test
from vnd_core.state import ACTION_DIM, hover_state
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.features import context_features
from vnd_core.wire import ACTION_NAMES, CheckpointAction

from vnd_flight.hotswap import Action, ModelSwapper, Source, SwapEvent

# vnd_msgs/CheckpointCommand ACTION_* values (vnd_core.wire.CheckpointAction).
ACTION_LIST = CheckpointAction.LIST
ACTION_LOAD = CheckpointAction.LOAD
ACTION_ACTIVATE = CheckpointAction.ACTIVATE
ACTION_ROLLBACK = CheckpointAction.ROLLBACK
ACTION_PIN = CheckpointAction.PIN
ACTION_UNPIN = CheckpointAction.UNPIN
ACTION_ARM = CheckpointAction.ARM  # answered by the policy node (vnd_flight.arming)
ACTION_DISARM = CheckpointAction.DISARM

Validator = Callable[[Bundle], None]


@dataclass(frozen=True)
class CheckpointReply:
    """One ``vnd_msgs/CheckpointStatus`` without its header (same field names)."""

    request_id: str  # id of the answered request ('model:<version>' for learner bundles)
    node: str  # fully qualified name of the answering node
    accepted: bool  # the request was carried out
    message: str  # what happened, or why not
    active_version: int  # version active after the request (0 = none)
    available_versions: list[int]  # versions held and ready to activate
    pinned: bool  # learner bundles are refused while True

    def fields(self) -> dict:
        """The fields as keyword arguments for the message constructor."""
        return dataclasses.asdict(self)


def learner_request_id(version: int) -> str:
    """Request id under which a learner bundle's swap is announced."""
    return f"model:{version}"


class BundleRuntime:
    """Active, previous and available bundles of one node, and the requests that change them.

    Args:
        node_name: fully qualified node name (answers carry it; commands may target it).
        validate: node-specific checks run on the loader thread (raise BundleError).
        registry_size: bundles kept loaded (active and previous always among them).
    """

    def __init__(self, node_name: str, validate: Validator, registry_size: int = 4) -> None:
        self.node_name = node_name
        self._validate = validate
        # identity = content hash; learner bundles ordered per lineage (hotswap docstring)
        self.swapper: ModelSwapper[Bundle] = ModelSwapper(
            version_of=lambda bundle: bundle.version,
            registry_size=registry_size,
            name="bundle",
            identity_of=lambda bundle: bundle.sha256,
            lineage_of=lambda bundle: bundle.lineage,
        )
        self.rejections = 0  # bundles refused (load errors, failed checks, pinned refusals)

    # ------------------------------------------------------------------ state
    @property
    def active(self) -> Bundle | None:
        """The bundle the node uses now (None before the first one is active)."""
        return self.swapper.active

    @property
    def active_version(self) -> int:
        """Version of the active bundle (0 = none)."""
        return self.swapper.active_version or 0

    @property
    def previous_version(self) -> int:
        """Version a rollback restores (0 = none)."""
        return self.swapper.previous_version or 0

    @property
    def pinned(self) -> bool:
        """True while learner bundles are refused."""
        return self.swapper.pinned

    def close(self) -> None:
        """Stop the loader thread."""
        self.swapper.close()

    # ------------------------------------------------------------------ requests
    def load_startup(self, path: str | Path, timeout_s: float = 60.0) -> CheckpointReply:
        """Load, check and activate the start-up bundle, waiting for it (before any tick).

        Raises BundleError when it is refused or not ready within ``timeout_s``.
        """
        self.swapper.submit(self._path_loader(path), Source.OPERATOR, "startup", activate=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            replies = self.poll()
            if replies:
                reply = replies[-1]
                if not reply.accepted:
                    raise BundleError(f"start-up bundle {path}: {reply.message}")
                return reply
            time.sleep(0.01)
        raise BundleError(f"start-up bundle {path}: not loaded within {timeout_s} s")

    def submit_learner(self, payload: bytes, version: int, sha256: str) -> None:
        """Queue a learner bundle (``vnd_msgs/ModelBundle``); the answer comes from poll()."""

        def load() -> Bundle:
            if sha256 and hashlib.sha256(payload).hexdigest() != sha256.lower():
                raise BundleError(f"payload sha256 differs from the announced {sha256[:16]}...")
            bundle = load_bundle(payload)
            if bundle.version != version:
                raise BundleError(
                    f"message says version {version}, the bundle is version {bundle.version}"
                )
            self._validate(bundle)
            return bundle

        self.swapper.submit(load, Source.LEARNER, learner_request_id(version))

    def addressed(self, target_node: str) -> bool:
        """True when a command with ``target_node`` is meant for this node."""
        if not target_node:
            return True
        return target_node in (self.node_name, self.node_name.rsplit("/", 1)[-1])

    def request(
        self, action: int, request_id: str, path: str = "", version: int = 0
    ) -> CheckpointReply | None:
        """Carry out an operator request; the reply, or None for a load (answered by poll())."""
        if action == ACTION_LOAD:
            if not path:
                return self.reply(request_id, False, "load needs a bundle path")
            self.swapper.submit(self._path_loader(path), Source.OPERATOR, request_id)
            return None
        if action == ACTION_LIST:
            return self.reply(request_id, True, self.describe())
        if action in (ACTION_ARM, ACTION_DISARM):  # the encoder, asked without a target_node
            return self.reply(request_id, False, f"{ACTION_NAMES[action]} is for the policy node")
        handlers: dict[int, Callable[[], SwapEvent]] = {
            ACTION_ACTIVATE: lambda: self.swapper.activate(int(version), request_id),
            ACTION_ROLLBACK: lambda: self.swapper.rollback(request_id),
            ACTION_PIN: lambda: self.swapper.pin(request_id),
            ACTION_UNPIN: lambda: self.swapper.unpin(request_id),
        }
        if action not in handlers:
            return self.reply(request_id, False, f"unknown checkpoint action {action}")
        return self._from_event(handlers[action]())

    def poll(self) -> list[CheckpointReply]:
        """Apply finished loads (never waits) and return their replies, oldest first."""
        return [self._from_event(event) for event in self.swapper.poll()]

    def describe(self) -> str:
        """One line: active, previous and available versions and the pin."""
        held = ", ".join(map(str, self.swapper.available_versions())) or "none"
        pin = ", pinned" if self.pinned else ""
        return (
            f"active {self.active_version}, previous {self.previous_version}, "
            f"available [{held}]{pin}"
        )

    # ------------------------------------------------------------------ internals
    def _path_loader(self, path: str | Path) -> Callable[[], Bundle]:
        def load() -> Bundle:
            bundle = load_bundle(path)
            self._validate(bundle)
            return bundle

        return load

    def _from_event(self, event: SwapEvent) -> CheckpointReply:
        if not event.accepted and event.action == Action.LOAD:
            self.rejections += 1
        request_id = event.request_id
        if not request_id and event.source == Source.LEARNER and event.version is not None:
            request_id = learner_request_id(event.version)
        return self.reply(request_id, event.accepted, event.message)

    def reply(self, request_id: str, accepted: bool, message: str) -> CheckpointReply:
        """An answer to ``request_id`` carrying this node's bundle state."""
        return CheckpointReply(
            request_id=request_id,
            node=self.node_name,
            accepted=accepted,
            message=message,
            active_version=self.active_version,
            available_versions=self.swapper.available_versions(),
            pinned=self.pinned,
        )


# ---------------------------------------------------------------------------------- checks
def check_latent_sizes(bundle: Bundle) -> None:
    """A bundle's policy and VND model must agree on the latent size."""
    if bundle.model is not None and bundle.model.latent_dim != bundle.policy.latent_dim:
        raise BundleError(
            f"wrong architecture: policy latent size {bundle.policy.latent_dim}, "
            f"encoder latent size {bundle.model.latent_dim}"
        )


def check_vehicle(bundle: Bundle, vehicle: VehicleParams) -> None:
    """The bundle must be trained for the vehicle this node flies (every parameter equal)."""
    if bundle.vehicle == vehicle:
        return
    mine, theirs = dataclasses.asdict(vehicle), dataclasses.asdict(bundle.vehicle)
    differing = [name for name in mine if mine[name] != theirs[name]]
    raise BundleError(
        f"bundle is for vehicle '{bundle.vehicle.name}', this node flies '{vehicle.name}' "
        f"(differing: {', '.join(differing)})"
    )


def policy_validator(
    vehicle: VehicleParams, budget_us: float, behaviour: BehaviourCheckConfig | None = None
) -> Validator:
    """Checks of the policy node: vehicle, latent sizes, policy smoke test within ``budget_us``,
    then the behavioural check (``vnd_core.behaviour``: closed-loop rollouts inside the
    safety envelope; ``behaviour`` defaults to :meth:`BehaviourCheckConfig.for_flight` of
    ``vehicle``; ``enabled=False`` skips it, for tests only)."""
    behaviour = behaviour or BehaviourCheckConfig.for_flight(vehicle)

    def validate(bundle: Bundle) -> None:
        check_vehicle(bundle, vehicle)
        check_latent_sizes(bundle)
        smoke_test(bundle, budget_us=budget_us)
        behaviour_check(bundle, behaviour)

    return validate


def encoder_validator(vehicle: VehicleParams, budget_us: float) -> Validator:
    """Checks of the encoder node: vehicle, latent sizes, encoder smoke test (if it has one)."""

    def validate(bundle: Bundle) -> None:
        check_vehicle(bundle, vehicle)
        check_latent_sizes(bundle)
        if bundle.model is not None:
            encoder_smoke_test(bundle, budget_us=budget_us)

    return validate


def encoder_smoke_test(bundle: Bundle, budget_us: float = 20_000.0, repeats: int = 5) -> dict:
    """Encode a canned window: z must be finite and of the latent size; the per-tick cost of
    the deployed path (context features of one new transition + the GRU over the window, see
    ``vnd_core.latent_estimator``) must stay within ``budget_us`` (median of ``repeats``).
    Returns ``median_us``; raises BundleError otherwise."""
    model = bundle.model
    c = model.context_len
    states = hover_state((1, c + 1))
    states[..., 7] = torch.linspace(0.0, 0.5, c + 1)  # some forward speed, to be non-trivial
    actions = torch.zeros(1, c, ACTION_DIM)
    actions[..., 0] = bundle.vehicle.hover_thrust_n
    durations = []
    with torch.inference_mode():
        features = context_features(model.prior, states, actions)  # (1, C, F)
        for _ in range(repeats):
            start = time.perf_counter()
            context_features(model.prior, states[0, -2:], actions[0, -1:])
            z = model.encoder(features)
            durations.append(time.perf_counter() - start)
        reference = model.encode(states, actions)
    if tuple(z.shape) != (1, model.latent_dim) or not bool(torch.isfinite(z).all()):
        raise BundleError(f"encoder smoke test: latent {z.tolist()} is not finite or mis-sized")
    if not torch.allclose(z, reference, atol=1e-5):
        raise BundleError("encoder smoke test: the cached-feature path differs from encode()")
    median_us = float(np.median(durations) * 1e6)
    if median_us > budget_us:
        raise BundleError(
            f"encoder smoke test: one tick takes {median_us:.0f} us (median), "
            f"budget {budget_us:.0f} us"
        )
    return {"median_us": median_us}
