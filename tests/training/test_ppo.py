from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from attentived.agents.checkpoint import CheckpointError, LoadedModel, load_model
from attentived.agents.order import estimated_runtime
from attentived.agents.registry import make_policy
from attentived.simulator.engine import Simulation, prepare_jobs
from attentived.simulator.metrics import summarize
from attentived.simulator.trace import load_trace
from attentived.topology import uniform
from attentived.training.config import PPOConfig, Stage
from attentived.training.gym_env import Episode, FixedEpisode, SchedulingEnv
from attentived.training.ppo import _rewind, bc_term, evaluate, score, train, validation_episodes
from attentived.training.reward import RewardWeights
from attentived.training.teacher import teacher_action


def write_toy_trace(path: Path, n: int = 400, seed: int = 0) -> Path:
    """A generic-format trace: comm-heavy multi-GPU jobs among small ones, three users."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lines = ["job_id,submit_time,user,num_gpus,duration,model"]
    t = 0.0
    for i in range(n):
        t += float(rng.exponential(120.0))
        gpus = int(rng.choice([1, 1, 2, 4, 8]))
        model = str(rng.choice(["bert", "yolov3", "deepspeech2"])) if gpus > 1 else "cifar10"
        lines.append(f"t{i},{t:.0f},u{i % 3},{gpus},{float(rng.integers(300, 3600))},{model}")
    path.write_text("\n".join(lines) + "\n")
    return path


def tiny_config(tmp_path: Path, **kw) -> PPOConfig:
    trace = write_toy_trace(tmp_path / "toy.csv")
    base: dict[str, Any] = dict(
        seed=3, out_dir=str(tmp_path / "run"), total_steps=2 * 2 * 16, num_envs=2, num_steps=16, window=8,
        max_nodes=2, num_minibatches=2, update_epochs=2, train_trace=str(trace), train_days=(0.0, 0.3),
        tiresias_share=0.0, curriculum=(Stage(0.0, nodes=(1, 2), jobs=(20, 30), load=(1.0, 1.2)),),
        val_days=(0.3, 1.0), val_episodes=1, val_jobs=20, val_nodes=2, val_every=1, checkpoint_every=1,
        net=PPOConfig().net.__class__(d_model=16, heads=2, layers=1), env_workers=0,
    )
    base.update(kw)
    return PPOConfig(**base)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


SPLIT = ("rollout_s", "update_s")
"""metrics.csv's split of an update's time between the rollout and the update."""


def _timeless(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """metrics.csv rows without the times, the columns two identical runs differ in."""
    return [{k: v for k, v in r.items() if k not in ("wall_s", *SPLIT)} for r in rows]


def _same_weights(a: LoadedModel, b: LoadedModel) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.net.state_dict().values(), b.net.state_dict().values()))


def test_config_derived_sizes_and_curriculum():
    cfg = PPOConfig(total_steps=100_000, num_envs=8, num_steps=128, num_minibatches=4)
    assert cfg.batch_size == 1024 and cfg.minibatch_size == 256 and cfg.num_updates == 97
    assert cfg.stage(0).nodes == (2, 4) and cfg.stage(40_000).nodes == (4, 8) and cfg.stage(99_999).nodes == (8, 16, 32)
    assert cfg.as_dict()["reward"] == {"jct": 1.0, "fairness": 2.0, "comm": 2.0, "fairness_power": 2.0}
    assert cfg.train_days[1] <= cfg.val_days[0] and cfg.val_days[1] <= 40.0  # evaluation days stay unseen


def test_teacher_picks_the_smallest_gpu_time_then_consolidates(tmp_path):
    cfg = tiny_config(tmp_path)
    trace = load_trace(cfg.train_trace)
    ep = validation_episodes(cfg, trace)[0][0]
    env = SchedulingEnv(FixedEpisode(ep), window=8, max_nodes=2)
    env.reset(seed=0)
    for _ in range(60):
        a = teacher_action(env)
        assert env.action_masks()[a]
        if env.phase == 0 and a != env.wait_action:
            view, state = env.job_view, env.state
            chosen = state.pending[int(view.index[a])]
            for s in np.flatnonzero(view.feasible):
                other = state.pending[int(view.index[s])]
                assert chosen.num_gpus * estimated_runtime(chosen, state) <= other.num_gpus * estimated_runtime(other, state)
        elif env.phase == 1:
            assert "consolidate" in env.placements[a].sources
        if env.step(a)[2]:
            break


def test_score_is_the_reward_definition(tmp_path):
    jobs = prepare_jobs(load_trace(write_toy_trace(tmp_path / "toy.csv", n=20)).jobs, seed=0)
    records = Simulation(jobs, uniform(1, 8), make_policy("fifo")).run().records
    value, m = score(records, 8, RewardWeights(jct=2.0, fairness=0.0, comm=0.0))
    assert m == summarize(records, 8) and value == pytest.approx(-2.0 * m["lower_bound_ratio"])


def test_training_writes_models_logs_and_is_reproducible(tmp_path):
    a = tiny_config(tmp_path / "a")
    best = train(a, progress=False, command="attentived train --steps 10")
    out = Path(a.out_dir)
    for name in ("best.pt", "final.pt", "checkpoint.pt", "metrics.csv", "summary.json"):
        assert (out / name).exists(), name
    assert best == out / "best.pt"
    started = json.loads((out / "provenance.json").read_text())  # what bench/ship_model.py records
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parents[2], capture_output=True, text=True)
    assert started["command"] == "attentived train --steps 10" and isinstance(started["dirty"], bool)
    assert started["commit"] == head.stdout.strip()
    rows = _rows(out / "metrics.csv")
    assert [r["update"] for r in rows] == ["1", "2"] and all(r["val_score"] for r in rows)
    b = tiny_config(tmp_path / "b")
    train(b, progress=False)
    again = _rows(Path(b.out_dir) / "metrics.csv")
    assert _timeless(rows) == _timeless(again)


def test_a_minibatch_of_one_row_leaves_the_weights_finite(tmp_path):
    """Advantages are normalised per minibatch; one row has no spread (its std is NaN),
    which must not turn every weight into NaN."""
    for agent in ("deeprm", "proximity-drl"):  # rows of 1 and 2, and of 1 only (no GPU phase)
        cfg = tiny_config(tmp_path / agent, agent=agent, total_steps=3, num_envs=1, num_steps=3, num_minibatches=3,
                          update_epochs=1)
        train(cfg, progress=False)
        model = load_model(Path(cfg.out_dir) / "final.pt")
        assert all(torch.isfinite(v).all() for v in model.net.state_dict().values()), agent


def test_the_teacher_term_weighs_each_transition_by_its_w():
    nll = torch.tensor([1.0, 2.0, 4.0, 8.0])
    w = torch.tensor([[0.0], [1.0], [0.5], [0.25]])
    rows = torch.tensor([0, 1, 3])
    assert bc_term(nll[rows], 0.2, 0.0, w, rows).item() == pytest.approx(0.2 * 11 / 3)
    # the W = 0 transition keeps the base weight, the W = 1 one gains the whole bc_fairness
    assert bc_term(nll[rows], 0.2, 1.8, w, rows).item() == pytest.approx(0.2 * 11 / 3 + 1.8 * (0 + 2 + 2) / 3)


def test_a_leash_growing_with_w_changes_training_and_stays_reproducible(tmp_path):
    from attentived.training.kinds import kind_defaults

    conditioned = {k: v for k, v in kind_defaults("attentive").items() if k in ("fairness_range", "urgency_input")}
    runs = [tiny_config(tmp_path / name, **conditioned, bc_fairness=leash)
            for name, leash in (("a", 2.0), ("b", 2.0), ("plain", 0.0))]
    for cfg in runs:
        train(cfg, progress=False)
    a, b, plain = (_timeless(_rows(Path(cfg.out_dir) / "metrics.csv")) for cfg in runs)
    assert a == b
    assert a != plain
    assert not _same_weights(*(load_model(Path(cfg.out_dir) / "final.pt") for cfg in (runs[0], runs[2])))


def test_resume_continues_from_the_checkpoint(tmp_path):
    cfg = tiny_config(tmp_path, time_budget_s=0.0)  # stops (and checkpoints) after one update
    train(cfg, progress=False)
    assert [r["update"] for r in _rows(Path(cfg.out_dir) / "metrics.csv")] == ["1"]
    with pytest.raises(CheckpointError, match=r"started with other settings \(seed, learning_rate\)"):
        train(tiny_config(tmp_path, learning_rate=1e-3, seed=9), progress=False, resume=True)  # what it learns
    train(tiny_config(tmp_path), progress=False, resume=True)
    assert [r["update"] for r in _rows(Path(cfg.out_dir) / "metrics.csv")] == ["1", "2"]


def test_each_row_splits_its_time_between_the_rollout_and_the_update(tmp_path):
    cfg = tiny_config(tmp_path, total_steps=2 * tiny_config(tmp_path).batch_size)
    train(cfg, progress=False)
    rows = _rows(Path(cfg.out_dir) / "metrics.csv")
    assert len(rows) == 2
    for r in rows:
        rollout, update = float(r["rollout_s"]), float(r["update_s"])
        assert rollout > 0 and update > 0
    # the second row's wall time covers its rollout and update (and the first row's)
    assert float(rows[1]["wall_s"]) >= float(rows[1]["rollout_s"]) + float(rows[1]["update_s"]) - 0.1


def test_a_resumed_run_keeps_the_columns_its_metrics_file_has(tmp_path):
    """A run started by a version without some column (here the time split) resumes with
    its file's header, so every row lines up with it."""
    cfg = tiny_config(tmp_path, time_budget_s=0.0)
    train(cfg, progress=False)
    metrics = Path(cfg.out_dir) / "metrics.csv"
    old = [{k: v for k, v in r.items() if k not in SPLIT} for r in _rows(metrics)]
    with metrics.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(old[0]))
        writer.writeheader()
        writer.writerows(old)
    train(tiny_config(tmp_path), progress=False, resume=True)
    with metrics.open(newline="") as f:
        lines = list(csv.reader(f))
    assert lines[0] == list(old[0]) and [len(line) for line in lines[1:]] == [len(old[0])] * 2
    assert [r["update"] for r in _rows(metrics)] == ["1", "2"]


