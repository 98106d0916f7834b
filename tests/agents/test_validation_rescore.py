"""`bench/validation_rescore.py`: the in-run validation's replays, scored at several powers."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from attentived.agents.checkpoint import save_model
from attentived.agents.networks import AttentiveNet, NetConfig
from attentived.training.config import PPOConfig
from attentived.training.kinds import kind_defaults
from attentived.training.reward import RewardWeights
from tests.bench_scripts import load_bench


@pytest.fixture
def bench(monkeypatch):
    return load_bench("validation_rescore", monkeypatch)


TOY = replace(PPOConfig(), **kind_defaults("attentive"), val_episodes=1, val_jobs=40, val_nodes=2,
              reward=RewardWeights(fairness=3.0), num_envs=1)


def _model(path, seed):
    torch.manual_seed(seed)
    save_model(path, AttentiveNet(NetConfig(d_model=16, heads=2, layers=1, fairness_input=True)), window=16,
               max_candidates=6, meta={"agent": "attentive"})


def _run(tmp_path, seeds=(1, 2)):
    """A run folder as `attentived train` leaves it with keep_validated, at a toy scale: two
    untrained models and a validation of one 40-job window on 2 nodes."""
    run = tmp_path / "run"
    (run / "validated").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"config": TOY.as_dict()}))
    for i, seed in enumerate(seeds, 1):
        _model(run / "validated" / f"update-{15 * i:04d}.pt", seed)
    return run


def test_the_score_at_the_runs_own_power_is_its_in_run_validation_score(bench, tmp_path):
    """Same windows, settings, reward weights (here a fairness weight of 3) and averaging as
    `ppo._validate`, which the training ran."""
    from attentived.agents.checkpoint import load_model
    from attentived.training.gym_env import FixedEpisode
    from attentived.training.ppo import _validate, load_training_trace, validation_episodes
    from attentived.training.vector import VectorEnv

    run = _run(tmp_path, seeds=(4,))
    doc = bench.main([str(run), "--powers", "2", "--out", str(tmp_path / "o.json")])
    (path, scores), = doc["scores"].items()
    groups = validation_episodes(TOY, load_training_trace(TOY))
    envs = VectorEnv(TOY, FixedEpisode(groups[0][0]), 0)
    assert scores["2.0"] == _validate(TOY, load_model(path), groups, envs)


def test_each_power_scores_the_same_replays_and_picks_its_best(bench, tmp_path):
    run = _run(tmp_path)
    out = tmp_path / "rescore.json"
    doc = bench.main([str(run), "--powers", "2,8", "--out", str(out)])
    scores = doc["scores"]
    assert len(scores) == 2 and json.loads(out.read_text()) == doc
    for s in scores.values():
        assert s["8.0"] <= s["2.0"] < 0  # a power mean is at least the RMS: the fairness cost can only grow
    for p in ("2.0", "8.0"):
        assert doc["picks"][str(run)][p] == max(scores, key=lambda k: scores[k][p])


def test_a_second_call_replays_only_models_written_since_and_picks_among_those_kept(bench, tmp_path, capsys):
    run = _run(tmp_path, seeds=(3, 5))
    out = tmp_path / "rescore.json"
    first = bench.main([str(run), "--out", str(out)])
    capsys.readouterr()
    bench.main([str(run), "--out", str(out)])
    assert "p=2.0" not in capsys.readouterr().out  # nothing replayed
    kept = sorted((run / "validated").glob("*.pt"))
    loser = min(kept, key=lambda m: first["scores"][str(m)]["2.0"])
    winner = max(kept, key=lambda m: first["scores"][str(m)]["2.0"])
    winner.unlink()  # a resumed run rewinds: the best one is gone, the other written anew
    _model(loser, 6)
    again = bench.main([str(run), "--out", str(out)])
    assert f"{loser}: p=2.0" in capsys.readouterr().out  # the new model at the old path was scored
    assert again["scores"][str(loser)] != first["scores"][str(loser)]
    assert again["picks"][str(run)] == {"2.0": str(loser), "8.0": str(loser)}  # not the removed one


def test_more_windows_and_every_kth_model(bench, tmp_path):
    run = _run(tmp_path, seeds=(1, 2, 3, 4))
    own = bench.main([str(run), "--powers", "2", "--out", str(tmp_path / "own.json")])["scores"]
    more = bench.main([str(run), "--powers", "2", "--episodes", "2", "--every", "2", "--out", str(tmp_path / "more.json")])
    kept = sorted((run / "validated").glob("*.pt"))
    assert sorted(more["scores"]) == sorted(str(m) for m in (kept[0], kept[2], kept[3]))  # every 2nd and the last
    assert more["episodes"] == 2
    for m in more["scores"]:  # a second window: other scores from the same models
        assert more["scores"][m]["2.0"] != own[m]["2.0"]
    with pytest.raises(SystemExit) as e:  # scores over another validation are not mixed in one file
        bench.main([str(run), "--powers", "2", "--episodes", "3", "--out", str(tmp_path / "more.json")])
    assert e.value.code == 2


def _broken_model(tmp_path):
    run = _run(tmp_path, seeds=(1,))
    (run / "validated" / "update-0015.pt").write_bytes(b"not a model")
    return run


@pytest.mark.parametrize("make, argv, says", [
    (lambda p: p, ["--powers", "2"], "no summary.json"),
    (lambda p: _run(p), ["--powers", "0.5"], "fairness_power must be in [1, 16]"),
    (lambda p: _run(p), ["--powers", "2,x"], "--powers takes numbers separated by commas"),
    (lambda p: _run(p), ["--every", "0"], "positive whole number"),
    (_broken_model, [], "update-0015.pt: "),
])
def test_bad_input_exits_2_with_the_reason(bench, tmp_path, capsys, make, argv, says):
    run = make(tmp_path)
    with pytest.raises(SystemExit) as e:
        bench.main([str(run), *argv, "--out", str(tmp_path / "o.json")])
    assert e.value.code == 2 and says in capsys.readouterr().err
