"""A scenario flown by the stack's flight runtime in simulated time, without middleware.

The loop of :mod:`vnd_flight.fault_flight` with no fault and with the encoder: the simulated
vehicle on its stand with its 100 Hz motion capture, the pose filter, the encoder's latent
estimator and the policy node's controller (safety filter, force observer, rate
compensation), at the nodes' timing. It measures the state as the stack does (motion capture
through the pose filter), and flies bundles within a few millimetres of the stack and in its
order (docs/decisions.md). A flight report's references are flown so; ``vnd eval`` flies
every run on the same loop (:mod:`vnd_flight.evaluation_flight`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from vnd_core.bundle import Bundle
from vnd_core.scenario import Scenario
from vnd_core.state import POS

from vnd_flight.fault_flight import EncoderLatent, FaultFlight, RuntimeLoop


@dataclass(frozen=True)
class RuntimeFlight:
    """What the vehicle did (ground truth at the motion-capture rate)."""

    time_s: np.ndarray  # (N,) scenario time
    position_m: np.ndarray  # (N, 3) true position
    error_m: np.ndarray  # (N,) its distance from the scenario's reference
    latent_valid: float  # share of the policy's ticks that had a valid latent
    crashed: bool  # the vehicle crashed


def fly_scenario(bundle: Bundle, scenario: Scenario, seed: int = 0) -> RuntimeFlight:
    """Fly ``scenario`` with ``bundle`` (frozen: no learner) from the stand, its encoder
    feeding the policy when the bundle has a model."""
    flight = FaultFlight(fault="none", seed=seed)
    loop = RuntimeLoop.on_scenario(bundle.vehicle, bundle, scenario, flight, EncoderLatent(bundle))
    loop.run(scenario.duration_s + 1.0, scenario.duration_s)  # the fault "none" never acts
    time_s, error_m = loop.tracking_error(scenario.reference)
    trace = loop.trace()
    ticks = max(len(loop.tick_times_ns), 1)
    return RuntimeFlight(
        time_s=time_s,
        position_m=trace["truth"][:, POS],
        error_m=error_m,
        latent_valid=loop.valid_latent_ticks / ticks,
        crashed=bool(trace["crashed"].any()),
    )
