"""Every trainable agent ships a model that loads as its own policy and replays a trace
feasibly (the engine checks every start) and identically twice."""

from __future__ import annotations

import pytest

from attentived.agents.checkpoint import load_model
from attentived.agents.learned import default_model_path, load_learned
from attentived.simulator.engine import Simulation, prepare_jobs
from attentived.simulator.samples import sample_path
from attentived.simulator.trace import load_trace
from attentived.topology import uniform
from attentived.training.kinds import KINDS, kind_defaults


@pytest.mark.parametrize("agent", list(KINDS))
def test_shipped_model_replays_feasibly_and_deterministically(agent):
    assert load_model(default_model_path(agent)).agent == agent
    trace = load_trace(sample_path("philly-sample"), max_jobs=150)
    jobs, topo = prepare_jobs(trace.jobs, 3), uniform(4, 8, nodes_per_switch=2)
    runs = [Simulation(jobs, topo, load_learned(agent, seed=3)).run().records for _ in range(2)]
    assert len(runs[0]) == 150 and runs[0] == runs[1]


def test_kind_defaults_name_the_agents():
    assert kind_defaults("deeprm")["window"] == 10
    assert max(max(s.nodes) for s in kind_defaults("proximity-drl")["curriculum"]) * 8 <= 128
    with pytest.raises(KeyError, match="attentive, deeprm, proximity-drl"):
        kind_defaults("dqn")
