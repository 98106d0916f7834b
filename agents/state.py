"""What a policy may see: one frozen snapshot of the cluster and its queue.

The simulator builds a ``ClusterState`` from its event loop and the daemon builds one from
Slurm; both hand it to the same policies. It carries only what Slurm shows live (see
"Fair comparisons" in DEVELOPERS.md): requested GPUs, user, submit time, the user's time
limit, running jobs' allocations and start times, and each user's finished-job history.
A job's true duration is absent unless the run is an explicitly named oracle run.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from operator import attrgetter
from types import MappingProxyType
from typing import overload

import numpy as np

from attentived.topology import Topology


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting in the queue, as Slurm shows it.

    ``num_nodes`` is set when the user fixed the node count (``sbatch -N``); then the job
    needs exactly ``num_gpus / num_nodes`` GPUs on each of that many nodes. ``model`` is a
    workload class the user declared (job name or comment), ``None`` when unknown.
    ``oracle_duration`` is filled only in oracle runs (an upper bound, never a baseline).

    The rest is what Slurm checks before it starts a job besides free GPUs, so that a plan
    never puts a job where Slurm will refuse it (`attentived.agents.fit` applies them):
    ``cpus`` in all (0: none to honour) spread over its nodes in proportion to its GPUs,
    memory per node (``mem_per_node``, MB), per CPU (``mem_per_cpu``) or per GPU
    (``mem_per_gpu``: ``--mem-per-gpu``, or the site's ``DefMemPerGPU``), ``exclusive``
    (whole idle nodes only), a GPU type (``--gres=gpu:h100:2``), the nodes it must run on
    (``nodelist``, ``-w``), may not run on (``exclude``, ``-x``) and the node features it
    requires (``features``, ``-C a&b``).
    """

    job_id: str
    user: str
    num_gpus: int
    submit_time: float
    time_limit: float | None = None
    num_nodes: int | None = None
    model: str | None = None
    partition: str = ""
    oracle_duration: float | None = None
    cpus: int = 0
    mem_per_node: int = 0
    mem_per_cpu: int = 0
    mem_per_gpu: int = 0
    exclusive: bool = False
    gpu_type: str = ""
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    features: tuple[str, ...] = ()

    @property
    def placement_constrained(self) -> bool:
        """Whether anything besides GPU count limits where the job may go."""
        return bool(self.exclusive or self.gpu_type or self.nodelist or self.exclude or self.features)

    @property
    def asks_resources(self) -> bool:
        """Whether it asks for CPUs or memory (which limit it only where nodes say what is left)."""
        return bool(self.cpus or self.mem_per_node or self.mem_per_cpu or self.mem_per_gpu)

    @overload
    def mem_on(self, gpus: int, cpus: int) -> int: ...
    @overload
    def mem_on(self, gpus: np.ndarray, cpus: np.ndarray) -> np.ndarray: ...

    def mem_on(self, gpus: int | np.ndarray, cpus: int | np.ndarray) -> int | np.ndarray:
        """MB the job needs on a node where it takes ``gpus`` GPUs and ``cpus`` CPUs (numbers
        or arrays over nodes): Slurm takes one of per node, per CPU and per GPU (sbatch
        refuses two; a driver keeps the one Slurm applies), so the sum is that one."""
        return self.mem_per_node + self.mem_per_cpu * cpus + self.mem_per_gpu * gpus

    def waited(self, now: float) -> float:
        return max(0.0, now - self.submit_time)


def request(job: PendingJob) -> tuple:
    """Everything `attentived.agents.fit.Fit.usable` reads of ``job``: jobs with equal
    requests may use the same GPUs."""
    return (job.num_gpus, job.num_nodes, job.cpus, job.mem_per_node, job.mem_per_cpu, job.mem_per_gpu, job.exclusive,
            job.gpu_type, job.nodelist, job.exclude, job.features, job.partition)