def test_a_resumed_run_gets_its_time_budget_afresh(tmp_path):
    """A run stopped by its budget, resumed with the same budget, goes on: the budget is
    the command's, not the run's (which once made each resume stop after one update)."""
    cfg = tiny_config(tmp_path, total_steps=3 * tiny_config(tmp_path).batch_size, time_budget_s=0.0)
    train(cfg, progress=False)
    checkpoint = Path(cfg.out_dir) / "checkpoint.pt"
    payload = torch.load(checkpoint, weights_only=False)
    payload["progress"]["wall_s"] = 1e9  # the run so far took far longer than the budget below
    torch.save(payload, checkpoint)
    train(replace(cfg, time_budget_s=1e6), progress=False, resume=True)
    rows = _rows(Path(cfg.out_dir) / "metrics.csv")
    assert [r["update"] for r in rows] == ["1", "2", "3"]
    assert float(rows[-1]["wall_s"]) >= 1e9  # the run's own wall time still adds up across resumes


def test_resume_after_a_stop_between_checkpoints_redoes_the_updates_since(tmp_path):
    """A run killed after update 2 whose last checkpoint is update 1: the resumed run logs
    update 2 once and keeps a best model it reached itself, exactly as a resume from that
    checkpoint does when nothing ran past it."""
    killed = tiny_config(tmp_path / "killed", keep_validated=True)
    clean = tiny_config(tmp_path / "clean", time_budget_s=0.0, keep_validated=True)
    train(killed, progress=False)  # updates 1 and 2, then ...
    train(clean, progress=False)  # ... the same update 1, checkpointed there
    shutil.copy(Path(clean.out_dir) / "checkpoint.pt", Path(killed.out_dir) / "checkpoint.pt")
    for cfg in (killed, clean):
        train(replace(cfg, time_budget_s=None), progress=False, resume=True)
    rows = {cfg.out_dir: _rows(Path(cfg.out_dir) / "metrics.csv") for cfg in (killed, clean)}
    assert [r["update"] for r in rows[killed.out_dir]] == ["1", "2"]
    assert _timeless(rows[killed.out_dir]) == _timeless(rows[clean.out_dir])
    best = [load_model(Path(cfg.out_dir) / "best.pt") for cfg in (killed, clean)]
    assert best[0].meta["update"] == best[1].meta["update"]
    assert _same_weights(*best)
    kept = [sorted(p.name for p in (Path(cfg.out_dir) / "validated").iterdir()) for cfg in (killed, clean)]
    assert kept[0] == kept[1] == ["update-0001.pt", "update-0002.pt"]


