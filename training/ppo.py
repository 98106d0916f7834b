"""PPO for the attentive agents and the DRL baselines, in one loop, in the manner of
CleanRL's ``ppo.py``.

Everything tunable is in `PPOConfig`; ``agent`` picks what is trained (`training.kinds`:
the network, its environment and the teacher's action there; `agents.learned` runs it),
and everything else -- data, curriculum, reward, the loop, validation -- is shared. The loop is the textbook one: collect
``num_steps`` transitions from each of ``num_envs`` environments with the current policy,
compute advantages with GAE, then run ``update_epochs`` epochs of clipped PPO on shuffled
minibatches. A transition is one phase of a decision (a job or WAIT, or a placement), so
both agents learn from the same advantages; masks ride along in the observations and
masked actions get logits of ``-1e8``, so they are never sampled and never contribute to
the entropy.

One addition to textbook PPO: a teacher-guided start. The loss also has ``bc_coef x``
the cross-entropy toward a heuristic teacher's action (`training.teacher`) on the same
observations; the coefficient falls linearly from ``bc_coef`` to ``bc_floor`` over the
first ``bc_until`` of training and stays there. From scratch, a near-uniform policy over
65 job slots picks WAIT often enough to idle the cluster for hours; on the 2-core budget
PPO did not get past that (a 7-minute run validated at -21 where SJF scores -4.3). With
the teacher term annealed all the way to zero, PPO then drifted: validation fell from
-4.35 to between -4.4 and -10.9 as the agents unlearned the teacher's holds faster than
they learned anything better. The floor keeps them near a good schedule while PPO
improves on it; the agents always act on their own samples, so the critic learns their
own policy's values. With ``bc_fairness`` the leash also grows with each transition's
fairness setting W (`bc_term`).

Data, stated once (see docs/agents.md):

* training: random windows of the Philly trace submitted in days [0, 30), plus the
  Tiresias 60-job list, on uniform clusters of 8-GPU nodes at random offered load,
  following a curriculum from small clusters and short windows to larger ones;
* validation (choosing the checkpoint to ship): fixed windows from Philly days [30, 40);
* evaluation (`evaluate`, the benchmarks): Philly days [40, 60), never seen in training
  or validation, with deterministic (argmax) decisions.

Speed (``bench/train_speed.py``): the environments and the teacher step in
``env_workers`` processes (`training.vector`; results do not depend on how many), and
every rollout step is one forward pass for all ``num_envs`` environments, in inference
mode. Every minibatch of the update is one forward and one backward pass on
``update_threads`` threads; a GPU phase rides in the minibatch of the job phase before
it (`_minibatches`), whose queue it shows, so the job agent encodes that queue once
for both. `AttentiveNet` cuts the padded queues and node lists of a batch to what its
rows use (most queues fill a few of the window's 64 slots), and the teacher plans each
state once for both phases (`training.teacher`). The losses and masks are unchanged,
and the cut and shared passes agree with the padded ones to float rounding
(``tests/training/test_batched.py``). Validation runs in the workers too.

Seeds: ``seed`` seeds torch (sampling, initialization, minibatches) and each
environment's episode RNG (``seed * 1000 + env index``); on CPU a run is reproducible,
with any number of environment workers. Every ``checkpoint_every``
updates the optimizer, counters and RNG states go to ``out_dir/checkpoint.pt``;
``resume=True`` continues from there (episodes that were in flight restart, from seeds
derived from the update counter, so a resumed run is itself reproducible; what was logged
or saved after the checkpoint is put back first, `_rewind`).

Outputs in ``out_dir``: ``metrics.csv`` (one row per update; ``rollout_s`` and ``update_s``
split its time between collecting and learning), ``summary.json`` (config,
timings, validation history), ``best.pt`` (best validation score), ``final.pt``, and with
``keep_validated`` every validated model in ``validated/``.
"""

from __future__ import annotations

import csv
import json
import math
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attentived.agents.checkpoint import (
    CheckpointError,
    LoadedModel,
    Net,
    load_training,
    save_model,
    save_training,
)
from attentived.agents.learned import POLICIES, load_learned
from attentived.agents.pack import Pack
from attentived.agents.registry import ALL, make_policy, unsupported
from attentived.agents.spec import BadPolicyName
from attentived.atomic import write_file, write_text
from attentived.simulator.engine import JobRecord, Simulation
from attentived.simulator.metrics import summarize
from attentived.simulator.replay import replay
from attentived.simulator.samples import sample_path
from attentived.simulator.trace import Trace, load_trace
from attentived.topology import Topology

