"""An in-memory Slurm for tests and demos: ``FakeBackend`` implements the backend interface on
a mutable copy of a snapshot and applies the daemon's actions the way slurmctld does
(priorities, ``ReqNodeList``, reservations that cannot be deleted while a job uses them,
hold = priority 0, release = priority recomputed). It never starts jobs by itself; tests
call ``start()`` / ``finish()`` to move the cluster on. ``calls`` records every write.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence

from .backend import BackendMixin
from .records import (
    NO_HOLD_AFTER_END,
    CommandResult,
    JobUpdate,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmPartition,
    SlurmReservation,
    SlurmVersion,
    Snapshot,
    reservation_flags,
)


class FakeBackend(BackendMixin):
    name = "fake"

    def __init__(self, jobs: Iterable[SlurmJob] = (), nodes: Iterable[SlurmNode] = (),
                 reservations: Iterable[SlurmReservation] = (), *, version: SlurmVersion = SlurmVersion(22, 5, 8),
                 config: dict[str, str] | None = None, partitions: Iterable[SlurmPartition] | None = None,
                 now: float | None = None) -> None:
        self.jobs = {j.job_id: j for j in jobs}
        self.nodes = {n.name: n for n in nodes}
        self.reservations = {r.name: r for r in reservations}
        self._version = version
        self._config = config if config is not None else {
            "SchedulerType": "sched/builtin", "PriorityType": "priority/multifactor", "GresTypes": "gpu",
            "SelectType": "select/cons_tres", "TopologyPlugin": "topology/tree"}
        self.partition_records = tuple(partitions) if partitions is not None else (SlurmPartition("main", default=True),)
        self.now = now
        self.calls: list[tuple[str, ...]] = []
        self.fail: dict[tuple[str, str], str] = {}  # (kind, job or reservation) -> error
        self.snapshot_error: Exception | None = None
        self.snapshots = 0

    @classmethod
    def from_snapshot(cls, snap: Snapshot, **kw: object) -> FakeBackend:
        return cls(snap.jobs, snap.nodes, snap.reservations, version=snap.version, now=snap.taken_at, **kw)  # type: ignore[arg-type]

    # ---- reads ----
    def version(self) -> SlurmVersion:
        return self._version

    def config(self) -> dict[str, str]:
        return dict(self._config)

    def partitions(self) -> tuple[SlurmPartition, ...]:
        return self.partition_records

    def snapshot(self) -> Snapshot:
        self.snapshots += 1
        if self.snapshot_error is not None:
            raise self.snapshot_error
        return Snapshot(self._version, self.now if self.now is not None else time.time(), tuple(self.jobs.values()),
                        tuple(self._nodes_now()), tuple(self.reservations.values()))

    def _nodes_now(self) -> list[SlurmNode]:
        used: dict[str, set[int]] = {n: set() for n in self.nodes}
        for j in self.jobs.values():
            if j.active:
                for node, idx in j.gpu_indices.items():
                    used.setdefault(node, set()).update(idx)
        out = []
        for n in self.nodes.values():
            u = tuple(sorted(used.get(n.name, ())))
            state = n.state if n.state not in ("IDLE", "MIXED", "ALLOCATED") else (
                "IDLE" if not u else ("ALLOCATED" if len(u) >= n.gpus else "MIXED"))
            out.append(dataclasses.replace(n, used_indices=u, gpus_used=len(u), state=state))
        return out

    # ---- writes ----
    def _err(self, kind: str, target: str) -> str | None:
        return self.fail.get((kind, target)) or self.fail.get((kind, "*"))

    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[CommandResult]:
        out = []
        for u in updates:
            argv = ("scontrol", *u.args())
            self.calls.append(argv)
            job = self.jobs.get(u.job_id)
            err = self._err("update", u.job_id)
            if job is None:
                err = err or f"Invalid job id specified for job {u.job_id}"
            if err:
                out.append(CommandResult(argv, False, 1, err))
                continue
            assert job is not None
            changes: dict[str, object] = {}
            for key, value in u.fields:
                if key == "Priority":
                    if job.held:
                        err = f"Job is in held state, pending scheduler release for job {u.job_id}"
                        break
                    changes["priority"] = int(value)
                elif key == "ReqNodeList":
                    if not job.pending:
                        err = f"Invalid node name specified for job {u.job_id}"
                        break
                    bad = [n for n in value.split(",") if n and n not in self.nodes]
                    if bad:
                        err = f"Invalid node name specified for job {u.job_id}"
                        break
                    changes["required_nodes"] = tuple(n for n in value.split(",") if n)
                elif key == "ExcNodeList":
                    changes["excluded_nodes"] = tuple(n for n in value.split(",") if n)
                elif key == "ReservationName":
                    if value and value not in self.reservations:
                        err = f"Requested reservation is invalid for job {u.job_id}"
                        break
                    changes["reservation"] = value
                elif key == "AdminComment":
                    changes["admin_comment"] = value
            if err:
                out.append(CommandResult(argv, False, 1, err))
                continue
            self.jobs[u.job_id] = dataclasses.replace(job, **changes)  # type: ignore[arg-type]
            out.append(CommandResult(argv, True))
        return out

    def create_reservation(self, name: str, nodes: Sequence[str], users: Sequence[str], minutes: int,
                           ignore_jobs: bool) -> CommandResult:
        flags = reservation_flags(ignore_jobs)
        argv = ("scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={','.join(nodes)}",
                f"Users={','.join(users)}", f"Duration={minutes}", "Flags=" + ",".join(flags))
        self.calls.append(argv)
        err = self._err("create", name)
        if name in self.reservations:
            err = err or "Duplicate reservation name"
        busy = {n.name for n in self._nodes_now() if n.gpus_used}
        if not ignore_jobs and busy & set(nodes):
            err = err or "Requested nodes are busy"
        if err:
            return CommandResult(argv, False, 1, err)
        now = self.now if self.now is not None else time.time()
        self.reservations[name] = SlurmReservation(name, tuple(nodes), tuple(users), (*flags, "SPEC_NODES"),
                                                   now, now + 60 * minutes)
        return CommandResult(argv, True)

    def update_reservation(self, name: str, **fields: str) -> CommandResult:
        argv = ("scontrol", "update", f"ReservationName={name}", *(f"{k}={v}" for k, v in fields.items()))
        self.calls.append(argv)
        r = self.reservations.get(name)
        err = self._err("update_reservation", name)
        if r is None:
            err = err or "Requested reservation is invalid"
        if err:
            return CommandResult(argv, False, 1, err)
        assert r is not None
        now = self.now if self.now is not None else time.time()
        ch: dict[str, object] = {}
        if "Nodes" in fields:
            ch["nodes"] = tuple(fields["Nodes"].split(","))
        if "Users" in fields:
            ch["users"] = tuple(fields["Users"].split(","))
        if "Duration" in fields:
            ch["end_time"] = (r.start_time or now) + 60 * int(fields["Duration"])
        if fields.get("EndTime", "").startswith("now"):
            ch["end_time"] = now + int(fields["EndTime"][4:] or 0)
        added = [f for f in fields.get("Flags", "").split(",") if f]
        ch["flags"] = tuple(dict.fromkeys((*r.flags, *added, NO_HOLD_AFTER_END)))  # as the CLI backend writes
        self.reservations[name] = dataclasses.replace(r, **ch)  # type: ignore[arg-type]
        return CommandResult(argv, True)

    def delete_reservation(self, name: str) -> CommandResult:
        argv = ("scontrol", "delete", f"ReservationName={name}")
        self.calls.append(argv)
        err = self._err("delete", name)
        if name not in self.reservations:
            err = err or "Requested reservation is invalid"
        elif any(j.reservation == name and (j.pending or j.active) for j in self.jobs.values()):
            err = err or "Requested reservation is in use"
        if err:
            return CommandResult(argv, False, 1, err)
        del self.reservations[name]
        return CommandResult(argv, True)

    def hold(self, job_ids: Sequence[str]) -> CommandResult:
        argv = ("scontrol", "hold", ",".join(job_ids))
        self.calls.append(argv)
        for j in job_ids:
            if j in self.jobs and self.jobs[j].pending:
                self.jobs[j] = dataclasses.replace(self.jobs[j], priority=0, held=True, reason="JobHeldAdmin")
        return CommandResult(argv, True)

    def release(self, job_ids: Sequence[str]) -> CommandResult:
        argv = ("scontrol", "release", ",".join(job_ids))
        self.calls.append(argv)
        for j in job_ids:
            if j in self.jobs and self.jobs[j].held:
                self.jobs[j] = dataclasses.replace(self.jobs[j], priority=1, held=False, reason="None")
        return CommandResult(argv, True)

    # ---- moving the cluster on (tests) ----
    def start(self, job_id: str, placement: Mapping[str, Sequence[int]], at: float | None = None) -> None:
        job = self.jobs[job_id]
        if not job.pending:
            raise SlurmError(f"job {job_id} is {job.state}")
        at = at if at is not None else (self.now if self.now is not None else time.time())
        self.jobs[job_id] = dataclasses.replace(
            job, state="RUNNING", reason="None", nodes=tuple(placement),
            gpu_indices={n: tuple(sorted(i)) for n, i in placement.items()}, start_time=at)

    def finish(self, job_id: str, at: float | None = None, state: str = "COMPLETED") -> None:
        job = self.jobs[job_id]
        at = at if at is not None else (self.now if self.now is not None else time.time())
        self.jobs[job_id] = dataclasses.replace(job, state=state, end_time=at,
                                                start_time=job.start_time or at)

    def submit(self, job: SlurmJob) -> None:
        self.jobs[job.job_id] = job

    def writes(self) -> list[tuple[str, ...]]:
        return list(self.calls)

    def close(self) -> None:
        pass
