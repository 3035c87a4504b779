"""``vnd vehicle fit``: a vehicle file fitted to logged flight (replay bags, e.g. from
``vnd import``): mass (hover thrust) and body-rate time constant, the rest from ``--vehicle``.
See :mod:`vnd_tools.logimport.vehicle_fit` for the fits and what they cannot separate."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import yaml
from vnd_core.evaluation.replay_bag import ReadReport, ReplayBagError, read_transitions
from vnd_core.vehicle import load_vehicle

from vnd_tools.logimport.vehicle_fit import VehicleFitError, fit_vehicle


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``vnd vehicle``."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    fit = sub.add_parser("fit", help="fit mass and body-rate time constant to replay bags")
    fit.add_argument("bags", nargs="+", type=Path, metavar="BAG", help="replay bag(s)")
    fit.add_argument("--vehicle", required=True, help="vehicle name or file for the rest")
    fit.add_argument("--out", required=True, type=Path, help="vehicle YAML file to write")
    fit.add_argument("--name", default=None, help="name of the fitted vehicle (base + _fit)")


def run(args: argparse.Namespace) -> int:
    """Fit and write the vehicle file; returns the exit code."""
    try:
        base = load_vehicle(args.vehicle)
        read_report = ReadReport()
        records = read_transitions(args.bags, report=read_report)
        fit = fit_vehicle(records)
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
    header = (
        f"# Fitted by vnd vehicle fit from {len(read_report.bags)} bags ({fit.ticks} ticks): "
        f"mass and body_rate_time_constant_s; the rest from {base.name}.\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(header + yaml.safe_dump(plain, sort_keys=False))
    print(f"wrote {args.out}")
    return 0
