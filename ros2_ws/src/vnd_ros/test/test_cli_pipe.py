"""A ``vnd`` command whose stdout reader goes away (``vnd topic echo T | head -1``) ends quietly
with exit code 141 (128 + SIGPIPE, as the shell reports for ``yes | head -1``): a real talker
process, a real ``vnd`` process, a real pipe closed after the first line."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

TEST_DIR = Path(__file__).parent
TIMEOUT_S = 60.0


def test_topic_echo_into_a_closed_pipe_ends_quietly():
    prefix = f"/vnd_pipe_test_{uuid.uuid4().hex[:8]}"
    talker = subprocess.Popen(
        [sys.executable, str(TEST_DIR / "bag_talker.py"), prefix, "0"],  # 20 Hz forever
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert talker.stdout.readline().startswith("STREAMING"), talker.stderr.read()
        echo_cmd = ["topic", "echo", f"{prefix}/chatter", "--timeout", str(TIMEOUT_S)]
        echo = subprocess.Popen(
            [sys.executable, "-m", "vnd_tools.cli", *echo_cmd],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert echo.stdout.readline().startswith(b"data: msg ")
        echo.stdout.close()  # the reader leaves; echo's next message meets a closed pipe
        code = echo.wait(timeout=TIMEOUT_S)
        stderr = echo.stderr.read().decode()
    finally:
        talker.terminate()
        talker.wait(timeout=10)
    assert code == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_help_into_a_closed_pipe_ends_quietly():
    """The usual shell form: a pipeline whose reader exits after one line."""
    result = subprocess.run(
        f"'{sys.executable}' -m vnd_tools.cli --help | head -c 1; exit ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode in (0, 141)  # help may fit the pipe buffer before head exits
    assert "Traceback" not in result.stderr, result.stderr
