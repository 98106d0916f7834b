"""Every setting of a training run in one typed dataclass, `PPOConfig`, and the curriculum
stages it schedules (`Stage`). ``train_config`` reads the same fields from a TOML file."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from attentived.agents.features import DEFAULT_WINDOW, MAX_CANDIDATES
from attentived.agents.mlp import MlpConfig
from attentived.agents.networks import NetConfig

from .reward import RewardWeights


@dataclass(frozen=True)
class Stage:
    """A curriculum stage, in force from ``start`` (fraction of ``total_steps``) on."""

    start: float
    nodes: tuple[int, ...]
    jobs: tuple[int, int]
    load: tuple[float, float]


DEFAULT_CURRICULUM = (
    Stage(0.0, nodes=(2, 4), jobs=(150, 400), load=(0.8, 1.4)),
    Stage(0.3, nodes=(4, 8), jobs=(300, 800), load=(0.8, 1.5)),
    Stage(0.6, nodes=(8, 16, 32), jobs=(500, 1500), load=(0.9, 1.5)),
)


TEACHER_NAMES = ("smallest-gpu-time", "look-ahead", "look-ahead-packed")
"""The teachers `training.teacher.TEACHERS` builds: a heuristic, or the look-ahead at each
episode's fairness setting W (expert iteration), its starts as planned or packed."""


