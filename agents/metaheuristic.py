"""Meta-heuristic job choosers: search the look-ahead model for the best order and packing.

`SearchChooser` is the part the genetic algorithm (``genetic.py``), simulated annealing
(``annealing.py``) and the no-search `Portfolio` share: build the `LookAhead` window of
the state, evaluate heuristic starting solutions, run the search under a budget, and turn
the best solution into a `Ranking`: the jobs the model starts now first, then the rest of
the window in the solution's order, then the queue by arrival, with ``startable`` = the
number the model starts now. Run by the ordinary `Scheduler` loop with the consolidating
placer, exactly those jobs start, on best-fit GPUs; when the model prefers to keep GPUs
for a blocked job or to wait for a packed placement, nothing else starts (an explicit
wait).

Fairness: ``fairness`` = W in [0, 1] (default `objective.DEFAULT_FAIRNESS`; ValueError
outside) blends the look-ahead cost's completion-time term with the same term weighted
towards the users with the highest projected mean waits (see `objective`): 0 is
completion time only, 1 protects the worst-off users as much as the model can. With W > 0
the window and the starting solutions include the blended cost's own order (estimate /
urgency), so those users' jobs are candidates and one starting solution puts them first.

Budget: each decision's search stops after ``budget_ms`` *or* ``max_evaluations`` cost
evaluations, whichever comes first, and earlier when ``patience`` evaluations bring no
improvement (building the window and scoring the starting solutions adds about a
millisecond, and once per model and job size a row of speed-model slowdowns). The random
stream of a decision is seeded from ``seed`` and the state (its clock and queue), so a
decision is a pure function of (seed, state) as long as the evaluation cap, not the
clock, ends the search. By default ``budget_ms`` counts the deciding thread's CPU time
(``clock="cpu"``): on an idle machine that is the wall time, and on a shared one other
processes cannot cut a search short, so replays stay reproducible (with the defaults,
100 evaluations of ~50-200 us each against 50 ms, the cap binds). ``clock="wall"``
bounds the latency itself, for a live scheduler that must answer in time whatever the
machine's load; ``budget_ms=None`` drops the clock.

Register them in ``agents/registry.py`` with `register` (see its docstring).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, TypedDict

import numpy as np

from .objective import (
    DEFAULT_FAIRNESS,
    PROTECT_OFF,
    LookAhead,
    SlowdownTable,
    Solution,
    Weights,
    check_fairness,
    check_protect,
)
from .policy import Ranking
from .state import ClusterState

DEFAULT_WINDOW = 32
DEFAULT_BUDGET_MS = 50.0
DEFAULT_MAX_EVALUATIONS = 100
DEFAULT_PATIENCE = 60


class SearchBudget(TypedDict):
    """A `SearchChooser`'s budget keywords."""

    max_evaluations: int
    budget_ms: float
    patience: int


def scaled_budget(evaluations: int) -> SearchBudget:
    """The search budget of ``evaluations`` cost evaluations per decision, as keywords of a
    `SearchChooser`: the CPU-time cap and the patience grow in proportion (100 gives exactly
    the defaults), so the evaluation count, not the clock, still ends a search and a replay
    stays a pure function of its seed. More than the default suits replays and training
    labels, not a live scheduler's 50 ms."""
    if evaluations < 1:
        raise ValueError(f"evaluations must be at least 1, got {evaluations}")
    scale = evaluations / DEFAULT_MAX_EVALUATIONS
    return SearchBudget(max_evaluations=evaluations, budget_ms=DEFAULT_BUDGET_MS * scale,
                        patience=max(1, round(DEFAULT_PATIENCE * scale)))


CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.thread_time, "wall": time.perf_counter}
"""What ``budget_ms`` measures: the deciding thread's CPU time, or wall-clock time."""