def deadline(start_time: float, time_limit: float | None) -> float:
    """When a job started at ``start_time`` reaches its limit; -inf without one (nothing to
    expect, so it counts as coming back at once)."""
    return -math.inf if time_limit is None else start_time + time_limit


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding GPUs. Its expected end is ``start_time + time_limit`` when a limit exists.

    ``cpus`` and ``mem`` (MB) are what it holds in all, spread over its nodes in proportion
    to its GPUs there; an ``exclusive`` job holds its nodes whole. A hold computed from
    expected ends gives these back with the GPUs."""

    job_id: str
    user: str
    gpus: tuple[int, ...]
    submit_time: float
    start_time: float
    time_limit: float | None = None
    cpus: int = 0
    mem: int = 0
    exclusive: bool = False
    #: ``start_time + time_limit`` (-inf without a limit): a plain field, so ordering
    #: hundreds of running jobs by it at every blocked decision is a C-level sort.
    deadline: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "deadline", deadline(self.start_time, self.time_limit))

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    def expected_end(self, now: float) -> float:
        """When the job's GPUs are expected back: its time limit, or ``now`` if it has none
        or has overrun it (the earliest moment it could end)."""
        if self.time_limit is None:
            return now
        return max(now, self.start_time + self.time_limit)


@dataclass(frozen=True, slots=True)
class UserStats:
    """A user's finished-job history: what a fair-share or a learned policy may use."""

    jobs: int = 0
    gpu_seconds: float = 0.0
    wait_seconds: float = 0.0
    run_seconds: float = 0.0
    limit_seconds: float = 0.0  # sum of time limits of finished jobs that had one
    limited_jobs: int = 0
    #: Mean run time / time limit over the user's finished jobs (``None`` if unknown): how
    #: much the user over-asks, so policies can sharpen a limit into an estimate. A field
    #: set at construction: every decision of a replay reads it for each of its users.
    limit_accuracy: float | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        known = self.limited_jobs and self.limit_seconds > 0
        object.__setattr__(self, "limit_accuracy", min(1.0, self.run_seconds / self.limit_seconds) if known else None)

    @property
    def mean_wait(self) -> float:
        return self.wait_seconds / self.jobs if self.jobs else 0.0

    def add(self, num_gpus: int, wait: float, run: float, time_limit: float | None) -> UserStats:
        return UserStats(
            jobs=self.jobs + 1,
            gpu_seconds=self.gpu_seconds + num_gpus * run,
            wait_seconds=self.wait_seconds + wait,
            run_seconds=self.run_seconds + (run if time_limit is not None else 0.0),
            limit_seconds=self.limit_seconds + (time_limit or 0.0),
            limited_jobs=self.limited_jobs + (time_limit is not None),
        )


_NO_USERS: Mapping[str, UserStats] = MappingProxyType({})


