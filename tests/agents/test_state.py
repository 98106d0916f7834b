"""The snapshot's derived arrays: the queue taken from a table, arrival order, running jobs
as arrays, and what a start carries over to the next state."""

from __future__ import annotations

import numpy as np

from attentived.agents.fit import Fit
from attentived.agents.state import ClusterState, QueueArrays
from attentived.topology import uniform

from .conftest import RunningJob, UserStats, job, make_state


def test_a_taken_queue_is_the_tables_rows_read_when_asked():
    table = QueueArrays.of([job(f"j{i}", gpus=1 + i % 3, user=f"u{i % 2}", submit=float(i), limit=60.0 * (i + 1))
                            for i in range(10)])
    rows = np.array([1, 4, 5, 9])
    taken = table.take(rows)
    assert not {"seq", "submit", "gpus", "limit", "oracle", "user"} & set(vars(taken))  # nothing gathered yet
    for name in ("seq", "submit", "gpus", "limit", "user"):
        assert np.array_equal(getattr(taken, name), getattr(table, name)[rows])
    assert taken.users == table.users and set(vars(taken)) >= {"gpus", "limit"}
    nan = np.full(4, np.nan)
    assert table.take(rows, nan).oracle is nan
    assert np.array_equal(taken.arrival, np.arange(4))  # rows ascending in an arrival-ordered table


def test_the_next_queue_carries_the_arrays_read_and_gathers_the_rest():
    table = QueueArrays.of([job(f"j{i}", gpus=1 + i % 3, user=f"u{i % 2}", submit=float(i), limit=60.0 * (i + 1))
                            for i in range(12)])
    first = table.take(np.array([1, 4, 5, 7]))
    first.limit, first.user  # noqa: B018  (read, as a policy would)
    rows = np.array([1, 5, 8, 10])  # 4 and 7 started (positions 1 and 3), 8 and 10 arrived
    after = first.follow(rows, np.array([1, 3]), None)
    for name in ("seq", "submit", "gpus", "limit", "oracle", "user"):
        assert np.array_equal(getattr(after, name), getattr(table, name)[rows], equal_nan=True), name
    again = after.follow(rows, np.zeros(0, dtype=np.int64), None)  # nothing changed
    assert again.limit is after.limit


def test_arrival_order_sorts_only_a_queue_out_of_order():
    q = QueueArrays.of([job("b", submit=5.0), job("a", submit=5.0), job("c", submit=1.0)])
    assert q.arrival.tolist() == [2, 1, 0]  # submit time, then job id
    assert not q.arrival.flags.writeable


def test_a_start_carries_over_what_it_cannot_change():
    topo = uniform(4, 8, nodes_per_switch=2)
    running = [RunningJob(f"r{k}", f"u{k % 2}", (2 * k, 2 * k + 1), 100.0 * k, 500.0 + 10 * k, 3600.0 if k % 3 else None)
               for k in range(5)]
    users = {"u0": UserStats(jobs=3, gpu_seconds=7200.0, wait_seconds=900.0)}
    pending = [job(f"p{i}", gpus=1 + i % 2, user=f"u{i % 3}", submit=float(i), nodes=1 if i == 3 else None) for i in range(6)]
    s = make_state(topo, pending, running=running, now=2000.0, users=users)
    for name in ("attained_service", "waits_by_user", "release_in", "irregular", "free_counts"):
        getattr(s, name)  # computed, so `started` carries them
    fit = Fit.of(s)
    run = fit.started(s.pending[2], (20, 21, 22)[: s.pending[2].num_gpus], s.now)
    after = s.started(2, run, fit.capacity())
    fresh = ClusterState(now=after.now, topology=topo, free=after.free, pending=after.pending, running=after.running,
                         users=after.users, nodes=after.nodes)
    assert after.attained_service == fresh.attained_service
    assert after.waits_by_user == fresh.waits_by_user
    assert np.array_equal(after.release_in, fresh.release_in)
    assert np.array_equal(after.irregular, fresh.irregular)
    assert all(np.array_equal(a, b) for a, b in zip(after.free_counts, fresh.free_counts))
    assert np.array_equal(after.queue.gpus, fresh.queue.gpus) and after.queue.users == fresh.queue.users


def test_a_start_carries_which_irregular_jobs_ask_alike():
    """`ClusterState.irregular_requests` numbers the jobs that ask alike once per snapshot;
    a start carries it (its job cut out), and jobs ask alike after it exactly when a fresh
    snapshot says so."""
    topo = uniform(4, 8, nodes_per_switch=2)
    pending = [job(f"p{i}", gpus=1 + i % 2, user=f"u{i % 3}", submit=float(i), nodes=1 if i % 3 else None)
               for i in range(9)]
    s = make_state(topo, pending, now=100.0)
    s.irregular_requests  # noqa: B018  (computed, so `started` carries it)
    fit = Fit.of(s)
    run = fit.started(s.pending[1], (0, 1), s.now)  # p1: the first of its request
    after = s.started(1, run, fit.capacity())
    fresh = ClusterState(now=after.now, topology=topo, free=after.free, pending=after.pending, running=after.running,
                         users=after.users, nodes=after.nodes)
    assert "irregular_requests" in vars(after)
    carried, anew = after.irregular_requests, fresh.irregular_requests
    assert np.array_equal(after.irregular, fresh.irregular) and len(carried) == 5
    assert np.array_equal(carried[:, None] == carried[None, :], anew[:, None] == anew[None, :])
    assert len(set(anew.tolist())) == 2  # 1 GPU on one node, 2 GPUs on one node
