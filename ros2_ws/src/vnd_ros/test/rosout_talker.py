"""A node process for the /rosout test: logs one warning at start-up, then an info line every
0.2 s, on the dds backend.

    python rosout_talker.py TOKEN --ros-args -r __ns:=/ns -r __node:=talker

Prints 'READY' after the warning was logged.
"""

from __future__ import annotations

import sys

from vnd_ros.runtime import ExternalShutdownException, Node, init, spin, try_shutdown


class Talker(Node):
    """Logs through its node logger and a child logger."""

    def __init__(self, token: str) -> None:
        super().__init__("talker")
        self.token = token
        self.ticks = 0
        self.warn_at_start()
        self.create_timer(0.2, self.tick)

    def warn_at_start(self) -> None:
        self.get_logger().warning(f"rosout check {self.token}")

    def tick(self) -> None:
        self.ticks += 1
        self.get_logger().get_child("loop").info(f"tick {self.ticks} {self.token}")


def main() -> int:
    token = sys.argv[1]
    init(args=sys.argv)
    try:
        node = Talker(token)
        print("READY", flush=True)
        spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