def test_rewind_puts_a_run_back_to_its_checkpoint(tmp_path):
    """What `--resume` undoes first, case by case, on a real run's files: rows, kept models
    and the best model past the checkpoint; no best yet; a checkpoint older than the best."""
    cfg = tiny_config(tmp_path, keep_validated=True)
    train(cfg, progress=False)  # updates 1 and 2
    out = Path(cfg.out_dir)
    first = load_model(out / "validated" / "update-0001.pt")
    state = {"state_dict": first.net.state_dict(), "meta": first.meta}
    _rewind(out, {"update": 1, "best": first.meta["val_score"], "best_model": state}, load_model(out / "final.pt").net, cfg)
    assert [r["update"] for r in _rows(out / "metrics.csv")] == ["1"]
    assert [p.name for p in (out / "validated").iterdir()] == ["update-0001.pt"]
    assert _same_weights(load_model(out / "best.pt"), first)
    _rewind(out, {"update": 1, "best": first.meta["val_score"]}, first.net, cfg)  # before checkpoints held the best
    assert (out / "best.pt").exists()
    _rewind(out, {"update": 0, "best": -math.inf}, first.net, cfg)  # nothing validated at the checkpoint
    assert not (out / "best.pt").exists() and not list((out / "validated").iterdir())
    assert _rows(out / "metrics.csv") == [] and (out / "metrics.csv").read_text().startswith("update,")