@dataclass(frozen=True)
class QueueArrays:
    """The pending queue as aligned numpy arrays (row i = ``ClusterState.pending[i]``).

    Choosers rank thousands of pending jobs at every decision of a replay; reading these
    arrays costs microseconds where walking the dataclasses costs milliseconds. ``seq`` is
    the tie-break order (arrival order: submit time, then job id).
    """

    seq: np.ndarray
    submit: np.ndarray
    gpus: np.ndarray
    limit: np.ndarray  # inf when the job has no time limit
    oracle: np.ndarray  # nan unless this is an oracle run
    user: np.ndarray  # index into ``users``
    users: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.seq)

    @cached_property
    def in_arrival_order(self) -> bool:
        """Whether row i is the i-th arrival (``seq`` ascending), as the simulator's is."""
        return _ascending(self.seq)

    @cached_property
    def arrival(self) -> np.ndarray:
        """Queue indices in arrival order (``seq`` ascending). The simulator's queue is
        already in that order, and a replay asks at every decision: no sort then."""
        order = np.arange(len(self)) if self.in_arrival_order else np.argsort(self.seq, kind="stable")
        order.setflags(write=False)  # shared by every reader of this snapshot
        return order

    def take(self, rows: np.ndarray, oracle: np.ndarray | None = None) -> QueueRows:
        """The queue made of this table's rows ``rows`` (ascending), each array gathered from the
        table the first time it is read (``oracle``: that column as given instead). A
        replay snapshots a queue of thousands of jobs at every decision, and FIFO reads
        two of its arrays: gathering all six was most of a whole-trace replay's time."""
        return QueueRows(self, rows, oracle)

    @classmethod
    def of(cls, pending: Sequence[PendingJob]) -> QueueArrays:
        users = tuple(sorted({j.user for j in pending}))
        uidx = {u: i for i, u in enumerate(users)}
        submit = np.array([j.submit_time for j in pending], dtype=float)
        by_arrival = np.lexsort((np.array([j.job_id for j in pending], dtype=str), submit))
        seq = np.empty(len(pending), dtype=np.int64)
        seq[by_arrival] = np.arange(len(pending))
        return cls(
            seq=seq,
            submit=submit,
            gpus=np.array([j.num_gpus for j in pending], dtype=np.int64),
            limit=np.array([np.inf if j.time_limit is None else j.time_limit for j in pending], dtype=float),
            oracle=np.array([np.nan if j.oracle_duration is None else j.oracle_duration for j in pending], dtype=float),
            user=np.array([uidx[j.user] for j in pending], dtype=np.int64),
            users=users,
        )


def _ascending(seq: np.ndarray) -> bool:
    return bool((seq[1:] > seq[:-1]).all())


_COLUMNS = ("seq", "submit", "gpus", "limit", "oracle", "user")  # QueueArrays' per-job arrays


class QueueRows(QueueArrays):
    """`QueueArrays.take`: rows of a table, gathered on first read of each array, or
    carried over from the queue before (`follow`)."""

    _table: QueueArrays
    _rows: np.ndarray
    _before: tuple[dict[str, np.ndarray], np.ndarray, np.ndarray] | None

    def __init__(self, table: QueueArrays, rows: np.ndarray, oracle: np.ndarray | None,
                 before: tuple[dict[str, np.ndarray], np.ndarray, np.ndarray] | None = None) -> None:
        object.__setattr__(self, "_table", table)  # the dataclass is frozen
        object.__setattr__(self, "_rows", rows)
        object.__setattr__(self, "_before", before)
        object.__setattr__(self, "users", table.users)
        if oracle is not None:
            object.__setattr__(self, "oracle", oracle)

    def __len__(self) -> int:
        return len(self._rows)

    def follow(self, rows: np.ndarray, gone: np.ndarray, oracle: np.ndarray | None) -> QueueRows:
        """The next snapshot's queue, table rows ``rows``: this queue's without its
        positions ``gone``, then rows that arrived since (all after its own). Each array
        read here is carried over (``gone`` cut out, the arrivals' values appended)
        instead of gathered again from the table: at 16,384 GPUs the queue holds tens of
        thousands of jobs spread over a table of 500,000, a gather that missed the cache
        for each of them at every decision, while a decision starts or admits a handful."""
        read = {c: self.__dict__[c] for c in _COLUMNS if c in self.__dict__ and not (c == "oracle" and oracle is not None)}
        arrived = rows[len(self._rows) - len(gone) :]
        return QueueRows(self._table, rows, oracle, (read, gone, arrived) if read else None)

    def _column(self, name: str) -> np.ndarray:
        table = getattr(self._table, name)
        if self._before is not None and name in self._before[0]:
            read, gone, arrived = self._before
            return spliced(read[name], gone, table[arrived])
        return table[self._rows]

    @cached_property
    def in_arrival_order(self) -> bool:
        """Ascending rows of a table in arrival order are in arrival order: no gather."""
        return self._table.in_arrival_order or _ascending(self.seq)

    @cached_property
    def seq(self) -> np.ndarray:
        return self._column("seq")

    @cached_property
    def submit(self) -> np.ndarray:
        return self._column("submit")

    @cached_property
    def gpus(self) -> np.ndarray:
        return self._column("gpus")

    @cached_property
    def limit(self) -> np.ndarray:
        return self._column("limit")

    @cached_property
    def oracle(self) -> np.ndarray:
        return self._column("oracle")

    @cached_property
    def user(self) -> np.ndarray:
        return self._column("user")


