"""docker/ cannot be built here: check instead that compose.yaml and the Dockerfile parse and
that every path, package, console-script entry point and launch file they reference exists in
this repository (and, through the launch file, every node it starts)."""

from __future__ import annotations

import ast
import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
DOCKER = REPO / "docker"
SRC = REPO / "ros2_ws/src"
FLIGHT_LAUNCH = "launch/vnd_flight.launch.yaml"
# What the onboard stack must start: pose filter, encoder, policy and a bridge.
ONBOARD_EXECUTABLES = {
    ("vnd_encoder", "pose_filter_node"),
    ("vnd_encoder", "encoder_node"),
    ("vnd_policy", "policy_node"),
    ("vnd_bridges", "px4_bridge_node"),
    ("vnd_bridges", "mavros_bridge_node"),
}
SUBSTITUTION = re.compile(r"\$\(")


# --- repository facts -----------------------------------------------------------------------


def packages() -> dict[str, Path]:
    """ROS package name -> directory, from ros2_ws/src/*/package.xml."""
    found = {}
    for xml in SRC.glob("*/package.xml"):
        match = re.search(r"<name>\s*([^<\s]+)\s*</name>", xml.read_text())
        assert match, f"{xml}: no <name>"
        found[match.group(1)] = xml.parent
    return found


def console_scripts(package_dir: Path) -> dict[str, str]:
    """Console-script name -> 'module:function' from the package's setup.py (parsed, not run)."""
    setup_py = package_dir / "setup.py"
    if not setup_py.exists():
        return {}
    for node in ast.walk(ast.parse(setup_py.read_text())):
        if isinstance(node, ast.keyword) and node.arg == "entry_points":
            entry_points = ast.literal_eval(node.value)
            scripts = {}
            for spec in entry_points.get("console_scripts", []):
                name, _, target = (part.strip() for part in spec.partition("="))
                scripts[name] = target
            return scripts
    return {}


def entry_point_problem(package_dir: Path, target: str) -> str | None:
    """Why ``module:function`` does not resolve to a function in the package sources, or None."""
    module, _, function = target.partition(":")
    path = package_dir.joinpath(*module.split(".")).with_suffix(".py")
    if not path.exists():
        return f"module file {path.relative_to(REPO)} does not exist"
    tree = ast.parse(path.read_text())
    if not any(isinstance(n, ast.FunctionDef) and n.name == function for n in tree.body):
        return f"{path.relative_to(REPO)} defines no top-level function {function}()"
    return None


def executable_problem(pkg: str, executable: str) -> str | None:
    """Why ``ros2 run pkg executable`` would fail in the image, or None."""
    known = packages()
    if pkg not in known:
        return f"package '{pkg}' has no ros2_ws/src/*/package.xml"
    scripts = console_scripts(known[pkg])
    if executable not in scripts:
        return f"package '{pkg}' has no console script '{executable}' (has: {sorted(scripts)})"
    problem = entry_point_problem(known[pkg], scripts[executable])
    return f"'{pkg} {executable}': {problem}" if problem else None


