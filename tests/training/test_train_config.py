from __future__ import annotations

from pathlib import Path

import pytest

from attentived.training.config import PPOConfig
from attentived.training.reward import RewardWeights
from attentived.training.train_config import (
    TrainConfigError,
    apply_settings,
    load_train_config,
)


def test_toml_sets_plain_fields_and_reward_weights(tmp_path):
    f = tmp_path / "train.toml"
    f.write_text('seed = 7\nlearning_rate = 1e-4\ntrain_days = [0, 20]\n[reward]\nfairness = 5\n')
    cfg = load_train_config(f)
    assert cfg.seed == 7 and cfg.learning_rate == 1e-4 and cfg.train_days == (0.0, 20.0)
    assert cfg.reward == RewardWeights(jct=1.0, fairness=5.0, comm=2.0)
    assert cfg.total_steps == PPOConfig().total_steps  # untouched


def test_toml_sets_the_power_of_the_fairness_terms_mean(tmp_path):
    f = tmp_path / "train.toml"
    f.write_text('[reward]\nfairness_power = 8\n')
    assert load_train_config(f).reward == RewardWeights(fairness_power=8.0)


@pytest.mark.parametrize(
    "doc, where",
    [
        ({"sead": 1}, "sead: unknown"),
        ({"seed": "one"}, "seed: expected an integer"),
        ({"learning_rate": True}, "learning_rate: expected float"),
        ({"train_days": [1]}, "train_days: expected a list of 2"),
        ({"reward": {"speed": 1}}, "reward.speed: unknown reward setting"),
        ({"reward": {"comm": -1}}, "reward: reward weight comm must be non-negative"),
        ({"reward": {"fairness_power": 0.5}}, "reward: fairness_power must be in \\[1, 16\\], got 0.5"),
        ({"net": {}}, "net: unknown"),
        ({"fairness_range": [0.9, 0.1]}, "fairness_range must be \\[lo, hi\\] within \\[0, 1\\]"),
        ({"fairness_range": [0, "x"]}, "fairness_range: expected a list of 2 numbers"),
        ({"teacher": "oracle"}, "teacher must be one of smallest-gpu-time, look-ahead"),
        ({"urgency_input": True}, "urgency_input needs fairness_range"),
        ({"env_workers": -1}, "env_workers must be 0 \\(step the environments here\\) or more, got -1"),
        ({"update_threads": 0}, "update_threads must be at least 1, got 0"),
        ({"num_envs": 0}, "num_envs must be at least 1"),
        ({"val_large": [64, 0]}, "val_large must be \\[nodes, jobs\\], both positive, or \\[0, 0\\] for none"),
        ({"val_large": [64]}, "val_large: expected a list of 2"),
    ],
)
def test_bad_settings_name_the_key(doc, where):
    with pytest.raises(TrainConfigError, match=where):
        apply_settings(PPOConfig(), doc, "t.toml")


def test_unreadable_or_invalid_toml(tmp_path):
    with pytest.raises(TrainConfigError, match="cannot read"):
        load_train_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("seed = = 1")
    with pytest.raises(TrainConfigError, match="not valid TOML"):
        load_train_config(bad)


def test_the_fairness_range_and_teacher_come_from_a_file_too(tmp_path):
    from attentived.training.config import TEACHER_NAMES
    from attentived.training.teacher import TEACHERS

    assert tuple(TEACHERS) == TEACHER_NAMES
    f = tmp_path / "train.toml"
    f.write_text('fairness_range = [0.2, 0.8]\nteacher = "look-ahead"\n')
    cfg = load_train_config(f)
    assert cfg.fairness_range == (0.2, 0.8) and cfg.teacher == "look-ahead"
    f.write_text('fairness_range = [0.0, 1.0]\nurgency_input = true\n')
    from attentived.training.kinds import KINDS

    net = KINDS["attentive"].make_net(load_train_config(f))
    assert net.cfg.fairness_input and net.cfg.urgency_input  # the experimental input, when asked for


def test_the_curriculum_comes_from_a_file(tmp_path):
    from attentived.training.config import Stage

    f = tmp_path / "train.toml"
    f.write_text("max_nodes = 128\n"
                 "[[curriculum]]\nstart = 0\nnodes = [2, 4]\njobs = [150, 400]\nload = [0.8, 1.4]\n"
                 "[[curriculum]]\nstart = 0.8\nnodes = [64, 128]\njobs = [1500, 3000]\nload = [0.9, 1.5]\n")
    cfg = load_train_config(f)
    assert cfg.curriculum == (Stage(0.0, (2, 4), (150, 400), (0.8, 1.4)), Stage(0.8, (64, 128), (1500, 3000), (0.9, 1.5)))
    assert cfg.stage(int(0.9 * cfg.total_steps)).nodes == (64, 128)


def _stage(**over):
    return {"start": 0.0, "nodes": [2], "jobs": [10, 20], "load": [1.0, 1.0], **over}


