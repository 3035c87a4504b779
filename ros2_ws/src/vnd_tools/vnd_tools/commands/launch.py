"""``vnd launch FILE [name:=value ...]``: run a ROS 2 YAML launch file without ROS.

Like ``ros2 launch``, also accepts ``vnd launch PACKAGE FILE`` (FILE searched in the package's
share directory). SIGINT or SIGTERM stop every process (SIGINT, then SIGTERM and SIGKILL after
the timeouts); so does the exit of a process marked ``on_exit: shutdown``, whose reason is the
last line. The exit code is 0 only when no process crashed or stopped uncleanly.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from pathlib import Path

from vnd_ros.launch import LaunchError, LaunchService, parse_launch_file, resolve_launch
from vnd_ros.paths import find_package_share


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vnd launch``."""
    parser.add_argument(
        "target",
        nargs="+",
        metavar="FILE | PACKAGE FILE",
        help="launch file path, or package and file name, followed by name:=value arguments",
    )
    parser.add_argument(
        "-s", "--show-args", action="store_true", help="print the declared arguments and exit"
    )
    parser.add_argument(
        "--print",
        dest="print_only",
        action="store_true",
        help="print the resolved command of every process and exit without running",
    )
    parser.add_argument("--log-dir", type=Path, help="folder for output: log files")
    parser.add_argument(
        "--sigint-timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between SIGINT and SIGTERM on shutdown (default 5)",
    )


def split_target(target: list[str]) -> tuple[Path, dict[str, str]]:
    """Launch file path and ``name:=value`` arguments from the positional words."""
    words = [word for word in target if ":=" not in word]
    launch_args = dict(word.split(":=", 1) for word in target if ":=" in word)
    if len(words) == 1:
        return Path(words[0]), launch_args
    if len(words) == 2:
        return _find_in_package(words[0], words[1]), launch_args
    raise LaunchError(f"expected FILE or PACKAGE FILE before the arguments, got {words}")


def _find_in_package(package: str, file_name: str) -> Path:
    try:
        share = find_package_share(package)
    except LookupError as err:
        raise LaunchError(str(err)) from err
    matches = sorted(share.rglob(file_name))
    if not matches:
        raise LaunchError(f"no file '{file_name}' in the share directory {share} of '{package}'")
    return matches[0]


def run(args: argparse.Namespace) -> int:
    """Resolve and run the launch file; returns the exit code."""
    try:
        path, launch_args = split_target(args.target)
        if args.show_args:
            return _show_args(path)
        resolved = resolve_launch(path, launch_args)
    except LaunchError as err:
        print(f"vnd launch: error: {err}", file=sys.stderr)
        return 2
    for name in resolved.unused_args:
        print(f"[WARN] [launch]: argument '{name}' is not declared by {path}", file=sys.stderr)
    if args.print_only:
        for spec in resolved.processes:
            print(f"{spec.name}: {shlex.join(spec.cmd)}")
        return 0
    if not resolved.processes:
        print("[INFO] [launch]: no processes to start", file=sys.stderr)
        return 0
    service = LaunchService(
        resolved.processes, log_dir=args.log_dir, sigint_timeout_s=args.sigint_timeout
    )
    return _run_until_signal(service)


def _run_until_signal(service: LaunchService) -> int:
    """Run until every process ended or SIGINT/SIGTERM arrived; then shut down."""
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        service.start()
        code = None
        while code is None and not stop.is_set():
            code = service.wait(timeout_s=0.1)
        if code is None:
            code = service.shutdown()
        if service.shutdown_reason is not None:
            print(f"vnd launch: {service.shutdown_reason}", file=sys.stderr)
        return code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _show_args(path: Path) -> int:
    description = parse_launch_file(path)
    if not description.declared_args:
        print("No arguments.")
    for arg in description.declared_args:
        default = "(required)" if arg.default is None else f"(default: '{arg.default.source}')"
        print(
            f"    '{arg.name}':\n        {arg.description or 'no description'}\n        {default}"
        )
    return 0
