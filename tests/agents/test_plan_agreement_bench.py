"""`bench/plan_agreement.py`'s probe: it asks the teacher at every state and changes nothing."""

from __future__ import annotations

import torch

from attentived.agents.attentive import AttentivePolicy
from attentived.agents.networks import AttentiveNet, JobEncoding, NetConfig
from attentived.simulator.engine import SimJob, Simulation
from attentived.simulator.trace import TraceJob
from attentived.topology import uniform
from tests.bench_scripts import load_bench


def test_the_probe_counts_every_decision_once_and_decides_as_the_model(monkeypatch):
    bench = load_bench("plan_agreement", monkeypatch)
    jobs = [SimJob(TraceJob(f"j{i}", i * 30.0, f"u{i % 3}", [1, 2, 4, 8][i % 4], 200.0 + 50 * (i % 5), None, 0), 900.0, "bert")
            for i in range(40)]

    def model() -> AttentivePolicy:
        torch.manual_seed(3)
        net = AttentiveNet(NetConfig(d_model=32, heads=2, fairness_input=True, urgency_input=True, plan_input=True))
        return AttentivePolicy(net, fairness=1.0, window=16, max_candidates=6)

    alone = Simulation(jobs, uniform(2, 8), model()).run()
    probe = bench.Probe(model(), 1.0)
    probed = Simulation(jobs, uniform(2, 8), probe).run()
    assert [(r.job_id, r.start_time, r.gpus) for r in probed.records] == [(r.job_id, r.start_time, r.gpus) for r in alone.records]
    c = probe.counts
    kinds = ("both start nothing", "teacher starts nothing, model starts jobs", "teacher starts jobs, model starts nothing",
             "same first job", "another first job")
    assert c["decisions"] == probed.decisions == sum(c[k] for k in kinds) > 0
    assert c["same GPUs"] <= c["starts the teacher also makes"] and c["same set of jobs"] <= c["decisions"]
    assert c["same first job"] > 0  # an untrained network starts at its teacher's choice (the plan's bias)


def test_a_model_made_to_follow_takes_every_choice_its_plan_makes(monkeypatch):
    """``--follow``: an untrained network's first job is its plan's in every decision where
    the plan starts one, and it starts nothing where the plan starts nothing."""
    bench = load_bench("plan_agreement", monkeypatch)
    jobs = [SimJob(TraceJob(f"j{i}", i * 20.0, f"u{i % 3}", [1, 2, 4, 8][i % 4], 300.0 + 70 * (i % 5), None, 0), 900.0, "bert")
            for i in range(60)]
    torch.manual_seed(4)
    net = AttentiveNet(NetConfig(d_model=32, heads=2, fairness_input=True, urgency_input=True, plan_input=True))

    def own_views(module, _args, kwargs, enc: JobEncoding) -> JobEncoding:
        """Views as strong as a network's can be (logits within +-10), for the window's
        last jobs, plus the plan's bias as the network adds it."""
        logits = torch.zeros_like(enc.logits)
        logits[:, :-1] = torch.linspace(-10.0, 10.0, logits.shape[1] - 1)
        return JobEncoding(enc.jobs, enc.context, logits + module.plan_bias * kwargs["plan"], enc.attention)

    net.job_agent.register_forward_hook(own_views, with_kwargs=True)
    counts = []
    for follows in (False, True):
        model = AttentivePolicy(net, fairness=1.0, window=16, max_candidates=6)
        if follows:
            bench.follow(model)
        probe = bench.Probe(model, 1.0)
        Simulation(jobs, uniform(2, 8), probe).run()
        counts.append(probe.counts)
    own, followed = counts
    assert own["another first job"] + own["teacher starts nothing, model starts jobs"] > 0  # its own views win at 4 nats
    assert followed["same first job"] + followed["both start nothing"] == followed["decisions"] > 0
    assert followed["both start nothing"] > 0  # the queue builds up: there were decisions to wait at
