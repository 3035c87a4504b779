"""``vnd vehicle fit``: a vehicle file fitted to logged flight (replay bags, e.g. from
``vnd import``): mass (hover thrust), thrust curve and body-rate time constant, the rest from
``--vehicle``. A bag imported from a log of normalised thrust records the curve its import used
(its import report's ``thrust_curve``): the logged command is recovered through it, so the curve
can be fitted. See :mod:`vnd_tools.logimport.vehicle_fit` for the fits and what they cannot
separate."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import yaml
from vnd_core.evaluation.replay_bag import (
    ReadReport,
    ReplayBagError,
    find_bags,
    read_transitions,
)
from vnd_core.vehicle import load_vehicle

from vnd_tools.logimport.thrust_curve import ThrustCurve
from vnd_tools.logimport.vehicle_fit import FitFlight, VehicleFitError, fit_vehicle
from vnd_tools.logimport.writer import REPORT_KEY, read_import_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``vnd vehicle``."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    fit = sub.add_parser(
        "fit", help="fit mass, thrust curve and body-rate time constant to replay bags"
    )
    fit.add_argument("bags", nargs="+", type=Path, metavar="BAG", help="replay bag(s)")
    fit.add_argument("--vehicle", required=True, help="vehicle name or file for the rest")
    fit.add_argument("--out", required=True, type=Path, help="vehicle YAML file to write")
    fit.add_argument("--name", default=None, help="name of the fitted vehicle (base + _fit)")


def read_fit_flights(paths: list[Path], report: ReadReport) -> list[FitFlight]:
    """One :class:`FitFlight` per bag at ``paths`` (bags, or directories of them): its ticks and,
    when its import report records a thrust curve, the normalised command of each tick.

    Each bag is read on its own: imported logs count time from their own epoch (a ULog from the
    autopilot's boot), so two flights may share stamps without being the same ticks.
    """
    flights = []
    for bag in [b for p in paths for b in find_bags(p)]:
        records = read_transitions(bag, report=report)
        normalised = None
        imported = read_import_report(bag).get(REPORT_KEY)
        curve = json.loads(imported).get("thrust_curve") if imported else None
        if curve is not None:
            thrust = ThrustCurve(curve["thrust_max_n"], curve["thrust_model_factor"])
            normalised = thrust.normalised(records.action[:, 0])
        flights.append(FitFlight(records=records, normalised=normalised, source=str(bag)))
    return flights


def run(args: argparse.Namespace) -> int:
    """Fit and write the vehicle file; returns the exit code."""
    try:
        base = load_vehicle(args.vehicle)
        read_report = ReadReport()
        fit = fit_vehicle(read_fit_flights(args.bags, read_report), base)
    except (OSError, ValueError, ReplayBagError, VehicleFitError) as err:
        print(f"vnd vehicle fit: {err}")
        return 2
    print(f"vnd vehicle fit: {read_report.describe()}")
    print(fit.describe())
    fitted = fit.apply(base, args.name or f"{base.name}_fit")
    try:
        fitted.validate()
    except ValueError as err:
        print(f"vnd vehicle fit: the fitted vehicle is not valid: {err}")
        return 2
    plain = {
        k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(fitted).items()
    }
    fitted_fields = "mass_kg, " + ("thrust_model_factor, " if fit.curve_fitted else "")
    header = (
        f"# Fitted by vnd vehicle fit from {len(read_report.bags)} bags ({fit.ticks} ticks): "
        f"{fitted_fields}body_rate_time_constant_s; the rest from {base.name}.\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(header + yaml.safe_dump(plain, sort_keys=False))
    print(f"wrote {args.out}")
    return 0
