"""The ``vnd`` command: one entry point, one module per subcommand.

Each subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int``. Modules are
imported only when their subcommand runs, so ``vnd --help`` stays fast and ROS-free commands
never import a middleware.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

# Exit code after the reader of stdout went away (``vnd status | head -1``): 128 + SIGPIPE, what
# the shell reports for a writer that SIGPIPE ended (``yes | head -1``), so ``set -o pipefail``
# scripts see the same code for vnd as for any other Unix tool.
EXIT_BROKEN_PIPE = 141

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train-base": ("vnd_tools.commands.train_base", "train the base policy on the nominal model"),
    "train-observer": (
        "vnd_tools.commands.train_observer",
        "train the force-observer start bundle (dr, then dob) from a base bundle",
    ),
    "sim": ("vnd_tools.commands.sim", "fly one closed-loop episode of the true plant in-process"),
    "eval": ("vnd_tools.commands.eval", "compare adaptation methods on the disturbance scenarios"),
    "learn": ("vnd_tools.commands.learn", "fit the VND model and policy from recorded replay bags"),
    "model-eval": ("vnd_tools.commands.model_eval", "open-loop prediction error of a bundle"),
    "import": ("vnd_tools.commands.import_logs", "flight logs to replay bags for vnd learn"),
    "vehicle": ("vnd_tools.commands.vehicle", "fit a vehicle file to logged flight"),
    "launch": ("vnd_tools.commands.launch", "run a YAML launch file without ROS"),
    "bag": ("vnd_tools.commands.bag", "record, inspect and play rosbag2 (MCAP) bags"),
    "topic": ("vnd_tools.commands.topic", "list, echo and measure the rate of topics"),
    "checkpoint": ("vnd_tools.commands.checkpoint", "list, load, activate and roll back bundles"),
    "arm": ("vnd_tools.commands.arm", "re-arm the policy node after a landing (DISARMED -> IDLE)"),
    "disarm": ("vnd_tools.commands.disarm", "operator kill switch: DISARMED, zero thrust"),
    "status": ("vnd_tools.commands.status", "modes, versions, rates and learner state"),
    "fly": ("vnd_tools.commands.fly", "fly the simulated stack through a scenario and report"),
    "preflight": ("vnd_tools.commands.preflight", "check a live graph before take-off"),
}

# subcommand -> the middleware its own process uses when VND_MIDDLEWARE names none (set before
# the module imports vnd_ros.runtime, which picks its backend at import). ``vnd fly``'s process
# watches the flight beside its nodes, which run on dds unless told otherwise, and only on dds
# does it read the DDS source timestamps its per-tick latency figures come from; left to
# "auto" it would take rclpy whenever the ROS wheels import and report coarse windows instead.
OWN_MIDDLEWARE: dict[str, str] = {"fly": "dds"}


def _available() -> dict[str, tuple[str, str]]:
    return {
        name: entry
        for name, entry in COMMANDS.items()
        if importlib.util.find_spec(entry[0].rsplit(".", 1)[0]) is not None
        and _module_exists(entry[0])
    }


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; returns the process exit code.

    A closed stdout pipe ends any command quietly with :data:`EXIT_BROKEN_PIPE` (no traceback).
    """
    try:
        code = _run(argv)
        sys.stdout.flush()  # the last buffered lines meet a closed pipe here, not at exit
    except BrokenPipeError:
        # Python flushes stdout again at exit; pointing it at /dev/null keeps that flush from
        # raising a second time and printing "Exception ignored ... BrokenPipeError".
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


def _run(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = _available()
    parser = argparse.ArgumentParser(prog="vnd", description="VND flight stack tools")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in commands.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        if argv and argv[0] not in ("-h", "--help"):
            parser.print_usage(sys.stderr)
            print(f"vnd: unknown command '{argv[0]}'", file=sys.stderr)
            return 2
        parser.print_help()
        return 0
    name = argv[0]
    if name in OWN_MIDDLEWARE and not os.environ.get("VND_MIDDLEWARE", "").strip():
        os.environ["VND_MIDDLEWARE"] = OWN_MIDDLEWARE[name]
    module = importlib.import_module(commands[name][0])
    sub_parser = argparse.ArgumentParser(prog=f"vnd {name}", description=commands[name][1])
    module.add_arguments(sub_parser)
    args = sub_parser.parse_args(argv[1:])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
