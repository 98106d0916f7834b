from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from attentived.agents.placement import Consolidate, FirstFit, LoadBalance, RandomPlacer
from attentived.agents.slurm_select import SlurmSelectPlacer
from attentived.topology import uniform

from .conftest import job, make_state, split_cases, tight

PLACERS = [FirstFit(), Consolidate(), LoadBalance(), RandomPlacer(seed=3), SlurmSelectPlacer()]


def test_consolidate_keeps_small_jobs_inside_one_island(lab):
    s = make_state(lab)
    for n in (1, 2, 3, 4):
        gpus = Consolidate().place(job("a", n), s.free, s)
        assert lab.spread(gpus) == (1, 1, 1)


def test_consolidate_best_fit_uses_the_fragmented_island(lab):
    # island 0 (node1 GPUs 0-3) has one free GPU left; a 1-GPU job should take it and
    # leave the fully free islands whole.
    s = make_state(lab, busy=[0, 1, 2])
    assert Consolidate().place(job("a", 1), s.free, s) == (3,)


def test_consolidate_multi_node_job_stays_under_one_switch(lab):
    # node1 is partly busy; a 16-GPU job must take two whole nodes, both under one switch.
    s = make_state(lab, busy=[0])
    gpus = Consolidate().place(job("a", 16), s.free, s)
    assert gpus is not None and len(gpus) == 16
    islands, nodes, switches = lab.spread(gpus)
    assert (nodes, switches) == (2, 1)
    assert set(lab.gpu_node[list(gpus)]) == {2, 3}  # node3+node4: the only fully free pair


def test_first_fit_is_lowest_node_lowest_gpu(lab):
    s = make_state(lab, busy=[0, 1, 2, 3, 4, 5])
    assert FirstFit().place(job("a", 2), s.free, s) == (6, 7)
    assert FirstFit().place(job("b", 4), s.free, s) == (8, 9, 10, 11)


def test_first_fit_ignores_islands_where_consolidate_does_not(lab):
    s = make_state(lab, busy=[0, 1, 2])  # node1: GPU 3 free in island 0, 4-7 free
    ff = FirstFit().place(job("a", 4), s.free, s)
    co = Consolidate().place(job("a", 4), s.free, s)
    assert ff == (3, 4, 5, 6)  # straddles the two islands
    assert lab.spread(co)[0] == 1


def test_load_balance_picks_the_emptiest_node(lab):
    s = make_state(lab, busy=list(range(0, 8)) + list(range(8, 12)) + [16])
    gpus = LoadBalance().place(job("a", 2), s.free, s)
    assert set(lab.gpu_node[list(gpus)]) == {3}  # node4 is the only fully free node


def test_shaped_job_gets_exactly_its_nodes(lab):
    s = make_state(lab, busy=[0, 1, 2, 3, 4])  # node1 has 3 free
    for placer in PLACERS:
        gpus = placer.place(job("a", 8, nodes=2), s.free, s)
        assert gpus is not None
        per_node = np.bincount(lab.gpu_node[list(gpus)], minlength=4)
        assert sorted(per_node[per_node > 0]) == [4, 4], placer.name
        assert per_node[0] == 0, placer.name  # node1 cannot give 4


def test_nothing_fits_returns_none(lab):
    s = make_state(lab, busy=range(30))
    for placer in PLACERS:
        assert placer.place(job("a", 3), s.free, s) is None


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.integers(1, 6),
    gpn=st.sampled_from([1, 2, 4, 8, 16]),
    busy_bits=st.lists(st.booleans(), min_size=96, max_size=96),
    n=st.integers(1, 40),
    shaped=st.booleans(),
)
def test_every_placer_returns_distinct_free_gpus_or_none(nodes, gpn, busy_bits, n, shaped):
    topo = uniform(nodes, gpn, nodes_per_switch=2)
    busy = [g for g in range(topo.num_gpus) if busy_bits[g % len(busy_bits)] and g % 3]
    s = make_state(topo, busy=busy)
    k = None
    if shaped and n % gpn == 0 and n // gpn <= nodes:
        k = n // gpn
    for placer in PLACERS:
        gpus = placer.place(job("a", n, nodes=k), s.free, s)
        if gpus is None:
            if k is None:
                assert n > s.num_free or placer.name != "random"
            continue
        assert len(gpus) == n == len(set(gpus)), placer.name
        assert s.free[list(gpus)].all(), placer.name
        if k is not None:
            per_node = np.bincount(topo.gpu_node[list(gpus)])
            assert sorted(per_node[per_node > 0]) == [n // k] * k
    # Unshaped: whenever enough GPUs are free, every placer finds a set.
    if k is None and n <= s.num_free:
        for placer in PLACERS:
            assert placer.place(job("a", n), s.free, s) is not None, placer.name


def test_consolidate_never_splits_a_job_a_tighter_set_holds(lab):
    for name, s, level in split_cases(lab):
        gpus = Consolidate().place(s.pending[0], s.free, s)
        assert gpus is not None and tight(lab, gpus, level), (name, gpus)


def test_consolidate_puts_a_one_node_job_in_one_island_when_one_holds_it(lab):
    # -N 1: node1 (best fit by free GPUs) has 3 and 4 free, node2 a whole island.
    s = make_state(lab, busy=[0, 1, 2, 5, 6, 7, 8, 9, 10, 11])
    assert Consolidate().place(job("a", 2, nodes=1), s.free, s) == (12, 13)
    assert Consolidate().place(job("b", 9, nodes=1), s.free, s) is None


def test_first_fit_of_one_gpu_is_the_lowest_free_gpu():
    """The one-GPU shortcut is what the node-by-node rule gives: the lowest node with a
    free GPU, its lowest free GPU."""
    topo = uniform(6, 8, nodes_per_switch=2)
    rng = np.random.default_rng(0)
    for _ in range(50):
        free = rng.random(topo.num_gpus) < rng.uniform(0.0, 0.3)
        s = make_state(topo, [job("j", gpus=1)], busy=np.flatnonzero(~free).tolist())
        got = FirstFit().place(s.pending[0], s.free, s)
        assert got == (tuple(int(g) for g in np.flatnonzero(free)[:1]) or None)