@dataclass(frozen=True)
class PPOConfig:
    """Every hyper-parameter of a training run."""

    # run
    agent: str = "attentive"  # which network and environment (training.kinds): attentive, deeprm, proximity-drl
    seed: int = 1
    out_dir: str = "runs/attentive"
    total_steps: int = 200_000
    time_budget_s: float | None = None  # stop early (saving everything) after this wall time of one invocation (a resume gets it afresh)
    device: str = "auto"  # "auto": CUDA when present, else CPU
    torch_threads: int = 1  # intra-op threads of the rollout: its batches of one row per environment are fastest on one
    update_threads: int = 2  # intra-op threads of the PPO update: its 256-row minibatches gain from a second core
    env_workers: int = 2  # processes stepping the environments (training.vector; 0: this one); results do not depend on it
    # environments and data
    num_envs: int = 32  # one forward pass serves them all: 32 rows cost little more than 8 (bench/train_speed.py)
    window: int = DEFAULT_WINDOW
    max_candidates: int = MAX_CANDIDATES
    max_nodes: int = 32  # node padding of the observation; >= the largest curriculum cluster
    max_gpus: int = 128  # proximity-drl: GPU slots of its fixed-size input
    order: str = "fifo"  # proximity-drl: the heuristic job order it places for
    train_trace: str = "philly"  # a bundled sample name or a trace file
    train_days: tuple[float, float] = (0.0, 30.0)
    tiresias_share: float = 0.1  # fraction of episodes drawn from the Tiresias job list
    curriculum: tuple[Stage, ...] = DEFAULT_CURRICULUM
    reward: RewardWeights = field(default_factory=RewardWeights)
    # Preference conditioning: each episode draws its fairness setting W from this range
    # and the network reads W (one model for every W; validated at VALIDATION_FAIRNESS).
    # None: W = 1 for every episode and no W input (the DRL baselines).
    fairness_range: tuple[float, float] | None = None
    # The job agent also reads each job's urgency beside W (NetConfig.urgency_input): on
    # for the attentive agent (`kinds`), whose knob barely moved the worst-off user
    # without it (docs/agents.md, "The fairness setting W on held-out days").
    urgency_input: bool = False
    # The job agent also reads the look-ahead's plan at W (NetConfig.plan_input), the one
    # its `look-ahead` teacher labels from (docs/agents.md, "The teacher's plan as an input").
    plan_input: bool = False
    # The plan's marks scaled by W (NetConfig.plan_by_fairness): the network does not see
    # its teacher's plan at W = 0 and reads all of it at W = 1.
    plan_by_fairness: bool = False
    teacher: str = "smallest-gpu-time"  # one of TEACHER_NAMES (training.teacher.TEACHERS)
    # Every start in training follows the packing rule (`agents.pack`, `POLICY:pack=1`): a
    # chosen job starts packed, or is held until it can, and validation runs the model
    # with ``pack=1``. For a model that will run as ``attentive:model=PATH,pack=1``, so it
    # learns its order under the rule it runs with (docs/agents.md, "Trained under the rule").
    # Teach it with ``look-ahead-packed``: another teacher labels spread starts, which
    # under the rule hold their job instead.
    pack: bool = False
    # model
    net: NetConfig = field(default_factory=NetConfig)  # attentive
    mlp: MlpConfig = field(default_factory=MlpConfig)  # deeprm, proximity-drl
    # PPO
    num_steps: int = 32  # per environment per rollout (a batch of num_envs x num_steps = 1,024 transitions)
    learning_rate: float = 3e-4
    anneal_lr: bool = True
    gamma: float = 0.999  # decisions are seconds apart; their effects last hours
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = 0.05
    # teacher-guided start: a behaviour-cloning term toward `teacher_action`, annealed away
    bc_coef: float = 1.0
    bc_until: float = 0.5  # fraction of training over which the coefficient falls to bc_floor
    bc_floor: float = 0.2  # kept for the rest of training: a leash, not a target
    # more leash the more fairness the episode asks for: a transition's weight is the
    # annealed coefficient above plus bc_fairness x its W, so a preference-conditioned
    # student may leave its teacher for speed at W = 0 and stays on the look-ahead's
    # protective plan at W = 1 (docs/agents.md, "A leash that grows with W")
    bc_fairness: float = 0.0
    # validation and checkpoints
    val_days: tuple[float, float] = (30.0, 40.0)
    val_episodes: int = 3
    val_jobs: int = 600
    val_nodes: int = 8
    # (nodes, jobs) of one more validation window, at the scale a frontier curriculum ends
    # at; (0, 0): none. Judged on 8 nodes alone, every frontier run kept a checkpoint from
    # before its large stage (docs/agents.md, "Training up to 64-128 nodes").
    val_large: tuple[int, int] = (0, 0)
    val_every: int = 15  # updates
    # also keep every validated model as out_dir/validated/update-NNNN.pt (its val_score in
    # its meta), to compare checkpoints afterwards (`--policy attentive:model=PATH`); the
    # run is the same with or without
    keep_validated: bool = False
    checkpoint_every: int = 10  # updates

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_updates(self) -> int:
        return max(1, self.total_steps // self.batch_size)

    def stage(self, global_step: int, horizon: int | None = None) -> Stage:
        """The curriculum stage at ``global_step`` of a run planned for ``horizon`` steps
        (default ``total_steps``; a resumed run keeps the horizon it started with)."""
        frac = global_step / max(horizon or self.total_steps, 1)
        return [s for s in self.curriculum if s.start <= frac][-1]

    def lr_factor(self, update: int, horizon: int | None = None) -> float:
        """The learning rate's share at ``update`` (linear decay over the horizon's updates,
        held at its last value beyond it)."""
        if not self.anneal_lr:
            return 1.0
        updates = max(1, (horizon or self.total_steps) // self.batch_size)
        return 1.0 - (min(update, updates) - 1) / updates

    def bc_weight(self, global_step: int, horizon: int | None = None) -> float:
        """The behaviour-cloning coefficient at ``global_step``: from ``bc_coef`` down to
        ``bc_floor`` over ``bc_until`` of the horizon, then the floor."""
        steps = self.bc_until * (horizon or self.total_steps)
        anneal = max(0.0, 1.0 - global_step / steps) if steps > 0 else 0.0
        return self.bc_floor + (self.bc_coef - self.bc_floor) * anneal

    def __post_init__(self) -> None:
        if self.fairness_range is not None and not 0.0 <= self.fairness_range[0] <= self.fairness_range[1] <= 1.0:
            raise ValueError(f"fairness_range must be [lo, hi] within [0, 1], got {list(self.fairness_range)}")
        if self.fairness_range is not None and self.agent != "attentive":
            raise ValueError(f"fairness_range is for the attentive agent (it reads W), not {self.agent}")
        if min(self.val_large) < 0 or (self.val_large[0] > 0) != (self.val_large[1] > 0):
            raise ValueError(f"val_large must be [nodes, jobs], both positive, or [0, 0] for none, got {list(self.val_large)}")
        if self.urgency_input and self.fairness_range is None:
            raise ValueError("urgency_input needs fairness_range (the urgency is read beside W)")
        if self.plan_input and (self.fairness_range is None or self.agent != "attentive"):
            raise ValueError("plan_input is for the attentive agent with a fairness_range (the plan is the look-ahead's at W)")
        if self.plan_by_fairness and not self.plan_input:
            raise ValueError("plan_by_fairness needs plan_input (it scales the plan's marks by W)")
        if self.pack and (self.agent == "proximity-drl" or self.plan_input):
            raise ValueError("pack is for the two-phase agents (attentive, deeprm) without plan_input "
                             "(the rule replaces the placements and WAITs the plan would mark)")
        if self.bc_fairness < 0 or (self.bc_fairness > 0 and self.fairness_range is None):
            raise ValueError(f"bc_fairness must be 0, or positive with a fairness_range (it weighs by W), got {self.bc_fairness}")
        if self.teacher not in TEACHER_NAMES:
            raise ValueError(f"teacher must be one of {', '.join(TEACHER_NAMES)}, got {self.teacher!r}")
        largest = max(n for stage in self.curriculum for n in stage.nodes)
        if self.agent != "proximity-drl" and largest > self.max_nodes:  # proximity-drl reads max_gpus slots instead
            raise ValueError(f"max_nodes ({self.max_nodes}) must be at least the curriculum's largest cluster ({largest} nodes)")
        if self.env_workers < 0:
            raise ValueError(f"env_workers must be 0 (step the environments here) or more, got {self.env_workers}")
        for name in ("torch_threads", "update_threads", "num_envs", "num_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def as_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))