def test_kept_validated_models_are_the_validated_ones_and_change_nothing(tmp_path):
    plain, keep = tiny_config(tmp_path / "plain"), tiny_config(tmp_path / "keep", keep_validated=True)
    for cfg in (plain, keep):
        train(cfg, progress=False)
    rows = _rows(Path(keep.out_dir) / "metrics.csv")
    assert _timeless(rows) == _timeless(_rows(Path(plain.out_dir) / "metrics.csv"))
    for r in rows:
        model = load_model(Path(keep.out_dir) / "validated" / f"update-{int(r['update']):04d}.pt")
        assert model.meta["val_score"] == pytest.approx(float(r["val_score"]))
    final, last = (load_model(Path(keep.out_dir) / name) for name in ("final.pt", f"validated/update-{len(rows):04d}.pt"))
    assert _same_weights(final, last)


def test_resume_keeps_the_original_schedules_and_needs_a_checkpoint(tmp_path):
    none = tiny_config(tmp_path / "none")
    with pytest.raises(CheckpointError, match="no checkpoint to resume from"):
        train(none, progress=False, resume=True)
    assert not Path(none.out_dir).exists()  # nothing created
    cfg = tiny_config(tmp_path, time_budget_s=0.0, bc_until=1.0, bc_floor=0.0)  # 2 updates planned, stops after 1
    train(cfg, progress=False)
    longer = tiny_config(tmp_path, total_steps=4 * cfg.batch_size, bc_until=1.0, bc_floor=0.0)  # extended to 4
    train(longer, progress=False, resume=True)
    rows = _rows(Path(cfg.out_dir) / "metrics.csv")
    lr = [float(r["lr"]) for r in rows]
    # the 2-update schedule continues: lr x (1 - 1/2) at update 2, held beyond (not 1 - 1/4 = 0.75)
    assert lr == pytest.approx([cfg.learning_rate, cfg.learning_rate / 2, cfg.learning_rate / 2, cfg.learning_rate / 2])
    bc = [float(r["bc_coef"]) for r in rows]
    assert bc[-1] == pytest.approx(0.0) and bc == sorted(bc, reverse=True)


def test_evaluate_compares_the_model_with_baselines(tmp_path):
    cfg = tiny_config(tmp_path)
    model = train(cfg, progress=False)
    trace = load_trace(cfg.train_trace, start=0.5 * 86_400, max_jobs=25)
    result = evaluate(model, trace, uniform(2, 8), seeds=(0, 1), baselines=("fifo", "sjf+consolidate"))
    assert set(result.policies) == {"attentive", "fifo", "sjf+consolidate"}
    assert result.policies["attentive"]["jobs"] == 25
    assert result.as_json()["seeds"] == [0, 1]