from .config import PPOConfig, Stage
from .gym_env import Episode, Mixture, TraceWindows
from .kinds import KINDS, kind_defaults
from .reward import RewardWeights, user_wait_power_mean
from .vector import VectorEnv

# ---- data ----


def _samplers(cfg: PPOConfig, stage: Stage, philly: Trace, tiresias: Trace) -> Mixture:
    """Episodes of one curriculum stage: Philly training windows and the Tiresias list."""
    ph = TraceWindows(philly, days=cfg.train_days, jobs=stage.jobs, nodes=stage.nodes, load=stage.load)
    ti = TraceWindows(tiresias, days=(0.0, 1.0), jobs=(60, 60), nodes=tuple(n for n in stage.nodes if n <= 4) or (2,), load=stage.load)
    return Mixture((ph, ti), (1.0 - cfg.tiresias_share, cfg.tiresias_share))


def load_training_trace(cfg: PPOConfig) -> Trace:
    name = cfg.train_trace
    return load_trace(sample_path(name) if not Path(name).suffix else name)


def validation_episodes(cfg: PPOConfig, trace: Trace) -> list[list[Episode]]:
    """Fixed windows from the validation days, near saturation, where scheduling decisions
    matter most, in groups judged alike: ``val_episodes`` windows of ``val_jobs`` jobs on
    ``val_nodes`` nodes and, when ``val_large`` names (nodes, jobs), one window at that
    scale (drawn after the others, so they stay the same windows with or without it)."""
    rng = np.random.default_rng(12345)

    def windows(nodes: int, jobs: int, count: int) -> list[Episode]:
        sampler = TraceWindows(trace, days=cfg.val_days, jobs=(jobs, jobs), nodes=(nodes,), load=(1.0, 1.3))
        return [sampler(rng) for _ in range(count)]

    groups = [windows(cfg.val_nodes, cfg.val_jobs, cfg.val_episodes)]
    if cfg.val_large[0]:
        groups.append(windows(*cfg.val_large, 1))
    return groups


def score(records: Sequence[JobRecord], num_gpus: int, weights: RewardWeights,
          fairness: float = 1.0) -> tuple[float, dict[str, float]]:
    """An episode's return as the reward defines it at fairness setting W = ``fairness``,
    recomputed from its job records: ``-jct * lower_bound_ratio - fairness_weight * W *
    user_wait_power_mean - comm * comm_cost / ideal GPU-s``."""
    m = summarize(records, num_gpus)
    ideal = sum(r.ideal_duration * r.num_gpus for r in records)
    wait = user_wait_power_mean(records, weights.fairness_power)
    value = (-weights.jct * m["lower_bound_ratio"] - weights.fairness * fairness * wait
             - weights.comm * m["comm_cost"] / ideal)
    return value, m


VALIDATION_FAIRNESS = (0.0, 0.5, 1.0)
"""The settings a preference-conditioned model is validated at (its score is the mean):
the knob must work across its range, and W = 1's fairness term keeps a model that starves
a user from being chosen."""


def validation_settings(cfg: PPOConfig) -> tuple[float | None, ...]:
    """The W each validation episode is replayed at: `VALIDATION_FAIRNESS`, or none for a
    model that does not read W."""
    return VALIDATION_FAIRNESS if cfg.fairness_range is not None else (None,)


def validation_runs(cfg: PPOConfig, groups: Sequence[Sequence[Episode]]) -> list[tuple[Episode, float | None]]:
    """The (episode, W) replays of a validation, group by group: each episode of a group at
    each of `validation_settings`."""
    return [(e, w) for group in groups for w in validation_settings(cfg) for e in group]


def validation_replay(cfg: PPOConfig, model: LoadedModel, episode: Episode, w: float | None) -> Sequence[JobRecord]:
    """One validation episode replayed by ``model`` at setting ``w``, on the rollout's
    thread count (the trainer's own setting, and a worker's too: 2 threads on each of 2
    workers would put 4 on the 2 cores)."""
    policy = POLICIES[cfg.agent](model, 0, cfg.torch_threads, **({} if w is None else {"fairness": w}))
    if cfg.pack:  # the model runs as it was trained, under the packing rule
        policy = Pack(policy, f"{policy.name}:pack=1")
    return Simulation(episode.jobs, episode.topology, policy).run().records


