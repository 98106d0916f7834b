"""The discrete-event simulator: arrivals, starts and completions on a heapq clock.

Non-preemptive, as under Slurm: once started, a job holds its GPUs until it ends. At each
decision point (after every event batch at one instant, when some pending job could fit)
the policy gets a frozen ``ClusterState`` -- the same type the daemon builds from Slurm --
and returns a ``Plan``. The engine trusts nothing in the plan: every start is checked
(job pending, GPUs free and distinct, count and node shape right) before it is applied.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from attentived.agents.plan import Plan
from attentived.agents.policy import Policy
from attentived.agents.state import (
    ClusterState,
    PendingJob,
    QueueArrays,
    RowView,
    RunningJob,
    UserStats,
)
from attentived.topology import Topology
from attentived.topology.speed import SpeedModel, resolve_model

from .limits import time_limit
from .trace import TraceJob

_COMPLETION, _ARRIVAL = 0, 1  # at one instant, free GPUs before new jobs are seen


class PolicyError(RuntimeError):
    """The policy returned a plan that cannot be carried out (a bug in the policy)."""


class SimulationStalled(RuntimeError):
    """Jobs are pending, nothing runs and nothing will arrive: no policy decision can help."""


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
    """

    def __init__(
        self,
        jobs: Sequence[SimJob],
        topology: Topology,
        policy: Policy | None = None,
        *,
        speed: SpeedModel | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        too_big = [s.job for s in jobs if s.job.num_gpus > topology.num_gpus]
        if too_big:
            j = too_big[0]
            raise ValueError(f"job {j.job_id} needs {j.num_gpus} GPUs, the cluster has {topology.num_gpus}")
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
        self._table = QueueArrays.of(self._as_pending)
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
        self._pending: dict[str, PendingJob] = {}  # insertion order = arrival order
        # Rows of pending jobs as a bitmap; rows below _first_pending are never pending
        # again, so a snapshot scans only the window of jobs that arrived and still wait.
        self._is_pending = np.zeros(len(self.jobs), dtype=bool)
        self._first_pending = 0
        self._arrived = 0  # arrivals come in row order: rows < _arrived have arrived
        self._sizes: Counter[int] = Counter()
        self._running: dict[str, RunningJob] = {}
        self._users: dict[str, UserStats] = {}
        self._records: list[JobRecord] = []
        self._decision_times: list[float] = []
        self.now = 0.0

    def next_decision(self) -> ClusterState | None:
        """Advance the clock to the next instant where some pending job could fit and
        return the snapshot a policy decides on; ``None`` once every job has finished."""
        while self._events:
            self.now = self._events[0][0]
            finished_any = False
            while self._events and self._events[0][0] == self.now:
                _, kind, _, job_id = heapq.heappop(self._events)
                if kind == _ARRIVAL:
                    pj = self._as_pending[self._row[job_id]]
                    self._pending[job_id] = pj
                    self._is_pending[self._row[job_id]] = True
                    self._arrived += 1
                    self._sizes[pj.num_gpus] += 1
                else:
                    self._finish(job_id)
                    finished_any = True
            if finished_any and self.progress is not None:
                self.progress(len(self._records))
            if self._pending and int(self._free.sum()) >= min(self._sizes):
                return self.snapshot()
        if self._pending:
            raise SimulationStalled(f"{len(self._pending)} job(s) never started")
        return None

    def snapshot(self) -> ClusterState:
        lo = self._first_pending
        rows = lo + np.flatnonzero(self._is_pending[lo : self._arrived])
        self._first_pending = int(rows[0]) if len(rows) else self._arrived
        t = self._table
        return ClusterState(
            now=self.now,
            topology=self.topology,
            free=self._free,
            pending=RowView(self._as_pending, rows),
            running=tuple(self._running.values()),
            users=MappingProxyType(dict(self._users)),
            queue_arrays=QueueArrays(
                seq=t.seq[rows],
                submit=t.submit[rows],
                gpus=t.gpus[rows],
                limit=t.limit[rows],
                oracle=t.oracle[rows],
                user=t.user[rows],
                users=t.users,
            ),
        )

    def apply(self, plan: Plan) -> None:
        """Start the plan's jobs (after checking it) and schedule their completions."""
        for job_id, gpus in self._checked_starts(plan):
            pj = self._pending.pop(job_id)
            self._is_pending[self._row[job_id]] = False
            self._sizes[pj.num_gpus] -= 1
            if not self._sizes[pj.num_gpus]:
                del self._sizes[pj.num_gpus]
            self._free[list(gpus)] = False
            s = self._by_id[job_id]
            self._running[job_id] = RunningJob(job_id, pj.user, gpus, pj.submit_time, self.now, pj.time_limit)
            end = self.now + self.speed.runtime(s.model, s.job.duration, gpus)
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

    def _finish(self, job_id: str) -> None:
        run = self._running.pop(job_id)
        self._free[list(run.gpus)] = True
        s = self._by_id[job_id]
        self._users[run.user] = self._users.get(run.user, UserStats()).add(
            run.num_gpus, run.start_time - run.submit_time, self.now - run.start_time, run.time_limit
        )
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
        out = []
        for st in plan.starts:
            job = pending.get(st.job_id)
            where = f"policy {self.name}: start of job {st.job_id}"
            if job is None:
                raise PolicyError(f"{where}: the job is not pending")
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
            taken.update(gpus)
            out.append((st.job_id, gpus))
        return out