@pytest.mark.slow
def test_short_training_beats_random_placement(tmp_path):
    """Smoke test of learning: a few minutes of CPU at most on a toy trace where placement
    matters (communication-heavy 2-8 GPU jobs on 4 nodes behind 2 switches)."""
    cfg = tiny_config(
        tmp_path, total_steps=30 * 4 * 64, num_envs=4, num_steps=64, max_nodes=4, val_every=10, checkpoint_every=10,
        curriculum=(Stage(0.0, nodes=(4,), jobs=(40, 80), load=(0.8, 1.2)),), val_nodes=4, val_jobs=60,
        bc_until=0.5,
    )
    model = train(cfg, progress=False)
    held_out = load_trace(cfg.train_trace, start=0.4 * 86_400, max_jobs=80)  # after train_days
    result = evaluate(model, held_out, uniform(4, 8, nodes_per_switch=2), seeds=(0,), baselines=("fifo+random",))
    agent, random = result.policies["attentive"], result.policies["fifo+random"]
    assert agent["comm_cost"] < random["comm_cost"]
    assert agent["avg_jct"] < random["avg_jct"]


def test_validation_windows_come_from_the_validation_days(tmp_path):
    cfg = tiny_config(tmp_path)
    trace = load_trace(cfg.train_trace)
    ((ep,),) = validation_episodes(cfg, trace)
    ids = {s.job.job_id for s in ep.jobs}
    in_days = {j.job_id for j in trace.jobs if cfg.val_days[0] * 86_400 <= j.submit_time < cfg.val_days[1] * 86_400}
    assert ids <= in_days and isinstance(ep, Episode)


def test_a_large_validation_window_is_a_group_of_its_own_and_keeps_the_others(tmp_path):
    cfg = tiny_config(tmp_path)
    trace = load_trace(cfg.train_trace)
    ((small,),) = validation_episodes(cfg, trace)
    (same,), (large,) = validation_episodes(replace(cfg, val_large=(3, 25)), trace)
    assert [s.job.job_id for s in same.jobs] == [s.job.job_id for s in small.jobs]
    assert len(large.topology.nodes) == 3 and len(large.jobs) == 25 and len(small.topology.nodes) == 2


@pytest.mark.parametrize("agent", ["deeprm", "proximity-drl"])
def test_the_same_loop_trains_the_drl_baselines(tmp_path, agent):
    """One PPO loop, reward and data for every agent: each baseline trains, validates, saves
    a model of its own kind, and is reproducible under the seed."""
    from attentived.agents.checkpoint import CheckpointError, load_model
    from attentived.agents.learned import load_learned
    from attentived.training.kinds import kind_defaults

    def config(sub):
        cfg = tiny_config(tmp_path / sub)
        kind = {k: v for k, v in kind_defaults(agent).items() if k not in ("out_dir", "curriculum")}
        return replace(cfg, **kind, max_gpus=16, mlp=replace(cfg.mlp, hidden=32))

    cfg = config("a")
    best = train(cfg, progress=False)
    model = load_model(best)
    assert model.agent == agent and model.window == 10
    rows = _rows(Path(cfg.out_dir) / "metrics.csv")
    assert [r["update"] for r in rows] == ["1", "2"] and all(r["val_score"] for r in rows)
    train(config("b"), progress=False)
    assert _timeless(_rows(Path(config("b").out_dir) / "metrics.csv")) == _timeless(rows)
    policy = load_learned(agent, best)
    trace = load_trace(cfg.train_trace, start=0.5 * 86_400, max_jobs=25)
    records = Simulation(prepare_jobs(trace.jobs, 0), uniform(2, 8), policy).run().records
    assert len(records) == 25
    with pytest.raises(CheckpointError, match=f"a model of the {agent} agent, not attentive"):
        make_policy("attentive", model=str(best))


def test_a_run_under_the_packing_rule_is_validated_under_it(tmp_path):
    """``pack = true`` trains and validates the model as it will run, with ``pack=1``:
    every validation start is packed, where the same model alone spreads jobs."""
    from dataclasses import replace

    from attentived.agents.placement import packed
    from attentived.simulator.trace import load_trace
    from attentived.training.kinds import kind_defaults
    from attentived.training.ppo import validation_replay

    conditioned = {k: v for k, v in kind_defaults("attentive").items() if k in ("fairness_range", "urgency_input")}
    cfg = tiny_config(tmp_path, **conditioned, pack=True, teacher="look-ahead-packed", val_jobs=60)
    train(cfg, progress=False)
    model = load_model(Path(cfg.out_dir) / "final.pt")
    episodes = [e for group in validation_episodes(cfg, load_trace(cfg.train_trace)) for e in group]
    spread = {}
    for pack in (True, False):
        records = [r for e in episodes for r in validation_replay(replace(cfg, pack=pack), model, e, 0.0)]
        spread[pack] = sum(not packed(episodes[0].topology, r.gpus) for r in records)
    assert spread[True] == 0 < spread[False]
