"""A Gymnasium environment around the simulator, for training and studying scheduling agents.

One episode replays one workload (a window of a trace on a cluster shape, drawn by an
`EpisodeSampler` from the environment's seeded RNG). Decisions are made in two phases:

* **job phase** (``obs["phase"] == 0``): the action is a job slot ``0..window-1`` of the
  encoded queue, or ``window`` for WAIT (hold GPUs for the first queued job that cannot
  start, start only what cannot delay it, as the decision loop does behind a WAIT:
  `attentived.agents.behind_wait`, then move to the next event);
* **GPU phase** (``obs["phase"] == 1``): the action is a candidate placement
  ``0..max_candidates-1`` for the job just chosen.

With ``pack=True`` every start follows the packing rule of ``POLICY:pack=1``
(`attentived.agents.pack`), for a model that will run with it: a chosen job starts on its
packed placement at once (no GPU phase: the rule places it), or, when it can pack only
once running jobs end, is held for that with what cannot delay it started behind it; WAIT
holds the first job of the queue that cannot start packed.

Both phases share one ``Discrete(max(window + 1, max_candidates))`` action space;
``obs["action_mask"]`` (and `SchedulingEnv.action_masks`, the name sb3-contrib's
MaskablePPO calls) says which actions are legal now. A masked action is never needed: the
mask offers only jobs that fit and only topology-valid GPU sets. WAIT is offered only
while some job runs (otherwise the cluster would idle with nothing to wake it up). An agent
that ignores the mask may still send a masked action: nothing happens, the reward is
``-invalid_penalty`` and ``info["invalid"]`` is true.

Observations are the arrays of `attentived.agents.features` padded to fixed shapes:

=============  =================================  =========================================
key            shape                              meaning
=============  =================================  =========================================
phase          Discrete(2)                        0 job phase, 1 GPU phase
jobs           (window, JOB_FEATURES)             one row per job slot
summary        (SUMMARY_TOKENS, SUMMARY_FEATURES) the cluster now, and expected releases
job_valid      MultiBinary(window)                slot holds a job
job            Discrete(window)                   the chosen slot (GPU phase; 0 otherwise)
nodes          (max_nodes, NODE_FEATURES)         one row per node (GPU phase)
node_valid     MultiBinary(max_nodes)             row is a node of this cluster
candidates     (max_candidates, CANDIDATE_FEAT.)  one row per candidate placement
share          (max_candidates, max_nodes)        fraction of the job on each node
action_mask    MultiBinary(actions)               legal actions in this phase
fairness       Box(0, 1, (1,))                    the episode's fairness setting W
urgency        (window,)                          each slot's `job_urgency` (0 unless urgency=True)
plan           (window + 1,)                      `plan_marks` of the slots and WAIT (0 unless plan=True)
=============  =================================  =========================================

The reward is `attentived.training.reward` (JCT, fairness of waiting, communication cost;
weights in `RewardWeights`, the fairness term scaled by W), paid when the simulation
moves. ``fairness`` is W, or a range W is drawn from (uniformly, by the environment's
RNG) at each reset: a preference-conditioned agent reads it from the observation and
learns the whole range with one network; ``urgency=True`` fills ``obs["urgency"]`` (for
the experimental urgency input, `PPOConfig.urgency_input`), ``plan=True`` fills
``obs["plan"]`` with the look-ahead's plan at the episode's W (`PPOConfig.plan_input`). ``info`` carries the step's
reward terms, and at the end of an episode ``info["metrics"]`` (the
`attentived.simulator.metrics.summarize` dict) and ``info["episode_name"]``.

`SchedulingEnv.phase` says which phase the next action is for (the same number as
``obs["phase"]``, read-only: only `step` moves it). A job phase ends with WAIT (what
cannot delay the held job starts, the simulation moves to the next event, and a new job
phase begins) or with a job, which
opens its GPU phase; a GPU phase ends with a start, after which the next phase is a job
phase again (the same instant while jobs still fit, else the next event). A masked action
changes nothing, the phase included; ``reset`` starts in a job phase.

Seeding: ``reset(seed=s)`` seeds the environment's RNG, which draws the episode (and the
episode's time limits and models), so the same seed and the same actions give the same
observations, rewards and ``info``. The simulation itself draws nothing. Episodes end
with ``terminated`` when every job has finished; the environment never truncates.

Gymnasium id ``attentived/Scheduling-v0``: importing `attentived.training` registers it.
Gymnasium 1.x reads no plugin entry points, so the import is what registers it; the id
with a module in front, ``"attentived.training:attentived/Scheduling-v0"``, makes
``gymnasium.make`` import it first. Keyword arguments of ``gymnasium.make`` go to
`SchedulingEnv`; without ``episodes``, an episode is a random window of the bundled
Philly dev trace's first 30 days (`TraceWindows.philly`). ``gymnasium.make`` wraps the
environment (order enforcing, the passive checker): reach `phase`, `action_masks` and the
other attributes through ``env.unwrapped``.

Usage::

    import gymnasium
    import attentived.training  # registers attentived/Scheduling-v0

    env = gymnasium.make("attentived/Scheduling-v0", max_nodes=4)
    obs, info = env.reset(seed=0)
    while True:
        action = env.action_space.sample(mask=obs["action_mask"])
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated:
            break
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from attentived.agents.behind_wait import fill_behind_wait, wait_hold
from attentived.agents.features import (
    CANDIDATE_FEATURES,
    DEFAULT_WINDOW,
    JOB_FEATURES,
    MAX_CANDIDATES,
    NODE_FEATURES,
    SUMMARY_FEATURES,
    SUMMARY_TOKENS,
    Candidate,
    Context,
    FeatureEncoder,
    GpuView,
    JobView,
)
from attentived.agents.guided import look_ahead_teacher
from attentived.agents.pack import PackedPlacer
from attentived.agents.plan import Hold, Plan, Start
from attentived.agents.policy import Ranking, Scheduler
from attentived.agents.state import ClusterState, PendingJob
from attentived.simulator.engine import SimJob, Simulation, prepare_jobs
from attentived.simulator.metrics import summarize
from attentived.simulator.samples import sample_path
from attentived.simulator.trace import Trace, TraceJob, load_trace
from attentived.topology import Topology, uniform
from attentived.training.reward import RewardTerms, RewardTracker, RewardWeights

DAY = 86_400.0
_BOUND = 100.0  # features are O(1) by construction (see attentived.agents.features)


@dataclass(frozen=True)
class Episode:
    """One workload on one cluster."""

    jobs: tuple[SimJob, ...]
    topology: Topology
    name: str


class EpisodeSampler(Protocol):
    """Draws the next episode from the environment's RNG (so ``reset(seed=...)`` replays it)."""

    def __call__(self, rng: np.random.Generator) -> Episode: ...