def validation_score(records: Sequence[JobRecord], episode: Episode, weights: RewardWeights, w: float | None) -> float:
    """A validation replay's score: its return under ``weights`` at its setting (W = 1 for a
    model that does not read W)."""
    return score(records, episode.topology.num_gpus, weights, 1.0 if w is None else w)[0]


def validation_mean(scores: Iterable[float], cfg: PPOConfig, groups: Sequence[Sequence[Episode]]) -> float:
    """The mean over the validation groups of the mean of a group's scores (``scores`` in
    `validation_runs` order): a scale with one window weighs as much as one with three."""
    per_episode = len(validation_settings(cfg))
    it = iter(scores)
    return float(np.mean([np.mean([next(it) for _ in range(per_episode * len(group))]) for group in groups]))


def _validate(cfg: PPOConfig, model: LoadedModel, groups: Sequence[Sequence[Episode]], envs: VectorEnv) -> float:
    """``model``'s validation score (`validation_runs`, `validation_mean`), its replays
    spread over the environment workers (idle between rollouts)."""
    runs = [(cfg, model, e, w) for e, w in validation_runs(cfg, groups)]
    return validation_mean(envs.map(_validation_score, runs), cfg, groups)


def _validation_score(run: tuple[PPOConfig, LoadedModel, Episode, float | None]) -> float:
    """One validation episode's score (a function of its own: a worker process runs it)."""
    cfg, model, episode, w = run
    return validation_score(validation_replay(cfg, model, episode, w), episode, cfg.reward, w)


# ---- tensors ----


def bc_term(nll: torch.Tensor, coef: float, per_w: float, fairness: torch.Tensor | None,
            rows: torch.Tensor) -> torch.Tensor:
    """The teacher term of a minibatch: ``coef`` x the mean cross-entropy toward the
    teacher (``nll``, one per transition of ``rows``), plus ``per_w`` x its mean weighted
    by each transition's W (`PPOConfig.bc_fairness`), so the leash grows with the fairness
    the episode asks for. ``per_w = 0`` adds exactly nothing."""
    if not per_w:
        return coef * nll.mean()
    assert fairness is not None, "bc_fairness needs the fairness setting W in the observations"
    return coef * nll.mean() + per_w * (fairness[rows].view(-1) * nll).mean()


def _to_torch(obs: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v, device=device) for k, v in obs.items()}


# ---- training ----


def provenance(command: str | None) -> dict[str, Any]:
    """What a run was started by: the code commit, whether the working tree had changes
    then (a model trained on a dirty tree does not come back from its commit), and the
    command line. `bench/ship_model.py` copies them into a shipped model's record, so the
    record names the code the model was trained at, not the code it was shipped at."""
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):  # no git, or not a clone
            return None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status), "command": command,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


RESUMABLE = ("total_steps", "time_budget_s", "out_dir", "train_trace", "env_workers", "torch_threads", "update_threads",
             "device")
"""What a ``--resume`` may set anew: how long and where it runs, not what it learns (a run
is the same with any number of workers or threads; a longer one keeps its schedules; a
trace file may have moved)."""


