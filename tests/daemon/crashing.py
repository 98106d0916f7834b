"""Fault injection through a test seam: a backend wrapper that SIGKILLs its own process.

``CrashingBackend(inner, crash_after=N)`` wraps any ``Backend`` (daemon/backend.py) and
kills the process with SIGKILL right after the Nth Slurm *write* it has passed on, counted
from its creation (one count per process):

- ``update_jobs``: each job update counts once. A batch goes to the inner backend one job at
  a time (one ``scontrol update`` each), so the kill can land between two jobs of a batch.
  Once a job's update shows slurmctld gone, the rest of that batch is not sent (it fails
  with ``records.NOT_SENT``), as ``execute`` does between batches;
- ``create_reservation``, ``update_reservation``, ``delete_reservation``, ``hold`` and
  ``release``: one count per call.

Reads (``snapshot``, ``config``, ``version``, ``partitions``) and everything else the
inner backend has (``run``, ``close``, ...) pass through unchanged and count nothing. With a
count that is never reached the wrapper only changes how job updates are sent (one per
``scontrol``). Production code knows nothing of this: tests hand the wrapper to ``Service``
(``backend=``) in the launcher ``crashing_daemon.py``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from attentived.daemon.backend import Backend
from attentived.daemon.records import NOT_SENT, CommandResult, JobUpdate, controller_gone


class CrashingBackend:
    """``inner`` with a SIGKILL after its ``crash_after``-th write (see the module doc)."""

    def __init__(self, inner: Backend, crash_after: int, *, kill: Callable[[], None] | None = None) -> None:
        if crash_after < 1:
            raise ValueError(f"crash_after must be at least 1, got {crash_after}")
        self.inner = inner
        self.name = inner.name
        self.crash_after = int(crash_after)
        self.writes = 0
        self._kill = kill or (lambda: os.kill(os.getpid(), signal.SIGKILL))

    def __getattr__(self, attr: str) -> Any:  # reads and helpers (run, close, ...) pass through
        return getattr(self.inner, attr)

    def _wrote(self) -> None:
        self.writes += 1
        if self.writes >= self.crash_after:
            self._kill()

    # -- reads --
    def version(self) -> Any:
        return self.inner.version()

    def snapshot(self) -> Any:
        return self.inner.snapshot()

    def config(self) -> dict[str, str]:
        return self.inner.config()

    def partitions(self) -> Any:
        return self.inner.partitions()

    # -- writes --
    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[CommandResult]:
        out: list[CommandResult] = []
        updates = list(updates)
        for i, u in enumerate(updates):
            r = self.inner.update_jobs([u])[0]
            out.append(r)
            self._wrote()
            if not r.ok and controller_gone(r.error):
                out.extend(CommandResult(("scontrol", *v.args()), False, None, NOT_SENT) for v in updates[i + 1:])
                break
        return out

    def create_reservation(self, name: str, nodes: Sequence[str], users: Sequence[str], minutes: int,
                           ignore_jobs: bool) -> CommandResult:
        r = self.inner.create_reservation(name, nodes, users, minutes, ignore_jobs)
        self._wrote()
        return r

    def update_reservation(self, name: str, **fields: str) -> CommandResult:
        r = self.inner.update_reservation(name, **fields)
        self._wrote()
        return r

    def delete_reservation(self, name: str) -> CommandResult:
        r = self.inner.delete_reservation(name)
        self._wrote()
        return r

    def hold(self, job_ids: Sequence[str]) -> CommandResult:
        r = self.inner.hold(job_ids)
        self._wrote()
        return r

    def release(self, job_ids: Sequence[str]) -> CommandResult:
        r = self.inner.release(job_ids)
        self._wrote()
        return r