@dataclass(frozen=True)
class FixedEpisode:
    """The same workload every episode (tests, evaluation of one window)."""

    episode: Episode

    def __call__(self, rng: np.random.Generator) -> Episode:
        return self.episode


@dataclass(frozen=True)
class TraceWindows:
    """Random windows of a trace on random uniform clusters, at a random offered load.

    A window is ``jobs`` consecutive jobs (submitted in ``days``, small enough for the
    cluster) on ``nodes x gpus_per_node`` GPUs. Submissions are then compressed or spread
    so the window offers ``load`` times the cluster's capacity (work counted up to the
    window's span, so one month-long job does not decide the load): the same trace
    teaches both calm and congested regimes on every cluster size. Time limits and models
    are drawn per episode (`prepare_jobs`).
    """

    trace: Trace
    days: tuple[float, float] = (0.0, 30.0)
    jobs: tuple[int, int] = (200, 1000)
    nodes: tuple[int, ...] = (2, 4)
    gpus_per_node: int = 8
    nodes_per_switch: int = 2
    load: tuple[float, float] = (0.8, 1.4)

    @classmethod
    def philly(cls, **kwargs: Any) -> TraceWindows:
        return cls(load_trace(sample_path("philly")), **kwargs)

    def __call__(self, rng: np.random.Generator) -> Episode:
        nodes = int(rng.choice(self.nodes))
        gpus = nodes * self.gpus_per_node
        lo, hi = self.days[0] * DAY, self.days[1] * DAY
        pool = [j for j in self.trace.jobs if lo <= j.submit_time < hi and j.num_gpus <= gpus]
        if not pool:
            raise ValueError(f"{self.trace.name}: no job in days {self.days} fits {gpus} GPUs")
        n = min(int(rng.integers(self.jobs[0], self.jobs[1] + 1)), len(pool))
        first = int(rng.integers(0, len(pool) - n + 1))
        window = pool[first : first + n]
        target = float(rng.uniform(*self.load))
        jobs = _at_load(window, gpus, target)
        topo = uniform(nodes, self.gpus_per_node, nodes_per_switch=self.nodes_per_switch)
        name = f"{self.trace.name}[{first}:{first + n}] on {nodes}x{self.gpus_per_node} at load {target:.2f}"
        return Episode(tuple(prepare_jobs(jobs, int(rng.integers(2**31)))), topo, name)


