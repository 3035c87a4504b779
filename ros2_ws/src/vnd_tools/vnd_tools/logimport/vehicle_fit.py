"""Vehicle identification from logged flight: mass (hover thrust), thrust curve and body-rate
time constant.

Input: the replay ticks of each bag (imported or recorded), thrust in newtons, and for a bag
imported from a log of normalised thrust the normalised command ``u`` of each tick (recovered
through the thrust curve its import used, :class:`FitFlight`). Every fit is least squares over
every run of ticks, at the command lag (whole ticks, up to ``max_delay_s``) that fits best:

- thrust: the specific force along body z, ``f = (a + g e_z) . b_z`` with ``a`` the central
  difference of the velocities, equals thrust / mass of the lagged thrust command. With the
  normalised command, ``f = c1 u + c2 u^2`` gives the thrust curve of
  :mod:`.thrust_curve` (``T = thrust_max_n ((1 - k) u + k u^2)``): ``k = c2 / (c1 + c2)`` and
  ``mass = thrust_max_n / (c1 + c2)``, with ``thrust_max_n`` taken from the base vehicle (mass and
  thrust scale are not separable from kinematics alone: a wrong ``thrust_max_n`` shows up as a
  proportionally wrong mass). ``k`` is identified only when the flight spans a range of thrust
  levels: the normalised thrust's 5th to 95th percentile must span ``min_thrust_span`` and the
  standard error of ``k`` (independent-residual, so optimistic for closed-loop flight) stay
  within ``max_factor_error``. Otherwise, and for bags that logged newtons, the curve is kept
  from the base vehicle and only ``1 / mass`` is fitted through it;
- body-rate time constant: ``w[k+1] - w[k] = (dt / tau) (c[k - d] - w[k])`` on roll and pitch.

Figures of fit: R^2 (through the origin) and the RMS residual of each regression, the lags, the
thrust span, the factor's standard error and the RMS a linear curve would leave.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.learner.records import TickRecords
from vnd_core.learner.segmenter import split_runs
from vnd_core.plant_parts import rotmat_np
from vnd_core.state import GRAVITY_MPS2, OMEGA, QUAT, VEL
from vnd_core.vehicle import VehicleParams


class VehicleFitError(ValueError):
    """Not enough flight to fit the vehicle; the message says what is missing."""


@dataclass(frozen=True)
class FitFlight:
    """The ticks of one bag and the thrust command as its log gave it."""

    records: TickRecords  # the bag's ticks, thrust in newtons
    normalised: np.ndarray | None = None  # (N,) logged normalised thrust; None: logged newtons
    source: str = ""  # the bag, for messages


@dataclass(frozen=True)
class VehicleFitConfig:
    """Limits of the vehicle fit."""

    period_s: float = CONTROL_PERIOD_S  # control period of the ticks [s]
    max_delay_s: float = 0.2  # longest command lag searched [s]
    min_thrust_span: float = 0.15  # 5th-95th percentile span of u needed to fit the curve
    max_factor_error: float = 0.05  # standard error of the factor above which it is not fitted


@dataclass
class VehicleFit:
    """Fitted parameters and how well they fit."""

    mass_kg: float  # fitted mass
    hover_thrust_n: float  # mass times gravity
    thrust_lag_s: float  # lag of the thrust command used in the mass fit
    mass_r2: float  # R^2 of the specific-force fit
    mass_rms_mps2: float  # RMS residual of the specific-force fit
    rate_time_constant_s: float  # fitted first-order body-rate time constant (roll, pitch)
    rate_lag_s: float  # lag of the rate command used in the rate fit
    rate_r2: float  # R^2 of the rate-change fit
    ticks: int  # ticks used
    thrust_model_factor: float  # thrust curve factor: fitted, or the base's (curve_fitted False)
    curve_fitted: bool  # whether the flight identified the thrust curve
    curve_note: str  # how the curve was found, or why it was not
    factor_error: float | None = None  # standard error of the fitted factor
    thrust_span: tuple[float, float] | None = None  # 5th and 95th percentile of u
    linear_rms_mps2: float | None = None  # RMS residual of a linear curve, for comparison

    def describe(self) -> str:
        """The fit for the terminal."""
        return (
            f"mass {self.mass_kg:.4f} kg (hover thrust {self.hover_thrust_n:.3f} N; R^2 "
            f"{self.mass_r2:.4f}, RMS {self.mass_rms_mps2:.3f} m/s^2, thrust lag "
            f"{self.thrust_lag_s * 1e3:.0f} ms)\nthrust curve: {self.curve_note}\n"
            f"body-rate time constant {self.rate_time_constant_s * 1e3:.1f} ms (R^2 "
            f"{self.rate_r2:.3f}, rate lag {self.rate_lag_s * 1e3:.0f} ms); {self.ticks} ticks"
        )

    def apply(self, base: VehicleParams, name: str) -> VehicleParams:
        """``base`` with the fitted mass, thrust curve and rate time constant, named ``name``."""
        return dataclasses.replace(
            base,
            name=name,
            mass_kg=round(self.mass_kg, 5),
            thrust_model_factor=round(min(max(self.thrust_model_factor, 0.0), 1.0), 5),
            body_rate_time_constant_s=round(self.rate_time_constant_s, 5),
        )


def _r2(target: np.ndarray, residual: np.ndarray) -> float:
    """R^2 of a fit through the origin (against zero, not the mean: at hover the specific force
    hardly varies, and what is fitted is its ratio to the thrust)."""
    power = float((target**2).sum())
    return 1.0 - float((residual**2).sum()) / power if power > 0 else 0.0


@dataclass
class _Regression:
    """Least squares ``target ~ design @ coef`` at one lag."""

    lag: int
    coef: np.ndarray
    residual: np.ndarray
    target: np.ndarray
    design: np.ndarray

    @property
    def rss(self) -> float:
        return float((self.residual**2).sum())


def _solve(lag: int, design: np.ndarray, target: np.ndarray) -> _Regression:
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    return _Regression(lag, coef, target - design @ coef, target, design)


def _best(fits: list[_Regression]) -> _Regression:
    return min(fits, key=lambda fit: fit.rss)


@dataclass
class _Samples:
    """Regression inputs of one lag over every run."""

    force: list[np.ndarray] = dataclasses.field(default_factory=list)  # specific force [m/s^2]
    thrust_n: list[np.ndarray] = dataclasses.field(default_factory=list)  # lagged command [N]
    normalised: list[np.ndarray] = dataclasses.field(default_factory=list)  # lagged u
    # (n, k) lagged thrust terms through the motor lag: thrust [N], or u and u^2
    terms: list[np.ndarray] = dataclasses.field(default_factory=list)
    drag: list[np.ndarray] = dataclasses.field(default_factory=list)  # (n, 2) v_z, v_z |v_z|
    change: list[np.ndarray] = dataclasses.field(default_factory=list)  # rate change [rad/s]
    drive: list[np.ndarray] = dataclasses.field(default_factory=list)  # command - rate [rad/s]


def _motor_lag(command: np.ndarray, decay: float) -> np.ndarray:
    """Columns of ``command`` (T, k), held over each tick, through a first-order lag sampled
    at the ticks (``decay`` = exp(-period / time constant)); starts settled."""
    out = np.empty_like(command)
    out[0] = command[0]
    for i in range(1, len(command)):
        out[i] = decay * out[i - 1] + (1.0 - decay) * command[i - 1]
    return out


def _samples(
    flights: Sequence[FitFlight],
    runs: list[list[slice]],
    lag: int,
    max_lag: int,
    period_s: float,
    decay: float,
) -> _Samples:
    out = _Samples()
    for flight, flight_runs in zip(flights, runs, strict=True):
        for run in flight_runs:
            state, action = flight.records.state[run], flight.records.action[run]
            if flight.normalised is None:
                command = action[:, :1]
            else:
                u = flight.normalised[run]
                command = np.stack([u, u * u], axis=1)
            terms = _motor_lag(command, decay)
            k = np.arange(max_lag + 1, len(state) - 1)
            accel = (state[k + 1, VEL] - state[k - 1, VEL]) / (2 * period_s)
            accel[:, 2] += GRAVITY_MPS2
            body_z = rotmat_np(state[k, QUAT])[:, :, 2]
            out.force.append((accel * body_z).sum(axis=1))
            climb = (state[k, VEL] * body_z).sum(axis=1)  # velocity along body z [m/s]
            out.drag.append(np.stack([climb, climb * np.abs(climb)], axis=1))
            out.thrust_n.append(action[k - lag, 0])
            out.terms.append(terms[k - lag])
            if flight.normalised is not None:
                out.normalised.append(flight.normalised[run][k - lag])
            out.change.append((state[k + 1, 10:12] - state[k, 10:12]).ravel())
            out.drive.append((action[k - lag, 1:3] - state[k, OMEGA][:, :2]).ravel())
    return out


def fit_vehicle(
    flights: Sequence[FitFlight], base: VehicleParams, config: VehicleFitConfig | None = None
) -> VehicleFit:
    """Fit mass, thrust curve and body-rate time constant to ``flights`` (POLICY-mode runs);
    ``base`` gives ``thrust_max_n`` and the curve kept when the flight does not identify it."""
    config = config or VehicleFitConfig()
    period_s = config.period_s
    max_lag = max(1, round(config.max_delay_s / period_s))
    runs = [
        [
            r
            for r in split_runs(f.records.stamp_ns, f.records.mode, period_s)
            if r.stop - r.start > max_lag + 3
        ]
        for f in flights
    ]
    rate_fits: list[_Regression] = []
    ticks = sum(r.stop - r.start for flight_runs in runs for r in flight_runs)
    if not ticks:
        total = sum(len(f.records) for f in flights)
        raise VehicleFitError(
            f"no run of more than {max_lag + 3} contiguous ticks in {total} ticks"
        )
    newtons = [f.source or f"bag {i}" for i, f in enumerate(flights) if f.normalised is None]
    k0 = base.thrust_model_factor
    # per lag: the specific force, the thrust terms through the motor lag, the drag terms
    decay = float(np.exp(-period_s / base.motor_time_constant_s))
    per_lag = []
    for lag in range(max_lag + 1):
        s = _samples(flights, runs, lag, max_lag, period_s, decay)
        terms = np.concatenate(s.terms)
        per_lag.append((lag, np.concatenate(s.force), terms, np.concatenate(s.drag)))
        logged_u = None if newtons else np.concatenate(s.normalised)
        change, drive = np.concatenate(s.change), np.concatenate(s.drive)
        rate_fits.append(_solve(lag, drive[:, None], change))
    rate = _best(rate_fits)
    gain = float(rate.coef[0])
    factor, factor_error, span, linear_rms = k0, None, None, None
    curve_fitted = False
    if newtons:
        chosen = _best(
            [_solve(lag, _design(drag, t[:, 0]), force) for lag, force, t, drag in per_lag]
        )
        mass_kg = 1.0 / float(chosen.coef[0]) if chosen.coef[0] > 0 else float("nan")
        note = (
            f"kept from the base vehicle (thrust_model_factor {k0:g}): {', '.join(newtons)} "
            "logged thrust in newtons, not the normalised command the curve maps"
        )
    else:
        curve = _best(
            [_solve(lag, _design(drag, t[:, 0], t[:, 1]), force) for lag, force, t, drag in per_lag]
        )
        assert logged_u is not None
        lo, hi = (float(x) for x in np.percentile(logged_u, [5.0, 95.0]))
        span = (lo, hi)
        fitted, factor_error = _factor(curve)
        linear = _best(
            [_solve(lag, _design(drag, t[:, 0]), force) for lag, force, t, drag in per_lag]
        )
        linear_rms = float(np.sqrt((linear.residual**2).mean()))
        clamped = min(max(fitted, 0.0), 1.0)
        wide = hi - lo >= config.min_thrust_span
        determined = factor_error <= config.max_factor_error
        inside = abs(fitted - clamped) <= 2.0 * factor_error
        curve_fitted = wide and determined and inside
        if curve_fitted:
            factor = clamped
            note = (
                f"thrust_model_factor {factor:.4f} +- {factor_error:.4f} fitted (normalised "
                f"thrust u {lo:.3f} to {hi:.3f}, 5th-95th percentile; a linear curve leaves RMS "
                f"{linear_rms:.3f} m/s^2)"
            )
        else:
            if not wide:
                why = (
                    f"the normalised thrust spans only u {lo:.3f} to {hi:.3f} (5th-95th "
                    f"percentile; a span of {config.min_thrust_span:g} is needed: fly climbs and "
                    "descents)"
                )
            elif not determined:
                why = f"the fitted factor {fitted:.3f} +- {factor_error:.3f} is not determined"
            else:
                why = f"the fitted factor {fitted:.3f} +- {factor_error:.3f} is outside [0, 1]"
            note = (
                f"NOT identified: {why}; kept from the base vehicle (thrust_model_factor {k0:g}),"
                " the mass fitted through it"
            )
        # the mass through the curve kept: one scale on the curve's shape
        chosen = _best(
            [
                _solve(lag, _design(drag, (1.0 - factor) * t[:, 0] + factor * t[:, 1]), force)
                for lag, force, t, drag in per_lag
            ]
        )
        scale = float(chosen.coef[0])
        mass_kg = base.thrust_max_n / scale if scale > 0 else float("nan")
    if not mass_kg > 0 or not gain > 0:
        raise VehicleFitError("the flight does not determine the fit (thrust or rates never vary)")
    return VehicleFit(
        mass_kg=mass_kg,
        hover_thrust_n=mass_kg * GRAVITY_MPS2,
        thrust_lag_s=chosen.lag * period_s,
        mass_r2=_r2(chosen.target, chosen.residual),
        mass_rms_mps2=float(np.sqrt((chosen.residual**2).mean())),
        rate_time_constant_s=period_s / gain,
        rate_lag_s=rate.lag * period_s,
        rate_r2=_r2(rate.target, rate.residual),
        ticks=ticks,
        thrust_model_factor=factor,
        curve_fitted=curve_fitted,
        curve_note=note,
        factor_error=factor_error,
        thrust_span=span,
        linear_rms_mps2=linear_rms,
    )


def _design(drag: np.ndarray, *thrust: np.ndarray) -> np.ndarray:
    """Regressors of the specific force: the thrust terms, then the body-z drag terms (their
    coefficients are fitted too and not reported: they keep the velocity-dependent part of the
    force out of the thrust terms and the lag)."""
    return np.concatenate([np.stack(thrust, axis=1), drag], axis=1)


def _factor(curve: _Regression) -> tuple[float, float]:
    """``k = c2 / (c1 + c2)`` of the curve regression and its standard error (delta method)."""
    c1, c2 = (float(c) for c in curve.coef[:2])
    total = c1 + c2
    if not total > 0:
        return float("nan"), float("inf")
    dof = max(len(curve.target) - curve.design.shape[1], 1)
    covariance = curve.rss / dof * np.linalg.pinv(curve.design.T @ curve.design)
    gradient = np.zeros(curve.design.shape[1])
    gradient[:2] = np.array([-c2, c1]) / total**2
    return c2 / total, float(np.sqrt(max(float(gradient @ covariance @ gradient), 0.0)))