@pytest.mark.parametrize(
    "curriculum, where",
    [
        ({"start": 0}, "curriculum: must be \\[\\[curriculum\\]\\] tables"),
        ([{"start": 0.0, "nodes": [2]}], "stage 1: needs start, nodes, jobs and load"),
        ([_stage(size=3)], "stage 1: needs start, nodes, jobs and load; unknown: size"),
        ([_stage(nodes=[2, "x"])], "stage 1: nodes: expected a list of positive integers"),
        ([_stage(jobs=[20, 10])], "stage 1: jobs and load must be \\[low, high\\]"),
        ([_stage(start=0.2)], "stage 1: start: the first stage starts at 0"),
        ([_stage(), _stage(start=0.0)], "stage 2: start: .* after the one before"),
        ([_stage(), _stage(start=1.0)], "stage 2: start: .* below 1"),
        ([_stage(nodes=[64])], "max_nodes \\(32\\) must be at least the curriculum's largest cluster \\(64 nodes\\)"),
    ],
)
def test_a_bad_curriculum_names_the_stage(curriculum, where):
    with pytest.raises(TrainConfigError, match=where):
        apply_settings(PPOConfig(), {"curriculum": curriculum}, "t.toml")


@pytest.mark.parametrize("recipe", sorted((Path(__file__).parents[2] / "training" / "recipes").glob("*.toml")),
                         ids=lambda p: p.name)
def test_every_shipped_recipe_loads_for_the_attentive_agent(recipe):
    from dataclasses import replace

    from attentived.training.kinds import kind_defaults

    cfg = load_train_config(recipe, replace(PPOConfig(), **kind_defaults("attentive")))
    assert cfg.urgency_input  # each recipe is the urgency-reading one, varied


def test_the_plan_input_is_for_the_attentive_agent_over_a_range_of_w():
    from attentived.training.kinds import KINDS, kind_defaults

    with pytest.raises(ValueError, match="plan_input"):
        PPOConfig(plan_input=True)  # no fairness_range
    with pytest.raises(ValueError, match="fairness_range is for the attentive agent"):
        PPOConfig(**{**kind_defaults("deeprm"), "fairness_range": (0.0, 1.0), "plan_input": True})
    with pytest.raises(ValueError, match="fairness_range is for the attentive agent"):
        PPOConfig(**{**kind_defaults("deeprm"), "fairness_range": (0.0, 1.0)})  # its validation would take no W
    cfg = PPOConfig(**{**kind_defaults("attentive"), "plan_input": True})
    assert KINDS["attentive"].make_net(cfg).cfg.plan_input
    assert not KINDS["attentive"].make_net(PPOConfig(**kind_defaults("attentive"))).cfg.plan_input
    with pytest.raises(ValueError, match="plan_by_fairness needs plan_input"):
        PPOConfig(**{**kind_defaults("attentive"), "plan_by_fairness": True})
    scaled = PPOConfig(**{**kind_defaults("attentive"), "plan_input": True, "plan_by_fairness": True})
    assert KINDS["attentive"].make_net(scaled).cfg.plan_by_fairness
    assert not KINDS["attentive"].make_net(cfg).cfg.plan_by_fairness


def test_a_leash_that_grows_with_w_needs_w():
    from attentived.training.kinds import kind_defaults

    with pytest.raises(ValueError, match="bc_fairness"):
        PPOConfig(bc_fairness=1.0)  # no fairness_range: no W to weigh by
    with pytest.raises(ValueError, match="bc_fairness"):
        PPOConfig(**{**kind_defaults("attentive"), "bc_fairness": -0.5})
    assert PPOConfig(**{**kind_defaults("attentive"), "bc_fairness": 1.8}).bc_fairness == 1.8


def test_the_packed_teacher_holds_a_job_the_look_ahead_would_start_spread():
    import numpy as np

    from attentived.agents.placement import packed
    from attentived.agents.state import ClusterState, PendingJob, RunningJob
    from attentived.topology import uniform
    from attentived.training.teacher import TEACHERS

    topo = uniform(4, 8, nodes_per_switch=2)
    busy = RunningJob("r", "x", tuple(g for g in range(32) if g not in (2, 3, 6, 7)), 0.0, 0.0, 600.0)
    free = np.ones(32, dtype=bool)
    free[list(busy.gpus)] = False
    state = ClusterState(now=0.0, topology=topo, free=free, pending=(PendingJob("four", "alice", 4, 0.0, 3600.0),),
                         running=(busy,))
    (spread,) = TEACHERS["look-ahead"](0.75).decide(state).starts
    assert not packed(topo, spread.gpus)  # two islands of node1
    plan = TEACHERS["look-ahead-packed"](0.75).decide(state)
    assert plan.starts == () and [h.job_id for h in plan.holds] == ["four"] and packed(topo, plan.holds[0].gpus)


def test_the_packing_rule_is_for_the_two_phase_agents_without_the_plan_input():
    from dataclasses import replace

    from attentived.training.kinds import KINDS, kind_defaults

    with pytest.raises(ValueError, match="pack is for the two-phase agents"):
        PPOConfig(**{**kind_defaults("proximity-drl"), "pack": True})
    with pytest.raises(ValueError, match="pack is for the two-phase agents"):
        PPOConfig(**{**kind_defaults("attentive"), "plan_input": True, "pack": True})
    for agent in ("attentive", "deeprm"):
        cfg = PPOConfig(**{**kind_defaults(agent), "pack": True})
        assert KINDS[agent].make_env(cfg, lambda rng: None).packer is not None
        assert KINDS[agent].make_env(replace(cfg, pack=False), lambda rng: None).packer is None
    recipe = load_train_config(Path(__file__).parents[2] / "training" / "recipes" / "attentive-pack-env.toml",
                               PPOConfig(**kind_defaults("attentive")))
    assert recipe.pack and recipe.teacher == "look-ahead-packed"