def _at_load(window: Sequence[TraceJob], gpus: int, load: float) -> list[TraceJob]:
    """Re-time ``window`` so it offers ``load`` x the capacity of ``gpus`` GPUs."""
    t0 = window[0].submit_time
    span = max(window[-1].submit_time - t0, 1.0)
    work = sum(j.num_gpus * min(j.duration, span) for j in window)
    stretch = work / (load * gpus * span)  # new gaps = old gaps x stretch
    stretch = min(max(stretch, 1e-3), 1e3)
    return [replace(j, submit_time=(j.submit_time - t0) * stretch) for j in window]


@dataclass(frozen=True)
class Mixture:
    """Draws from several samplers with the given weights (e.g. Philly and Tiresias)."""

    samplers: tuple[EpisodeSampler, ...]
    weights: tuple[float, ...]

    def __call__(self, rng: np.random.Generator) -> Episode:
        p = np.asarray(self.weights, float)
        return self.samplers[int(rng.choice(len(self.samplers), p=p / p.sum()))](rng)


@dataclass
class FirstThen:
    """A job chooser: the pending jobs ``first`` names, in that order, then the others in
    the queue's. Under the packing rule it orders an instant as the agent's plan orders
    ``pack=1``'s: the jobs it started, the one it holds, then the rest (the environment has
    no logits to rank them by)."""

    first: tuple[str, ...]
    name: str = "first-then-queue"
    needs_oracle: ClassVar[bool] = False

    def rank(self, state: ClusterState) -> Ranking:
        at = {job.job_id: i for i, job in enumerate(state.pending)}
        head = np.array([at[j] for j in self.first], dtype=np.int64)
        return Ranking(np.concatenate((head, np.setdiff1d(np.arange(len(state.pending)), head))))


