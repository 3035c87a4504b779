"""``vnd launch``: parsing errors, substitutions, scoping, and real processes (no DDS needed)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from vnd_ros.launch import LaunchError, LaunchService, parse_launch_file, resolve_launch
from vnd_ros.launch.source import Location
from vnd_ros.launch.substitutions import Scope, evaluate, parse_template, safe_eval
from vnd_tools.cli import main as vnd_main

FIXTURES = Path(__file__).parent / "launch_fixtures"
PYTHON = sys.executable


def _write(tmp_path: Path, text: str, name: str = "t.launch.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ---------------------------------------------------------------- errors name file and line


def test_unknown_tag_names_file_line_and_tag(tmp_path):
    path = _write(
        tmp_path, "launch:\n- arg:\n    name: a\n    default: '1'\n- nodee:\n    pkg: x\n"
    )
    with pytest.raises(LaunchError) as err:
        parse_launch_file(path)
    assert f"{path}:5:" in str(err.value)
    assert "unsupported tag 'nodee'" in str(err.value)


def test_unknown_substitution_names_file_line_and_name(tmp_path):
    text = "launch:\n- let:\n    name: a\n    value: '1'\n- let:\n    name: b\n"
    text += "    value: $(find-pkg-prefix vnd_ros)/x\n"
    path = _write(tmp_path, text)
    with pytest.raises(LaunchError) as err:
        parse_launch_file(path)
    assert f"{path}:7:" in str(err.value)
    assert "unsupported substitution '$(find-pkg-prefix)'" in str(err.value)


def test_unknown_attribute_names_file_line_and_attribute(tmp_path):
    text = "launch:\n- node:\n    pkg: vnd_tools\n    exec: vnd\n    nmae: typo\n"
    path = _write(tmp_path, text)
    with pytest.raises(LaunchError) as err:
        parse_launch_file(path)
    assert f"{path}:5:" in str(err.value)
    assert "'node': unsupported attribute 'nmae'" in str(err.value)


def test_substitution_syntax_errors(tmp_path):
    for value, expected in [
        ("$(var a", "unterminated substitution"),
        ("$(var)", "takes 1 argument"),
        ("$(equals a)", "takes 2 argument"),
        ("$(eval '1 + 1)", "unterminated quote"),
    ]:
        with pytest.raises(LaunchError, match=expected):
            parse_template(value, Location(tmp_path / "x.launch.yaml", 3))


def test_errors_inside_an_included_file_name_that_file(tmp_path):
    inner = _write(
        tmp_path, "launch:\n- let:\n    name: a\n    value: $(anon x)\n", "inner.launch.yaml"
    )
    outer = _write(tmp_path, "launch:\n- include:\n    file: $(dirname)/inner.launch.yaml\n")
    with pytest.raises(LaunchError) as err:
        resolve_launch(outer, {}, {})
    assert f"{inner}:4:" in str(err.value) and "'$(anon)'" in str(err.value)


def test_missing_required_argument_is_named():
    with pytest.raises(LaunchError) as err:
        resolve_launch(FIXTURES / "features.launch.yaml", {})
    assert "missing required launch argument 'vehicle'" in str(err.value)
    assert "features.launch.yaml:" in str(err.value)


def test_invalid_condition_value_is_an_error(tmp_path):
    text = "launch:\n- executable:\n    cmd: echo x\n    if: maybe\n"
    with pytest.raises(LaunchError, match="condition value 'maybe'"):
        resolve_launch(_write(tmp_path, text), {})


# ---------------------------------------------------------------- substitutions


def test_template_quoting_and_nesting():
    where = Location(Path("/x/y.launch.yaml"), 1)
    scope = Scope({"a": "2", "name": "x500"}, {"HOME_X": "/h"}, "", Path("/x/y.launch.yaml"))
    cases = {
        "rate=$(var a)": "rate=2",
        "$(eval '$(var a) * 3 + 1')": "7",
        "$(eval \"'$(var name)' == 'x500'\")": "True",
        "$(equals $(var a) 2.0)": "true",
        "$(equals true TRUE)": "true",
        "$(not-equals $(var name) x500)": "false",
        "$(env HOME_X)/$(env MISSING 'a default')": "/h/a default",
        "$(dirname)/f": "/x/f",
        "plain $ text": "plain $ text",
    }
    for text, expected in cases.items():
        assert evaluate(parse_template(text, where), scope) == expected, text


def test_safe_eval_allows_operators_and_rejects_code():
    assert safe_eval("1 + 2 * 3 - 4 / 2") == 5.0
    assert safe_eval("2 ** 10 // 3 % 7") == 341 % 7
    assert safe_eval("not (1 < 2 <= 2) or 'a' != 'b'") is True
    assert safe_eval("10 if 1 > 2 else 20") == 20
    for bad in ["__import__('os')", "open('/etc/passwd')", "x + 1", "(1).real", "[1][0]"]:
        with pytest.raises(ValueError, match="not allowed"):
            safe_eval(bad)
    with pytest.raises(ValueError, match="exponent"):
        safe_eval("10 ** 100000")
    with pytest.raises(ValueError, match="repetition"):
        safe_eval("'a' * 1000000")


def test_env_without_default_is_an_error(tmp_path):
    text = "launch:\n- executable:\n    cmd: echo $(env VND_TEST_SURELY_UNSET)\n"
    with pytest.raises(LaunchError, match="'VND_TEST_SURELY_UNSET' is not set"):
        resolve_launch(_write(tmp_path, text), {}, env={})


# ---------------------------------------------------------------- resolution


def _by_name(resolved):
    return {spec.name: spec for spec in resolved.processes}


def test_features_resolve_like_ros2_launch():
    resolved = resolve_launch(FIXTURES / "features.launch.yaml", {"vehicle": "x500"}, env={})
    procs = _by_name(resolved)
    # if/unless, equals, not-equals and eval conditions
    assert list(procs) == [
        "policy",
        "sim_echo",
        "included_node",
        "deep_node",
        "after_group",
        "eval_condition",
    ]
    policy = procs["policy"].cmd
    assert policy[:2] == (PYTHON, "-c") and "from vnd_tools.cli import main" in policy[2]
    ros_args = list(policy[policy.index("--ros-args") :])
    assert policy[3] == "--help"  # args come before --ros-args
    assert ros_args[:5] == ["--ros-args", "-r", "__node:=policy", "-r", "__ns:=/fcu"]
    assert ["--params-file", str((FIXTURES / "params.yaml").resolve())] == ros_args[5:7]
    params = [ros_args[i + 1] for i, word in enumerate(ros_args) if word == "-p"]
    assert params == [
        "rate_hz:=50",
        "vehicle:=x500",
        "period_ms:=20.0",
        "gains:=[1.5, 2.5]",
        "limits.thrust_n:=20.0",
    ]
    assert ros_args[-2:] == ["-r", "odom:=/mocap/odom"]
    assert procs["policy"].output == "screen" and procs["policy"].node_name == "/fcu/policy"
    assert procs["policy"].env["VND_TEST_ENV"] == "fallback"


def test_group_scoping_and_include_arguments():
    procs = _by_name(resolve_launch(FIXTURES / "features.launch.yaml", {"vehicle": "x500"}, {}))
    assert procs["sim_echo"].cmd == ("echo", "sim", "100")  # let inside the group
    assert procs["after_group"].cmd == ("echo", "after-group", "50")  # ... did not leak out
    included = procs["included_node"].cmd
    assert included[3] == "inner-x500"  # include arg evaluated in the including scope
    assert "__ns:=/sim" in included  # pushed namespace applies inside the include
    assert "__ns:=/sim/deeper" in procs["deep_node"].cmd  # push-ros-namespace spelling
    assert procs["deep_node"].node_name == "/sim/deeper/deep_node"


def test_unscoped_group_leaks_and_cli_arguments_override(tmp_path):
    text = """launch:
