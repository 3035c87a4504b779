"""``vnd checkpoint``: list, inspect, load, activate, roll back and pin model bundles live.

    vnd checkpoint list                  [--vehicle NS] [--node NAME] [--timeout S]
    vnd checkpoint inspect [PATH|VERSION] [--run-dir DIR]   (a file works offline)
    vnd checkpoint load PATH             validate and hold a bundle file (not activated)
    vnd checkpoint activate VERSION      swap to a held version at the next tick boundary
    vnd checkpoint rollback              back to the previously active version
    vnd checkpoint pin | unpin           refuse / accept learner bundles

Every verb but an offline ``inspect`` publishes one ``vnd_msgs/CheckpointCommand`` with a fresh
request id and prints one line per answering node (encoder, policy). The exit code is 0 only
when every expected node answered in time and accepted; 1 otherwise; 2 for usage errors.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from vnd_core.wire import CheckpointAction
from vnd_ros.client import StackClient
from vnd_ros.launch.resolve import default_environment
from vnd_ros.stack_records import CheckpointResult, ClientError

if TYPE_CHECKING:
    from vnd_core.bundle import Bundle

DEFAULT_RUN_DIR = "/tmp/vnd_run"  # launch/vnd_sim.launch.yaml's run_dir default
VERBS = {
    "list": CheckpointAction.LIST,
    "load": CheckpointAction.LOAD,
    "activate": CheckpointAction.ACTIVATE,
    "rollback": CheckpointAction.ROLLBACK,
    "pin": CheckpointAction.PIN,
    "unpin": CheckpointAction.UNPIN,
}


def add_live_options(parser: argparse.ArgumentParser, node: str = "") -> None:
    """--vehicle, --node (default ``node``; empty = every node) and --timeout: the options of
    every request to a live stack (also ``vnd arm`` / ``vnd disarm``)."""
    parser.add_argument("--vehicle", default="vnd1", help="vehicle namespace (default vnd1)")
    node_help = "address one node (e.g. policy); default all"
    parser.add_argument(
        "--node", default=node, help=f"node to address (default {node})" if node else node_help
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0, metavar="S", help="answer wait (default 10 s)"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Verbs and the options they share."""
    common = argparse.ArgumentParser(add_help=False)
    add_live_options(common)
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    sub.add_parser("list", parents=[common], help="active and available versions per node")
    inspect = sub.add_parser(
        "inspect", parents=[common], help="metadata of a bundle file or registered version"
    )
    inspect.add_argument(
        "target", nargs="?", default="", help="bundle file, or version (default: the active one)"
    )
    inspect.add_argument(
        "--run-dir",
        default=DEFAULT_RUN_DIR,
        help=f"learner run directory holding bundles/ (default {DEFAULT_RUN_DIR})",
    )
    load = sub.add_parser("load", parents=[common], help="load and validate a bundle file")
    load.add_argument("path", type=Path, help="bundle file (.safetensors)")
    activate = sub.add_parser("activate", parents=[common], help="activate a held version")
    activate.add_argument("version", type=int, help="bundle version")
    for name, text in (
        ("rollback", "activate the previously active version"),
        ("pin", "keep the active version: refuse learner bundles"),
        ("unpin", "accept learner bundles again"),
    ):
        sub.add_parser(name, parents=[common], help=text)


def run(args: argparse.Namespace) -> int:
    """Carry out the verb; the exit code."""
    os.environ.update(default_environment(os.environ))  # loopback unless configured
    if args.verb == "inspect":
        return _inspect(args)
    path = ""
    if args.verb == "load":
        if not args.path.is_file():
            print(f"vnd checkpoint: error: no bundle file {args.path}", file=sys.stderr)
            return 2
        path = str(args.path.resolve())  # the nodes run with their own working directory
    return send(args, VERBS[args.verb], "vnd checkpoint", path, getattr(args, "version", 0))


