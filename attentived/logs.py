"""structlog, configured once: readable lines on a terminal, JSON lines otherwise.

Logs go to stderr so that ``--json`` output on stdout stays machine-readable.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any, TextIO, cast

import structlog
from structlog.typing import Processor


class _Stderr:
    """``sys.stderr`` as it is at each write, not as it was at `configure` (pytest and
    service managers swap it; a logger bound to a closed stream would raise)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(
    level: str = "info",
    json: bool | None = None,
    stream: TextIO | None = None,
    extra: Sequence[Processor] = (),
) -> None:
    """``json=None`` picks JSON unless the stream is a TTY (systemd's journal, CI, pipes).
    ``extra`` processors run before rendering (the daemon adds its cycle id)."""
    tty = (stream or sys.stderr).isatty()
    use_json = (not tty) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer(ensure_ascii=False)
        if use_json
        else structlog.dev.ConsoleRenderer(colors=tty)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *extra,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=stream or cast(TextIO, _Stderr())),
        cache_logger_on_first_use=False,
    )
