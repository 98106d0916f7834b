"""The discrete-event simulator: arrivals, starts and completions on a heapq clock.

Non-preemptive, as under Slurm: once started, a job holds its GPUs until it ends. At each
decision point (after every event batch at one instant, when some pending job could fit)
the policy gets a frozen ``ClusterState`` -- the same type the daemon builds from Slurm --
and returns a ``Plan``. The engine trusts nothing in the plan: every start is checked
(job pending, GPUs free and distinct, count and node shape right) before it is applied.

When the cluster declares per-node CPUs or memory, or some job asks for more than GPUs
(CPUs, memory, ``--exclusive``, a GPU type, ``-w``/``-x``, features), the engine also
keeps each node's free CPUs and memory and whether it is idle, shows them to the policy
as ``ClusterState.nodes`` and checks every start against them as Slurm would (see
``_Resources``). Otherwise ``nodes`` is ``None`` and none of that costs anything.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from types import MappingProxyType

import numpy as np

from attentived.agents.plan import Plan
from attentived.agents.policy import Policy, next_change
from attentived.agents.state import (
    BY_RELEASE,
    ClusterState,
    NodeCapacity,
    PendingJob,
    QueueArrays,
    RowView,
    RunningJob,
    UserStats,
    spliced,
)
from attentived.topology import Topology
from attentived.topology.speed import SpeedModel, resolve_model

from .limits import time_limit
from .trace import TraceJob

_DEADLINE, _JOB_ID = attrgetter("deadline"), attrgetter("job_id")
_COMPLETION, _ARRIVAL, _PASS, _WAKE = 0, 1, 2, 3  # at one instant, free GPUs before new jobs are seen

#: Free CPUs and MB of a node whose capacity the cluster does not declare: more than any
#: job asks, and small enough that sums over a million nodes stay inside int64.
UNKNOWN_CAPACITY = 1 << 40


def next_pass(t: float, every: float, phase: float) -> float:
    """The first instant ``phase + k * every`` at or after ``t`` (a float ``t`` a hair
    past a pass counts as on it)."""
    return math.ceil((t - phase) / every - 1e-9) * every + phase


@dataclass(frozen=True, slots=True)
class Relay:
    """Another process carries the decisions out at its own passes, at ``phase + k *
    every``: a plan decided at ``t`` starts its jobs at the first pass at or after ``t +
    delay``, and they hold their GPUs from ``t`` on. The demo's daemon re-plans at every
    cycle and slurmctld starts the last plan that reached it before a pass (its
    background thread's tick, once a second at a phase of its own): the daemon decides
    for a pass ``delay`` before it (docs/demo.md, "The two clocks")."""

    every: float
    phase: float = 0.0
    delay: float = 0.0

    def __post_init__(self) -> None:
        if not (0 < self.every < math.inf and 0 <= self.delay < math.inf and math.isfinite(self.phase)):
            raise ValueError(f"relay: passes every > 0 s, a delay >= 0 s and a finite phase, got {self}")

    def start_of(self, decided: float) -> float:
        return next_pass(decided + self.delay, self.every, self.phase)


@dataclass(frozen=True)
class MainPasses:
    """Slurm's main scheduler, on a clock of its own: ``offset`` seconds after each of the
    engine's passes (its ``cadence`` grid, where the policy decides in full, as
    slurmctld's backfill does), ``policy`` decides again, and only its plan's head starts:
    the jobs of its priority order up to the first that it does not start. slurmctld's
    main loop starts jobs in priority order and stops at the first that does not fit; its
    thread sleeps a second between passes, as the backfill thread does, at a phase of its
    own (on the lab 0.1-0.6 s after the backfill pass, docs/demo.md). ``policy`` is
    normally the engine's own instance: both loops read the same priorities."""

    offset: float
    policy: Policy

    def head(self, plan: Plan) -> Plan:
        """``plan`` cut to the starts of its order's head (see the class docstring)."""
        by_id = {s.job_id: s for s in plan.starts}
        head = []
        for job_id in plan.order:
            start = by_id.get(job_id)
            if start is None:
                break
            head.append(start)
        return Plan(order=plan.order, starts=tuple(head))


class PolicyError(RuntimeError):
    """The policy returned a plan that cannot be carried out (a bug in the policy)."""


class SimulationStalled(RuntimeError):
    """Jobs are pending, nothing runs and nothing will arrive: no policy decision can help."""


class UnstartableJob(ValueError):
    """A job that no placement on this cluster could ever start (found before replaying)."""

    def __init__(self, job_id: str, reason: str) -> None:
        self.job_id = job_id
        self.reason = reason
        super().__init__(f"job {job_id} can never start on this cluster: {reason}")

    def __reduce__(self) -> tuple[type[UnstartableJob], tuple[str, str]]:
        return UnstartableJob, (self.job_id, self.reason)


@dataclass(frozen=True, slots=True)
class SimJob:
    """A trace job with what the simulation adds: the user's time limit and a model."""

    job: TraceJob
    time_limit: float
    model: str

    def pending(self, oracle: bool) -> PendingJob:
        j = self.job
        return PendingJob(
            job_id=j.job_id,
            user=j.user,
            num_gpus=j.num_gpus,
            submit_time=j.submit_time,
            time_limit=self.time_limit,
            model=self.model,
            oracle_duration=j.duration if oracle else None,
            cpus=j.cpus,
            mem_per_node=j.mem_per_node,
            mem_per_cpu=j.mem_per_cpu,
            mem_per_gpu=j.mem_per_gpu,
            exclusive=j.exclusive,
            gpu_type=j.gpu_type,
            nodelist=j.nodelist,
            exclude=j.exclude,
            features=j.features,
            num_nodes=j.num_nodes,
        )


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One finished job: what metrics are computed from."""

    job_id: str
    user: str
    num_gpus: int
    model: str
    submit_time: float
    start_time: float
    end_time: float
    ideal_duration: float
    time_limit: float
    gpus: tuple[int, ...]

    @property
    def wait(self) -> float:
        return self.start_time - self.submit_time

    @property
    def jct(self) -> float:
        return self.end_time - self.submit_time

    @property
    def runtime(self) -> float:
        return self.end_time - self.start_time


@dataclass(frozen=True)
class SimResult:
    policy: str
    topology: Topology
    records: tuple[JobRecord, ...]
    decisions: int
    decision_seconds: tuple[float, ...] = field(repr=False)
    wall_seconds: float


def prepare_jobs(jobs: Iterable[TraceJob], seed: int) -> list[SimJob]:
    """Attach a modelled time limit and a workload model to each trace job (both
    deterministic per job id and seed, so every policy sees the same workload)."""
    return [
        SimJob(j, time_limit(j.job_id, j.duration, seed), resolve_model(j.model, j.job_id, j.num_gpus, seed))
        for j in jobs
    ]


class Simulation:
    """One replay of ``jobs`` on ``topology`` under ``policy``.

    ``run()`` replays it all. An outside decider (the Gymnasium environment) instead calls
    ``reset()``, then alternates ``next_decision()`` and ``apply(plan)``. ``progress`` is
    called with the number of finished jobs after each completion batch.

    ``cadence`` (seconds, 0: off) makes decisions wait for the scheduler's next pass on a
    grid of that period (at ``phase + k * cadence``), as a live Slurm starts jobs at its
    scheduling passes (``sched_interval``) rather than the instant resources free up.
    The engine looks at the queue only when a job arrives or ends, and, with a cadence,
    also when the policy says its decisions may change on their own (`next_change`:
    Slurm's priority ticks), as slurmctld's backfill looks again at every pass.

    ``overhead`` (seconds) is added to every run: what a live start takes beyond the job's
    own run time (launch, epilog), which Slurm's records count in the job's run. Metrics
    that compare a run with its ideal duration (``comm_cost``, ``multi_gpu_slowdown``)
    count it too, as the live records do; the demo's placement figures come from the speed
    model instead (`attentived.ops.demo.measure.extra_metrics`).

    Time limits do not end runs: a job the speed model slows past its limit (a spread
    placement of a job whose limit is close to its run) runs to its end, where Slurm would
    kill it. Limits are drawn at least 1.05x the job's ideal run (`limits`), so this takes
    a placement slowed by more than 5% on a tight limit: 5 of the 300 jobs of the bundled
    Philly sample under random placement, 1 under ``fifo``, at most 2.0x their limit.

    ``relay`` (`Relay`, or ``None``: starts happen when decided) delays the starts of each
    plan to another scheduler's next pass: decisions on a grid ``delay`` ahead of the
    relay's passes (the same ``cadence``, ``phase - delay``) are started at those passes.

    ``at_submit`` (a policy, or ``None``: off) decides at once, on a state holding that job
    alone, on a job that arrives while no other job is pending, instead of at the next
    pass with the jobs that arrive in the same instant. Live, jobs submitted "together" are
    submitted one sbatch after another, and Slurm's pass (once a second, at a phase of its
    own) or a daemon's cycle can fall between them: this stands in for those clocks, which
    the engine does not know. On the lab two 8-GPU jobs submitted together onto an idle
    queue both started in their second, where a replay deciding at the pass held one back
    for the 1-GPU jobs that arrived with them.

    ``main`` (`MainPasses`, or ``None``: off; needs ``cadence``) adds Slurm's main
    scheduler between the passes: at ``phase + main.offset + k * cadence`` it starts the
    head of ``main.policy``'s plan.
    """

    def __init__(
        self,
        jobs: Sequence[SimJob],
        topology: Topology,
        policy: Policy | None = None,
        *,
        speed: SpeedModel | None = None,
        progress: Callable[[int], None] | None = None,
        cadence: float = 0.0,
        phase: float = 0.0,
        at_submit: Policy | None = None,
        relay: Relay | None = None,
        overhead: float = 0.0,
        main: MainPasses | None = None,
    ) -> None:
        if not 0 <= cadence < math.inf:
            raise ValueError(f"cadence must be a number of seconds >= 0, got {cadence!r}")
        if main is not None and not 0 < main.offset < cadence:
            raise ValueError(f"main passes need a cadence and an offset strictly inside it, got offset "
                             f"{main.offset!r} with cadence {cadence!r}")
        if not math.isfinite(phase):
            raise ValueError(f"phase must be a finite number of seconds, got {phase!r}")
        if not 0 <= overhead < math.inf:
            raise ValueError(f"overhead must be a number of seconds >= 0, got {overhead!r}")
        self.at_submit = at_submit
        self.main = main
        self.relay = relay
        self.overhead = overhead
        self.phase = phase
        bad = next((s.job for s in jobs if s.job.num_nodes is not None
                    and not (s.job.num_nodes >= 1 and s.job.num_gpus % s.job.num_nodes == 0)), None)
        if bad is not None:
            raise ValueError(f"job {bad.job_id}: {bad.num_gpus} GPUs cannot be split evenly over {bad.num_nodes} node(s)")
        self.cadence = cadence
        too_big = [s.job for s in jobs if s.job.num_gpus > topology.num_gpus]
        if too_big:
            j = too_big[0]
            raise ValueError(f"job {j.job_id} needs {j.num_gpus} GPUs, the cluster has {topology.num_gpus}")
        sizes = np.diff(topology.node_first_gpu)
        for s in jobs:  # a node count the cluster cannot hold would stall the replay only at its end
            n = s.job.num_nodes
            if n is None:
                continue
            per = s.job.num_gpus // n
            wide = int((sizes >= per).sum())
            if wide < n:
                raise UnstartableJob(s.job.job_id, f"it asks for {n} node(s) with {per} GPU(s) each, the cluster has {wide}")
        # Arrival order (submit time, then job id) is also the row order of the queue
        # table below, so the pending rows are always ascending.
        self.jobs = sorted(jobs, key=lambda s: (s.job.submit_time, s.job.job_id))
        self.topology = topology
        self.policy = policy
        self.name = policy.name if policy is not None else "external"
        self.speed = speed or SpeedModel(topology)
        self.progress = progress
        self.oracle = policy is not None and policy.needs_oracle
        # Every job's queue row, built once: snapshots slice it instead of rebuilding arrays.
        self._as_pending = tuple(s.pending(self.oracle) for s in self.jobs)
        self._res = _Resources.of(topology, self._as_pending)
        # Slurm's block topology, where the cluster has one: a start off its rule is refused,
        # as slurmctld refuses the pin (the simulator has no partitions: every job is in one)
        self._blocks = topology.blocks if (topology.node_block >= 0).any() else None
        if self._res is not None:
            self._as_pending = self._res.prepare(self._as_pending)
        self._table = QueueArrays.of(self._as_pending)
        self._user_index = {u: i for i, u in enumerate(self._table.users)}
        self._no_oracle = np.full(len(self.jobs), np.nan)
        self._no_oracle.setflags(write=False)
        self._row = {s.job.job_id: i for i, s in enumerate(self.jobs)}

    # ---- stepping API: the Gymnasium environment drives these; ``run`` loops over them ----

    def reset(self) -> None:
        """Put every job back in the future and the cluster back to idle."""
        self._t_wall = time.perf_counter()
        self._counter = itertools.count()
        self._events: list[tuple[float, int, int, str]] = []
        self._by_id = {s.job.job_id: s for s in self.jobs}
        if len(self._by_id) != len(self.jobs):
            raise ValueError("duplicate job ids in the workload")
        for s in self.jobs:
            heapq.heappush(self._events, (s.job.submit_time, _ARRIVAL, next(self._counter), s.job.job_id))
        self._free = np.ones(self.topology.num_gpus, dtype=bool)
        if self._res is not None:
            self._res.reset()
        self._pending: dict[str, PendingJob] = {}  # insertion order = arrival order
        # Rows of pending jobs as a bitmap, and the last snapshot's pending rows and queue
        # arrays: the next one cuts out the rows started since and adds the arrivals since
        # (rows _seen.._arrived), work for what changed, not a pass over every job that
        # arrived since the oldest waiting one (a day of arrivals at 16,384 GPUs).
        self._is_pending = np.zeros(len(self.jobs), dtype=bool)
        self._pending_rows = np.zeros(0, dtype=np.int64)
        self._queue = self._table.take(self._pending_rows, self._no_oracle[:0] if not self.oracle else None)
        self._started_rows: list[int] = []  # since the last snapshot
        self._seen = 0
        self._arrived = 0  # arrivals come in row order: rows < _arrived have arrived
        self._sizes: Counter[int] = Counter()
        self._running: dict[str, RunningJob] = {}
        # The same jobs in release order (`ClusterState.running_by_end`), kept as jobs
        # start, end and pass their limit: those past it by job id, the rest by (deadline,
        # job id). Each snapshot hands policies this order instead of a sort of thousands
        # of running jobs, or of the hundreds past their limit, at every decision.
        self._overdue: list[RunningJob] = []
        self._by_end: list[RunningJob] = []
        self._users: dict[str, UserStats] = {}
        # Each queue user's limit accuracy (`ClusterState.limit_accuracies`), updated when
        # one of their jobs ends instead of read from the users' stats at every decision.
        self._accuracy = np.ones(len(self._table.users))
        self._records: list[JobRecord] = []
        self._decision_times: list[float] = []
        self._pass_at = -math.inf  # the scheduler pass already queued (cadence)
        self.now = 0.0
        self._queue_wake()

    def _queue_wake(self) -> None:
        """With Slurm's passes modelled (``cadence``), look again when the policy's decisions
        may change with no event (`policy.next_change`: Slurm's priority ticks): its backfill
        runs every pass, so a new priority order acts at the next pass, not at the next job's
        arrival or end. Without passes the engine decides at events only."""
        if not self.cadence or self.policy is None:
            return
        at = next_change(self.policy, self.now)
        if at is not None and self.now < at < math.inf:
            heapq.heappush(self._events, (at, _WAKE, next(self._counter), ""))

    def next_decision(self) -> ClusterState | None:
        """Advance the clock to the next instant where some pending job could fit and
        return the snapshot a policy decides on; ``None`` once every job has finished."""
        while self._events:
            if len(self._records) == len(self.jobs):
                break  # every job is done: what is left is a wake-up, which must not move the clock
            self.now = self._events[0][0]
            finished_any = False
            while self._events and self._events[0][0] == self.now:
                _, kind, _, job_id = heapq.heappop(self._events)
                if kind == _PASS:
                    continue
                if kind == _WAKE:
                    self._queue_wake()  # a wake-up left once every job is done is never reached: see above
                    continue
                if kind == _ARRIVAL:
                    pj = self._as_pending[self._row[job_id]]
                    self._pending[job_id] = pj
                    self._is_pending[self._row[job_id]] = True
                    self._arrived += 1
                    self._sizes[pj.num_gpus] += 1
                    if self.at_submit is not None and len(self._pending) == 1:
                        self._start_at_submit(pj)
                else:
                    self._finish(job_id)
                    finished_any = True
            if finished_any and self.progress is not None:
                self.progress(len(self._records))
            if self._some_job_fits():
                if self.cadence:
                    at = next_pass(self.now, self.cadence, self.phase)
                    if self.main is not None and at > self.now:
                        main_phase = self.phase + self.main.offset
                        main_at = next_pass(self.now, self.cadence, main_phase)
                        if main_at == self.now:
                            self._main_pass()
                            if not self._some_job_fits():
                                continue
                            # the next main pass, from next_pass itself: a sum of floats
                            # could miss the grid by a hair and no longer be "on" a pass
                            main_at = next_pass(self.now + self.cadence / 2, self.cadence, main_phase)
                        at = min(at, main_at)
                    if at > self.now:
                        if at != self._pass_at:
                            self._pass_at = at
                            heapq.heappush(self._events, (at, _PASS, next(self._counter), ""))
                        continue
                return self.snapshot()
        if self._pending:
            raise SimulationStalled(f"{len(self._pending)} job(s) never started")
        return None

    def snapshot(self) -> ClusterState:
        due = bisect.bisect_right(self._by_end, self.now, key=_DEADLINE)
        for run in self._by_end[:due]:
            bisect.insort(self._overdue, run, key=_JOB_ID)
        del self._by_end[:due]
        by_end = (*self._overdue, *self._by_end)
        started = np.array(sorted(self._started_rows), dtype=np.int64)
        self._started_rows = []
        gone = np.searchsorted(self._pending_rows, started[started < self._seen])
        arrived = np.arange(self._seen, self._arrived)
        arrived = arrived[self._is_pending[arrived]]
        rows = self._pending_rows = spliced(self._pending_rows, gone, arrived)
        self._seen = self._arrived
        # A queue of ten thousand jobs is common in a replay, and every array of it is a
        # pass over it at every decision: the queue's arrays are gathered only when a policy
        # reads them, and a run without the oracle reads no true durations (a view of a
        # read-only NaN column).
        self._queue = self._queue.follow(rows, gone, None if self.oracle else self._no_oracle[: len(rows)])
        return ClusterState(
            now=self.now,
            topology=self.topology,
            free=self._free,
            pending=RowView(self._as_pending, rows),
            running=by_end,
            release_order=by_end,
            users=MappingProxyType(dict(self._users)),
            user_accuracy=self._accuracy.copy(),
            queue_arrays=self._queue,
            nodes=None if self._res is None else self._res.capacity(),
        )

    def apply(self, plan: Plan) -> None:
        """Start the plan's jobs (after checking it) and schedule their completions."""
        starts = self._checked_starts(plan)
        begin = self.now if self.relay is None else self.relay.start_of(self.now)
        for job_id, gpus in starts:
            pj = self._pending.pop(job_id)
            row = self._row[job_id]
            self._is_pending[row] = False
            self._started_rows.append(row)
            self._sizes[pj.num_gpus] -= 1
            if not self._sizes[pj.num_gpus]:
                del self._sizes[pj.num_gpus]
            self._free[list(gpus)] = False
            s = self._by_id[job_id]
            if self._res is None:
                run = RunningJob(job_id, pj.user, gpus, pj.submit_time, begin, pj.time_limit)
            else:
                held = self._res.start(job_id, self._free)
                run = RunningJob(job_id, pj.user, gpus, pj.submit_time, begin, pj.time_limit, held.cpus, held.mem,
                                 pj.exclusive)
            self._running[job_id] = run
            bisect.insort(self._by_end, run, key=BY_RELEASE)
            end = begin + self.speed.runtime(s.model, s.job.duration, gpus) + self.overhead
            heapq.heappush(self._events, (end, _COMPLETION, next(self._counter), job_id))
        if self._pending and not self._running and not self._events:
            raise SimulationStalled(
                f"policy {self.name} left {len(self._pending)} job(s) pending on an idle cluster "
                f"with nothing left to arrive (first: {next(iter(self._pending))})"
            )

    def result(self) -> SimResult:
        return SimResult(
            policy=self.name,
            topology=self.topology,
            records=tuple(self._records),
            decisions=len(self._decision_times),
            decision_seconds=tuple(self._decision_times),
            wall_seconds=time.perf_counter() - self._t_wall,
        )

    def run(self) -> SimResult:
        """Replay the whole workload under ``self.policy``."""
        if self.policy is None:
            raise ValueError("run() needs a policy; drive reset/next_decision/apply yourself otherwise")
        self.reset()
        while (state := self.next_decision()) is not None:
            t0 = time.perf_counter()
            plan = self.policy.decide(state)
            self._decision_times.append(time.perf_counter() - t0)
            self.apply(plan)
        return self.result()

    def _start_at_submit(self, job: PendingJob) -> None:
        """Start ``job``, just submitted onto an empty queue, if ``at_submit`` places it now."""
        assert self.at_submit is not None
        # The snapshot holds this job alone, with the running jobs and users' records a
        # live scheduler sees when it decides at submission.
        starts = self.at_submit.decide(self.snapshot()).starts
        if starts:
            self.apply(Plan(order=(job.job_id,), starts=starts))

    def _some_job_fits(self) -> bool:
        """Whether a pending job could fit the free GPUs by count: else no decision can
        start anything."""
        return bool(self._pending) and int(np.count_nonzero(self._free)) >= min(self._sizes)

    def _main_pass(self) -> None:
        """Start the head of the main scheduler's plan (`MainPasses`)."""
        assert self.main is not None
        plan = self.main.head(self.main.policy.decide(self.snapshot()))
        if plan.starts:
            self.apply(plan)

    def _finish(self, job_id: str) -> None:
        run = self._running.pop(job_id)
        i = bisect.bisect_left(self._by_end, BY_RELEASE(run), key=BY_RELEASE)
        if i < len(self._by_end) and self._by_end[i] is run:
            del self._by_end[i]
        else:
            del self._overdue[bisect.bisect_left(self._overdue, run.job_id, key=_JOB_ID)]
        self._free[list(run.gpus)] = True
        if self._res is not None:
            self._res.finish(job_id, self._free)
        s = self._by_id[job_id]
        stats = self._users[run.user] = self._users.get(run.user, UserStats()).add(
            run.num_gpus, run.start_time - run.submit_time, self.now - run.start_time, run.time_limit
        )
        self._accuracy[self._user_index[run.user]] = stats.limit_accuracy or 1.0
        self._records.append(
            JobRecord(
                job_id=job_id,
                user=run.user,
                num_gpus=run.num_gpus,
                model=s.model,
                submit_time=run.submit_time,
                start_time=run.start_time,
                end_time=self.now,
                ideal_duration=s.job.duration,
                time_limit=s.time_limit,
                gpus=run.gpus,
            )
        )

    def _checked_starts(self, plan: Plan) -> list[tuple[str, tuple[int, ...]]]:
        topo, pending, free = self.topology, self._pending, self._free
        taken: set[int] = set()
        started: set[str] = set()
        out = []
        for st in plan.starts:
            job = pending.get(st.job_id)
            where = f"policy {self.name}: start of job {st.job_id}"
            if job is None:
                raise PolicyError(f"{where}: the job is not pending")
            if st.job_id in started:
                raise PolicyError(f"{where}: the plan starts it twice")
            started.add(st.job_id)
            gpus = tuple(int(g) for g in st.gpus)
            if len(gpus) != job.num_gpus or len(set(gpus)) != len(gpus):
                raise PolicyError(f"{where}: needs {job.num_gpus} distinct GPUs, got {gpus}")
            if any(g < 0 or g >= topo.num_gpus for g in gpus):
                raise PolicyError(f"{where}: GPU ids out of range in {gpus}")
            if taken.intersection(gpus) or not free[list(gpus)].all():
                raise PolicyError(f"{where}: GPUs {gpus} are not all free")
            if job.num_nodes is not None:
                per_node = Counter(int(topo.gpu_node[g]) for g in gpus)
                if len(per_node) != job.num_nodes or set(per_node.values()) != {job.num_gpus // job.num_nodes}:
                    raise PolicyError(f"{where}: needs {job.num_nodes} nodes x {job.num_gpus // job.num_nodes} GPUs")
            if self._blocks is not None:
                nodes = np.unique(topo.gpu_node[list(gpus)])
                if not self._blocks.allows(topo.node_block, nodes):
                    raise PolicyError(f"{where}: its nodes are not where Slurm's block topology lets a job of "
                                      f"{len(nodes)} nodes run")
            taken.update(gpus)
            out.append((st.job_id, gpus))
        if self._res is not None and out:
            self._res.check(out, pending, self.name)
        return out


@dataclass(frozen=True, slots=True)
class _Held:
    """What one started job takes from its nodes besides GPUs (arrays aligned with ``nodes``)."""

    nodes: np.ndarray
    node_cpus: np.ndarray  # taken from each node's free CPUs
    node_mem: np.ndarray  # taken from each node's free MB
    exclusive: bool
    cpus: int  # in all, as RunningJob shows it (an exclusive job: all its nodes had)
    mem: int


class _Resources:
    """Each node's free CPUs and memory, its jobs, and the checks Slurm makes at a start.

    A job's ``cpus`` spread over its nodes in proportion to its GPUs there, rounded up per
    node (``ceil(cpus * g / num_gpus)``); its memory per node is ``mem_per_node``, or
    ``mem_per_cpu`` times its CPUs there, or ``mem_per_gpu`` times its GPUs there
    (`PendingJob.mem_on`). A start must fit every node it touches: CPUs and memory free,
    the GPU type and features the job asks for, no node it excludes, every node of its
    ``nodelist`` among them; an ``exclusive`` job needs idle nodes and then
    holds them whole (their other GPUs too; ``RunningJob.cpus``/``mem`` then say all its
    nodes had, as `attentived.agents.fit` books them), and no job may join a node held
    whole. A node's undeclared CPUs or memory (0 in the cluster file) count as `UNKNOWN_CAPACITY`.
    A cluster that names no GPU type (no features) cannot honour a job's type (features):
    those requests are dropped, as in a replay on a quick ``--nodes`` cluster.
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        nodes = topology.nodes
        self.total_cpus = np.array([n.cpus or UNKNOWN_CAPACITY for n in nodes], dtype=np.int64)
        self.total_mem = np.array([n.mem_mb or UNKNOWN_CAPACITY for n in nodes], dtype=np.int64)
        for a in (self.total_cpus, self.total_mem):  # every snapshot's `NodeCapacity` shares them
            a.setflags(write=False)
        self.gpu_type = tuple(n.gpu_type for n in nodes)
        self.features = tuple(frozenset(n.features) for n in nodes)
        self.node_gpus = np.diff(topology.node_first_gpu)
        self.gpu_node = topology.gpu_node.tolist()
        self.reset()

    @classmethod
    def of(cls, topology: Topology, jobs: Sequence[PendingJob]) -> _Resources | None:
        """Tracking when the cluster declares CPUs or memory or some job asks for more than GPUs."""
        declared = any(n.cpus or n.mem_mb for n in topology.nodes)
        if declared or any(_asks_more_than_gpus(j) for j in jobs):
            return cls(topology)
        return None

    def prepare(self, jobs: tuple[PendingJob, ...]) -> tuple[PendingJob, ...]:
        """The jobs with the requests this cluster cannot model dropped; a job that could
        never start anywhere is an `UnstartableJob` now rather than a stalled replay later."""
        typed, featured = any(self.gpu_type), any(self.features)
        out = []
        for job in jobs:
            if (job.gpu_type and not typed) or (job.features and not featured):
                job = replace(job, gpu_type=job.gpu_type if typed else "", features=job.features if featured else ())
            problem = self._never_fits(job)
            if problem:
                raise UnstartableJob(job.job_id, problem)
            out.append(job)
        return tuple(out)

    def reset(self) -> None:
        self.cpus = self.total_cpus.copy()
        self.mem = self.total_mem.copy()
        self.jobs = np.zeros(len(self.total_cpus), dtype=np.int64)  # jobs on each node
        self.whole = np.zeros(len(self.total_cpus), dtype=bool)  # held by an exclusive job
        self.held: dict[str, _Held] = {}
        self._planned: dict[str, _Held] = {}

    def capacity(self) -> NodeCapacity:
        cpus, mem, idle = self.cpus.copy(), self.mem.copy(), self.jobs == 0
        for a in (cpus, mem, idle):
            a.setflags(write=False)
        return NodeCapacity(cpus=cpus, mem=mem, idle=idle, gpu_type=self.gpu_type, features=self.features,
                            total_cpus=self.total_cpus, total_mem=self.total_mem)

    # ---- a plan's starts: all checked first (on copies), then applied one by one ----

    def check(self, starts: Sequence[tuple[str, tuple[int, ...]]], pending: dict[str, PendingJob], policy: str) -> None:
        """Raise PolicyError unless every start fits, in plan order; then reserve them all."""
        cpus, mem, jobs, whole = self.cpus.copy(), self.mem.copy(), self.jobs.copy(), self.whole.copy()
        planned: dict[str, _Held] = {}
        for job_id, gpus in starts:
            job = pending[job_id]
            where = f"policy {policy}: start of job {job_id}"
            per_node = Counter(self.gpu_node[g] for g in gpus)
            nodes = sorted(per_node)
            names = [self.topology.nodes[n].name for n in nodes]
            missing = [n for n in job.nodelist if n not in names]
            if missing:
                raise PolicyError(f"{where}: its nodelist (-w) needs node {missing[0]} among its nodes {names}")
            take_cpus = np.zeros(len(nodes), dtype=np.int64)
            take_mem = np.zeros(len(nodes), dtype=np.int64)
            for i, (n, name) in enumerate(zip(nodes, names)):
                g = per_node[n]
                need_cpus = -(-job.cpus * g // job.num_gpus)
                need_mem = job.mem_on(g, need_cpus)
                if name in job.exclude:
                    raise PolicyError(f"{where}: node {name} is excluded (-x)")
                if job.gpu_type and self.gpu_type[n] != job.gpu_type:
                    raise PolicyError(
                        f"{where}: node {name} has GPU type {self.gpu_type[n] or 'unknown'!r}, the job asks for {job.gpu_type!r}"
                    )
                lacking = sorted(set(job.features) - self.features[n])
                if lacking:
                    raise PolicyError(f"{where}: node {name} lacks feature(s) {', '.join(lacking)}")
                if whole[n]:
                    raise PolicyError(f"{where}: node {name} is held whole by an exclusive job")
                if job.exclusive and jobs[n]:
                    raise PolicyError(f"{where}: an exclusive job needs node {name} idle, {jobs[n]} job(s) run there")
                if need_cpus > cpus[n]:
                    raise PolicyError(f"{where}: needs {need_cpus} CPUs on node {name}, {cpus[n]} are free")
                if need_mem > mem[n]:
                    raise PolicyError(f"{where}: needs {need_mem} MB on node {name}, {mem[n]} MB are free")
                take_cpus[i] = cpus[n] if job.exclusive else need_cpus
                take_mem[i] = mem[n] if job.exclusive else need_mem
                cpus[n] -= take_cpus[i]
                mem[n] -= take_mem[i]
                jobs[n] += 1
                whole[n] = job.exclusive
            held_nodes = np.array(nodes, dtype=np.int64)
            planned[job_id] = _Held(held_nodes, take_cpus, take_mem, job.exclusive, int(take_cpus.sum()), int(take_mem.sum()))
        self.cpus, self.mem, self.jobs, self.whole = cpus, mem, jobs, whole
        self._planned = planned

    def start(self, job_id: str, free: np.ndarray) -> _Held:
        """Record a checked start; an exclusive job's nodes' other GPUs leave ``free``."""
        held = self.held[job_id] = self._planned.pop(job_id)
        if held.exclusive:
            self._set_node_gpus(held.nodes, free, False)
        return held

    def finish(self, job_id: str, free: np.ndarray) -> None:
        held = self.held.pop(job_id)
        self.cpus[held.nodes] += held.node_cpus
        self.mem[held.nodes] += held.node_mem
        self.jobs[held.nodes] -= 1
        if held.exclusive:
            self.whole[held.nodes] = False
            self._set_node_gpus(held.nodes, free, True)

    def _set_node_gpus(self, nodes: np.ndarray, free: np.ndarray, value: bool) -> None:
        first = self.topology.node_first_gpu
        for n in nodes.tolist():
            free[int(first[n]) : int(first[n + 1])] = value

    def _never_fits(self, job: PendingJob) -> str:
        """Why ``job`` fits no node set of the empty cluster ("" when it may fit)."""
        index = self.topology.node_index
        unknown = [n for n in job.nodelist if n not in index]
        if unknown:
            return f"its nodelist (-w) names {unknown[0]}, which the cluster does not have"
        excluded = set(job.exclude)
        ok = [
            i
            for i, node in enumerate(self.topology.nodes)
            if node.name not in excluded
            and (not job.gpu_type or self.gpu_type[i] == job.gpu_type)
            and set(job.features) <= self.features[i]
        ]
        wanted = []
        if job.gpu_type:
            wanted.append(f"GPU type {job.gpu_type}")
        if job.features:
            wanted.append(f"features {'&'.join(job.features)}")
        what = " with " + " and ".join(wanted) if wanted else ""
        bad = [n for n in job.nodelist if index[n] not in ok]
        if bad:
            return f"node {bad[0]} of its nodelist (-w) is not a node{what} it may use"
        if len(job.nodelist) > job.num_gpus:
            return f"its nodelist (-w) names {len(job.nodelist)} nodes but it has only {job.num_gpus} GPUs to spread on them"
        listed = int(sum(self.node_gpus[index[n]] for n in job.nodelist))
        if job.nodelist and listed < job.num_gpus:
            # Slurm would add nodes; the placers (agents.fit) keep a -w job on its nodes
            return f"it needs {job.num_gpus} GPU(s), the nodes of its nodelist (-w) have {listed}"
        gpus = int(self.node_gpus[ok].sum())
        if gpus < job.num_gpus:
            return f"it needs {job.num_gpus} GPU(s), the nodes{what} it may use have {gpus}"
        if job.num_nodes is not None:
            per = job.num_gpus // job.num_nodes
            room = [i for i in ok if self.node_gpus[i] >= per and (not job.nodelist or self.topology.nodes[i].name in job.nodelist)]
            if len(room) < job.num_nodes:
                return f"it asks for {job.num_nodes} node(s) with {per} GPU(s) each, the nodes{what} it may use have {len(room)}"
        if job.num_gpus == 1 or job.num_nodes == 1:
            mem = job.mem_on(job.num_gpus, job.cpus)
            if not any(
                self.node_gpus[i] >= job.num_gpus and self.total_cpus[i] >= job.cpus and self.total_mem[i] >= mem for i in ok
            ):
                return f"no node{what} has {job.num_gpus} GPU(s), {job.cpus} CPUs and {mem} MB"
        elif job.cpus > int(self.total_cpus[ok].sum()):
            return f"it needs {job.cpus} CPUs, the nodes{what} it may use have {int(self.total_cpus[ok].sum())}"
        elif job.mem_per_gpu:
            paid = sum(min(int(self.node_gpus[i]), int(self.total_mem[i]) // job.mem_per_gpu) for i in ok)
            if paid < job.num_gpus:
                return (f"it needs {job.num_gpus} GPU(s) with {job.mem_per_gpu} MB each, the nodes{what} it may use "
                        f"have memory for {paid}")
        return ""


def _asks_more_than_gpus(job: PendingJob) -> bool:
    return bool(
        job.cpus
        or job.mem_per_node
        or job.mem_per_cpu
        or job.mem_per_gpu
        or job.exclusive
        or job.gpu_type
        or job.nodelist
        or job.exclude
        or job.features
    )