# --- Dockerfile -----------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    logical, current = [], ""
    for raw in (DOCKER / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    assert not current, "Dockerfile ends inside a line continuation"
    out = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def copy_map() -> dict[str, str]:
    """Container path -> repository path of every COPY from the build context."""
    mapping = {}
    for keyword, args in dockerfile_instructions():
        if keyword != "COPY" or args.startswith("--from"):
            continue
        *sources, dest = shlex.split(args)
        for source in sources:
            target = dest.rstrip("/") + "/" + Path(source).name if dest.endswith("/") else dest
            mapping[target] = source
    return mapping


def repo_path_of(container_path: str) -> Path | None:
    """Repository path of a file the image holds at ``container_path`` (longest COPY prefix)."""
    for dest, source in sorted(copy_map().items(), key=lambda kv: -len(kv[0])):
        if container_path == dest or container_path.startswith(dest.rstrip("/") + "/"):
            return REPO / source / os.path.relpath(container_path, dest)
    return None


def test_dockerfile_builds_on_ros_base_with_a_distro_argument():
    instructions = dockerfile_instructions()
    args_before_from = []
    for keyword, args in instructions:
        if keyword == "FROM":
            assert args == "ros:${ROS_DISTRO}-ros-base"
            break
        assert keyword == "ARG", f"only ARG may precede FROM, found {keyword}"
        args_before_from.append(args)
    assert "ROS_DISTRO=jazzy" in args_before_from
    runs = " ".join(args for keyword, args in instructions if keyword == "RUN")
    assert "download.pytorch.org/whl/cpu" in " ".join(args for _, args in instructions)
    assert "requirements.txt" in runs
    assert "colcon build" in runs
    assert 'source "/opt/ros/${ROS_DISTRO}/setup.bash"' in runs


def test_dockerfile_copies_only_existing_paths():
    missing = [src for src in copy_map().values() if not (REPO / src).exists()]
    assert not missing, f"Dockerfile COPYs paths missing from the repository: {missing}"


def test_dockerignore_keeps_what_the_image_copies():
    ignored = [
        line.strip()
        for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ".venv" in ignored and ".git" in ignored
    for source in copy_map().values():
        assert Path(source).parts[0] not in ignored, f"{source} is copied but ignored"


def test_entrypoint_sources_ros_and_the_workspace():
    entrypoints = [args for keyword, args in dockerfile_instructions() if keyword == "ENTRYPOINT"]
    assert len(entrypoints) == 1
    (container_path,) = yaml.safe_load(entrypoints[0])  # exec form: a JSON list
    script = repo_path_of(container_path)
    assert script is not None and script.exists(), f"entrypoint {container_path} not copied"
    assert os.access(script, os.X_OK), f"{script} is not executable"
    text = script.read_text()
    assert 'source "/opt/ros/${ROS_DISTRO}/setup.bash"' in text
    assert "/install/setup.bash" in text
    assert 'exec "$@"' in text


# --- compose.yaml ---------------------------------------------------------------------------


def compose() -> dict:
    data = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    assert isinstance(data, dict) and "services" in data, "compose.yaml has no services"
    return data


def test_compose_services_share_the_domain_and_the_data():
    services = compose()["services"]
    assert set(services) >= {"onboard", "offboard"}
    for name, service in services.items():
        assert service["network_mode"] == "host", name
        env = service["environment"]
        assert env["ROS_DOMAIN_ID"].startswith("${ROS_DOMAIN_ID"), name
        assert env["RMW_IMPLEMENTATION"].startswith("${RMW_IMPLEMENTATION"), name
        # "${HOST_DIR:-default}:/target[:mode]": interpolations may contain ':' themselves.
        targets = [re.sub(r"\$\{[^}]*\}", "", v).split(":")[1] for v in service["volumes"]]
        assert service["working_dir"] in targets, f"{name}: data must live on a volume"
        build = service["build"]
        context = (DOCKER / build["context"]).resolve()
        assert context == REPO, f"{name}: build context must be the repository root"
        assert (context / build["dockerfile"]).resolve() == DOCKER / "Dockerfile"


def test_compose_cyclone_configuration_exists():
    for name, service in compose()["services"].items():
        uri = service["environment"]["CYCLONEDDS_URI"]
        default = re.search(r":-file://(/[^}]+)}", uri)
        assert default, f"{name}: CYCLONEDDS_URI needs a file default"
        path = repo_path_of(default.group(1))
        assert path is not None and path.exists(), f"{name}: {default.group(1)} is not in the image"


def launch_args(command: list[str]) -> tuple[str, dict[str, str]]:
    """(launch file path in the image, name -> value) of a `ros2 launch FILE a:=b` command."""
    assert command[:2] == ["ros2", "launch"] and len(command) >= 3
    args = dict(arg.split(":=", 1) for arg in command[3:])
    return command[2], args


def launch_entries(tree, kind: str) -> list[dict]:
    """Every ``{kind: {...}}`` entry of a ROS 2 YAML launch description, nested groups too."""
    found = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == kind and isinstance(value, dict):
                found.append(value)
            found.extend(launch_entries(value, kind))
    elif isinstance(tree, list):
        for item in tree:
            found.extend(launch_entries(item, kind))
    return found


def test_compose_commands_reference_existing_executables_and_launch_files():
    problems = []
    for name, service in compose()["services"].items():
        command = service["command"]
        if command[:2] == ["ros2", "run"]:
            problem = executable_problem(command[2], command[3])
            if problem:
                problems.append(f"{name}: {problem}")
        elif command[:2] == ["ros2", "launch"]:
            container_path, args = launch_args(command)
            path = repo_path_of(container_path)
            if path is None or not path.exists():
                problems.append(f"{name}: launch file {container_path} ({FLIGHT_LAUNCH}) missing")
                continue
            declared = {
                a.get("name") for a in launch_entries(yaml.safe_load(path.read_text()), "arg")
            }
            undeclared = sorted(set(args) - declared)
            if undeclared:
                problems.append(f"{name}: {path.name} declares no argument(s) {undeclared}")
        else:
            problems.append(f"{name}: unexpected command {command}")
    assert not problems, "\n".join(problems)


def test_flight_launch_starts_existing_nodes():
    path = REPO / FLIGHT_LAUNCH
    if not path.exists():
        pytest.fail(f"{FLIGHT_LAUNCH} does not exist yet (onboard service launches it)")
    nodes = launch_entries(yaml.safe_load(path.read_text()), "node")
    started = set()
    problems = []
    for node in nodes:
        pkg, executable = node.get("pkg", ""), node.get("exec", "")
        if SUBSTITUTION.search(pkg + executable):
            continue  # chosen at launch time; the pairs it may choose are checked below
        started.add((pkg, executable))
        problem = executable_problem(pkg, executable)
        if problem:
            problems.append(problem)
    missing = sorted(ONBOARD_EXECUTABLES - started)
    if missing:
        problems.append(f"{FLIGHT_LAUNCH} starts none of {missing}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("pkg", "executable"), sorted(ONBOARD_EXECUTABLES))
def test_onboard_executables_exist(pkg, executable):
    problem = executable_problem(pkg, executable)
    assert problem is None, problem


def test_learner_executable_exists():
    problem = executable_problem("vnd_learner", "learner_node")
    assert problem is None, problem