class Budget:
    """Counts evaluations and watches the clock; `spend` says whether one more may run."""

    __slots__ = ("deadline", "cap", "used", "stopped_by", "clock")

    def __init__(self, deadline: float | None, cap: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self.deadline = deadline
        self.cap = cap
        self.used = 0
        self.stopped_by = "converged"
        self.clock = clock

    def spend(self) -> bool:
        if self.used >= self.cap:
            self.stopped_by = "evaluations"
            return False
        if self.deadline is not None and self.clock() >= self.deadline:
            self.stopped_by = "time"
            return False
        self.used += 1
        return True


@dataclass(frozen=True)
class SearchStats:
    """What the last decision's search did (for tests, benchmarks and explanations)."""

    window: int
    evaluations: int
    stopped_by: str  # "evaluations", "time", "converged" or "trivial"
    seconds: float
    start_cost: float  # best heuristic starting solution
    best_cost: float
    startable: int | None


@dataclass
class SearchChooser:
    """Shared driver of the meta-heuristic choosers; subclasses implement `search`."""

    name: str = "search"
    needs_oracle: ClassVar[bool] = False
    seed: int = 0
    window: int = DEFAULT_WINDOW
    budget_ms: float | None = DEFAULT_BUDGET_MS
    max_evaluations: int = DEFAULT_MAX_EVALUATIONS
    patience: int = DEFAULT_PATIENCE
    weights: Weights = field(default_factory=Weights)
    fairness: float = DEFAULT_FAIRNESS  # W in [0, 1]: 0 = completion time only, 1 = protect the worst-off users most
    protect: float = PROTECT_OFF  # a job slowed down this much by its wait goes first, with a reservation (0: off)
    model: str = "backfill"  # the look-ahead's list schedule: "backfill" (EASY) or "serial"
    clock: str = "cpu"  # what budget_ms measures: "cpu" (this thread's CPU time) or "wall"
    min_gain: float = 0.0  # relative improvement a search result needs over the best heuristic start
    pack_genes: bool = True  # search the placement gene too (False: order only, never wait to pack)
    last: SearchStats | None = field(default=None, init=False, repr=False)
    _tables: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.fairness = check_fairness(self.fairness)
        self.protect = check_protect(self.protect)
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        if self.max_evaluations < 0:
            raise ValueError(f"max_evaluations must be non-negative, got {self.max_evaluations}")
        if self.budget_ms is not None and self.budget_ms <= 0:
            raise ValueError(f"budget_ms must be positive (or None), got {self.budget_ms}")
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {self.clock!r}")

    # ---- JobChooser ----

    def rank(self, state: ClusterState) -> Ranking:
        t0 = time.perf_counter()
        if len(state.pending) == 0:
            self.last = SearchStats(0, 0, "trivial", 0.0, 0.0, 0.0, None)
            return Ranking(np.zeros(0, dtype=np.int64))
        look = LookAhead(state, self.window, self.weights, self._table(state), self.model, self.pack_genes, self.fairness,
                         self.protect)
        if look.size == 0:  # nothing in the queue can ever fit: arrival order
            self.last = SearchStats(0, 0, "trivial", time.perf_counter() - t0, 0.0, 0.0, None)
            return Ranking(state.queue.arrival)
        starts = [Solution(o, p, look.evaluate(o, p)) for o, p in look.seeds(self.proposals(state, look))]
        first = min(starts, key=lambda s: s.cost)
        if self._trivial(look):
            best, budget = first, Budget(None, 0)
            budget.stopped_by = "trivial"
        else:
            # The budget bounds the search; the window and its starting solutions cost
            # about a millisecond more (and, once per model and job size, a slowdown row).
            clock = CLOCKS[self.clock]
            deadline = None if self.budget_ms is None else clock() + self.budget_ms / 1e3
            budget = Budget(deadline, self.max_evaluations, clock)
            rng = random.Random(self._stream(state))
            best = self.search(look, starts, rng, budget)
            if best.cost > first.cost - self.min_gain * abs(first.cost):
                best = first  # not clearly better than the heuristic start: keep that
        sched = look.schedule(best.order, best.pack)
        # The jobs the model starts now go first; the loop may start those and no others.
        now = sched.now
        chosen = set(now)
        order = tuple(now) + tuple(i for i in look.ordered(best.order) if i not in chosen)
        n_now = len(now)
        startable = None if n_now >= look.size or n_now == 0 and not self._can_start(look) else n_now
        self.last = SearchStats(look.size, budget.used, budget.stopped_by, time.perf_counter() - t0, first.cost, best.cost, startable)
        return Ranking(look.full_order(order), startable=startable)

    def search(self, look: LookAhead, starts: list[Solution], rng: random.Random, budget: Budget) -> Solution:
        raise NotImplementedError

    def proposals(self, state: ClusterState, look: LookAhead) -> list[tuple[int, ...]]:
        """Orders of the window (positions in ``look.rows``) to judge beside the heuristic
        starting solutions; none here (`attentived.agents.guided` adds the job agent's)."""
        return []

    # ---- helpers ----

    def _table(self, state: ClusterState) -> SlowdownTable:
        topo = state.topology
        table = self._tables.get(id(topo))
        if table is None or table.topology is not topo:
            table = self._tables[id(topo)] = SlowdownTable(topo)
        return table

    def _stream(self, state: ClusterState) -> str:
        q = state.pending
        return f"{self.name}:{self.seed}:{state.now!r}:{len(q)}:{q[0].job_id}:{state.num_free}"

    @staticmethod
    def _can_start(look: LookAhead) -> bool:
        return any(g <= look.total_free for g in look.gpus)

    @staticmethod
    def _trivial(look: LookAhead) -> bool:
        """Nothing to decide: no window job fits now, or the whole window fits at once
        without spreading any job (every order and gene gives the same start-now set)."""
        if not SearchChooser._can_start(look):
            return True
        if sum(look.gpus) > look.total_free:
            return False
        if look.size == 1:
            return True
        sched = look.schedule(tuple(range(look.size)), (False,) * look.size)
        return sched.startable == look.size and all(k <= 1 or look.shape[i] is not None for i, k in enumerate(sched.nodes))


@dataclass
class Portfolio(SearchChooser):
    """No search: the best of the heuristic starting solutions (FIFO, shortest estimate
    first, fit-now-first, the window's interleaved order and, with fairness W > 0, the
    urgency-weighted shortest first; spread or packed) by the look-ahead cost. The
    baseline that tells how much the search itself adds."""

    name: str = "portfolio"
    max_evaluations: int = 0

    def search(self, look: LookAhead, starts: list[Solution], rng: random.Random, budget: Budget) -> Solution:
        return min(starts, key=lambda s: s.cost)


# ---- shared search moves (on tuples; the window is small) ----


def mutate(order: tuple[int, ...], pack: tuple[bool, ...], flexible: list[int], rng: random.Random) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """One neighbour: swap two jobs, move one job, or flip one job's pack gene."""
    n = len(order)
    r = rng.random()
    if flexible and (r < 0.2 or n < 2):
        i = flexible[rng.randrange(len(flexible))]
        p = list(pack)
        p[i] = not p[i]
        return order, tuple(p)
    if n < 2:
        return order, pack
    a, b = rng.randrange(n), rng.randrange(n - 1)
    if b >= a:
        b += 1
    o = list(order)
    if r < 0.6:
        o[a], o[b] = o[b], o[a]
    else:
        o.insert(b, o.pop(a))
    return tuple(o), pack

