"""Node loggers of the dds backend with rclpy's call surface and console format.

``logger.info("x", throttle_duration_sec=1.0)``, ``once=True`` and ``skip_first=True`` behave as
in rclpy; each call site keeps its own throttle/once state. Lines go to stderr as
``[LEVEL] [epoch_s.ns] [logger]: message``, the rcutils default format, and, like rcl's rosout
handler, to the ``/rosout`` sink of the node owning the logger (``add_rosout_sink``): the
node's own logger or a child of it (``vnd1.policy.safety`` goes to node ``vnd1.policy``).
:class:`RclpyLogger` is the rclpy backend's node logger: the same filters, rcutils output.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Severity numbers of rcutils (used to compare levels).
LEVELS = {"debug": 10, "info": 20, "warn": 30, "error": 40, "fatal": 50}
_ALIASES = {"warning": "warn", "unset": "info"}

_default_level = LEVELS["info"]
_logger_levels: dict[str, int] = {}


@dataclass(frozen=True)
class LogRecord:
    """One emitted log line, with the fields of rcl_interfaces/msg/Log."""

    stamp_ns: int  # wall time of the call [ns since epoch]
    level: int  # 10 debug, 20 info, 30 warn, 40 error, 50 fatal (Log.DEBUG ... Log.FATAL)
    name: str  # logger name, e.g. 'vnd1.policy'
    msg: str  # the message
    file: str  # source file of the call
    function: str  # function of the call
    line: int  # line of the call


RosoutSink = Callable[[LogRecord], None]
_rosout_sinks: dict[str, RosoutSink] = {}  # node logger name -> its /rosout publisher
_sink_lock = threading.Lock()
_forwarding = threading.local()  # set while a sink runs: a sink's own logging is not forwarded


def add_rosout_sink(logger_name: str, sink: RosoutSink) -> None:
    """Send every line of logger ``logger_name`` and its children to ``sink``."""
    with _sink_lock:
        _rosout_sinks[logger_name] = sink


def remove_rosout_sink(logger_name: str, sink: RosoutSink) -> None:
    """Stop sending ``logger_name``'s lines to ``sink`` (no-op when another sink replaced it)."""
    with _sink_lock:
        if _rosout_sinks.get(logger_name) is sink:
            del _rosout_sinks[logger_name]


def _sink_for(name: str) -> RosoutSink | None:
    """The sink of ``name`` or of its nearest registered ancestor logger."""
    with _sink_lock:
        while True:
            sink = _rosout_sinks.get(name)
            if sink is not None or "." not in name:
                return sink
            name = name.rsplit(".", 1)[0]


def set_default_level(level: str) -> None:
    """Set the level of every logger without an explicit level (e.g. from ``--log-level``)."""
    global _default_level
    _default_level = LEVELS[_ALIASES.get(level, level)]


def set_logger_level(name: str, level: str) -> None:
    """Set the level of one logger (``--log-level name:=level``)."""
    _logger_levels[name] = LEVELS[_ALIASES.get(level, level)]