class SchedulingEnv(gym.Env):
    """Two-phase scheduling on the simulator (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        episodes: EpisodeSampler | None = None,
        *,
        window: int = DEFAULT_WINDOW,
        max_nodes: int = 32,
        max_candidates: int = MAX_CANDIDATES,
        reward: RewardWeights = RewardWeights(),
        invalid_penalty: float = 0.01,
        fairness: float | tuple[float, float] = 1.0,
        urgency: bool = False,
        plan: bool = False,
        pack: bool = False,
    ) -> None:
        lo, hi = fairness if isinstance(fairness, tuple) else (fairness, fairness)
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"fairness must be a setting or a range within [0, 1], got {fairness}")
        self.fairness_range = (float(lo), float(hi))
        self._fairness = float(lo)
        self.episodes = episodes if episodes is not None else TraceWindows.philly()
        self.invalid_penalty = invalid_penalty
        self.encoder = FeatureEncoder(window, max_candidates, urgency)
        self.plan = plan
        self.packer = PackedPlacer() if pack else None
        self.window, self.max_nodes, self.max_candidates = window, max_nodes, max_candidates
        self.weights = reward
        self.wait_action = window
        n_actions = max(window + 1, max_candidates)
        f32 = np.float32
        self.observation_space = spaces.Dict(
            {
                "phase": spaces.Discrete(2),
                "jobs": spaces.Box(-_BOUND, _BOUND, (window, JOB_FEATURES), f32),
                "summary": spaces.Box(-_BOUND, _BOUND, (SUMMARY_TOKENS, SUMMARY_FEATURES), f32),
                "job_valid": spaces.MultiBinary(window),
                "job": spaces.Discrete(window),
                "nodes": spaces.Box(-_BOUND, _BOUND, (max_nodes, NODE_FEATURES), f32),
                "node_valid": spaces.MultiBinary(max_nodes),
                "candidates": spaces.Box(-_BOUND, _BOUND, (max_candidates, CANDIDATE_FEATURES), f32),
                "share": spaces.Box(0.0, 1.0, (max_candidates, max_nodes), f32),
                "action_mask": spaces.MultiBinary(n_actions),
                "fairness": spaces.Box(0.0, 1.0, (1,), f32),
                "urgency": spaces.Box(-_BOUND, _BOUND, (window,), f32),
                "plan": spaces.Box(0.0, 1.0, (window + 1,), f32),
            }
        )
        self.action_space: spaces.Discrete = spaces.Discrete(n_actions)
        self.sim: Simulation | None = None
        self._phase = 0

    # ---- gymnasium API ----

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.episode = self.episodes(self.np_random)
        lo, hi = self.fairness_range
        self._fairness = float(self.np_random.uniform(lo, hi)) if hi > lo else lo
        if self.plan:
            self.encoder.planner = look_ahead_teacher(self._fairness).decide
        if len(self.episode.topology.nodes) > self.max_nodes:
            raise ValueError(
                f"episode {self.episode.name} has {len(self.episode.topology.nodes)} nodes, "
                f"the environment pads to max_nodes={self.max_nodes}"
            )
        self._by_id = {s.job.job_id: s for s in self.episode.jobs}
        self.sim = Simulation(self.episode.jobs, self.episode.topology)
        self.sim.reset()
        self.tracker = RewardTracker(self.episode.jobs, self.weights, self._fairness)
        self._gpu: GpuView | None = None
        self._slot = 0
        state = self.sim.next_decision()
        if state is None:
            raise ValueError(f"episode {self.episode.name} has nothing to decide")
        self._enter(state)
        self._instant: tuple[ClusterState, list[Start]] = (state, [])
        return self._obs(), {"episode_name": self.episode.name}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        if self.sim is None:
            raise RuntimeError("call reset() before step()")
        action = int(action)
        terms = RewardTerms()
        if not self.action_masks()[action]:
            obs = self._obs()
            return obs, -self.invalid_penalty, False, False, {"reward_terms": terms, "time": self.sim.now, "invalid": True}
        if self.phase == 0 and action == self.wait_action:
            terms = self._wait()
            more, done = self._advance(self.sim.next_decision())
            terms = terms + more
        elif self.phase == 0 and self.packer is not None:
            terms, done = self._pack(int(self.jobs.index[action]))
        elif self.phase == 0:
            self._slot = action
            job = self.ctx.state.pending[int(self.jobs.index[action])]
            self._gpu = self.encoder.gpus(self.ctx, job)
            self._phase = 1
            done = False
        else:
            job = self.ctx.state.pending[int(self.jobs.index[self._slot])]
            terms, done = self._start(job, self.placements[action].gpus)
        info: dict[str, Any] = {"reward_terms": terms, "time": self.sim.now}
        if done:
            info["metrics"] = summarize(self.sim.result().records, self.episode.topology.num_gpus)
            info["episode_name"] = self.episode.name
        return self._obs(), terms.total, done, False, info

    @property
    def phase(self) -> int:
        """The phase the next action is for: 0 job phase (a slot or WAIT), 1 GPU phase (a
        candidate for the chosen job); ``obs["phase"]``."""
        return self._phase

    @property
    def fairness(self) -> float:
        """This episode's fairness setting W (``obs["fairness"]``): the weight of the
        reward's fairness term, drawn from ``fairness_range`` at each reset."""
        return self._fairness

    @property
    def state(self) -> ClusterState:
        """The snapshot the current decision is about."""
        return self.ctx.state

    @property
    def job_view(self) -> JobView:
        """The encoded queue: ``job_view.index[slot]`` is the pending index of job ``slot``."""
        return self.jobs

    @property
    def chosen_slot(self) -> int:
        """The job slot chosen in the job phase (meaningful in the GPU phase)."""
        return self._slot

    @property
    def placements(self) -> tuple[Candidate, ...]:
        """The candidate GPU sets of the GPU phase (action ``k`` starts ``placements[k]``)."""
        return self._gpu.placements if self._gpu is not None else ()

    def action_masks(self) -> np.ndarray:
        """Legal actions now (bool), for maskable PPO implementations."""
        mask = np.zeros(self.action_space.n, bool)
        if self.phase == 0:
            mask[: self.window + 1] = self.jobs.action_mask
        else:
            assert self._gpu is not None  # phase 1 has a GPU view
            mask[: self.max_candidates] = self._gpu.valid
        return mask

    # ---- internals ----

    def _enter(self, state: ClusterState) -> None:
        """A new job phase on ``state``."""
        self.ctx = Context.of(state)
        self.jobs: JobView = self.encoder.jobs(self.ctx)
        self._phase = 0
        self._gpu = None
        self._slot = 0

    def _advance(self, state: ClusterState | None) -> tuple[RewardTerms, bool]:
        assert self.sim is not None
        terms = self.tracker.advance(self.sim.now, state)
        if state is None:
            self._phase = 0
            return terms, True
        self._enter(state)
        self._instant = (state, [])  # a new instant: its first snapshot, no start yet
        return terms, False

    def _start(self, job: PendingJob, gpus: tuple[int, ...]) -> tuple[RewardTerms, bool]:
        """Start ``job`` on ``gpus`` now; a job phase follows at this instant while a job
        still fits, else at the next event."""
        assert self.sim is not None
        self.sim.apply(Plan(order=self._order(), starts=(Start(job.job_id, gpus),)))
        self._instant[1].append(Start(job.job_id, gpus))
        terms = self._started(job, gpus)
        state = self.sim.snapshot()
        if Context.of(state).feasible.any():
            self._enter(state)
            return terms, False
        more, done = self._advance(self.sim.next_decision())
        return terms + more, done

    def _pack(self, index: int) -> tuple[RewardTerms, bool]:
        """Pending job ``index`` chosen under the packing rule (``pack=True``), as
        `attentived.agents.pack` starts the first job of a plan's order: on a packed
        placement now (with no GPU phase: the rule places it), or, when it will pack once
        running jobs end, held for that, with what cannot delay it started behind (a WAIT
        for this job)."""
        assert self.sim is not None and self.packer is not None
        state = self.ctx.state
        job = state.pending[index]
        gpus = self.packer.place(job, self.ctx.fit.usable(job, state.free), state)
        if gpus is not None:
            return self._start(job, tuple(int(g) for g in gpus))
        terms = self._wait(index)
        more, done = self._advance(self.sim.next_decision())
        return terms + more, done

    def _unpacked(self) -> int | None:
        """The first pending job, in the queue's order, that cannot start packed now
        (`PackedPlacer`, among the GPUs it may use); ``None`` when every job can."""
        assert self.packer is not None
        state, fit = self.ctx.state, self.ctx.fit
        return next((i for i, job in enumerate(state.pending) if not self.ctx.feasible[i]
                     or self.packer.place(job, fit.usable(job, state.free), state) is None), None)

    def _order(self) -> tuple[str, ...]:
        return tuple(j.job_id for j in self.ctx.state.pending)

    def _wait(self, chosen: int | None = None) -> RewardTerms:
        """WAIT as the decision loop applies it (`attentived.agents.behind_wait`): the first
        job in the queue's order that cannot start now is held (the look-ahead's hold, if
        the observation shows its plan and it holds), and what cannot delay it starts now,
        so the agent learns what a WAIT does when it runs. (The loop ranks by the agent's
        logits; the environment has none and ranks by the queue.) Under the packing rule
        it is what ``pack=1`` plans for the instant: on its first snapshot, the jobs
        started at it so far, then ``chosen`` (`_pack`) or else the first job that cannot
        start packed, then the queue. That job is held where it will pack, behind the
        instant's own starts only when nothing else makes room, as one plan holds; behind
        it jobs start only packed off its GPUs or when their limit ends before its start.
        Planned on the latest snapshot instead, where the instant's starts run and release
        at their limits, 44 of 150 random episodes held sooner than ``pack=1``."""
        assert self.sim is not None
        state = self.ctx.state
        holds: tuple[Hold, ...]
        if self.packer is None:
            plan = self.encoder.plan_of(state)
            hold = wait_hold(state, np.flatnonzero(~self.ctx.feasible), plan)
            starts, holds = tuple(fill_behind_wait(state, state.pending, hold, plan)), (hold,) if hold else ()
        else:
            first, made = self._instant
            head = self._unpacked() if chosen is None else chosen
            order = (*(s.job_id for s in made), *(() if head is None else (state.pending[head].job_id,)))
            packed = Scheduler(FirstThen(order), self.packer, backfill=True).decide(first)
            assert packed.starts[: len(made)] == tuple(made), "the instant's plan places its starts as they were made"
            starts, holds = packed.starts[len(made):], packed.holds
        self.sim.apply(Plan(order=self._order(), starts=starts, holds=holds, waited=True))
        jobs = {j.job_id: j for j in state.pending} if starts else {}
        terms = RewardTerms()
        for start in starts:
            terms = terms + self._started(jobs[start.job_id], start.gpus)
        return terms

    def _started(self, job: PendingJob, gpus: tuple[int, ...]) -> RewardTerms:
        """The reward terms of ``job`` starting on ``gpus`` now."""
        assert self.sim is not None
        s = self._by_id[job.job_id]
        runtime = self.sim.speed.runtime(s.model, s.job.duration, gpus)
        return self.tracker.start(job.user, job.submit_time, self.sim.now, job.num_gpus, s.job.duration, runtime)

    def _obs(self) -> dict[str, Any]:
        N, K = self.max_nodes, self.max_candidates
        nodes = np.zeros((N, NODE_FEATURES), np.float32)
        node_valid = np.zeros(N, np.int8)
        cands = np.zeros((K, CANDIDATE_FEATURES), np.float32)
        share = np.zeros((K, N), np.float32)
        if self.phase == 1:
            g = self._gpu
            assert g is not None  # phase 1 has a GPU view
            n = g.nodes.shape[0]
            nodes[:n], node_valid[:n], cands[:], share[:, :n] = g.nodes, 1, g.candidates, g.share
        return {
            "phase": self.phase,
            "jobs": self.jobs.jobs.copy(),
            "summary": self.jobs.summary.copy(),
            "job_valid": self.jobs.valid.astype(np.int8),
            "job": self._slot,
            "nodes": nodes,
            "node_valid": node_valid,
            "candidates": cands,
            "share": share,
            "action_mask": self.action_masks().astype(np.int8),
            "fairness": np.array([self._fairness], np.float32),
            "urgency": self.jobs.urgency.copy(),
            "plan": self.jobs.plan.copy(),
        }
