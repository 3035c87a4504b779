"""``vnd eval``: every adaptation method through the disturbance scenarios, in simulated time
(:mod:`vnd_core.evaluation.suite`), each run flown by the stack's flight runtime
(:mod:`vnd_flight.evaluation_flight`); arguments, presets and the output directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import torch
from vnd_core.bundle import BundleError, load_bundle
from vnd_core.config_io import ConfigError
from vnd_core.evaluation.report import (
    METHOD_ORDER,
)
from vnd_core.evaluation.suite import SCENARIOS, EvalConfig, evaluate
from vnd_core.learner.settings import (
    LEARNER_PRESETS,
    learner_preset,
    parse_assignments,
    with_overrides,
)
from vnd_core.scenario import load_scenario
from vnd_flight.evaluation_flight import fly_runtime


# ---------------------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``vnd eval``."""
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--quick", action="store_true", help="smoke configuration (<= 15 min)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds (default: preset's)")
    parser.add_argument(
        "--methods",
        nargs="+",
        type=_method_names,
        default=[list(METHOD_ORDER)],
        metavar="METHOD",
        help=f"methods, space- or comma-separated, from {', '.join(METHOD_ORDER)}",
    )
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), help="scenario names")
    parser.add_argument("--bundle", type=Path, default=None, help="base bundle (default: shipped)")
    parser.add_argument(
        "--time-scale", type=float, default=None, help="scenario time factor (default: preset's)"
    )
    parser.add_argument(
        "--update-delay",
        default=None,
        help="simulated delay between an update's start and its bundle flying: seconds, or "
        "'charged' (default): the update's CPU time divided by --learner-cpu-share",
    )
    parser.add_argument(
        "--learner-cpu-share",
        type=float,
        default=None,
        help="share of one core the learner gets beside the flight stack (default 0.6, "
        "measured in the demo); an update of c CPU seconds lands c / share seconds later",
    )
    parser.add_argument(
        "--learner-preset",
        choices=tuple(LEARNER_PRESETS),
        default=None,
        help="LearnerConfig preset of vnd and refit (default: standard; --quick: every 15 s)",
    )
    parser.add_argument(
        "--learner-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a LearnerConfig field to replace, named as the learner node's parameter and with "
        "its value in YAML, e.g. trainer.iterations=100 (repeatable)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (jobs 1)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="runs at a time, each a process with one thread"
    )


def _method_names(text: str) -> list[str]:
    """Method names of one --methods word ("dr" or "base,dr,dob"), each checked."""
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in METHOD_ORDER]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method {', '.join(unknown) or repr(text)}; choose from "
            f"{', '.join(METHOD_ORDER)}"
        )
    return names


def _parse_delay(text: str) -> float | None:
    """'charged' -> None (the CPU time charged), else a non-negative number of seconds."""
    if text == "charged":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:
        raise ValueError(f"must be 'charged' or seconds >= 0, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    """Evaluate, write DIR/results.{json,md} and plots; returns the exit code."""
    from vnd_core.bundle import shipped_bundle_path

    # Forked workers inherit the parent's OpenMP pool, which must be a single thread then.
    torch.set_num_threads(1 if args.jobs > 1 else args.threads)
    overrides = {
        k: v for k, v in (("seeds", args.seeds), ("time_scale", args.time_scale)) if v is not None
    }
    if args.update_delay is not None:
        try:
            overrides["update_delay_s"] = _parse_delay(args.update_delay)
        except ValueError as err:
            print(f"vnd eval: --update-delay: {err}")
            return 2
    if args.learner_cpu_share is not None:
        if not 0.0 < args.learner_cpu_share <= 1.0:
            print(
                f"vnd eval: --learner-cpu-share must be within (0, 1], got {args.learner_cpu_share}"
            )
            return 2
        overrides["learner_cpu_share"] = args.learner_cpu_share
    if args.learner_preset is not None:
        overrides["learner"] = learner_preset(args.learner_preset)
    config = EvalConfig.quick(**overrides) if args.quick else EvalConfig.full(**overrides)
    if args.learner_param:
        try:
            learner = with_overrides(
                config.learner, parse_assignments(args.learner_param), "--learner-param"
            )
        except ValueError as err:  # ConfigError is a ValueError
            print(f"vnd eval: {err}")
            return 2
        config = dataclasses.replace(config, learner=learner)
    bundle_path = args.bundle or shipped_bundle_path()
    try:
        base = load_bundle(bundle_path)
        for name in args.scenarios:
            load_scenario(name)
    except (BundleError, ConfigError, FileNotFoundError) as err:
        print(f"vnd eval: {err}")
        return 2
    if args.jobs < 1:
        print(f"vnd eval: --jobs must be at least 1, got {args.jobs}")
        return 2
    methods = list(dict.fromkeys(name for word in args.methods for name in word))
    payload = evaluate(
        config, base, args.out, methods, args.scenarios, jobs=args.jobs, fly=fly_runtime
    )
    print(f"wrote {args.out / 'results.json'} and results.md in {payload['wall_s']:.0f} s")
    return 0