class Logger:
    """A named logger (rclpy RcutilsLogger subset)."""

    def __init__(self, name: str) -> None:
        self.name = name
        # call site (file, line, severity) -> (last emission monotonic s or None, calls seen)
        self._sites: dict[tuple[str, int, str], list[Any]] = {}

    def get_child(self, suffix: str) -> Logger:
        """Logger ``name.suffix``."""
        return Logger(f"{self.name}.{suffix}")

    def get_effective_level(self) -> int:
        """Numeric severity threshold of this logger."""
        return _logger_levels.get(self.name, _default_level)

    def set_level(self, level: str) -> None:
        """Set this logger's threshold ('debug', 'info', 'warn', 'error', 'fatal')."""
        set_logger_level(self.name, level.lower())

    def is_enabled_for(self, severity: str) -> bool:
        """True when a message of ``severity`` would be printed."""
        return LEVELS[severity] >= self.get_effective_level()

    def debug(self, message: str, **kwargs: Any) -> bool:
        """Log at DEBUG; returns True when the line was emitted."""
        return self._log("debug", message, **kwargs)

    def info(self, message: str, **kwargs: Any) -> bool:
        """Log at INFO; returns True when the line was emitted."""
        return self._log("info", message, **kwargs)

    def warning(self, message: str, **kwargs: Any) -> bool:
        """Log at WARN; returns True when the line was emitted."""
        return self._log("warn", message, **kwargs)

    warn = warning

    def error(self, message: str, **kwargs: Any) -> bool:
        """Log at ERROR; returns True when the line was emitted."""
        return self._log("error", message, **kwargs)

    def fatal(self, message: str, **kwargs: Any) -> bool:
        """Log at FATAL; returns True when the line was emitted."""
        return self._log("fatal", message, **kwargs)

    def _log(
        self,
        severity: str,
        message: str,
        *,
        throttle_duration_sec: float | None = None,
        throttle_time_source_type: Any = None,
        once: bool = False,
        skip_first: bool = False,
    ) -> bool:
        del throttle_time_source_type  # throttling always uses the monotonic clock here
        if not self.is_enabled_for(severity):
            return False
        frame = sys._getframe(2)  # the caller of debug()/info()/...
        if throttle_duration_sec or once or skip_first:
            site = self._sites.setdefault(
                (frame.f_code.co_filename, frame.f_lineno, severity), [None, 0]
            )
            site[1] += 1
            now_s = time.monotonic()
            if once and site[1] > 1:
                return False
            if skip_first and site[1] == 1:
                return False
            recent = site[0] is not None and now_s - site[0] < (throttle_duration_sec or 0.0)
            if throttle_duration_sec and recent:
                return False
            site[0] = now_s
        self._emit(severity, message, frame)
        return True

    def _emit(self, severity: str, message: str, frame: Any) -> None:
        """Write the console line and hand the record to the node's /rosout sink."""
        stamp_ns = time.time_ns()
        sec, nsec = divmod(stamp_ns, 1_000_000_000)
        line = f"[{severity.upper()}] [{sec}.{nsec:09d}] [{self.name}]: {message}\n"
        sys.stderr.write(line)
        sys.stderr.flush()
        sink = None if getattr(_forwarding, "active", False) else _sink_for(self.name)
        if sink is not None:
            record = LogRecord(
                stamp_ns=stamp_ns,
                level=LEVELS[severity],
                name=self.name,
                msg=message,
                file=frame.f_code.co_filename,
                function=frame.f_code.co_name,
                line=frame.f_lineno,
            )
            _forwarding.active = True
            try:
                sink(record)
            finally:
                _forwarding.active = False


class RclpyLogger(Logger):
    """A node logger of the rclpy backend: rcutils levels and output (console, /rosout, log
    file), with this module's per-call-site filters.

    rclpy's own logger keys its once/throttle state by call site alone and raises ValueError
    when one site logs at two severities (``log = logger.info if ok else logger.warning``, as
    a node replying to a request that it accepts or refuses does); here the state is kept per
    (site, severity) like the dds backend, and the message goes straight to rcutils with the
    caller's function, file and line.
    """

    def get_child(self, suffix: str) -> RclpyLogger:
        """Logger ``name.suffix``."""
        return RclpyLogger(f"{self.name}.{suffix}")

    def get_effective_level(self) -> int:
        """Numeric severity threshold of this logger (rcutils)."""
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

        return int(_rclpy.rclpy_logging_get_logger_effective_level(self.name))

    def set_level(self, level: str) -> None:
        """Set this logger's threshold ('debug', 'info', 'warn', 'error', 'fatal')."""
        from rclpy.logging import set_logger_level

        set_logger_level(self.name, LEVELS[_ALIASES.get(level.lower(), level.lower())])

    def is_enabled_for(self, severity: str) -> bool:
        """True when a message of ``severity`` would be logged."""
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
        from rclpy.logging import LoggingSeverity

        level = LoggingSeverity(LEVELS[severity])
        return bool(_rclpy.rclpy_logging_logger_is_enabled_for(self.name, level))

    def _emit(self, severity: str, message: str, frame: Any) -> None:
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
        from rclpy.logging import LoggingSeverity

        _rclpy.rclpy_logging_rcutils_log(
            LoggingSeverity(LEVELS[severity]),
            self.name,
            str(message),
            frame.f_code.co_name,
            frame.f_code.co_filename,
            frame.f_lineno,
        )


def get_logger(name: str) -> Logger:
    """A logger not tied to a node (rclpy.logging.get_logger)."""
    return Logger(name)
