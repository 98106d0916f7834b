"""Slurm snapshot -> ``ClusterState``: what the policies see, plus the mapping back to Slurm.

- Global GPU ids come from the ``Topology`` (gres.conf / cluster file); node ``n``'s GPU
  index ``i`` in Slurm (``IDX:`` in GRES strings) is ``topology.gpu_id(n, i)``.
- ``free`` is true only for GPUs on nodes that are up (not down, drained, failing...), in a
  managed partition, not in an active reservation of someone else, and not in use. GPUs in
  the daemon's own hold reservations count as free: each cycle decides holds afresh.
- ``running`` holds every job holding GPUs (any partition: they occupy the cluster), with
  the GPU indices Slurm gave them.
- ``pending`` holds the jobs the daemon manages: in a managed partition (all of them, for a
  job submitted to several), eligible (not held, no unmet dependency or begin time, not a
  pending array record), asking for at least one GPU.
- Pending jobs submitted in the same second are spread over that second in job-id order,
  so that policies keep Slurm's tie-break (lower job id first).
- ``users`` is each user's history from finished GPU jobs slurmctld still shows
  (``MinJobAge``): wait, run time and time limits.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from attentived.agents.state import ClusterState, PendingJob, RunningJob, UserStats
from attentived.topology import Topology, hostlist

from .records import SlurmJob, Snapshot

_MODEL_TOKEN = re.compile(r"(?:^|[\s,;])model[=:]([A-Za-z0-9_.+-]{1,64})")


@dataclass
class Built:
    """A ``ClusterState`` and what the apply step needs to map a plan back to Slurm."""

    state: ClusterState
    snapshot: Snapshot
    topology: Topology
    partitions: tuple[str, ...]
    managed: dict[str, SlurmJob]  # pending jobs handed to the policy, by id
    constrained: set[str]  # managed jobs with their own placement constraints: ordered, never pinned
    own_reservations: dict[str, object]
    node_reasons: dict[str, str] = field(default_factory=dict)  # why a node offers no free GPU
    running_gpus: dict[str, tuple[int, ...]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def nodes_of(self, gpus: Iterable[int]) -> tuple[str, ...]:
        topo = self.topology
        names = {topo.nodes[int(topo.gpu_node[int(g)])].name for g in gpus}
        return tuple(sorted(names, key=hostlist.natural_key))

    def gpu_names(self, gpus: Iterable[int]) -> tuple[str, ...]:
        return tuple(self.topology.gpu_name(int(g)) for g in gpus)


def in_partitions(job: SlurmJob, partitions: Iterable[str]) -> bool:
    """A job belongs to the managed set when every partition it was submitted to is managed."""
    parts = [p for p in job.partition.split(",") if p]
    wanted = set(partitions)
    return bool(parts) and all(p in wanted for p in parts)


def job_model(job: SlurmJob) -> str | None:
    """The workload class a user declared: ``model=NAME`` in the comment, else the job name."""
    m = _MODEL_TOKEN.search(job.comment)
    if m:
        return m.group(1)
    name = job.name.strip()
    return name if name and re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", name) else None


def build_state(
    snap: Snapshot,
    topology: Topology,
    partitions: Iterable[str],
    *,
    reservation_prefix: str = "attentived-",
    owned_pins: Mapping[str, tuple[str, ...]] | None = None,
    now: float | None = None,
) -> Built:
    now = snap.taken_at if now is None else now
    partitions = tuple(partitions)
    owned_pins = owned_pins or {}
    warnings: list[str] = []
    topo = topology
    free = np.zeros(topo.num_gpus, dtype=bool)
    node_reasons: dict[str, str] = {}
    slurm_nodes = snap.nodes_by_name
    reservations = snap.reservations
    own = {r.name: r for r in reservations if r.name.startswith(reservation_prefix)}
    foreign_reserved: dict[str, str] = {}
    for r in reservations:
        if r.name in own or not r.active(now):
            continue
        for n in r.nodes:
            foreign_reserved.setdefault(n, r.name)

    for ni, tnode in enumerate(topo.nodes):
        name = tnode.name
        snode = slurm_nodes.get(name)
        base = int(topo.node_first_gpu[ni])
        if snode is None:
            node_reasons[name] = "unknown to Slurm"
            continue
        if not snode.usable:
            node_reasons[name] = "+".join((snode.state, *snode.flags))
            continue
        if partitions and not set(snode.partitions) & set(partitions):
            node_reasons[name] = "in no managed partition"
            continue
        if name in foreign_reserved:
            node_reasons[name] = f"reservation {foreign_reserved[name]}"
            continue
        count = min(tnode.num_gpus, snode.gpus) if snode.gpus else 0
        if snode.gpus != tnode.num_gpus:
            warnings.append(f"node {name}: Slurm reports {snode.gpus} GPUs, the topology {tnode.num_gpus}")
        free[base : base + count] = True
        for idx in snode.used_indices:
            if 0 <= idx < tnode.num_gpus:
                free[base + idx] = False
        if snode.gpus_used and not snode.used_indices:
            node_reasons.setdefault(name, "GPU indices in use unknown")
    for name in slurm_nodes:
        if name not in topo.node_index and slurm_nodes[name].gpus:
            warnings.append(f"node {name} has GPUs in Slurm but is not in the topology: ignored")

    # running jobs and their GPUs
    running: list[RunningJob] = []
    running_gpus: dict[str, tuple[int, ...]] = {}
    for job in snap.jobs:
        if not job.active or job.gpus <= 0:
            continue
        gpus = _job_gpus(job, topo, free, warnings)
        if not gpus:
            continue
        free[list(gpus)] = False
        running_gpus[job.job_id] = gpus
        running.append(RunningJob(
            job_id=job.job_id, user=job.user, gpus=gpus, submit_time=job.submit_time or now,
            start_time=job.start_time or now, time_limit=job.time_limit,
        ))

    # finished jobs -> users' history
    users: dict[str, UserStats] = {}
    for job in snap.jobs:
        if not job.finished or job.gpus <= 0 or not job.start_time or not job.end_time or not job.nodes:
            continue
        wait = max(0.0, job.start_time - (job.submit_time or job.start_time))
        run = max(0.0, job.end_time - job.start_time)
        users[job.user] = users.get(job.user, UserStats()).add(job.gpus, wait, run, job.time_limit)

    # pending jobs the daemon manages
    managed: dict[str, SlurmJob] = {}
    constrained: set[str] = set()
    pending: list[PendingJob] = []
    counts = {"pending": 0, "managed": 0, "ineligible": 0, "other_partitions": 0, "no_gpu": 0}
    for job in snap.jobs:
        if not job.pending:
            continue
        counts["pending"] += 1
        if not in_partitions(job, partitions):
            counts["other_partitions"] += 1
            continue
        if not job.eligible:
            counts["ineligible"] += 1
            continue
        if job.gpus <= 0:
            counts["no_gpu"] += 1
            continue
        managed[job.job_id] = job
        if _constrained(job, owned_pins.get(job.job_id), reservation_prefix):
            constrained.add(job.job_id)
        pending.append(PendingJob(
            job_id=job.job_id, user=job.user, num_gpus=job.gpus, submit_time=job.submit_time or now,
            time_limit=job.time_limit, num_nodes=job.num_nodes if job.per_node_fixed else None,
            model=job_model(job), partition=job.partition,
        ))
    submits = _tie_break(list(managed.values()), now)
    pending = [dataclasses.replace(p, submit_time=submits[p.job_id]) for p in pending]
    counts["managed"] = len(pending)
    counts["running"] = len(running)
    state = ClusterState(now=now, topology=topo, free=free, pending=tuple(pending), running=tuple(running), users=users)
    return Built(state=state, snapshot=snap, topology=topo, partitions=partitions, managed=managed,
                 constrained=constrained, own_reservations=dict(own), node_reasons=node_reasons,
                 running_gpus=running_gpus, warnings=warnings, counts=counts)


def _tie_break(jobs: list[SlurmJob], now: float) -> dict[str, float]:
    """Submit times with Slurm's tie-break built in. Slurm's submit times are whole seconds
    and Slurm breaks ties by job id; policies break them by the id *string* ("10" < "9").
    Jobs of one second are spread over it in job-id order (offsets < 1 s)."""
    by_second: dict[float, list[SlurmJob]] = {}
    for job in jobs:
        by_second.setdefault(job.submit_time or now, []).append(job)
    out: dict[str, float] = {}
    for second, group in by_second.items():
        group.sort(key=lambda j: (int(j.job_id) if j.job_id.isdigit() else 0, j.job_id))
        for rank, job in enumerate(group):
            out[job.job_id] = second + rank / (len(group) + 1)
    return out


def _constrained(job: SlurmJob, owned_pin: tuple[str, ...] | None, prefix: str) -> bool:
    """A job that carries placement constraints of its own (nodes, features, a reservation)
    keeps them: the daemon orders it but never pins it or reserves for it."""
    if job.required_nodes and tuple(job.required_nodes) != tuple(owned_pin or ()):
        return True
    if job.excluded_nodes or (job.features and job.features != "(null)"):
        return True
    return bool(job.reservation) and not job.reservation.startswith(prefix)


def _job_gpus(job: SlurmJob, topo: Topology, free: np.ndarray, warnings: list[str]) -> tuple[int, ...]:
    """Global GPU ids of an active job from the indices Slurm reports; when a node's indices
    are missing, the node's lowest GPUs not yet claimed stand in (and a warning says so)."""
    out: list[int] = []
    per_node = job.gpus_per_node or (job.gpus // max(1, len(job.nodes)) if job.nodes else 0)
    for node in job.nodes:
        if node not in topo.node_index:
            continue
        ni = topo.node_index[node]
        base = int(topo.node_first_gpu[ni])
        n_local = topo.nodes[ni].num_gpus
        idx = job.gpu_indices.get(node)
        if idx:
            out.extend(base + i for i in idx if 0 <= i < n_local)
        elif per_node:
            guess = [base + i for i in range(n_local) if free[base + i]][:per_node]
            out.extend(guess)
            warnings.append(f"job {job.job_id}: no GPU indices for {node}; assumed {len(guess)} GPUs")
    return tuple(sorted(set(out)))