- arg: {name: mode, default: sim}
- group:
    scoped: false
    children:
    - let: {name: leaked, value: yes-$(var mode)}
    - push_ros_namespace: {namespace: outer}
- node: {pkg: vnd_tools, exec: vnd, name: after, args: $(var leaked)}
- executable: {cmd: echo $(var mode), name: show, unless: $(equals $(var mode) sim)}
"""
    path = _write(tmp_path, text)
    procs = _by_name(resolve_launch(path, {}, {}))
    assert procs["after"].cmd[3] == "yes-sim" and "__ns:=/outer" in procs["after"].cmd
    assert "show" not in procs
    procs = _by_name(resolve_launch(path, {"mode": "real", "typo": "1"}, {}))
    assert procs["show"].cmd == ("echo", "real")
    assert resolve_launch(path, {"typo": "1"}, {}).unused_args == ["typo"]


def test_unknown_executable_is_reported(tmp_path):
    text = "launch:\n- node:\n    pkg: vnd_ros\n    exec: no_such_node\n"
    with pytest.raises(LaunchError, match="executable 'no_such_node' not found in package"):
        resolve_launch(_write(tmp_path, text), {}, {})


def test_cli_print_and_show_args(capsys):
    features = str(FIXTURES / "features.launch.yaml")
    assert vnd_main(["launch", "--print", features, "vehicle:=x500"]) == 0
    out = capsys.readouterr().out
    assert "sim_echo: echo sim 100" in out and "__node:=policy" in out
    assert vnd_main(["launch", "--show-args", features]) == 0
    out = capsys.readouterr().out
    assert "'vehicle':" in out and "(required)" in out and "(default: '50')" in out
    assert vnd_main(["launch", features]) == 2
    assert "missing required launch argument 'vehicle'" in capsys.readouterr().err


# ---------------------------------------------------------------- processes


def test_node_runs_through_its_console_script_entry_point(tmp_path):
    text = "launch:\n- node:\n    pkg: vnd_tools\n    exec: vnd\n    name: helpnode\n"
    text += "    args: --help\n    output: screen\n"
    screen = io.StringIO()
    service = LaunchService.from_file(_write(tmp_path, text), {}, screen=screen, report=_quiet)
    service.start()
    assert service.wait(timeout_s=20.0) == 0
    assert "[helpnode] usage: vnd" in screen.getvalue()


def _quiet(level: str, text: str) -> None:
    del level, text


def test_two_node_launch_runs_two_processes_and_sigint_stops_both(tmp_path):
    """The CLI as an operator runs it: two OS processes, SIGINT stops both within 5 s."""
    log_dir = tmp_path / "log"
    command = [PYTHON, "-m", "vnd_tools.cli", "launch", str(FIXTURES / "two_nodes.launch.yaml")]
    command += [f"python:={PYTHON}", f"marker_dir:={tmp_path}", "--log-dir", str(log_dir)]
    launcher = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_for(lambda: len(list(tmp_path.glob("*.started"))) == 2, 20.0)
        pids = {int(p.name.split(".")[1]) for p in tmp_path.glob("*.started")}
        assert len(pids) == 2 and launcher.pid not in pids and os.getpid() not in pids
        assert all(_pid_alive(pid) for pid in pids)
        start = time.monotonic()
        launcher.send_signal(signal.SIGINT)
        out, err = launcher.communicate(timeout=5.0)
        elapsed_s = time.monotonic() - start
    finally:
        launcher.kill()
    assert launcher.returncode == 0, err
    assert elapsed_s < 5.0
    stopped = sorted(p.read_text().strip() for p in tmp_path.glob("*.stopped"))
    assert stopped == ["SIGINT", "SIGINT"]  # each child got exactly the forwarded SIGINT
    assert not any(_pid_alive(pid) for pid in pids)
    assert "[talker] talker up, env VND_TEST_ENV=from_launch" in out  # screen output, set_env
    assert "listener stopping on SIGINT" in (log_dir / "listener.log").read_text()  # log output


def test_service_lists_processes_and_shuts_down(tmp_path):
    args = {"python": PYTHON, "marker_dir": str(tmp_path)}
    service = LaunchService.from_file(
        FIXTURES / "two_nodes.launch.yaml",
        args,
        screen=io.StringIO(),
        report=_quiet,
        log_dir=tmp_path / "log",
    )
    with service:
        assert _wait_for(lambda: len(list(tmp_path.glob("*.started"))) == 2, 20.0)
        infos = service.processes()
        assert [info.name for info in infos] == ["talker", "listener"]
        assert all(info.running and info.starts == 1 for info in infos)
        assert service.wait(timeout_s=0.1) is None  # still running
    assert service.exit_code == 0
    assert not any(info.running for info in service.processes())
    assert not any(_pid_alive(info.pid) for info in service.processes())


def test_crashing_node_is_reported_and_respawned(tmp_path):
    reports: list[str] = []
    service = LaunchService.from_file(
        FIXTURES / "crash.launch.yaml",
        {"python": PYTHON, "marker_dir": str(tmp_path)},
        report=lambda level, text: reports.append(f"{level} {text}"),
        log_dir=tmp_path / "log",
    )
    service.start()
    try:
        assert _wait_for(lambda: len(list(tmp_path.glob("crasher.*.started"))) >= 2, 20.0)
    finally:
        code = service.shutdown()
    assert code == 1  # crashes make the launch fail even though they were respawned
    failures = service.failures
    assert failures and all("'crasher'" in f and "exit code 3" in f for f in failures)
    assert "crasher crashing with 3" in failures[0]  # the log tail of the crashed run
    assert any(r.startswith("INFO respawning 'crasher' in 0.3 s") for r in reports)
    assert service.processes()[0].starts >= 2


def test_crash_without_respawn_ends_the_launch(tmp_path):
    service = LaunchService.from_file(
        FIXTURES / "crash.launch.yaml",
        {"python": PYTHON, "marker_dir": str(tmp_path), "respawn": "false"},
        report=_quiet,
        log_dir=tmp_path / "log",
    )
    service.start()
    assert service.wait(timeout_s=20.0) == 1
    assert len(list(tmp_path.glob("crasher.*.started"))) == 1
    assert service.processes()[0].returncode == 3
