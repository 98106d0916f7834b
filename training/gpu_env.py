"""A Gymnasium environment in which the agent places each job GPU by GPU (Proximity-DRL style).

At every decision point of the simulation a heuristic job order (`ORDERS` of the policy
registry, FIFO by default) decides *which* jobs start, exactly as `Scheduler` without
backfill does: the jobs in order while they fit. The agent then chooses, for each of those
jobs in turn, one GPU per step until the job has all it asked for; the job starts, and the
next one follows. When the decision's jobs are placed the simulation moves to the next
decision point where some job starts.

* observation (`attentived.agents.proximity.Observer`): ``gpus`` (max_gpus x
  GPU_FEATURES), ``globals`` (GLOBAL_FEATURES) and ``action_mask`` (max_gpus: free, not yet
  picked, a real GPU);
* action: a GPU id ``0..max_gpus-1``;
* reward: the same `attentived.training.reward` terms as `SchedulingEnv` (placement cost at
  each start, JCT and fairness as the clock moves), so the returns are comparable;
* ``info["metrics"]`` at the end of an episode, as `SchedulingEnv`.

Inference runs the same code path: `ProximityPlacer` builds the same observation from the
same (snapshot, free mask, job, picks) for `Scheduler`. Which jobs start is decided by the
heuristic order on the snapshot, which for jobs that do not fix a node count (every trace's)
depends on counts alone, not on where earlier jobs went; a job with a fixed node shape
that no longer fits after the agent's earlier placements ends the decision, as in
`Scheduler` without backfill.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from attentived.agents.placement import Consolidate
from attentived.agents.plan import Plan, Start
from attentived.agents.policy import Scheduler
from attentived.agents.proximity import (
    GLOBAL_FEATURES,
    GPU_FEATURES,
    QUEUE_WINDOW,
    Observer,
    can_place,
    teacher_gpu,
)
from attentived.agents.state import ClusterState, PendingJob
from attentived.simulator.engine import Simulation
from attentived.simulator.metrics import summarize
from attentived.training.reward import RewardTerms, RewardTracker, RewardWeights

from .gym_env import EpisodeSampler


class GpuByGpuEnv(gym.Env):
    """GPU-at-a-time placement under a heuristic job order (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        episodes: EpisodeSampler,
        *,
        order: str = "fifo",
        max_gpus: int = 128,
        window: int = QUEUE_WINDOW,
        reward: RewardWeights = RewardWeights(),
        invalid_penalty: float = 0.01,
    ) -> None:
        from attentived.agents.registry import ORDERS

        self.episodes = episodes
        self.order = order
        self.heuristic = Scheduler(ORDERS[order](0), Consolidate(), backfill=False)
        self.observer = Observer(max_gpus, window)
        self.max_gpus, self.weights, self.invalid_penalty = max_gpus, reward, invalid_penalty
        self.observation_space = spaces.Dict(
            {
                "gpus": spaces.Box(-100.0, 100.0, (max_gpus, GPU_FEATURES), np.float32),
                "globals": spaces.Box(-100.0, 100.0, (GLOBAL_FEATURES,), np.float32),
                "action_mask": spaces.MultiBinary(max_gpus),
            }
        )
        self.action_space = spaces.Discrete(max_gpus)
        self.sim: Simulation | None = None

    # ---- gymnasium API ----

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.episode = self.episodes(self.np_random)
        if self.episode.topology.num_gpus > self.max_gpus:
            raise ValueError(f"episode {self.episode.name} has {self.episode.topology.num_gpus} GPUs, max_gpus={self.max_gpus}")
        self._by_id = {s.job.job_id: s for s in self.episode.jobs}
        self.sim = Simulation(self.episode.jobs, self.episode.topology)
        self.sim.reset()
        self.tracker = RewardTracker(self.episode.jobs, self.weights)
        self._jobs: list[PendingJob] = []
        _, done = self._next_placement(self.sim.next_decision())
        if done:
            raise ValueError(f"episode {self.episode.name} has nothing to place")
        return self._obs, {"episode_name": self.episode.name}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        if self.sim is None:
            raise RuntimeError("call reset() before step()")
        action = int(action)
        if not self._obs["action_mask"][action]:
            obs = {k: v.copy() for k, v in self._obs.items()}  # callers keep what they get
            return obs, -self.invalid_penalty, False, False, {"reward_terms": RewardTerms(), "invalid": True, "time": self.sim.now}
        self._picked.append(action)
        terms, done = RewardTerms(), False
        if len(self._picked) == self.job.num_gpus:
            terms = self._start(self.job, tuple(sorted(self._picked)))
            self._jobs.pop(0)
            more, done = self._next_placement(None)
            terms = terms + more
        else:
            self._observe()
        info: dict[str, Any] = {"reward_terms": terms, "time": self.sim.now}
        if done:
            info["metrics"] = summarize(self.sim.result().records, self.episode.topology.num_gpus)
            info["episode_name"] = self.episode.name
        return self._obs, terms.total, done, False, info

    def action_masks(self) -> np.ndarray:
        return self._obs["action_mask"].astype(bool)

    def teacher_action(self) -> int:
        """The teacher's GPU (`teacher_gpu`: consolidate, then nearest to the picks)."""
        return teacher_gpu(self.state, self.action_masks(), self._picked, self._preferred)

    # ---- internals ----

    def _next_placement(self, state: ClusterState | None) -> tuple[RewardTerms, bool]:
        """Move to the next job the agent must place: the next of this decision's jobs, or
        (``state``, or the simulation's next decision points) the first job of the next
        decision that starts something. Returns the reward terms accrued on the way and
        whether the episode ended."""
        assert self.sim is not None
        terms = RewardTerms()
        while True:
            if state is not None:
                self.state, self._free = state, state.free.copy()
                plan = self.heuristic.decide(state)
                pending = {j.job_id: j for j in state.pending}
                self._jobs, self._order = [pending[s.job_id] for s in plan.starts], plan.order
                state = None
            if self._jobs and not can_place(self._jobs[0], self._free, self.state.topology):
                self._jobs = []  # a fixed node shape no longer fits: strict order stops here, as Scheduler does
            if self._jobs:
                self.job = self._jobs[0]
                self._picked: list[int] = []
                self._preferred = Consolidate().place(self.job, self._free, self.state) or ()
                self._observe()
                return terms, False
            self.sim.apply(Plan(order=self._order))  # checks that the simulation can go on
            state = self.sim.next_decision()
            terms = terms + self.tracker.advance(self.sim.now, state)
            if state is None:
                return terms, True

    def _start(self, job: PendingJob, gpus: tuple[int, ...]) -> RewardTerms:
        assert self.sim is not None
        self.sim.apply(Plan(order=self._order, starts=(Start(job.job_id, gpus),)))
        self._free[list(gpus)] = False
        s = self._by_id[job.job_id]
        runtime = self.sim.speed.runtime(s.model, s.job.duration, gpus)
        return self.tracker.start(job.user, job.submit_time, self.sim.now, job.num_gpus, s.job.duration, runtime)

    def _observe(self) -> None:
        self._obs = self.observer.observe(self.state, self._free, self.job, self._picked)
