"""Slurm snapshot -> ``ClusterState``: what the policies see, plus the mapping back to Slurm.

- Global GPU ids come from the ``Topology`` (gres.conf / cluster file); node ``n``'s GPU
  index ``i`` in Slurm (``IDX:`` in GRES strings) is ``topology.gpu_id(n, i)``.
- ``free`` is true only for GPUs on nodes that are up (not down, drained, failing...), in a
  managed partition, not in an active reservation of someone else, and not in use. GPUs in
  the daemon's own hold reservations count as free: each cycle decides holds afresh. "Own"
  is by the journal's record (name and Slurm's start time), never by name alone, and never
  a maintenance reservation.
- ``nodes`` (``NodeCapacity``) holds each node's free CPUs and memory, whether it is idle
  (for ``--exclusive``), its GPU type and features: what slurmctld checks besides GPUs.
- ``running`` holds every job holding GPUs (any partition: they occupy the cluster), with
  the GPU indices Slurm gave them on nodes that take jobs: GPUs on a node that is drained
  or down do not come back when the job ends, so no hold or look-ahead plans on them (a
  job held there in ``block`` mode, excluded from every other node, would never start);
  the job keeps the CPUs and memory of its other GPUs. A job wholly on such nodes is left
  out (its GPUs stay busy).
- ``pending`` holds the jobs the daemon manages: in a managed partition (all of them, for a
  job submitted to several), eligible (not held, no unmet dependency or begin time), asking
  for at least one GPU, with their CPUs, memory, ``--exclusive``, GPU type, ``-w``, ``-x``
  and features. A pending job array record is one job (one task's GPUs): it is ordered as
  a whole, never pinned (Slurm refuses a node list on an array). ``avoid`` adds nodes a job
  must not be planned on (where its last planned start stalled), and each job is kept off
  the nodes of others' reservations, active or beginning before its time limit would end
  (`reserved_for_others`: slurmctld refuses it there, whenever their GPUs free up).
  ``leave_to_slurm`` names pending jobs Slurm will not let anyone update for now
  (daemon/unregistered.py): they are left out, like jobs of other partitions, and counted
  as ``unregistered``.
- Pending jobs submitted in the same second are spread over that second in job-id order,
  so that policies keep Slurm's tie-break (lower job id first).
- ``users`` is each user's history from finished GPU jobs slurmctld still shows
  (``MinJobAge``): wait, run time and time limits.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from attentived.agents.state import ClusterState, NodeCapacity, PendingJob, RunningJob, UserStats, deadline
from attentived.topology import Topology, hostlist

from .job_defaults import Allocation, JobDefaults
from .others_reservations import OthersReservations
from .records import SlurmJob, SlurmNode, SlurmReservation, Snapshot, in_partitions, job_number

#: Seconds of clock difference tolerated between the daemon and slurmctld when a new
#: reservation's start time is compared with the moment the daemon asked for it.
CLOCK_SLACK = 5.0
#: What a node offers when Slurm does not say (a test backend): no limit.
_UNLIMITED = 1 << 40
_SIMPLE_FEATURES = re.compile(r"[A-Za-z0-9_.-]+(?:[&,][A-Za-z0-9_.-]+)*")
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
    own_reservations: dict[str, SlurmReservation]
    own_exclusions: dict[str, tuple[str, ...]] = field(default_factory=dict)  # held jobs' ExcNodeList the daemon set
    node_reasons: dict[str, str] = field(default_factory=dict)  # why a node offers no free GPU
    running_gpus: dict[str, tuple[int, ...]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    left_to_slurm: frozenset[str] = frozenset()  # pending jobs Slurm will not let the daemon update now
    #: managed jobs kept off nodes of others' reservations, active or beginning before
    #: their limit would end: the reservations' names, by job id
    reserved_for_others: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: those reservations (what an ``attach`` hold's own reservation must not overlap)
    others: OthersReservations | None = None

    def nodes_of(self, gpus: Iterable[int]) -> tuple[str, ...]:
        topo = self.topology
        names = {topo.nodes[int(topo.gpu_node[int(g)])].name for g in gpus}
        return tuple(sorted(names, key=hostlist.natural_key))

    def gpu_names(self, gpus: Iterable[int]) -> tuple[str, ...]:
        return tuple(self.topology.gpu_name(int(g)) for g in gpus)


def job_model(job: SlurmJob) -> str | None:
    """The workload class a user declared: ``model=NAME`` in the comment, else the job name."""
    m = _MODEL_TOKEN.search(job.comment)
    if m:
        return m.group(1)
    name = job.name.strip()
    return name if name and re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", name) else None


def owns(r: SlurmReservation, record: Mapping[str, object] | None) -> bool:
    """Whether reservation ``r`` is the one the daemon created (``record``: its journal row).

    By record, not by name: the journal must know the name, Slurm's start time must be the
    one first seen (a reservation deleted and re-created by someone else under the same name
    starts at another time), and a maintenance reservation is never the daemon's."""
    if record is None or "MAINT" in r.flags:
        return False
    seen, created = record.get("start_time"), record.get("created")
    if r.start_time is None:
        return True
    if isinstance(seen, (int, float)):
        return abs(r.start_time - seen) < 1.0
    return not isinstance(created, (int, float)) or r.start_time >= created - CLOCK_SLACK