@dataclass(frozen=True)
class RunningArrays:
    """Running jobs as aligned arrays (row i = ``ClusterState.running[i]``); ``gpus`` is
    every job's GPUs one after another (``num_gpus`` of them per row)."""

    user: np.ndarray  # index into ``users``
    users: tuple[str, ...]
    start: np.ndarray
    submit: np.ndarray
    deadline: np.ndarray  # start + limit; -inf without a limit (`RunningJob.deadline`)
    num_gpus: np.ndarray
    gpus: np.ndarray

    @classmethod
    def of(cls, running: Sequence[RunningJob]) -> RunningArrays:
        n = len(running)
        index: dict[str, int] = {}
        names = list(map(_USER, running))
        for u in names:
            index.setdefault(u, len(index))
        gpus = list(map(_GPUS, running))
        num_gpus = np.fromiter(map(len, gpus), np.int64, n)
        return cls(  # map with attrgetter: C-level reads, 3x faster than generators here
            user=np.fromiter(map(index.__getitem__, names), np.int64, n),
            users=tuple(index),
            start=np.fromiter(map(_START, running), float, n),
            submit=np.fromiter(map(_SUBMIT, running), float, n),
            deadline=np.fromiter(map(_DEADLINE, running), float, n),
            num_gpus=num_gpus,
            gpus=np.fromiter(chain.from_iterable(gpus), np.int64, int(num_gpus.sum())),
        )


_USER, _GPUS, _START, _SUBMIT, _DEADLINE = (attrgetter(a) for a in ("user", "gpus", "start_time", "submit_time", "deadline"))


def _without(pending: Sequence[PendingJob], index: int) -> RowView:
    """``pending`` without job ``index``, as rows of the same jobs: a plan of 460 starts on
    a queue of 10,000 copied the queue's tuple at every start."""
    if isinstance(pending, RowView):
        return RowView(pending._jobs, spliced(pending._rows, (index,)))
    return RowView(pending, spliced(np.arange(len(pending)), (index,)))


def spliced(a: np.ndarray, gone: Sequence[int] | np.ndarray, tail: np.ndarray | None = None) -> np.ndarray:
    """``a`` without its positions ``gone`` (ascending), then ``tail``: one copy, where
    ``np.delete`` (and an append) made two and built a mask as long as ``a``, at every
    start of a plan (one position) and every snapshot of a replay (a handful, and the
    arrivals), on queues of tens of thousands."""
    if not len(gone) and (tail is None or not len(tail)):
        return a
    parts, lo = [], 0
    for p in gone:
        parts.append(a[lo:p])
        lo = p + 1
    parts.append(a[lo:])
    if tail is not None:
        parts.append(tail)
    return np.concatenate(parts)


