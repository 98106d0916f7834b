"""Slurm's own GPU and core choice on a node (`SlurmSelect`), checked on starts the lab
recorded (80-job demo, seed 13: ``squeue --json`` keeps each job's socket and core)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from attentived.agents.slurm_select import SlurmSelect, SlurmSelectPlacer
from attentived.topology import uniform

from .conftest import RunningJob, job, make_state


@pytest.fixture
def lab_cpus():
    """The lab as Slurm sees it: 4 nodes x 8 GPUs, islands 0-3 and 4-7 each on its own
    socket, 8 cores per node (4 a socket)."""
    topo = uniform(4, 8, nodes_per_switch=2)
    return replace(topo, nodes=tuple(replace(n, cpus=8) for n in topo.nodes))


def _start(select, state, job_id, gpus_on_node2):
    """Place ``job_id`` on node2 (global GPUs 8-15) with the given count, as a replay does,
    and return it running from ``state.now``."""
    gpus = select.gpus(job_id, 1, [(1, gpus_on_node2)], state.free, state)
    return RunningJob(job_id, "x", gpus, 0.0, state.now, 600.0, cpus=1)


def test_the_socket_with_more_free_cores_takes_the_job(lab_cpus):
    # Slurm alone, demo-002 and demo-024: GPUs 0 and 1 of node2 busy, each job's core on
    # socket 0; a 4-GPU job got 4-7 and a 2-GPU job 4, 5, not the lowest free 2, 3 (socket 0
    # still had two free GPUs but only two free cores against four)
    select = SlurmSelect()
    s = make_state(lab_cpus, now=0.0)
    a = _start(select, s, "a", 1)
    s = make_state(lab_cpus, running=[a], now=1.0)
    b = _start(select, s, "b", 1)
    assert (a.gpus, b.gpus) == ((8,), (12,))  # b: socket 1 has more free cores
    # a third 1-GPU job goes back to socket 0 (3 free cores each: the lower on ties)
    s = make_state(lab_cpus, running=[a, b], now=2.0)
    assert select.gpus("c", 1, [(1, 1)], s.free, s) == (9,)
    four = make_state(lab_cpus, running=[a, b, RunningJob("c", "x", (9,), 0.0, 2.0, 600.0, cpus=1)], now=3.0)
    # socket 0: 2 free GPUs and 2 free cores; socket 1: 3 free GPUs and 3 free cores
    assert select.gpus("two", 1, [(1, 2)], four.free, four) == (13, 14)


def test_a_socket_without_a_free_gpu_gets_no_core(lab_cpus):
    # demo-028: node1 with GPUs 4, 6, 7 free, one core busy on each socket: the 1-GPU job's
    # core went to socket 1, where its GPU is, not to the lower socket
    select = SlurmSelect()
    held = [RunningJob("x0", "x", (0, 1, 2, 3), 0.0, 0.0, 600.0, cpus=1), RunningJob("x1", "x", (5,), 0.0, 0.0, 600.0, cpus=1)]
    s = make_state(lab_cpus, running=held, now=5.0)
    assert select.gpus("j", 1, [(0, 1)], s.free, s) == (4,)
    assert select.held("j") == ((0, 1, 1),)


def test_equal_cores_split_a_job_from_the_lower_socket(lab_cpus):
    # attentived's run, demo-004: node2 with 0, 6, 7 free and one busy core on each socket:
    # Slurm put the 2-GPU job's core on socket 0 and gave it 0 and 6, over both islands
    select = SlurmSelect()
    held = [RunningJob("y0", "x", (9, 10, 11), 0.0, 0.0, 600.0, cpus=1), RunningJob("y1", "x", (12, 13), 0.0, 0.0, 600.0, cpus=1)]
    s = make_state(lab_cpus, running=held, now=5.0)
    assert select.gpus("j", 1, [(1, 2)], s.free, s) == (8, 14)


def test_finished_jobs_give_their_cores_back(lab_cpus):
    select = SlurmSelect()
    s = make_state(lab_cpus, now=0.0)
    a = _start(select, s, "a", 1)
    s = make_state(lab_cpus, running=[a], now=1.0)
    assert select.gpus("b", 1, [(1, 1)], s.free, s) == (12,)
    # "a" has ended: socket 0 has all its cores again, socket 1 holds "b"'s
    b = RunningJob("b", "x", (12,), 0.0, 1.0, 600.0, cpus=1)
    s = make_state(lab_cpus, running=[b], now=2.0)
    assert select.gpus("c", 1, [(1, 1)], s.free, s) == (8,)
    assert select.held("a") == ()


def test_without_cpu_counts_the_gpus_are_the_lowest_free():
    topo = uniform(2, 8, nodes_per_switch=2)
    held = [RunningJob("x", "x", (0, 1), 0.0, 0.0, 600.0, cpus=1)]
    s = make_state(topo, running=held)
    placer = SlurmSelectPlacer()
    assert placer.place(job("four", 4), s.free, s) == (2, 3, 4, 5)


def test_the_slurm_preset_places_with_slurms_socket_choice(lab_cpus):
    from attentived.agents.registry import make_policy

    policy = make_policy("slurm")
    held = [RunningJob("x0", "x", (8,), 0.0, 0.0, 600.0, cpus=1), RunningJob("x1", "x", (9,), 0.0, 0.0, 600.0, cpus=1)]
    busy_elsewhere = [RunningJob("n1", "x", tuple(range(8)), 0.0, 0.0, 600.0, cpus=1)]
    s = make_state(lab_cpus, pending=[job("four", 4, cpus=1)], running=held + busy_elsewhere)
    (start,) = policy.decide(s).starts
    assert start.gpus == (12, 13, 14, 15)


def test_a_running_jobs_recorded_socket_counts_as_held(lab_cpus):
    # a driver that read the allocation from Slurm: x holds a core on node2's socket 1 with
    # its GPU on socket 0 (as when socket 0 had no free core); the next job's core goes to
    # socket 0, which now has more free cores
    select = SlurmSelect()
    x = RunningJob("x", "u", (8,), 0.0, 0.0, 600.0, cpus=1)
    select.hold("x", [(1, 1, 1)], now=0.0)
    s = make_state(lab_cpus, running=[x], now=1.0)
    assert select.gpus("j", 1, [(1, 1)], s.free, s) == (9,)
    assert select.held("j") == ((1, 0, 1),)


def test_topology_tree_takes_the_switch_with_the_fewest_nodes_that_fit(lab_cpus):
    # Slurm alone, 80-job demo seed 19 at 2.2 s: node1 had 2 free GPUs, node2 4, carol's
    # 8-GPU job held node3 and node4 was idle. Slurm put alice's 1-GPU job on node4 (leaf
    # switch sw2 had one node with room, sw1 two), not on node1, the lowest with room.
    held = [RunningJob("a", "x", tuple(range(6)), 0.0, 0.0, 600.0, cpus=1),
            RunningJob("b", "x", tuple(range(8, 12)), 0.0, 0.0, 600.0, cpus=1),
            RunningJob("c", "x", tuple(range(16, 24)), 0.0, 0.0, 600.0, cpus=1)]
    s = make_state(lab_cpus, running=held)
    assert SlurmSelectPlacer().place(job("j", 1, cpus=1, nodes=1), s.free, s) == (24,)
    # with no CPU counts the nodes are the same, the GPUs the lowest free there
    bare = make_state(uniform(4, 8, nodes_per_switch=2), running=held)
    assert SlurmSelectPlacer().place(job("j", 2), bare.free, bare) == (24, 25)


@pytest.mark.parametrize(("free", "gpus", "nodes", "expected"), [
    ([2, 4, 0, 8], 1, 1, [(3, 1)]),  # sw2 has one node with room, sw1 two: sw2
    ([2, 4, 8, 8], 1, 1, [(0, 1)]),  # two each: the first switch, its lowest node
    ([2, 4, 8, 8], 4, 1, [(1, 4)]),  # a 4-GPU job: sw1 has one node that holds it
    ([8, 8, 8, 8], 24, 3, [(0, 8), (1, 8), (2, 8)]),  # no leaf holds 3: the first full leaf, then one node of sw2
    ([0, 8, 8, 8], 16, 2, [(2, 8), (3, 8)]),  # sw1 has one node that fits, sw2 two: sw2 holds the job
    ([8, 1, 0, 2], 10, None, [(0, 8), (1, 1), (3, 1)]),  # no node holds 10 and no -N: nodes in index order
    ([1, 1, 1, 1], 4, 2, None),  # 2 per node fits nowhere
])
def test_tree_nodes(free, gpus, nodes, expected):
    from attentived.agents.placement import tree_nodes

    switch = np.array([0, 0, 1, 1])
    assert tree_nodes(job("j", gpus, nodes=nodes), np.array(free), switch) == expected