def own_reservations(snap: Snapshot, records: Mapping[str, Mapping[str, object]],
                     prefix: str = "") -> dict[str, SlurmReservation]:
    """The reservations of ``snap`` that are the daemon's (``records``: the journal's),
    among those whose name starts with ``prefix``."""
    return {r.name: r for r in snap.reservations if r.name.startswith(prefix) and owns(r, records.get(r.name))}


def build_state(
    snap: Snapshot,
    topology: Topology,
    partitions: Iterable[str],
    *,
    reservation_prefix: str = "attentived-",
    owned_pins: Mapping[str, tuple[str, ...]] | None = None,
    owned_reservations: Mapping[str, Mapping[str, object]] | None = None,
    owned_exclusions: Mapping[str, tuple[str, ...]] | None = None,
    avoid: Mapping[str, tuple[str, ...]] | None = None,
    leave_to_slurm: Collection[str] = (),
    defaults: JobDefaults = JobDefaults(),
    now: float | None = None,
) -> Built:
    """The state the policy sees; ``defaults``: what slurmctld allocates a job beyond what
    squeue shows it asking (`JobDefaults`)."""
    now = snap.taken_at if now is None else now
    partitions = tuple(partitions)
    owned_pins = owned_pins or {}
    owned_reservations = owned_reservations or {}
    avoid = avoid or {}
    jobs_now = snap.jobs_by_id
    own_exclusions = {j: tuple(exc) for j, exc in (owned_exclusions or {}).items()
                      if j in jobs_now and tuple(jobs_now[j].excluded_nodes) == tuple(exc)}
    warnings: list[str] = []
    topo = topology
    free = np.zeros(topo.num_gpus, dtype=bool)
    node_reasons: dict[str, str] = {}
    slurm_nodes = snap.nodes_by_name
    reservations = snap.reservations
    own = own_reservations(snap, owned_reservations, reservation_prefix)
    foreign_reserved: dict[str, str] = {}
    for r in reservations:
        if r.name in own or not r.active(now):
            continue
        for n in r.nodes:
            foreign_reserved.setdefault(n, r.name)
    others = OthersReservations.of(reservations, own, now)

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
    capacity = _capacity(snap, topo)

    # running jobs and their GPUs
    out_of_service = {topo.node_index[n] for n, snode in slurm_nodes.items() if not snode.usable and n in topo.node_index}
    active: list[tuple[SlurmJob, tuple[int, ...], bool]] = []
    for job in snap.jobs:
        if not job.active:
            continue
        gpus = _job_gpus(job, topo, free, warnings) if job.gpus > 0 else ()
        free[list(gpus)] = False
        active.append((job, gpus, defaults.allocation(job).exclusive))
    kept = _kept_whole(active, topo, free, defaults)
    running: list[RunningJob] = []
    running_gpus: dict[str, tuple[int, ...]] = {}
    for job, allocated, _apart in active:
        if allocated:
            running_gpus[job.job_id] = allocated
        gpus, cpus = allocated, job.cpus
        mem = _memory(job, defaults)
        if job.job_id in kept.lose:
            gpus = tuple(g for g in gpus if g not in kept.lose[job.job_id])
            if not gpus:
                continue  # its CPUs and memory come back with the owner's (`KeptWhole.cpus`)
        if job.job_id in kept.gain:
            gpus = tuple(sorted((*gpus, *kept.gain[job.job_id])))
            cpus, mem = cpus + kept.cpus.get(job.job_id, 0), mem + kept.mem.get(job.job_id, 0)
            for ni in np.unique(topo.gpu_node[list(kept.gain[job.job_id])]).tolist():
                node_reasons.setdefault(topo.nodes[ni].name, f"kept whole by job {job.job_id}")
        if not gpus:
            continue
        back = gpus if not out_of_service else tuple(g for g in gpus if int(topo.gpu_node[g]) not in out_of_service)
        if not back:
            continue
        if len(back) < len(gpus):  # what it holds on the nodes that come back, as `Fit.release` spreads it
            cpus, mem = -(-cpus * len(back) // len(gpus)), -(-mem * len(back) // len(gpus))
        running.append(RunningJob(
            job_id=job.job_id, user=job.user, gpus=back, submit_time=job.submit_time or now,
            start_time=job.start_time or now, time_limit=job.time_limit, cpus=cpus, mem=mem,
            exclusive=job.job_id in kept.alone,
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
    counts = {"pending": 0, "managed": 0, "ineligible": 0, "other_partitions": 0, "no_gpu": 0, "unregistered": 0}
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
        if job.job_id in leave_to_slurm:  # Slurm refuses its updates for now (daemon/unregistered.py)
            counts["unregistered"] += 1
            continue
        managed[job.job_id] = job
        if _constrained(job, owned_pins.get(job.job_id), own):
            constrained.add(job.job_id)
    submits = _tie_break(list(managed.values()), now)
    capacity = replace(capacity, partition_nodes=_partition_nodes(topo, slurm_nodes, {j.partition for j in managed.values()}))
    reserved_for_others: dict[str, tuple[str, ...]] = {}
    pending = []
    for job_id, job in managed.items():
        keep_off = avoid.get(job_id, ())
        # a job in a reservation of someone else's is Slurm's to place (never pinned)
        if others and (not job.reservation or job.reservation in own):
            nodes, names = others.kept_off(job.time_limit)
            if names:
                keep_off, reserved_for_others[job_id] = (*keep_off, *nodes), names
        pending.append(_pending_job(job, defaults.allocation(job), submits[job_id], owned_pins.get(job_id),
                                    job_id in own_exclusions, keep_off))
    counts["managed"] = len(pending)
    counts["running"] = len(running)
    state = ClusterState(now=now, topology=topo, free=free, pending=tuple(pending), running=tuple(running), users=users,
                         nodes=capacity)
    return Built(state=state, snapshot=snap, topology=topo, partitions=partitions, managed=managed,
                 constrained=constrained, own_reservations=dict(own), own_exclusions=own_exclusions,
                 node_reasons=node_reasons, left_to_slurm=frozenset(leave_to_slurm),
                 running_gpus=running_gpus, warnings=warnings, counts=counts, reserved_for_others=reserved_for_others,
                 others=others)


def _partition_nodes(topo: Topology, slurm_nodes: Mapping[str, SlurmNode], fields: set[str]) -> dict[str, np.ndarray]:
    """For each job ``partition`` field (``a`` or ``a,b``) whose partitions leave out some
    node of the cluster, the nodes they span (`NodeCapacity.partition_nodes`): a job may not
    be placed elsewhere (Slurm takes a pin there from an operator, then finds the job never
    runnable and sets its priority to 0). Nodes Slurm does not know hold no job anyway."""
    node_parts = [set(s.partitions) if (s := slurm_nodes.get(n.name)) is not None else None for n in topo.nodes]
    out = {}
    for partition in fields:
        parts = {p for p in partition.split(",") if p}
        within = np.array([p is None or bool(parts & p) for p in node_parts])
        if not within.all():
            within.setflags(write=False)
            out[partition] = within
    return out


def _pending_job(job: SlurmJob, allocation: Allocation, submit_time: float, own_pin: tuple[str, ...] | None,
                 own_exclusion: bool, avoid: tuple[str, ...]) -> PendingJob:
    """A managed job as the policies see it, with the CPUs, memory and exclusivity
    slurmctld will give it (`JobDefaults.allocation`). Its node list is the user's only
    (the daemon's own pin is not a constraint); its exclusions are the user's (not the
    daemon's hold exclusion) plus the nodes where its planned start stalled."""
    cpus, mem_per_node, mem_per_cpu, mem_per_gpu, exclusive = allocation
    users_pin = job.required_nodes if tuple(job.required_nodes) != tuple(own_pin or ()) else ()
    features = job.features if job.features not in ("", "(null)") else ""
    return PendingJob(
        job_id=job.job_id, user=job.user, num_gpus=job.gpus, submit_time=submit_time,
        time_limit=job.time_limit, num_nodes=_node_count(job),
        model=job_model(job), partition=job.partition, cpus=cpus, mem_per_node=mem_per_node,
        mem_per_cpu=mem_per_cpu, mem_per_gpu=mem_per_gpu, exclusive=exclusive, gpu_type=job.gpu_type,
        nodelist=tuple(users_pin),
        exclude=tuple(dict.fromkeys(((*job.excluded_nodes,) if not own_exclusion else ()) + tuple(avoid))),
        features=tuple(re.split(r"[&,]", features)) if _SIMPLE_FEATURES.fullmatch(features) else (),
    )


def _node_count(job: SlurmJob) -> int | None:
    """The node count a plan keeps the job to (`PendingJob.num_nodes`: that many nodes, the
    same GPUs on each). Its own when it asked GPUs per node (``--gres=gpu:N``,
    ``--gpus-per-node``). GPUs per job or task over more nodes than one (``-N 2 --gpus=8``;
    squeue's node count is slurmctld's minimum or its estimate) go on exactly those nodes,
    at least one on each: a single node pinned is refused, an even split over the pinned
    nodes is one slurmctld accepts (it may divide them otherwise there). A count that does
    not divide the GPUs is left to Slurm (`_constrained`)."""
    if job.per_node_fixed:
        return job.num_nodes
    if job.num_nodes > 1 and job.gpus % job.num_nodes == 0:
        return job.num_nodes
    return None


def _tie_break(jobs: list[SlurmJob], now: float) -> dict[str, float]:
    """Submit times with Slurm's tie-break built in. Slurm's submit times are whole seconds
    and Slurm breaks ties by job id; policies break them by the id *string* ("10" < "9").
    Jobs of one second are spread over it in job-id order (offsets < 1 s)."""
    by_second: dict[float, list[SlurmJob]] = {}
    for job in jobs:
        by_second.setdefault(job.submit_time or now, []).append(job)
    out: dict[str, float] = {}
    for second, group in by_second.items():
        group.sort(key=lambda j: (job_number(j.job_id), j.job_id))
        for rank, job in enumerate(group):
            out[job.job_id] = second + rank / (len(group) + 1)
    return out


def _capacity(snap: Snapshot, topo: Topology) -> NodeCapacity:
    """Each topology node's free CPUs and memory, idleness, GPU type and features."""
    n = len(topo.nodes)
    cpus = np.full(n, _UNLIMITED, dtype=np.int64)
    mem = np.full(n, _UNLIMITED, dtype=np.int64)
    idle = np.ones(n, dtype=bool)
    types: list[str] = [""] * n
    features: list[frozenset[str]] = [frozenset()] * n
    total_cpus = np.full(n, _UNLIMITED, dtype=np.int64)
    total_mem = np.full(n, _UNLIMITED, dtype=np.int64)
    nodes = snap.nodes_by_name
    for ni, tnode in enumerate(topo.nodes):
        sn = nodes.get(tnode.name)
        if sn is None:
            continue
        if sn.cpus:
            cpus[ni] = max(0, sn.cpus - sn.alloc_cpus)
            total_cpus[ni] = sn.cpus
        if sn.real_memory:
            mem[ni] = max(0, sn.real_memory - sn.alloc_memory)
            total_mem[ni] = sn.real_memory
        idle[ni] = not sn.busy
        types[ni] = sn.gpu_type
        features[ni] = frozenset(sn.features)
    return NodeCapacity(cpus=cpus, mem=mem, idle=idle, gpu_type=tuple(types), features=tuple(features),
                        total_cpus=total_cpus, total_mem=total_mem)


def _constrained(job: SlurmJob, owned_pin: tuple[str, ...] | None, own: Mapping[str, SlurmReservation]) -> bool:
    """A job the daemon orders but never pins or reserves for: one that set its own node
    list (``-w``: the plan keeps to it, but the node list is the user's), one in a
    reservation of someone else, a job array (Slurm refuses node lists on arrays), or one
    whose feature expression is more than a plain AND list (the plan cannot check it).
    ``-x`` and plain ``-C a&b`` are modelled by the plan, so such jobs are pinned."""
    if job.required_nodes and tuple(job.required_nodes) != tuple(owned_pin or ()):
        return True
    if job.array:
        return True
    if not job.per_node_fixed and job.num_nodes > 1 and job.gpus % job.num_nodes:
        return True  # GPUs spread unevenly over a node count (`_node_count`)
    features = job.features if job.features != "(null)" else ""
    if features and not _SIMPLE_FEATURES.fullmatch(features):
        return True
    return bool(job.reservation) and job.reservation not in own


@dataclass(frozen=True)
class KeptWhole:
    """What exclusive running jobs keep from other jobs (`_kept_whole`): per job id, the GPUs
    it gains, with the CPUs and memory of the jobs whose GPUs it takes over whole; the GPUs
    others lose to it; and the exclusive jobs alone on their nodes."""

    gain: dict[str, list[int]]
    cpus: dict[str, int]
    mem: dict[str, int]
    lose: dict[str, set[int]]
    alone: set[str]


def _kept_whole(active: list[tuple[SlurmJob, tuple[int, ...], bool]], topo: Topology, free: np.ndarray,
                defaults: JobDefaults) -> KeptWhole:
    """Who gives back an exclusive job's nodes, and when (marks their free GPUs not free).

    ``active``: each running job, its GPUs, and whether it keeps its nodes to itself
    (`JobDefaults.allocation`). slurmctld starts no other job on such a job's nodes, but for
    ``--exclusive=user`` (a partition's ``ExclusiveUser=YES``) or ``=mcs`` its own user's
    (group's) jobs, and keeps the node theirs until the last such job ends (``owner_job_cnt``
    in node_mgr.c); yet it allocates such a job, or one holding a node's whole memory, only
    the GPUs it asked for, and a CPU job none. So on each such node the exclusive job that
    ends last (by `RunningJob.deadline`) is its owner: it takes the GPUs no job holds, and
    those of the jobs beside it that end before it (with their CPUs and memory when they
    hold nothing else), and gives them all back when it ends. An exclusive job alone on its
    nodes gives them back whole (`Fit.release`). A job charged GPUs it keeps counts them as
    its user's service while it runs."""
    out = KeptWhole({}, {}, {}, {}, set())
    index = topo.node_index
    kept_nodes = {index[n] for job, _gpus, keeps in active if keeps for n in job.nodes if n in index}
    if not kept_nodes:
        return out
    on_node: dict[int, list[tuple[SlurmJob, tuple[int, ...], bool]]] = {}
    for entry in active:
        for name in entry[0].nodes:
            ni = index.get(name)
            if ni in kept_nodes:
                on_node.setdefault(ni, []).append(entry)
    first = topo.node_first_gpu
    shared: set[str] = set()
    for ni, here in on_node.items():
        apart = [job for job, _gpus, keeps in here if keeps]
        if not apart:
            continue
        if len(here) > 1:
            shared.update(job.job_id for job in apart)
        owner = max(apart, key=_ends)
        until = _ends(owner)
        lo, hi = int(first[ni]), int(first[ni + 1])
        span = np.arange(lo, hi)
        taken = span[free[span]].tolist()
        free[span] = False
        for job, gpus, _keeps in here:
            if job is owner or _ends(job) >= until:
                continue
            mine = {g for g in gpus if lo <= g < hi}
            if mine:  # ends while the node stays kept: its GPUs come back with the owner's
                out.lose.setdefault(job.job_id, set()).update(mine)
                taken.extend(mine)
                if len(mine) == len(gpus):
                    out.cpus[owner.job_id] = out.cpus.get(owner.job_id, 0) + job.cpus
                    out.mem[owner.job_id] = out.mem.get(owner.job_id, 0) + _memory(job, defaults)
        if taken:
            out.gain.setdefault(owner.job_id, []).extend(taken)
    out.alone.update(job.job_id for job, _gpus, keeps in active if keeps and job.job_id not in shared)
    return out


def _memory(job: SlurmJob, defaults: JobDefaults) -> int:
    """A running job's memory in all (MB): per node, per CPU or per GPU, as it asked; none
    where its partition allocates no memory (slurmctld's AllocMem leaves it out, so none
    comes back when it ends)."""
    if not defaults.allocates_memory(job.partition):
        return 0
    return job.mem_per_node * max(1, len(job.nodes)) + job.mem_per_cpu * job.cpus + job.mem_per_gpu * job.gpus


def _ends(job: SlurmJob) -> tuple[float, int]:
    """A running job's `RunningJob.deadline` (no limit: -inf, expected back at once), ties
    by job id."""
    return deadline(job.start_time or 0.0, job.time_limit), job_number(job.job_id)


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