class RowView(Sequence[PendingJob]):
    """``jobs[rows[i]]`` for each i, read on demand: the simulator's pending queue.

    A replay snapshots a queue of thousands of jobs at every decision and a policy reads
    only the few it starts; building a tuple each time would dominate the run time.
    """

    __slots__ = ("_jobs", "_rows")

    def __init__(self, jobs: Sequence[PendingJob], rows: np.ndarray) -> None:
        self._jobs = jobs
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> PendingJob: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[PendingJob, ...]: ...
    def __getitem__(self, i: int | slice) -> PendingJob | tuple[PendingJob, ...]:
        if isinstance(i, slice):
            return tuple(self._jobs[int(r)] for r in self._rows[i])
        return self._jobs[int(self._rows[i])]

    def __iter__(self) -> Iterator[PendingJob]:
        jobs = self._jobs
        return (jobs[r] for r in self._rows.tolist())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class NodeCapacity:
    """Per node (topology order), what is left besides GPUs: free CPUs, free memory (MB),
    whether nothing at all is allocated (what ``--exclusive`` needs), the GPU type and the
    node's features; and, per job ``partition`` field (``a`` or ``a,b``) that does not
    span every node, the nodes it does (a job runs only in its partitions: Slurm takes an
    operator's pin elsewhere, then finds the job never runnable). The daemon fills it from
    Slurm; the simulator when its cluster and trace say so; ``None`` in a ``ClusterState``
    means GPUs are the only limit."""

    cpus: np.ndarray  # int64
    mem: np.ndarray  # int64, MB
    idle: np.ndarray  # bool
    gpu_type: tuple[str, ...]
    features: tuple[frozenset[str], ...]
    partition_nodes: Mapping[str, np.ndarray] = field(default_factory=dict)  # bool per node
    #: Each node's CPUs and MB in all, where known: what an exclusive job, which held its
    #: nodes whole, gives each back when it ends (its total spread by GPUs is wrong on
    #: nodes of different sizes).
    total_cpus: np.ndarray | None = None
    total_mem: np.ndarray | None = None

    def confines(self, job: PendingJob) -> bool:
        """Whether the job's partitions leave out some node."""
        return job.partition in self.partition_nodes