def _changed_settings(started: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The settings, other than `RESUMABLE`, in which ``now`` differs from the run's start
    (both `PPOConfig.as_dict`); a key the run's version did not have is taken as unchanged."""
    return [k for k in now if k not in RESUMABLE and k in started
            and json.dumps(started[k], sort_keys=True) != json.dumps(now[k], sort_keys=True)]


RUN_FILES = ("checkpoint.pt", "best.pt", "final.pt")
"""What a run leaves in its out_dir that a later run there would take for its own."""


def train(cfg: PPOConfig, progress: bool = True, resume: bool = False, command: str | None = None) -> Path:
    """Train, validate and save; returns the path of the best model (``out_dir/best.pt``).
    ``command``: the command line that started it, kept in ``provenance.json`` with the
    code commit (`provenance`)."""
    out = Path(cfg.out_dir)
    checkpoint = out / "checkpoint.pt"
    if resume and not checkpoint.exists():  # before anything is created
        raise CheckpointError(f"{checkpoint}: no checkpoint to resume from (run without --resume to start afresh)")
    earlier = [name for name in RUN_FILES if (out / name).exists()]
    if not resume and earlier:  # a fresh run would report, or resume, the other run's models
        raise CheckpointError(f"{out}: holds a run already ({', '.join(earlier)}); --resume continues it, "
                              "or train into another out_dir")
    out.mkdir(parents=True, exist_ok=True)
    record = out / "provenance.json"
    if resume and record.exists():
        doc = json.loads(record.read_text())
        doc.setdefault("resumed", []).append(provenance(command))
    else:
        doc = provenance(command)
    write_text(record, json.dumps(doc, indent=2) + "\n")
    torch.set_num_threads(cfg.torch_threads)
    device = torch.device("cuda" if cfg.device == "auto" and torch.cuda.is_available() else ("cpu" if cfg.device == "auto" else cfg.device))
    torch.manual_seed(cfg.seed)
    philly, tiresias = load_training_trace(cfg), load_trace(sample_path("tiresias-60"))
    val_eps = validation_episodes(cfg, philly)

    kind = KINDS[cfg.agent]
    net = kind.make_net(cfg).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate, eps=1e-5)
    start_update, global_step, best, history, wall_before = 1, 0, -math.inf, [], 0.0
    best_model: dict[str, Any] | None = None  # the best weights and meta, kept in each checkpoint
    horizon = cfg.total_steps  # what the schedules (learning rate, teacher, curriculum) span
    if resume:
        model, opt_state, prog = load_training(checkpoint)
        if (model.agent, model.window, model.max_candidates) != (cfg.agent, cfg.window, cfg.max_candidates):
            raise ValueError(f"{checkpoint}: agent/window/candidates differ from the config; cannot resume")
        changed = _changed_settings(model.meta.get("config", {}), cfg.as_dict())
        if changed:
            raise CheckpointError(f"{checkpoint}: the run was started with other settings ({', '.join(changed)}); a "
                                  f"resume continues it as it was (only {', '.join(RESUMABLE)} may change)")
        net.load_state_dict(model.net.state_dict())
        optimizer.load_state_dict(opt_state)
        start_update, global_step = prog["update"] + 1, prog["global_step"]
        best, history, wall_before = prog["best"], list(prog["history"]), prog["wall_s"]
        torch.set_rng_state(prog["torch_rng"])
        if prog.get("cuda_rng") is not None and device.type == "cuda":  # dropout and sampling on the GPU draw from it
            torch.cuda.set_rng_state(prog["cuda_rng"], device)  # the training device's only: others may be hidden now
        # The schedules keep the horizon the run started with: extending a run (a larger
        # total_steps) continues them, at their final values beyond it, rather than
        # stretching them (which would raise the learning rate and the teacher's weight
        # again mid-run).
        horizon = int(prog.get("horizon", model.meta.get("config", {}).get("total_steps", cfg.total_steps)))
        best_model = prog.get("best_model")
        _rewind(out, prog, model.net, cfg)  # model.net, not a new one: building a net would move the restored RNG

    metrics_file = out / "metrics.csv"
    writer_file = metrics_file.open("a" if resume and metrics_file.exists() else "w", newline="")
    writer: csv.DictWriter | None = None
    bar = _Progress(cfg.num_updates, start_update - 1, enabled=progress)
    meta = {"config": cfg.as_dict()}
    update = start_update - 1
    stage = cfg.stage(global_step, horizon)
    envs = VectorEnv(cfg, _samplers(cfg, stage, philly, tiresias), cfg.env_workers)  # stops its workers if it fails
    try:
        reset_seed = cfg.seed * 1000 + (start_update - 1) * cfg.num_envs  # fresh and reproducible after a resume
        next_obs, next_teacher = envs.reset([reset_seed + i for i in range(cfg.num_envs)])
        next_done = np.zeros(cfg.num_envs, bool)

        # Rollout storage: [num_steps, num_envs, ...]
        obs_buf = {k: np.zeros((cfg.num_steps,) + v.shape, v.dtype) for k, v in next_obs.items()}
        actions = np.zeros((cfg.num_steps, cfg.num_envs), np.int64)
        teacher = np.zeros((cfg.num_steps, cfg.num_envs), np.int64)
        logprobs = np.zeros((cfg.num_steps, cfg.num_envs), np.float32)
        rewards = np.zeros((cfg.num_steps, cfg.num_envs), np.float32)
        dones = np.zeros((cfg.num_steps, cfg.num_envs), np.float32)
        values = np.zeros((cfg.num_steps, cfg.num_envs), np.float32)
        ep_return = np.zeros(cfg.num_envs)

        t0 = time.perf_counter()
        for update in range(start_update, cfg.num_updates + 1):
            optimizer.param_groups[0]["lr"] = cfg.learning_rate * cfg.lr_factor(update, horizon)
            new_stage = cfg.stage(global_step, horizon)
            if new_stage != stage:  # takes effect as each environment starts its next episode
                stage = new_stage
                envs.set_episodes(_samplers(cfg, stage, philly, tiresias))

            finished: list[dict[str, float]] = []
            rollout_t0 = time.perf_counter()
            net.eval()
            for step in range(cfg.num_steps):
                global_step += cfg.num_envs
                for k in obs_buf:
                    obs_buf[k][step] = next_obs[k]
                dones[step] = next_done
                teacher[step] = next_teacher  # the teacher's action for this observation, from its environment
                with torch.inference_mode():  # one forward for all environments, without autograd bookkeeping
                    logits, value = net(_to_torch(next_obs, device))
                    dist = torch.distributions.Categorical(logits=logits)
                    action = dist.sample()
                actions[step] = action.cpu().numpy()
                logprobs[step] = dist.log_prob(action).cpu().numpy()
                values[step] = value.cpu().numpy()
                stepped = envs.step(actions[step])  # an ended episode's environment is reset: next_obs is its first
                rewards[step] = stepped.rewards
                ep_return += stepped.rewards
                for i, info in stepped.ended:
                    finished.append({"return": ep_return[i], **_episode_metrics(info)})
                    ep_return[i] = 0.0
                next_obs, next_teacher, next_done = stepped.obs, stepped.teacher, stepped.dones

            # Generalized advantage estimation, bootstrapped from the value of the next state.
            with torch.inference_mode():
                _, next_value = net(_to_torch(next_obs, device))
            next_value = next_value.cpu().numpy()
            advantages = np.zeros_like(rewards)
            last = np.zeros(cfg.num_envs, np.float32)
            for t in reversed(range(cfg.num_steps)):
                if t == cfg.num_steps - 1:
                    nonterminal, nv = 1.0 - next_done.astype(np.float32), next_value
                else:
                    nonterminal, nv = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + cfg.gamma * nv * nonterminal - values[t]
                last = delta + cfg.gamma * cfg.gae_lambda * nonterminal * last
                advantages[t] = last
            returns = advantages + values

            update_t0 = time.perf_counter()
            # Flatten the batch and optimize policy and value.
            b_obs = _to_torch({k: v.reshape((-1,) + v.shape[2:]) for k, v in obs_buf.items()}, device)
            b_actions = torch.as_tensor(actions.reshape(-1), device=device)
            b_logprobs = torch.as_tensor(logprobs.reshape(-1), device=device)
            b_adv = torch.as_tensor(advantages.reshape(-1), device=device)
            b_returns = torch.as_tensor(returns.reshape(-1), device=device)
            b_values = torch.as_tensor(values.reshape(-1), device=device)
            b_teacher = torch.as_tensor(teacher.reshape(-1), device=device)
            bc_coef = cfg.bc_weight(global_step, horizon)
            net.train()
            torch.set_num_threads(cfg.update_threads)
            clipfracs, approx_kl = [], torch.zeros(())
            phases = obs_buf["phase"] if "phase" in obs_buf else np.zeros_like(actions)
            for _epoch in range(cfg.update_epochs):
                for mb, queue_of in _minibatches(phases, cfg.num_minibatches, device):
                    shared = {"queue_of": queue_of} if kind.shares_queues else {}
                    logits, new_value = net({k: v[mb] for k, v in b_obs.items()}, **shared)
                    dist = torch.distributions.Categorical(logits=logits)
                    new_logprob = dist.log_prob(b_actions[mb])
                    entropy = dist.entropy()
                    logratio = new_logprob - b_logprobs[mb]
                    ratio = logratio.exp()
                    with torch.no_grad():
                        approx_kl = ((ratio - 1) - logratio).mean()
                        clipfracs.append(((ratio - 1.0).abs() > cfg.clip_coef).float().mean().item())
                    adv = b_adv[mb]
                    spread = adv.std() if adv.numel() > 1 else 1.0  # one row has none (std NaN): centred only
                    adv = (adv - adv.mean()) / (spread + 1e-8)
                    pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
                    if cfg.clip_vloss:
                        v_clipped = b_values[mb] + (new_value - b_values[mb]).clamp(-cfg.clip_coef, cfg.clip_coef)
                        v_loss = 0.5 * torch.max((new_value - b_returns[mb]) ** 2, (v_clipped - b_returns[mb]) ** 2).mean()
                    else:
                        v_loss = 0.5 * ((new_value - b_returns[mb]) ** 2).mean()
                    bc_nll = -dist.log_prob(b_teacher[mb])
                    bc_loss = bc_nll.mean()
                    loss = (pg_loss - cfg.ent_coef * entropy.mean() + cfg.vf_coef * v_loss
                            + bc_term(bc_nll, bc_coef, cfg.bc_fairness, b_obs.get("fairness"), mb))
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(net.parameters(), cfg.max_grad_norm)
                    optimizer.step()
                if cfg.target_kl is not None and approx_kl > cfg.target_kl:
                    break

            torch.set_num_threads(cfg.torch_threads)
            update_s = time.perf_counter() - update_t0
            var_y = float(np.var(returns))
            row: dict[str, Any] = {
                "update": update,
                "global_step": global_step,
                "wall_s": round(wall_before + time.perf_counter() - t0, 1),
                "rollout_s": round(update_t0 - rollout_t0, 3),  # the environments, the teacher, the rollout's forward passes, GAE
                "update_s": round(update_s, 3),  # the PPO epochs: forward and backward passes
                "stage": cfg.curriculum.index(stage),
                "lr": optimizer.param_groups[0]["lr"],
                "episodes": len(finished),
                "episode_return": _mean(f["return"] for f in finished),
                "lower_bound_ratio": _mean(f["lower_bound_ratio"] for f in finished),
                "jain_fairness": _mean(f["jain_fairness"] for f in finished),
                "mean_reward": float(rewards.mean()),
                "policy_loss": pg_loss.item(),
                "value_loss": v_loss.item(),
                "entropy": entropy.mean().item(),
                "approx_kl": approx_kl.item(),
                "bc_coef": bc_coef,
                "bc_loss": bc_loss.item(),
                "teacher_agreement": float((actions == teacher).mean()),
                "clipfrac": float(np.mean(clipfracs)),
                "explained_variance": float("nan") if var_y == 0 else 1 - float(np.var(returns - values)) / var_y,
                "val_score": "",
            }
            if update % cfg.val_every == 0 or update == cfg.num_updates:
                model = LoadedModel(net.cpu().eval(), cfg.window, cfg.max_candidates, {}, cfg.agent)
                row["val_score"] = _validate(cfg, model, val_eps, envs)
                net.to(device)
                history.append({"update": update, "global_step": global_step, "score": row["val_score"]})
                validated = {**meta, "update": update, "global_step": global_step, "val_score": row["val_score"]}
                if cfg.keep_validated:
                    save_model(out / "validated" / f"update-{update:04d}.pt", net, window=cfg.window,
                               max_candidates=cfg.max_candidates, meta=validated)
                if row["val_score"] > best:
                    best = row["val_score"]
                    best_model = {"state_dict": {k: v.detach().cpu().clone() for k, v in net.state_dict().items()},
                                  "meta": validated}
                    save_model(out / "best.pt", net, window=cfg.window, max_candidates=cfg.max_candidates, meta=validated)
            if writer is None:
                # a resumed run keeps its file's columns (one started by an older version
                # may lack some), so every row lines up with the header
                writer = csv.DictWriter(writer_file, fieldnames=_header(metrics_file) or list(row), extrasaction="ignore")
                if writer_file.tell() == 0:
                    writer.writeheader()
            writer.writerow(row)
            writer_file.flush()
            bar.update(row)
            elapsed = time.perf_counter() - t0
            wall = wall_before + elapsed
            # the budget is this invocation's: a resumed run gets it afresh (the run's
            # own wall time, across resumes, is what metrics.csv and the summary record)
            out_of_time = cfg.time_budget_s is not None and elapsed >= cfg.time_budget_s
            if update % cfg.checkpoint_every == 0 or update == cfg.num_updates or out_of_time:
                save_training(checkpoint, net, optimizer, window=cfg.window, max_candidates=cfg.max_candidates, meta=meta,
                              progress={"update": update, "global_step": global_step, "horizon": horizon, "best": best,
                                        "history": history, **({"best_model": best_model} if best_model else {}),
                                        "wall_s": wall, "torch_rng": torch.get_rng_state(),
                                        "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None})
            if out_of_time:
                break
    finally:
        envs.close()
        bar.close()
        writer_file.close()

    wall = wall_before + time.perf_counter() - t0
    save_model(out / "final.pt", net, window=cfg.window, max_candidates=cfg.max_candidates,
               meta={**meta, "update": update, "global_step": global_step})
    if not (out / "best.pt").exists():
        (out / "best.pt").write_bytes((out / "final.pt").read_bytes())
    summary = {"config": cfg.as_dict(), "updates": update, "global_step": global_step, "wall_s": round(wall, 1),
               "best_val_score": best if math.isfinite(best) else None, "validation": history, "device": str(device)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return out / "best.pt"


def _header(metrics_file: Path) -> list[str]:
    """The columns of an existing metrics.csv (none for a new or empty one)."""
    with metrics_file.open(newline="") as f:
        return next(csv.reader(f), [])


def _rewind(out: Path, progress: dict[str, Any], net: Net, cfg: PPOConfig) -> None:
    """Put a run's outputs back to its checkpoint (``progress``) before resuming: a run
    stopped between checkpoints has logged updates, and may have saved a best model, that
    the resumed run redoes differently (its episodes restart). Those rows are dropped, so
    metrics.csv holds each update once, and ``best.pt`` becomes the checkpoint's best
    again (none validated yet: no ``best.pt``), so the best model is one the resumed run
    reached; models kept past the checkpoint (``keep_validated``) are removed. Checkpoints
    written before they held the best model leave ``best.pt`` as it is. ``net`` is
    overwritten (with the best weights)."""
    metrics_file = out / "metrics.csv"
    if metrics_file.exists() and metrics_file.stat().st_size:
        with metrics_file.open(newline="") as f:
            reader = csv.DictReader(f)
            kept = [r for r in reader if int(r["update"]) <= progress["update"]]

        def write(tmp: Path) -> None:
            with tmp.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(reader.fieldnames or ()))
                writer.writeheader()
                writer.writerows(kept)

        write_file(metrics_file, write)
    for model in (out / "validated").glob("update-*.pt"):
        if int(model.stem.removeprefix("update-")) > progress["update"]:
            model.unlink()
    best_model = progress.get("best_model")
    if progress["best"] == -math.inf:
        (out / "best.pt").unlink(missing_ok=True)
    if best_model is None:
        return
    net.load_state_dict(best_model["state_dict"])
    save_model(out / "best.pt", net, window=cfg.window, max_candidates=cfg.max_candidates, meta=best_model["meta"])


def _minibatches(phase: np.ndarray, count: int, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A rollout's rows (``phase`` is [steps, envs]; rows are its flattened positions),
    shuffled into ``count`` minibatches of near-equal size, each with its ``queue_of``
    (`AttentiveNet.forward`). A GPU phase stays in the minibatch of the job phase right
    before it, which shows the same queue, so the job agent encodes that queue once for
    both: the pairs, not the rows, are shuffled (by torch's generator, as the seed says)."""
    envs = phase.shape[1]
    flat = phase.reshape(-1)
    n = flat.size
    follows = np.flatnonzero(flat[envs:] != 0) + envs  # a GPU phase whose job phase is in this rollout
    follows = follows[flat[follows - envs] == 0]
    follower = np.full(n, -1)
    follower[follows - envs] = follows
    lead = np.ones(n, bool)
    lead[follows] = False
    units = np.flatnonzero(lead)[torch.randperm(int(lead.sum())).numpy()]
    paired = follower[units] >= 0
    first = np.cumsum(1 + paired) - (1 + paired)  # where each pair starts in the shuffled rows
    rows = np.empty(n, np.int64)
    rows[first] = units
    rows[first[paired] + 1] = follower[units][paired]
    queue_of = np.arange(n)
    queue_of[first[paired] + 1] = first[paired]
    at = np.searchsorted(first, np.arange(1, count) * n / count)  # the first pair at or past each equal share
    cuts = [0, *np.append(first, n)[at].tolist(), n]
    return [(torch.as_tensor(rows[a:b], device=device), torch.as_tensor(queue_of[a:b] - a, device=device))
            for a, b in zip(cuts, cuts[1:]) if b > a]


def _episode_metrics(info: dict[str, Any]) -> dict[str, float]:
    m = info["metrics"]
    return {"lower_bound_ratio": m["lower_bound_ratio"], "jain_fairness": m["jain_fairness"], "avg_jct": m["avg_jct"]}


def _mean(xs) -> float | str:
    xs = list(xs)
    return float(np.mean(xs)) if xs else ""


class _Progress:
    """A rich progress bar showing the running episode return and metrics (or nothing)."""

    def __init__(self, total: int, done: int, enabled: bool) -> None:
        self._bar = None
        if not enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("[bold]PPO"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"),
        )
        self._task = self._bar.add_task("train", total=total, completed=done, status="")
        self._bar.start()
        self._ret: float | None = None

    def update(self, row: dict[str, Any]) -> None:
        if self._bar is None:
            return
        if row["episode_return"] != "":  # exponential running mean over finished episodes
            r = float(row["episode_return"])
            self._ret = r if self._ret is None else 0.9 * self._ret + 0.1 * r
        parts = [f"stage {row['stage']}"]
        if self._ret is not None:
            parts.append(f"return {self._ret:.3f}")
        if row["lower_bound_ratio"] != "":
            parts.append(f"LBR {row['lower_bound_ratio']:.2f} Jain {row['jain_fairness']:.2f}")
        if row["val_score"] != "":
            parts.append(f"val {row['val_score']:.3f}")
        self._bar.update(self._task, completed=row["update"], status="  ".join(parts))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


# ---- evaluation ----


@dataclass(frozen=True)
class Evaluation:
    """Mean metrics over seeds for the attentive policy and each baseline."""

    trace: str
    cluster: dict[str, int]
    seeds: tuple[int, ...]
    policies: dict[str, dict[str, float]]

    def as_json(self) -> dict[str, Any]:
        return {"trace": self.trace, "cluster": self.cluster, "seeds": list(self.seeds), "policies": self.policies}


def evaluate(
    model_path: str | Path | None,
    trace: Trace,
    topology: Topology,
    seeds: Sequence[int] = (0,),
    baselines: Sequence[str] = ALL,
) -> Evaluation:
    """Replay ``trace`` on ``topology`` under the attentive policy (deterministic, the
    model at ``model_path`` or the shipped one) and the ``baselines``, once per seed (the
    seed draws time limits and models), and average every metric over seeds. Use windows
    the model was not trained on (Philly days [40, 60) for the shipped model)."""
    runs: dict[str, list[dict[str, float]]] = {}
    for seed in seeds:
        policies = [load_learned("attentive" if model_path is None else None, model_path, seed=seed)]
        if policies[0].name in baselines:
            raise BadPolicyName(f"policy {policies[0].name} given twice: the model runs under that name; "
                                f"leave it out of the baselines")
        if (reason := unsupported(policies[0], topology)) is not None:
            raise BadPolicyName(f"policy {policies[0].name}: {reason}")
        policies += [make_policy(name, seed=seed) for name in baselines]
        result = replay(trace, topology, policies, seed=seed)
        for name, run in result.runs.items():
            runs.setdefault(name, []).append(run.summary)
    means = {name: {k: _seed_mean([s[k] for s in summaries]) for k in summaries[0]} for name, summaries in runs.items()}
    return Evaluation(trace.name, {"nodes": len(topology.nodes), "gpus": topology.num_gpus}, tuple(seeds), means)


def _seed_mean(values: list) -> float:
    """The mean over seeds; a count every seed agrees on (jobs, users) stays a whole
    number, as `replay --json` writes it."""
    if all(isinstance(v, int) for v in values) and len(set(values)) == 1:
        return values[0]
    return float(np.mean(values))


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m attentived.training.ppo``: train with the defaults, overriding a few."""
    import argparse
    from dataclasses import replace

    ap = argparse.ArgumentParser(description="Train the attentive agents or a DRL baseline with PPO (see docs/agents.md).")
    ap.add_argument("--agent", default="attentive", choices=list(KINDS))
    ap.add_argument("--out-dir", default=None, help="default runs/AGENT")
    ap.add_argument("--seed", type=int, default=PPOConfig.seed)
    ap.add_argument("--total-steps", type=int, default=PPOConfig.total_steps)
    ap.add_argument("--time-budget", type=float, default=None, help="seconds of wall time before stopping")
    ap.add_argument("--resume", action="store_true", help="continue from OUT_DIR/checkpoint.pt")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    cfg = replace(PPOConfig(), **kind_defaults(args.agent))
    cfg = replace(cfg, out_dir=args.out_dir or cfg.out_dir, seed=args.seed, total_steps=args.total_steps,
                  time_budget_s=args.time_budget)
    command = shlex.join(["python", "-m", "attentived.training.ppo", *(sys.argv[1:] if argv is None else argv)])
    print(train(cfg, progress=not args.no_progress, resume=args.resume, command=command))


if __name__ == "__main__":
    main()

