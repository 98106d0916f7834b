"""The Proximity-DRL-style placer: what it observes, its teacher, and its plans."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from attentived.agents.learned import default_model_path, load_learned
from attentived.agents.mlp import MlpConfig, ProximityNet
from attentived.agents.order import Fifo
from attentived.agents.placement import Consolidate
from attentived.agents.policy import Scheduler
from attentived.agents.proximity import (
    ClusterTooLarge,
    Observer,
    ProximityPlacer,
    distance_to,
    teacher_gpu,
)
from attentived.topology import uniform

from .conftest import RunningJob, job, make_state, split_cases, tight
from .test_metaheuristic import check_plan, states


def test_distance_levels(lab):
    d = distance_to(lab, [1])
    assert d[1] == 0.25 and d[0] == 0.25 and d[3] == 0.25  # island 0-3
    assert d[4] == 0.5  # same node, other island
    assert d[8] == 0.75  # node 1, same leaf switch (2 nodes per switch)
    assert d[16] == 1.0  # other switch
    assert not distance_to(lab, []).any()


def test_observation_marks_free_picked_and_padding(lab):
    running = [RunningJob("r", "bob", (0, 1, 2), 0.0, 500.0, 3600.0)]
    s = make_state(lab, [job("a", 4), job("b", 2, submit=5.0)], running=running)
    obs = Observer(40).observe(s, s.free, s.pending[0], picked=[8])
    g = obs["gpus"]
    assert g.shape == (40, 7) and obs["globals"].ndim == 1
    assert g[:32, 0].all() and not g[32:].any()  # real GPUs, then padding
    assert g[0, 1] == 0 and g[0, 3] > 0  # busy, expected back later
    assert g[8, 1] == 0 and g[8, 2] == 1  # picked
    # GPU 8's island (8-11) holds the whole job: the next picks stay in it.
    assert np.flatnonzero(obs["action_mask"]).tolist() == [9, 10, 11]
    first = Observer(40).observe(s, s.free, s.pending[0], picked=[])["action_mask"]
    assert np.flatnonzero(first).tolist() == list(range(4, 32))  # any island with 4 free
    assert obs["globals"][1] == pytest.approx(3 / 4)  # three GPUs left to pick
    assert g[3, 5] == pytest.approx(1 / 4) and g[3, 6] == pytest.approx(5 / 8)  # island 0-3, node 0
    assert g[9, 5] == pytest.approx(3 / 4) and g[9, 6] == pytest.approx(7 / 8)  # GPU 8 is taken


def test_refuses_a_cluster_larger_than_its_input():
    s = make_state(uniform(4, 8), [job("a")])
    with pytest.raises(ClusterTooLarge, match="32"):
        Observer(16).observe(s, s.free, s.pending[0], [])


@pytest.mark.parametrize("gpus", [1, 3, 8, 12])
def test_teacher_from_an_empty_pick_reproduces_consolidate(lab, gpus):
    running = [RunningJob("r", "bob", (0, 1, 9, 17, 18), 0.0, 500.0, 3600.0)]
    s = make_state(lab, [job("a", gpus)], running=running)
    j = s.pending[0]
    preferred = Consolidate().place(j, s.free, s)
    observer = Observer(32)
    picked: list[int] = []
    for _ in range(gpus):
        allowed = observer.observe(s, s.free, j, picked)["action_mask"].astype(bool)
        picked.append(teacher_gpu(s, allowed, picked, preferred))
    assert tuple(sorted(picked)) == tuple(sorted(preferred))


def _placer(max_gpus=32, seed=0):
    torch.manual_seed(seed)
    return ProximityPlacer(ProximityNet(max_gpus, MlpConfig(hidden=32)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states())
def test_every_plan_is_feasible(state):
    # Random weights: feasibility must come from the masks, not from training.
    placer = _placer(max_gpus=48)
    check_plan(state, Scheduler(Fifo(), placer).decide(state))


def test_places_exactly_the_free_gpus_it_may_use(lab):
    s = make_state(lab, [job("a", 5), job("b", 2, nodes=2)], busy=range(0, 20))
    placer = _placer()
    usable = s.free.copy()
    usable[20:24] = False
    gpus = placer.place(s.pending[0], usable, s)
    assert len(set(gpus)) == 5 and usable[list(gpus)].all()
    assert placer.place(s.pending[0], np.zeros(32, bool), s) is None
    shaped = placer.place(s.pending[1], s.free, s)  # one GPU on each of two nodes
    assert len(set(lab.gpu_node[list(shaped)])) == 2


@pytest.mark.parametrize("nodes,gpus", [(1, 4), (2, 8), (3, 6), (4, 4)])
def test_the_mask_keeps_a_fixed_node_shape(lab, nodes, gpus):
    # Node 0 has 3 free GPUs, so a share of 4 must avoid it; random weights pick the rest.
    s = make_state(lab, [job("a", gpus, nodes=nodes)], busy=(0, 1, 2, 3, 4))
    for seed in range(5):
        placed = _placer(seed=seed).place(s.pending[0], s.free, s)
        per = np.bincount(lab.gpu_node[list(placed)], minlength=4)
        assert sorted(per[per > 0]) == [gpus // nodes] * nodes and s.free[list(placed)].all()
    full = make_state(lab, [job("b", 8, nodes=4)], busy=(0, 1, 2, 3, 4, 5, 6))
    assert _placer().place(full.pending[0], full.free, full) is None  # node 0 has 1 free: no 4 x 2


def test_deterministic_and_seeded_sampling(lab):
    s = make_state(lab, [job("a", 6)], busy=(0, 5, 9, 13))
    a, b = _placer(seed=3), _placer(seed=3)
    assert a.place(s.pending[0], s.free, s) == b.place(s.pending[0], s.free, s)
    a.deterministic = b.deterministic = False
    a._gen.manual_seed(11)
    b._gen.manual_seed(11)
    assert [a.place(s.pending[0], s.free, s) for _ in range(3)] == [b.place(s.pending[0], s.free, s) for _ in range(3)]


@pytest.mark.parametrize("seed", range(4))
def test_the_mask_never_splits_a_job_a_tighter_group_holds(lab, seed):
    # Random weights: tightness must come from the mask. Only the first job is placed.
    placer = _placer(seed=seed)
    for name, s, level in split_cases(lab):
        gpus = placer.place(s.pending[0], s.free, s)
        assert gpus is not None and tight(lab, gpus, level), (name, gpus)


@pytest.mark.skipif(not default_model_path("proximity-drl").exists(), reason="shipped model not built yet")
def test_shipped_model_places_the_split_cases_tightly(lab):
    pol = load_learned("proximity-drl")
    for name, s, level in split_cases(lab):
        (start, *_) = pol.decide(s).starts
        assert start.job_id == s.pending[0].job_id and tight(lab, start.gpus, level), (name, start.gpus)
