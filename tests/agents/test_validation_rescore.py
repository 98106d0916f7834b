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
from tests.bench_scripts import load_bench


@pytest.fixture
def bench(monkeypatch):
    return load_bench("validation_rescore", monkeypatch)


def _run(tmp_path, seeds=(1, 2)):
    """A run folder as `attentived train` leaves it with keep_validated, at a toy scale: two
    untrained models and a validation of one 40-job window on 2 nodes."""
    run = tmp_path / "run"
    cfg = replace(PPOConfig(), **kind_defaults("attentive"), val_episodes=1, val_jobs=40, val_nodes=2)
    (run / "validated").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"config": cfg.as_dict()}))
    net_cfg = NetConfig(d_model=16, heads=2, layers=1, fairness_input=True)
    for i, seed in enumerate(seeds, 1):
        torch.manual_seed(seed)
        save_model(run / "validated" / f"update-{15 * i:04d}.pt", AttentiveNet(net_cfg), window=16, max_candidates=6,
                   meta={"agent": "attentive"})
    return run


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


def test_a_second_call_replays_nothing_already_scored(bench, tmp_path, capsys):
    run = _run(tmp_path, seeds=(3,))
    out = tmp_path / "rescore.json"
    bench.main([str(run), "--out", str(out)])
    first = out.read_text()
    capsys.readouterr()
    bench.main([str(run), "--out", str(out)])
    assert "p=2.0" not in capsys.readouterr().out and out.read_text() == first


@pytest.mark.parametrize("make, argv, says", [
    (lambda p: p, ["--powers", "2"], "no summary.json"),
    (lambda p: _run(p), ["--powers", "0.5"], "fairness_power must be in [1, 16]"),
])
def test_bad_input_exits_2_with_the_reason(bench, tmp_path, capsys, make, argv, says):
    run = make(tmp_path)
    with pytest.raises(SystemExit) as e:
        bench.main([str(run), *argv, "--out", str(tmp_path / "o.json")])
    assert e.value.code == 2 and says in capsys.readouterr().err
