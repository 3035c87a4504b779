"""No import circle among the stack's modules.

A circle works only while every module in it happens to import the other lazily or late, and
breaks the first time someone moves an import to the top of a file. The static check reads
every ``import`` statement of every package under ros2_ws/src, including the ones inside
functions (a lazy import closes a circle just the same when its function runs), and fails
naming the circle. The subprocess check imports the message modules each on its own in a fresh
interpreter, the way a node or a test first touches them. The layer check keeps the packages'
imports pointing one way: numerics, then the flight runtime or the middleware, then the nodes,
then the tools.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC_DIR = Path(__file__).resolve().parents[2]  # ros2_ws/src
# Every Python package of the workspace: ros2_ws/src/<pkg>/<pkg>/__init__.py.
PACKAGES = sorted(
    path.parent
    for path in SRC_DIR.glob("*/*/__init__.py")
    if path.parent.name == path.parents[1].name
)


def module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of every workspace package."""
    modules = {}
    for package in PACKAGES:
        for path in package.rglob("*.py"):
            parts = path.relative_to(package.parent).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imported_modules(path: Path, own: str, modules: dict[str, Path]) -> set[str]:
    """Workspace modules that ``path`` (module ``own``) imports anywhere in its body."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in modules and name != own}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Circles of ``graph`` (module -> modules it imports), each as the path that closes it."""
    circles: list[list[str]] = []
    done: set[str] = set()
    path: list[str] = []

    def visit(name: str) -> None:
        path.append(name)
        for target in sorted(graph[name]):
            if target in path:
                circles.append([*path[path.index(target) :], target])
            elif target not in done:
                visit(target)
        path.pop()
        done.add(name)

    for name in sorted(graph):
        if name not in done:
            visit(name)
    return circles


def test_the_static_check_finds_a_lazy_circle() -> None:
    graph = {"a.messages": {"a.idl"}, "a.idl": {"a.messages", "a.names"}, "a.names": set()}
    assert import_circles(graph) == [["a.idl", "a.messages", "a.idl"]]
    graph["a.idl"] = {"a.names"}
    assert import_circles(graph) == []


def test_no_import_circle_in_the_workspace() -> None:
    modules = module_files()
    assert "vnd_ros.messages" in modules and "vnd_core.bundle" in modules, sorted(modules)
    graph = {name: imported_modules(path, name, modules) for name, path in modules.items()}
    assert import_circles(graph) == []


# package -> the workspace packages it may import (besides itself)
NODE_PACKAGES = ("vnd_encoder", "vnd_policy", "vnd_learner", "vnd_sim", "vnd_bridges")
ALLOWED_IMPORTS: dict[str, set[str]] = {
    "vnd_core": set(),
    "vnd_flight": {"vnd_core"},
    "vnd_ros": {"vnd_core"},
    **{node: {"vnd_core", "vnd_flight", "vnd_ros"} for node in NODE_PACKAGES},
    "vnd_tools": {"vnd_core", "vnd_flight", "vnd_ros", *NODE_PACKAGES},
}


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``module -> imported module`` edges that go from a package to one it may not import."""
    return [
        f"{name} -> {target}"
        for name, targets in sorted(graph.items())
        for target in sorted(targets)
        if target.split(".")[0] != name.split(".")[0]
        and target.split(".")[0] not in ALLOWED_IMPORTS.get(name.split(".")[0], set())
    ]


def test_the_layer_check_finds_an_upward_import() -> None:
    graph = {"vnd_core.learner": {"vnd_flight.safety"}, "vnd_flight.safety": {"vnd_core.units"}}
    assert layer_violations(graph) == ["vnd_core.learner -> vnd_flight.safety"]


def test_every_workspace_package_has_a_layer() -> None:
    packages = {path.name for path in PACKAGES} - {"vnd_msgs"}
    assert packages <= set(ALLOWED_IMPORTS), sorted(packages - set(ALLOWED_IMPORTS))


def test_packages_import_only_the_layers_below_them() -> None:
    modules = module_files()
    graph = {name: imported_modules(path, name, modules) for name, path in modules.items()}
    assert layer_violations(graph) == []


@pytest.mark.parametrize("module", ["vnd_ros._idl", "vnd_ros.messages", "vnd_ros.names"])
def test_message_modules_import_on_their_own(module: str) -> None:
    probe = f"import {module}; print({module}.dds_type_name('std_msgs/String'))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "std_msgs::msg::dds_::String_"