def free_counts(topo: Topology, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Free GPUs per NVLink island and per node."""
    return topo.per_island(free), topo.per_node(free)


DOWN_SECONDS = 30 * 86_400.0
"""What `ClusterState.release_in` says of a GPU on a node that is down or drained."""

BY_RELEASE = attrgetter("deadline", "job_id")
"""Sort key of running jobs before `release_order` (a driver that keeps them sorted uses it)."""
_BY_ID = attrgetter("job_id")


def release_order(by_release: Sequence[RunningJob], now: float) -> tuple[RunningJob, ...]:
    """Running jobs sorted by `BY_RELEASE`, in the order their GPUs are expected back
    (`ClusterState.running_by_end`): those past their limit (or without one) are expected
    *now*, so they come first, by job id."""
    overdue = bisect.bisect_right(by_release, now, key=_DEADLINE)
    if overdue > 1:
        return (*sorted(by_release[:overdue], key=_BY_ID), *by_release[overdue:])
    return tuple(by_release)


@dataclass(frozen=True)
class ClusterState:
    """One immutable snapshot. ``free`` is a read-only bool array over global GPU ids
    (``False`` for busy GPUs and for GPUs on nodes that are down or drained); ``nodes``
    the nodes' other resources when known."""

    now: float
    topology: Topology
    free: np.ndarray
    pending: Sequence[PendingJob]
    running: tuple[RunningJob, ...] = ()
    users: Mapping[str, UserStats] = field(default_factory=lambda: _NO_USERS)
    queue_arrays: QueueArrays | None = field(default=None, repr=False, compare=False)
    nodes: NodeCapacity | None = None
    #: ``running`` in `running_by_end` order, when the driver keeps it so (the simulator).
    release_order: tuple[RunningJob, ...] | None = field(default=None, repr=False, compare=False)
    #: `limit_accuracies`, when the driver keeps them (the simulator).
    user_accuracy: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.free.shape != (self.topology.num_gpus,):
            raise ValueError(f"free mask has shape {self.free.shape}, cluster has {self.topology.num_gpus} GPUs")
        if self.free.flags.writeable:
            free = self.free.copy()
            free.setflags(write=False)
            object.__setattr__(self, "free", free)

    @cached_property
    def queue(self) -> QueueArrays:
        """``pending`` as arrays: given by the driver (the simulator keeps them), else built."""
        return self.queue_arrays if self.queue_arrays is not None else QueueArrays.of(self.pending)

    @cached_property
    def num_free(self) -> int:
        return int(np.count_nonzero(self.free))

    @cached_property
    def running_by_end(self) -> tuple[RunningJob, ...]:
        """Running jobs by expected end (`RunningJob.expected_end`), then job id: the order
        their GPUs are expected back in. Jobs past their limit (or without one) are
        expected *now*, so they come first, by job id. Given by the driver as
        ``release_order`` when it keeps running jobs so, else sorted here."""
        if self.release_order is not None:
            return self.release_order
        # By the deadlines' array, ids breaking ties: sorting 6,000 running jobs by a
        # Python key was 48 ms of a 1 s plan at 16,384 GPUs.
        running = self.running
        order = np.lexsort((np.array([r.job_id for r in running]), self.running_arrays.deadline))
        return release_order([running[i] for i in order.tolist()], self.now)

    @cached_property
    def limit_accuracies(self) -> np.ndarray:
        """Each of ``queue.users``'s `UserStats.limit_accuracy`, 1.0 when unknown: what a
        size estimate multiplies time limits by. Given by the driver as ``user_accuracy``
        when it keeps them (they change only when a user's job ends), else read here."""
        if self.user_accuracy is not None:
            return self.user_accuracy
        users = self.users
        return np.array([(s.limit_accuracy or 1.0) if (s := users.get(u)) is not None else 1.0
                         for u in self.queue.users], dtype=float)

    @cached_property
    def free_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Free GPUs per NVLink island and per node: placers and features ask for these
        counts of the snapshot's own mask several times per decision."""
        per_island, per_node = free_counts(self.topology, self.free)
        per_island.setflags(write=False)
        per_node.setflags(write=False)
        return per_island, per_node

    @cached_property
    def running_arrays(self) -> RunningArrays:
        """``running`` as arrays, read in one pass: what the per-user and per-GPU views
        below are computed from (a 16,384-GPU cluster runs some 10,000 jobs)."""
        return RunningArrays.of(self.running)

    @cached_property
    def attained_service(self) -> dict[str, float]:
        """GPU-seconds each user has received: finished jobs plus running jobs so far."""
        out = {u: s.gpu_seconds for u, s in self.users.items()}
        ra = self.running_arrays
        if len(ra.start):
            got = np.bincount(ra.user, weights=ra.num_gpus * np.maximum(0.0, self.now - ra.start), minlength=len(ra.users))
            for u, g in zip(ra.users, got.tolist()):
                out[u] = out.get(u, 0.0) + g
        return out

    @cached_property
    def waits_by_user(self) -> dict[str, tuple[float, int]]:
        """Per user, seconds waited and jobs, over finished jobs and running ones (what
        users' mean waits so far are made of; pending jobs are the reader's to add)."""
        out = {u: (s.wait_seconds, s.jobs) for u, s in self.users.items()}
        ra = self.running_arrays
        if len(ra.start):
            waited = np.bincount(ra.user, weights=ra.start - ra.submit, minlength=len(ra.users))
            jobs = np.bincount(ra.user, minlength=len(ra.users))
            for u, w, n in zip(ra.users, waited.tolist(), jobs.tolist()):
                before, count = out.get(u, (0.0, 0))
                out[u] = (before + w, count + n)
        return out

    @cached_property
    def release_in(self) -> np.ndarray:
        """Per GPU, seconds until it is expected free: 0 if free, its running job's
        `RunningJob.expected_end` from now if busy, `DOWN_SECONDS` if its node is down or
        drained (busy, and no running job holds it). Read-only."""
        until = np.where(self.free, 0.0, DOWN_SECONDS)
        ra = self.running_arrays
        if len(ra.start):
            # `RunningJob.expected_end`: the deadline, never before now (now without a limit).
            left = np.where(np.isfinite(ra.deadline), np.maximum(ra.deadline - self.now, 0.0), 0.0)
            until[ra.gpus] = np.repeat(left, ra.num_gpus)
        until.setflags(write=False)
        return until

    @cached_property
    def irregular_requests(self) -> np.ndarray:
        """Per `irregular` job, a number shared by the jobs asking alike (`request`): they
        fit now or not together. Numbered once per snapshot and carried through a plan's
        starts (`started`): asked anew at each start, the daemon's 10,000-job queue at
        16,384 GPUs made a plan of 140 starts build 1.3 million request tuples (1.5 s)."""
        pending, numbers = self.pending, dict[tuple, int]()
        return np.array([numbers.setdefault(request(pending[int(i)]), len(numbers)) for i in self.irregular],
                        dtype=np.int64)

    @cached_property
    def irregular(self) -> np.ndarray:
        """Queue indices of the jobs for which enough free GPUs does not mean they fit: a
        node count, a placement constraint, or CPUs, memory or partitions that leave out
        nodes where nodes say what is left (`attentived.agents.fit.Fit.usable`); every job
        under Slurm's block topology (its GPUs must lie in one block's part)."""
        nodes = self.nodes
        if self.topology.blocks is not None:
            return np.arange(len(self.pending), dtype=np.int64)
        return np.array([i for i, j in enumerate(self.pending)
                         if j.num_nodes is not None or j.placement_constrained
                         or (nodes is not None and (j.asks_resources or nodes.confines(j)))],
                        dtype=np.int64)

    def user(self, name: str) -> UserStats:
        return self.users.get(name, UserStats())

    def started(self, index: int, run: RunningJob, nodes: NodeCapacity | None) -> ClusterState:
        """This state after pending job ``index`` starts as ``run`` now, with ``nodes``
        what is left on the nodes: the state a plan's next choice sees. What a start
        cannot change is carried over instead of recomputed over the whole queue and every
        running job (the users' attained service: the new job has run for no time yet),
        which made a 480-start plan on 16,384 GPUs pay for its queue 480 times."""
        assert run.start_time == self.now, "a plan starts jobs now"
        free = self.free.copy()
        free[list(run.gpus)] = False
        q = self.queue
        out = ClusterState(
            now=self.now,
            topology=self.topology,
            free=free,
            pending=_without(self.pending, index),
            running=self.running + (run,),
            users=self.users,
            user_accuracy=self.user_accuracy,
            queue_arrays=QueueArrays(**{c: spliced(getattr(q, c), (index,)) for c in _COLUMNS}, users=q.users),
            nodes=nodes,
        )
        cache = out.__dict__  # cached_property's own store
        if "attained_service" in self.__dict__:
            served = dict(self.attained_service)
            served.setdefault(run.user, 0.0)
            cache["attained_service"] = served
        if "free_counts" in self.__dict__:
            topo, taken = self.topology, np.asarray(run.gpus)
            per_island, per_node = (a.copy() for a in self.free_counts)
            np.subtract.at(per_island, topo.gpu_island[taken], 1)
            np.subtract.at(per_node, topo.gpu_node[taken], 1)
            per_island.setflags(write=False)
            per_node.setflags(write=False)
            cache["free_counts"] = (per_island, per_node)
        if "waits_by_user" in self.__dict__:
            waits = dict(self.waits_by_user)
            w, n = waits.get(run.user, (0.0, 0))
            waits[run.user] = (w + run.start_time - run.submit_time, n + 1)
            cache["waits_by_user"] = waits
        if "release_in" in self.__dict__:
            until = self.release_in.copy()
            until[list(run.gpus)] = run.expected_end(self.now) - self.now
            until.setflags(write=False)
            cache["release_in"] = until
        if "irregular" in self.__dict__ and (nodes is None) == (self.nodes is None):
            r = self.irregular
            kept = r != index
            r = r[kept]
            cache["irregular"] = np.where(r > index, r - 1, r)
            if "irregular_requests" in self.__dict__:
                cache["irregular_requests"] = self.irregular_requests[kept]
        return out
