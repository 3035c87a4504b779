"""The disturbance-observer baseline of ``vnd eval`` (dob): L1-style augmentation of a
policy with an online estimate of the external force and of the body-rate offset a torque
leaves, no learning in flight.

Observer (:class:`~vnd_core.force_observer.ForceObserver` on the prior alone): every tick it
compares the measured velocity change with the one the prior predicts for the command the
motors were actually producing (latency and motor lag handled explicitly) and low-pass filters
the difference into an external acceleration estimate. Everything the prior does not model
(wind drag, the vehicle's own drag, a payload, a weak rotor's lost thrust) lands in the
estimate, lumped into one force.

Feed-forward: what a practitioner does with a learned CTBR policy is to give it the force as
an input. The dob policy is dr's policy fine-tuned further (dr's trainer budget, warm start:
a practitioner starts from the most robust policy at hand) in the external-force simulation
(:class:`~vnd_core.evaluation.baselines.ExternalForcePrior`,
:meth:`RandomisationConfig.observer_feedforward`) with the true episode force as its z
(slots 0-2, newtons / ``FORCE_SCALE_N``); in flight the observer's estimate times the nominal
mass takes that place. The commands go out with the observer's compensation
(:meth:`~vnd_core.force_observer.ForceObserver.compensate`): the vertical force as thrust
feed-forward, and the body-rate offset a torque leaves under the vehicle's rate loop taken off.
The policy therefore reads and trains on the horizontal force only
(``RandomisationConfig.thrust_feedforward``). Nothing is learned in flight.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import nn

from vnd_core.bundle import Bundle
from vnd_core.evaluation.baselines import DISTURBANCE_DIM, FORCE, FORCE_SCALE_N
from vnd_core.evaluation.continual_loop import LATENT_ONLINE, LatentSource, Method
from vnd_core.force_observer import ForceObserver, ObserverConfig
from vnd_core.policy import with_force_input
from vnd_core.vehicle import VehicleParams


def force_latent(observer: ForceObserver) -> np.ndarray:
    """The dob policy's z (8,): the observer's force as the policy reads it
    (:meth:`~vnd_core.force_observer.ForceObserver.policy_force_n`, its horizontal part) in
    units of ``FORCE_SCALE_N`` in slots 0-2, zeros elsewhere."""
    z = np.zeros(DISTURBANCE_DIM, dtype=np.float32)
    z[FORCE] = observer.policy_force_n() / FORCE_SCALE_N
    return z


class _ObserverSource(LatentSource):
    """The observer as a per-run latent source of the continual loop (the run also
    compensates its commands' body rates with it)."""

    observer: ForceObserver

    def __init__(self, vehicle: VehicleParams, config: ObserverConfig) -> None:
        self.observer = ForceObserver(vehicle, config)

    def latent(self, stamp_ns: int, measured: np.ndarray) -> np.ndarray:
        """z of the force estimate after this measurement."""
        self.observer.observe(measured)
        return force_latent(self.observer)

    def command(self, stamp_ns: int, action: np.ndarray) -> None:
        """Into the observer's command history."""
        self.observer.command(action)


class DOBMethod(Method):
    """dob: the force-conditioned policy of ``bundle`` fed by a fresh
    :class:`~vnd_core.force_observer.ForceObserver` in every run; no learner."""

    def __init__(self, bundle: Bundle, config: ObserverConfig | None = None) -> None:
        super().__init__("dob", bundle, LATENT_ONLINE)
        self.config = config or ObserverConfig()
        self.config.validate()

    def latent_source(self) -> LatentSource:
        """A fresh observer (no estimate carried over between runs)."""
        return _ObserverSource(self.initial.vehicle, self.config)


def force_input_bundle(dob: Bundle) -> Bundle:
    """A bundle whose policy reads the dob policy's force as a force input
    (``PolicyConfig.force_dim`` = 3) and has zero-weighted z inputs: the same behaviour as
    ``dob``'s policy when fed the same force with z = 0, so a learner can start from it and give
    z a meaning while the observer keeps answering what the model does not explain yet.

    ``dob``'s policy reads the force as its z (slots 0-2, units of ``FORCE_SCALE_N``)."""
    old = dob.policy
    if old.force_dim or old.latent_dim != DISTURBANCE_DIM:
        raise ValueError("force_input_bundle() takes a dob bundle (force in z slots 0-2)")
    policy = with_force_input(old)
    head = old.observation.dim - old.latent_dim  # observation entries before z
    with torch.no_grad():  # dob's force columns move to the force input; z starts silent
        first, first_old = policy.net[0], old.net[0]
        assert isinstance(first, nn.Linear) and isinstance(first_old, nn.Linear)
        force = slice(head + FORCE.start, head + FORCE.stop)
        first.weight[:, head : head + 3] = first_old.weight[:, force] / FORCE_SCALE_N
        policy.silence_latent()
        for stat in ("mean", "std"):
            getattr(policy.normalizer, stat)[head : head + 3] = getattr(old.normalizer, stat)[force]
    summary = {**dob.summary, "force_input_from": "dob"}
    return dataclasses.replace(dob, policy=policy.eval(), summary=summary, sha256="")
