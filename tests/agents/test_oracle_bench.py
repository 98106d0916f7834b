"""`bench/oracle_lookahead.py`'s wrapper: the inner policy decides on the true run times."""

from __future__ import annotations

import numpy as np
import pytest

from attentived.agents.plan import Plan
from attentived.agents.registry import make_policy
from attentived.agents.state import ClusterState, PendingJob
from attentived.simulator.engine import SimJob, Simulation
from attentived.simulator.trace import TraceJob
from attentived.topology import uniform
from tests.bench_scripts import load_bench


@pytest.fixture
def bench(monkeypatch):
    return load_bench("oracle_lookahead", monkeypatch)


class Recording:
    """fifo, keeping every snapshot it was asked to decide on."""

    needs_oracle = False

    def __init__(self) -> None:
        self.inner, self.name = make_policy("fifo"), "recording"
        self.seen: list[ClusterState] = []

    def decide(self, state: ClusterState) -> Plan:
        self.seen.append(state)
        return self.inner.decide(state)


def _jobs():
    # limits four times the run: every user's past accuracy says a quarter, the oracle says 1
    return [SimJob(TraceJob(f"j{i}", i * 10.0, f"u{i % 2}", 1 + i % 2, 100.0 + 10 * i, None, 0), 4 * (100.0 + 10 * i), "bert")
            for i in range(12)]


def test_the_inner_policy_sees_the_true_run_times_as_limits_and_exact_users(bench):
    inner = Recording()
    records = Simulation(_jobs(), uniform(1, 4), bench.OracleEstimates(inner, "oracle:fifo")).run().records
    assert len(records) == 12
    duration = {f"j{i}": 100.0 + 10 * i for i in range(12)}
    assert any(s.running and s.pending for s in inner.seen)
    for state in inner.seen:
        assert all(j.time_limit == duration[j.job_id] for j in state.pending)
        assert all(r.time_limit == duration[r.job_id] for r in state.running)  # remembered from their pending days
        assert all(s.limit_accuracy == 1.0 for s in state.users.values())
        assert list(state.limit_accuracies) == [1.0] * len(state.queue.users)
    assert any(s.users for s in inner.seen)  # users with history were there to be made exact


def test_the_wrapper_refuses_a_run_without_true_durations(bench):
    topo = uniform(1, 4)
    state = ClusterState(now=0.0, topology=topo, free=np.ones(topo.num_gpus, dtype=bool),
                         pending=[PendingJob("a", "u", 1, 0.0, 60.0)])
    with pytest.raises(ValueError, match="oracle mode"):
        bench.OracleEstimates(make_policy("fifo"), "oracle:fifo").decide(state)


@pytest.mark.parametrize("argv, says", [
    (["--oracle", "portfolio:fair=2"], "has no parameter 'fair'"),
    ([], "give at least one --oracle"),
])
def test_a_bad_oracle_policy_exits_2_before_any_replay(bench, monkeypatch, capsys, argv, says):
    monkeypatch.setattr("sys.argv", ["oracle_lookahead.py", *argv, "--windows", "1"])
    with pytest.raises(SystemExit) as exit_:
        bench.main()
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err