def send(
    args: argparse.Namespace, action: CheckpointAction, prog: str, path: str = "", version: int = 0
) -> int:
    """One request to the stack named by ``args`` (see :func:`add_live_options`); prints the
    answers. Exit code 0 when every addressed node accepted, 1 otherwise, 130 on Ctrl-C."""
    os.environ.update(default_environment(os.environ))  # loopback unless configured
    try:
        with StackClient(args.vehicle) as client:
            result = client.checkpoint(
                action, path=path, version=version, target_node=args.node, timeout_s=args.timeout
            )
    except ClientError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    print(format_result(result))
    if result.missing:
        missing = ", ".join(result.missing)
        print(f"{prog}: error: no answer within {args.timeout:g} s from {missing}", file=sys.stderr)
    return 0 if result.ok else 1


def format_result(result: CheckpointResult) -> str:
    """One line per answering node, plus a line for the missing answers."""
    lines = []
    for reply in result.replies:
        verdict = "accepted" if reply.accepted else "REJECTED"
        held = ",".join(map(str, reply.available_versions)) or "none"
        pin = " pinned" if reply.pinned else ""
        lines.append(
            f"{reply.node}: {verdict}: {reply.message} "
            f"[active {reply.active_version}, available {held}{pin}]"
        )
    for node in result.starting:
        if node == "(unannounced)":
            lines.append("note: a participant had not announced its nodes yet: not asked")
        else:
            lines.append(f"{node}: not asked: no status and no entities yet (still starting?)")
    for node in result.missing:
        why = "not found reading the command topic" if node in result.not_found else "no answer"
        lines.append(f"{node}: DID NOT ANSWER ({why}) to request {result.request_id}")
    if result.timed_out:
        lines.append(
            f"timed out: {len(result.replies)} of {result.expected} node(s) answered "
            f"request {result.request_id}; missing: {', '.join(result.missing)}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- inspect


def _inspect(args: argparse.Namespace) -> int:
    target = args.target
    try:
        if target and not target.isdigit():
            path = Path(target)
        else:
            version = int(target) if target else _active_version(args)
            if version is None:
                return 1
            path = find_version(version, Path(args.run_dir))
        text, problem = describe_bundle(path)
        print(text)
    except (OSError, LookupError, ValueError) as err:
        print(f"vnd checkpoint inspect: error: {err}", file=sys.stderr)
        return 1
    if problem:  # the table says INVALID; scripts also need the exit code and stderr
        print(f"vnd checkpoint inspect: error: {path}: invalid bundle: {problem}", file=sys.stderr)
        return 1
    return 0


def _active_version(args: argparse.Namespace) -> int | None:
    """The version the addressed nodes fly now (asked over the command topic)."""
    try:
        with StackClient(args.vehicle) as client:
            result = client.checkpoint(
                CheckpointAction.LIST, target_node=args.node, timeout_s=args.timeout
            )
    except ClientError as err:
        print(f"vnd checkpoint inspect: error: {err} (give a file or a version)", file=sys.stderr)
        return None
    versions = {reply.active_version for reply in result.replies}
    if len(versions) != 1:
        print(
            f"vnd checkpoint inspect: nodes fly different versions {sorted(versions)}; name one",
            file=sys.stderr,
        )
        return None
    return versions.pop()


def find_version(version: int, run_dir: Path) -> Path:
    """Bundle file of ``version``: the learner registry of ``run_dir``, else the shipped base."""
    index_path = run_dir / "bundles" / "index.json"
    if index_path.is_file():
        index = json.loads(index_path.read_text())
        for entry in index.get("bundles", []):
            if int(entry.get("version", -1)) == version:
                return index_path.parent / entry["file"]
    from vnd_core.bundle import read_metadata, shipped_bundle_path

    shipped = shipped_bundle_path()
    if shipped.is_file() and read_metadata(shipped.read_bytes()).get("version") == version:
        return shipped
    raise LookupError(f"version {version} is neither in {index_path} nor the shipped bundle")


def describe_bundle(path: Path) -> tuple[str, str]:
    """Human-readable metadata of the bundle file at ``path``, and why it does not load.

    Returns ``(text, problem)``: ``problem`` is "" when the bundle loads (sha256, shapes,
    finite weights), else the loader's reason (corrupt bytes, bad metadata, hash mismatch).
    The text also says whether it passes the policy node's behavioural check with the default
    safety limits (a bundle that fails it loads, but no policy node would fly it).
    """
    from vnd_core.bundle import BundleError, load_bundle, read_metadata

    data = path.read_bytes()
    lines = [f"file:            {path} ({len(data) / 1024:.1f} KiB)"]
    lines.append(f"file sha256:     {hashlib.sha256(data).hexdigest()}")
    try:
        meta = read_metadata(data)
    except BundleError as err:
        return "\n".join([*lines, f"INVALID:         {err}"]), str(err)
    lines += [
        f"version:         {meta.get('version')} (parent {meta.get('parent_version')})",
        f"format version:  {meta.get('format_version')}",
        f"created (UTC):   {meta.get('created_utc')}",
        f"content sha256:  {meta.get('sha256')}",
        f"parent sha256:   {meta.get('parent_sha256') or '(none recorded)'}",
        f"lineage:         {meta.get('lineage') or '(none recorded)'}",
        f"vehicle:         {_vehicle_text(meta.get('vehicle'))}",
    ]
    lines += _architecture_lines(meta.get("architecture") or {})
    summary = meta.get("summary") or {}
    if summary:
        lines.append("summary:")
        lines += [f"  {key}: {_short(value)}" for key, value in sorted(summary.items())]
    problem = ""
    try:
        bundle = load_bundle(data)
        lines.append("check:           loads (sha256, shapes, finite weights)")
    except BundleError as err:
        problem = str(err)
        lines.append(f"INVALID:         {problem}")
        return "\n".join(lines), problem
    try:
        lines.append(f"behaviour:       {_behaviour_text(bundle)}")
    except BundleError as err:
        lines.append(f"behaviour:       FAILS, a policy node refuses it: {err}")
    return "\n".join(lines), problem


def _behaviour_text(bundle: Bundle) -> str:
    """The policy node's behavioural check with the default safety limits, passed (raises
    BundleError naming the figure when the bundle leaves the envelope)."""
    import math

    from vnd_core.behaviour import BehaviourCheckConfig, behaviour_check
    from vnd_flight.safety_config import SafetyConfig

    config = BehaviourCheckConfig.for_flight(bundle.vehicle, SafetyConfig())
    report = behaviour_check(bundle, config)
    return (
        f"inside the envelope over {report.rollouts} rollouts (default safety limits; worst "
        f"tilt {math.degrees(report.max_tilt_rad):.0f} deg, body rate "
        f"{report.max_body_rate_radps:.1f} rad/s, position error "
        f"{report.max_position_error_m:.2f} m)"
    )


def _vehicle_text(vehicle: object) -> str:
    """The vehicle line of a bundle's metadata: its name and mass, or "missing"."""
    if not isinstance(vehicle, dict):
        return "missing"
    name = vehicle.get("name", "?")
    mass = vehicle.get("mass_kg")
    return f"{name}" + (f", mass {mass} kg" if mass is not None else "")


def _architecture_lines(arch: dict) -> list[str]:
    lines = []
    policy = arch.get("policy") or {}
    if policy:
        lines.append(f"policy:          {_short(policy.get('config', {}))}")
    model = arch.get("model")
    lines.append(f"VND model:       {_short(model) if model else 'none (policy only)'}")
    return lines


def _short(value: object, limit: int = 160) -> str:
    """``value`` as one line of JSON (a string as it is), cut to ``limit`` characters."""
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."
