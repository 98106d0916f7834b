"""``POLICY:one_node=1``: jobs that fit on one node are decided as ``-N 1`` jobs."""

from __future__ import annotations

import numpy as np

from attentived.agents.registry import make_policy
from attentived.agents.state import RunningJob
from attentived.simulator.engine import Simulation, prepare_jobs
from attentived.simulator.trace import TraceJob

from .conftest import job, make_state


def _fragmented(lab):
    """Three GPUs free on node1 (5-7) and three on node2 (13-15), the rest busy for an hour."""
    busy = tuple(g for g in range(lab.num_gpus) if g not in (5, 6, 7, 13, 14, 15))
    return RunningJob("r", "x", busy, 0.0, 900.0, 3600.0)


def test_the_view_shapes_only_jobs_that_fit_one_node_and_keeps_queue_positions(lab):
    pending = [job("four", 4), job("one", 1), job("wide", 16), job("two-nodes", 4, nodes=2), job("pinned", 2, nodelist=("node1", "node2")),
               job("typed", 2, gpu_type="a100")]
    s = make_state(lab, pending)
    shown = make_policy("fifo+consolidate:one_node=1").view(s)
    assert [j.job_id for j in shown.pending] == [j.job_id for j in pending]
    assert [j.num_nodes for j in shown.pending] == [1, None, None, 2, None, None]
    assert shown.pending[1] is pending[1]  # untouched jobs are the driver's own
    assert len(shown.queue) == len(s.queue) and shown.now == s.now and shown.free is s.free


def test_a_job_that_fits_one_node_is_not_split_but_held_for_one(lab):
    s = make_state(lab, [job("four", 4)], running=[_fragmented(lab)])
    split = make_policy("fifo+consolidate").decide(s)
    assert len(split.starts) == 1 and len(set(lab.gpu_node[list(split.starts[0].gpus)])) == 2  # 6 free, over 2 nodes
    kept = make_policy("fifo+consolidate:one_node=1").decide(s)
    assert not kept.starts
    assert kept.holds and len(set(lab.gpu_node[list(kept.holds[0].gpus)])) == 1  # GPUs kept on one node


def test_in_a_replay_no_job_that_fits_one_node_runs_on_two(lab):
    rng = np.random.default_rng(3)
    jobs = prepare_jobs([TraceJob(f"j{i}", i * 20.0, f"u{i % 3}", int(rng.choice([1, 2, 3, 4, 6, 8])),
                                  float(rng.integers(300, 3000)), None, i + 1) for i in range(60)], seed=1)
    spans = {}
    for name in ("sjf+consolidate", "sjf+consolidate:one_node=1"):
        result = Simulation(jobs, lab, make_policy(name)).run()
        assert len(result.records) == len(jobs)
        spans[name] = max(len(set(lab.gpu_node[list(r.gpus)])) for r in result.records)
    assert spans["sjf+consolidate"] > 1  # the plain placer splits some of them
    assert spans["sjf+consolidate:one_node=1"] == 1


def test_only_an_agent_explains_and_it_explains_the_view(lab):
    assert not hasattr(make_policy("fifo:one_node=1"), "explain")
    s = make_state(lab, [job("four", 4), job("one", 1, submit=1.0)], running=[_fragmented(lab)])
    agent = make_policy("attentive:one_node=1")
    # the 4-GPU job fits only split (3 + 1): an option of the plain agent, none of the view's
    assert "four" in [o.job_id for o in make_policy("attentive").explain(s, k=3).top_jobs]
    options = [o.job_id for o in agent.explain(s, k=3).top_jobs]
    assert "one" in options and "four" not in options
    assert agent.name == "attentive:one_node=1" and agent.needs_oracle is False
