"""The Slurm backend interface: one bulk snapshot per cycle, and the few actions a plan needs.

Everything above the backends speaks in the typed records of ``records`` (``SlurmJob``,
``SlurmNode``, ``SlurmReservation``, ``Snapshot``), never in Slurm's JSON or text.

Backends, each in its own module:

- ``CliBackend`` (``backend = "cli"``, the default, ``cli_backend``): Slurm's own commands.
- ``PyslurmBackend`` (``backend = "pyslurm"``, ``pyslurm_backend``): only when ``import
  pyslurm`` works against the running Slurm.
- ``FakeBackend`` (``testing``): an in-memory Slurm for tests and the soak benchmark.

``connect.make_backend`` builds the one a config names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .records import (
    CommandResult,
    JobUpdate,
    SlurmPartition,
    SlurmVersion,
    Snapshot,
    check_name,
    moved,
    node_list,
)


class Backend(Protocol):
    """What the cycle needs from Slurm. All write methods return ``CommandResult``s instead of
    raising for per-action failures (a failed action must not stop the rest of a plan);
    reads raise ``SlurmError``.

    Every reservation a backend creates or updates carries ``records.NO_HOLD_AFTER_END``: by default
    Slurm *holds* (priority 0, reason ``ResvDeleted``) each job still waiting in a
    reservation when it ends, and the daemon's reservations end by lease expiry when the
    daemon is gone, or are ended under a job the daemon may not update."""

    name: str

    def version(self) -> SlurmVersion: ...
    def snapshot(self) -> Snapshot: ...
    def read_back(self, old: Snapshot, partitions: Sequence[str]) -> Snapshot | None: ...
    def config(self) -> dict[str, str]: ...
    def partitions(self) -> tuple[SlurmPartition, ...]: ...
    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[CommandResult]: ...
    def create_reservation(self, name: str, nodes: Sequence[str], users: Sequence[str],
                           minutes: int, ignore_jobs: bool) -> CommandResult: ...
    def update_reservation(self, name: str, **fields: str) -> CommandResult: ...
    def delete_reservation(self, name: str) -> CommandResult: ...
    def hold(self, job_ids: Sequence[str]) -> CommandResult: ...
    def release(self, job_ids: Sequence[str]) -> CommandResult: ...


class BackendMixin:
    """The one-job conveniences, on top of ``update_jobs``, and the read-back on top of
    ``snapshot``."""

    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[CommandResult]:  # pragma: no cover - abstract
        raise NotImplementedError

    def snapshot(self) -> Snapshot:  # pragma: no cover - abstract
        raise NotImplementedError

    def read_back(self, old: Snapshot, partitions: Sequence[str]) -> Snapshot | None:
        """Slurm again, after a decision slow enough for it to have moved on: ``None`` when
        no job started or ended and no managed pending job came or went since ``old``
        (``records.moved``), else the fresh snapshot to decide on. A backend may answer
        the first case more cheaply than a whole snapshot (``CliBackend`` does)."""
        fresh = self.snapshot()
        return fresh if moved(old, fresh, partitions) else None

    def set_priority(self, job_id: str, priority: int) -> CommandResult:
        if not 1 <= int(priority) < 0xFFFFFFFE:
            raise ValueError(f"priority {priority} out of range (1 .. 4294967293; 0 would hold the job)")
        return self.update_jobs([JobUpdate(job_id, (("Priority", str(int(priority))),))])[0]

    def pin(self, job_id: str, nodes: Sequence[str]) -> CommandResult:
        if not nodes:
            raise ValueError("pin needs at least one node")
        return self.update_jobs([JobUpdate(job_id, (("ReqNodeList", node_list(nodes)),))])[0]

    def unpin(self, job_id: str) -> CommandResult:
        return self.update_jobs([JobUpdate(job_id, (("ReqNodeList", ""),))])[0]

    def attach(self, job_id: str, reservation: str) -> CommandResult:
        return self.update_jobs([JobUpdate(job_id, (("ReservationName", check_name(reservation, "reservation")),))])[0]

    def detach(self, job_id: str) -> CommandResult:
        return self.update_jobs([JobUpdate(job_id, (("ReservationName", ""),))])[0]
