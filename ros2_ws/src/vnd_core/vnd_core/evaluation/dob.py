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

In flight the policy reads the force as a force input (:func:`force_input_bundle`), so dob
flies exactly as the flight stack flies a force-input bundle without a model: the policy
node's observer (the flight stack's :class:`~vnd_core.force_observer.ObserverConfig`) and its
compensation.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from vnd_core.bundle import Bundle
from vnd_core.evaluation.baselines import DISTURBANCE_DIM, FORCE, FORCE_SCALE_N
from vnd_core.evaluation.continual_loop import Method
from vnd_core.policy import with_force_input


def dob_method(bundle: Bundle) -> Method:
    """dob: the force-conditioned policy of ``bundle`` (dob's training) flown as the flight
    stack flies a policy with a force input (:func:`force_input_bundle`): the policy node's
    observer feeds it the force and compensates its commands; a fresh observer every run, no
    learner."""
    return Method("dob", force_input_bundle(bundle))


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
