"""`bench/ensemble_knob.py`'s ensemble: the mean of its members' log-probabilities."""

from __future__ import annotations

import pytest
import torch

from attentived.agents.attentive import AttentivePolicy
from attentived.agents.features import Context
from attentived.agents.learned import default_model_path
from attentived.agents.networks import AttentiveNet, NetConfig
from attentived.simulator.engine import SimJob, Simulation
from attentived.simulator.trace import TraceJob
from attentived.topology import uniform
from tests.bench_scripts import load_bench

from .conftest import RunningJob, job, make_state


@pytest.fixture
def bench(monkeypatch):
    return load_bench("ensemble_knob", monkeypatch)


def _net(seed: int) -> AttentiveNet:
    torch.manual_seed(seed)
    return AttentiveNet(NetConfig(d_model=32, heads=2))


def test_an_ensemble_of_one_model_twice_decides_as_the_model(bench):
    jobs = [SimJob(TraceJob(f"j{i}", i * 30.0, f"u{i % 3}", [1, 2, 4, 8][i % 4], 200.0 + 50 * (i % 5), None, 0), 900.0, "bert")
            for i in range(40)]
    net = _net(3)
    alone = Simulation(jobs, uniform(2, 8), AttentivePolicy(net, window=16, max_candidates=6)).run()
    twice = Simulation(jobs, uniform(2, 8), bench.EnsemblePolicy([net, net], window=16, max_candidates=6)).run()
    assert len(alone.records) == 40
    assert [(r.job_id, r.start_time, r.gpus) for r in twice.records] == [(r.job_id, r.start_time, r.gpus) for r in alone.records]


def test_the_job_agent_votes_with_the_members_mean_log_probabilities(bench, lab):
    state = make_state(lab, [job(f"j{i}", gpus=1 + i % 4, submit=i, user=f"u{i % 2}") for i in range(12)],
                       running=[RunningJob("r", "x", (0, 1), 0.0, 0.0, 600.0)])
    a, b = _net(1), _net(2)
    members = [AttentivePolicy(n, window=16, max_candidates=6) for n in (a, b)]
    ensemble = bench.EnsemblePolicy([a, b], window=16, max_candidates=6)
    view = ensemble.encoder.jobs(Context.of(state))
    with torch.inference_mode():
        voted = ensemble._encode(view).logits
        each = [torch.log_softmax(m._encode(view).logits, -1) for m in members]
    assert torch.allclose(voted, (each[0] + each[1]) / 2)
    assert not torch.allclose(each[0], each[1])  # two different members, so the vote is not either one
    assert ensemble.net is a  # the members were lent to the encoder and given back


@pytest.mark.parametrize("spec, says", [
    ("e={attentive},fairness=2", "fairness must be between 0 and 1"),
    ("e={attentive},fair=0.5", "expected NAME=A.pt"),
    ("e=missing.pt", "no such model file"),
    ("e={attentive}+{deeprm}", "every member must be an attentive model"),
])
def test_a_bad_ensemble_is_refused_saying_why(bench, spec, says):
    models = {name: default_model_path(name) for name in ("attentive", "deeprm")}
    with pytest.raises(ValueError, match=says):
        bench.ensemble(spec.format(**models))
