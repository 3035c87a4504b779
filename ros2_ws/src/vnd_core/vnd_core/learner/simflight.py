"""Closed loop on the true plant that flies bundles and logs tick records, in simulated time.

This is the deployed data path without middleware: each tick the policy reads the plant's
noisy measurement and the latent of the bundle's encoder, computed the way the encoder node
does it (:class:`~vnd_core.latent_estimator.LatentEstimator`: the context ends at the
previous tick's state, z = 0 until the window is full); the command goes to the plant, and one
:class:`TickRecords` row is logged. The plant and the scenario clock persist across
:meth:`SimulatedFlight.fly` calls, so a flight can be continued with each new bundle version.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vnd_core.bundle import Bundle
from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.latent_estimator import LatentEstimator
from vnd_core.learner.records import MODE_POLICY, TickRecords
from vnd_core.plant import TruePlant
from vnd_core.plant_parts import PlantConfig
from vnd_core.policy import PolicyRunner
from vnd_core.scenario import Scenario
from vnd_core.state import POS


@dataclass
class FlightChunk:
    """What one :meth:`SimulatedFlight.fly` call produced."""

    records: TickRecords  # one row per tick (with condition labels)
    time_s: np.ndarray  # (T,) scenario time after each tick
    error_m: np.ndarray  # (T,) true position error after each tick
    latent_valid: np.ndarray  # (T,) bool, the encoder's z was used (else z = 0)
    crashed: bool  # the plant reports a crash at the end


class SimulatedFlight:
    """One vehicle flying ``scenario`` on the true plant, one bundle at a time."""

    def __init__(
        self,
        scenario: Scenario,
        bundle: Bundle,
        seed: int = 0,
        plant_config: PlantConfig | None = None,
    ) -> None:
        self.scenario = scenario
        self.plant = TruePlant(bundle.vehicle, scenario, 1, plant_config, seed=seed)
        self.plant.reset(scenario.start_state(1))
        self.estimator = LatentEstimator()
        self._bundle: Bundle | None = None
        self._runner: PolicyRunner | None = None
        self.use(bundle)

    def use(self, bundle: Bundle) -> None:
        """Fly ``bundle`` from the next tick on (previous commands and context carry over)."""
        runner = PolicyRunner(bundle.policy, self.scenario.reference)
        if self._runner is not None and len(runner.prev_actions) == len(self._runner.prev_actions):
            runner.prev_actions = list(self._runner.prev_actions)
        self._runner, self._bundle = runner, bundle
        self.estimator.set_model(bundle.model)

    @property
    def time_s(self) -> float:
        """Scenario time now."""
        return self.plant.time_s

    def fly(self, duration_s: float) -> FlightChunk:
        """Fly ``duration_s`` more seconds with the current bundle."""
        n_ticks = round(duration_s / CONTROL_PERIOD_S)
        bundle, runner, plant = self._bundle, self._runner, self.plant
        if bundle is None or runner is None:
            raise RuntimeError("SimulatedFlight.fly before set_bundle")
        trajectory = self.scenario.trajectory(1)
        rows: dict[str, list] = {
            k: [] for k in ("stamp", "state", "action", "enc", "cond", "t", "err", "valid")
        }
        for _ in range(n_ticks):
            t_s = plant.time_s
            stamp_ns = round(t_s * 1e9)
            measured = plant.measure()[0].double().numpy()
            self.estimator.add_odometry(stamp_ns, measured)
            z = self.estimator.latent() if bundle.model is not None else None
            action = runner.act(measured, t_s, z)
            condition = plant.condition()
            state = plant.step(torch.from_numpy(action).float()[None])
            self.estimator.add_command(stamp_ns, action)
            reference = trajectory.sample(torch.full((1,), plant.time_s)).position_m[0]
            rows["stamp"].append(stamp_ns)
            rows["state"].append(measured)
            rows["action"].append(action)
            rows["enc"].append(bundle.version if z is not None else 0)
            rows["cond"].append(condition)
            rows["t"].append(plant.time_s)
            rows["err"].append(float((state[0, POS] - reference).norm()))
            rows["valid"].append(z is not None)
        n = len(rows["stamp"])
        records = TickRecords(
            stamp_ns=np.array(rows["stamp"], dtype=np.int64),
            state=np.array(rows["state"]).reshape(n, -1),
            action=np.array(rows["action"]).reshape(n, -1),
            mode=np.full(n, MODE_POLICY, dtype=np.uint8),
            policy_version=np.full(n, bundle.version, dtype=np.uint32),
            encoder_version=np.array(rows["enc"], dtype=np.uint32),
            condition=np.array(rows["cond"], dtype=np.str_),
        )
        return FlightChunk(
            records=records,
            time_s=np.array(rows["t"]),
            error_m=np.array(rows["err"]),
            latent_valid=np.array(rows["valid"], dtype=bool),
            crashed=bool(plant.crashed.any()),
        )
