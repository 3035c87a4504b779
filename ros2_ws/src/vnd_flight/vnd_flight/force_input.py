"""The force input of a policy that has one (``PolicyConfig.force_dim``): a
:class:`~vnd_core.force_observer.ForceObserver` run beside the control tick, and the body-rate
compensation of its commands.

The observer runs only while the policy flies the vehicle in the air (mode POLICY, measured
altitude at least ``min_altitude_m``): on the floor or the stand the ground's reaction reads as
an upward force, and a policy fed it would answer by cutting thrust, so it would never take off;
under a fallback the commands are not the policy's. Outside those conditions the observer
starts over and the policy reads no force.

Its update (one step of the prior) runs after the command is published
(:meth:`ForceInput.update`), so the tick reads the estimate of the previous measurement: the
observer's 0.3 s filter makes that one tick of age immaterial, and the command does not wait
for it. The observer predicts with the prior alone, whatever model the bundle carries: the
policy trained reading that (``force_observer``'s docstring), and the force read does not
depend on the encoder's latent or on a bundle swap.

Such a policy reads the horizontal part of the force, and its commands go out with the
observer's compensation (:meth:`ForceInput.compensate`): the vertical force the prior does not
explain as thrust feed-forward (a payload's weight held exactly), and the offset a torque
leaves under the vehicle's rate loop taken off the command's body rates, so the vehicle turns
at the rates the policy asked for.
The policy's own history and the safety filter keep the command as the filter passed it; the
vehicle, the replay and the observer get the command sent. Compensation acts only while the
observer runs (mode POLICY, in the air); a fallback's commands go out as its controller made
them.
"""

from __future__ import annotations

import numpy as np
from vnd_core.force_observer import ForceObserver, ObserverConfig
from vnd_core.state import POS, QUAT, RATES
from vnd_core.vehicle import VehicleParams
from vnd_core.wire import Mode

ALTITUDE = POS.start + 2  # index of the altitude (ENU z) in the state


class ForceInput:
    """The observer of one vehicle and what the policy reads from it (module docstring).

    Args:
        vehicle: the vehicle the observer's prior models.
        min_altitude_m: the observer runs only above this altitude (ENU z, m).
        config: observer settings.
    """

    def __init__(
        self,
        vehicle: VehicleParams,
        min_altitude_m: float = 0.15,
        config: ObserverConfig | None = None,
    ) -> None:
        self.vehicle = vehicle
        self.min_altitude_m = min_altitude_m
        self.config = config or ObserverConfig()
        self.observer: ForceObserver | None = None  # None: not running
        # what the next update() feeds the observer: (new measurement or None, command sent)
        self._pending: tuple[np.ndarray | None, np.ndarray] | None = None

    def force_n(self) -> np.ndarray | None:
        """The observer's force estimate (3,) in newtons now (None: the observer is not
        running)."""
        return None if self.observer is None else self.observer.force_n()

    def policy_force_n(self) -> np.ndarray | None:
        """The force (3,) in newtons the policy reads now: the part the thrust feed-forward
        leaves it (None: the observer is not running, the policy reads zero)."""
        return None if self.observer is None else self.observer.policy_force_n()

    def compensate(self, mode: Mode, command: np.ndarray, state: np.ndarray) -> np.ndarray:
        """The command (4,) to send for ``command`` (4,) passed by the safety filter in
        ``mode`` for the policy's ``state`` (13,): the observer's thrust feed-forward added
        and its rate offset taken off, within the vehicle's limits, while the observer runs in
        mode POLICY; else ``command`` itself."""
        if self.observer is None or mode != Mode.POLICY:
            return command
        sent = self.observer.compensate(command, np.asarray(state, dtype=np.float64)[QUAT])
        limit = np.asarray(self.vehicle.body_rate_max_radps, dtype=np.float64)
        sent[RATES] = np.clip(sent[RATES], -limit, limit)
        return sent

    def record(self, mode: Mode, measured: np.ndarray, fresh: bool, command: np.ndarray) -> None:
        """What one tick did: the controller ``mode`` after it, the ``measured`` state (13,),
        whether that measurement is new (``fresh``) and the ``command`` (4,) sent; applied by
        :meth:`update`. Leaving the flying conditions stops the observer at once."""
        flying = mode == Mode.POLICY and float(measured[ALTITUDE]) >= self.min_altitude_m
        if not flying or not np.isfinite(measured).all():
            self.observer, self._pending = None, None
            return
        fresh_measurement = np.array(measured, dtype=np.float64) if fresh else None
        self._pending = (fresh_measurement, command.copy())

    def update(self) -> None:
        """Feed the observer what :meth:`record` kept (call after publishing the command)."""
        if self._pending is None:
            return
        measured, command = self._pending
        self._pending = None
        if self.observer is None:
            if measured is None:
                return  # starts on a fresh measurement
            self.observer = ForceObserver(self.vehicle, self.config)
        if measured is None:
            self.observer.interrupt()  # a command without a new measurement
        else:
            self.observer.observe(measured)
        self.observer.command(command)
