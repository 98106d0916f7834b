"""Logging for the daemon: structlog, JSON lines (or console), ``cycle_id`` on every line.

Inside a cycle the id is bound with ``structlog.contextvars`` (``bind_cycle``); lines
outside any cycle (start-up, signals, shutdown) carry ``cycle_id: "-"``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, MutableMapping
from typing import Any, TextIO

import structlog

from attentived import logs

NO_CYCLE = "-"


def _cycle_id(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    event.setdefault("cycle_id", NO_CYCLE)
    return event


def configure(level: str = "info", fmt: str = "json", stream: TextIO | None = None) -> None:
    logs.configure(level, json=fmt == "json", stream=stream, extra=(_cycle_id,))


@contextlib.contextmanager
def bind_cycle(cycle_id: str) -> Iterator[None]:
    with structlog.contextvars.bound_contextvars(cycle_id=cycle_id):
        yield


def get(name: str = "attentived.daemon") -> Any:
    return structlog.get_logger(name)
