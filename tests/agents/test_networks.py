from __future__ import annotations

import numpy as np
import pytest
import torch

from attentived.agents.features import (
    CANDIDATE_FEATURES,
    JOB_FEATURES,
    NODE_FEATURES,
    SUMMARY_FEATURES,
    SUMMARY_TOKENS,
)
from attentived.agents.networks import AttentiveNet, NetConfig


def _obs(B=3, W=8, N=5, K=4, phase=None, seed=0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    A = max(W + 1, K)
    valid = torch.ones(B, W, dtype=torch.int8)
    valid[:, W - 2 :] = 0  # two padded slots
    mask = torch.zeros(B, A, dtype=torch.int8)
    ph = torch.tensor(phase if phase is not None else [i % 2 for i in range(B)])
    for b in range(B):
        if ph[b] == 0:
            mask[b, : W - 2] = 1
            mask[b, 1] = 0  # an infeasible job
            mask[b, W] = 1  # WAIT
        else:
            mask[b, : K - 1] = 1
    return {
        "phase": ph,
        "jobs": torch.randn(B, W, JOB_FEATURES, generator=g),
        "summary": torch.randn(B, SUMMARY_TOKENS, SUMMARY_FEATURES, generator=g),
        "job_valid": valid,
        "job": torch.zeros(B, dtype=torch.long),
        "nodes": torch.randn(B, N, NODE_FEATURES, generator=g),
        "node_valid": torch.ones(B, N, dtype=torch.int8),
        "candidates": torch.randn(B, K, CANDIDATE_FEATURES, generator=g),
        "share": torch.softmax(torch.randn(B, K, N, generator=g), -1),
        "action_mask": mask,
    }


def test_forward_shapes_and_masking():
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2))
    obs = _obs()
    logits, value = net(obs)
    assert logits.shape == obs["action_mask"].shape and value.shape == (3,)
    probs = torch.softmax(logits, -1)
    assert torch.all(probs[~obs["action_mask"].bool()] == 0)
    assert torch.allclose(probs.sum(-1), torch.ones(3))
    assert torch.isfinite(torch.distributions.Categorical(logits=logits).entropy()).all()


def test_same_seed_same_network_and_outputs():
    outs = []
    for _ in range(2):
        torch.manual_seed(7)
        net = AttentiveNet(NetConfig(d_model=32, heads=2))
        outs.append(net(_obs(seed=1)))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_padding_does_not_change_the_valid_slots():
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2)).eval()
    obs = _obs(B=1, phase=[0])
    base = net.job_agent(obs["jobs"], obs["summary"], obs["job_valid"].bool()).logits
    junk = dict(obs)
    junk["jobs"] = obs["jobs"].clone()
    junk["jobs"][:, -2:] = 1e3  # whatever sits in padded slots
    other = net.job_agent(junk["jobs"], junk["summary"], junk["job_valid"].bool()).logits
    assert torch.allclose(base[:, :6], other[:, :6], atol=1e-5) and torch.allclose(base[:, -1], other[:, -1], atol=1e-5)


def test_job_agent_is_permutation_equivariant():
    """No positional encoding: the queue order reaches the agent only through features."""
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2)).eval()
    jobs, summary = torch.randn(1, 6, JOB_FEATURES), torch.randn(1, SUMMARY_TOKENS, SUMMARY_FEATURES)
    valid = torch.ones(1, 6, dtype=torch.bool)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    a = net.job_agent(jobs, summary, valid).logits
    b = net.job_agent(jobs[:, perm], summary, valid).logits
    assert torch.allclose(a[:, :6][:, perm], b[:, :6], atol=1e-5)
    assert torch.allclose(a[:, 6], b[:, 6], atol=1e-5)  # WAIT does not care about the order


@pytest.mark.parametrize("W,N,K", [(4, 2, 2), (64, 128, 6)])
def test_any_window_node_and_candidate_count(W, N, K):
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2))
    logits, value = net(_obs(B=2, W=W, N=N, K=K))
    assert logits.shape == (2, max(W + 1, K)) and torch.isfinite(value).all()


def test_gpu_phase_depends_on_the_chosen_job():
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2)).eval()
    obs = _obs(B=1, phase=[1])
    a, _ = net(obs)
    obs2 = dict(obs)
    obs2["job"] = torch.tensor([3])
    b, _ = net(obs2)
    assert not torch.allclose(a[:, :3], b[:, :3])


def test_model_is_small():
    n = sum(p.numel() for p in AttentiveNet().parameters())
    assert n < 250_000  # about 0.5 MB of float32 weights
    assert np.log10(n) > 4


def test_a_preference_conditioned_network_reads_the_fairness_setting():
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2, layers=1, fairness_input=True)).eval()
    obs = _obs(phase=[0, 0, 1])
    with pytest.raises(ValueError, match="fairness setting W"):
        net(obs)
    low, _ = net({**obs, "fairness": torch.zeros(3, 1)})
    high, _ = net({**obs, "fairness": torch.ones(3, 1)})
    valid = obs["action_mask"].bool()
    assert not torch.allclose(low[valid], high[valid])
    assert (low[~valid] == high[~valid]).all()  # masks do not move with W
    plain = AttentiveNet.from_spec({"d_model": 32, "heads": 2, "layers": 1, "ff_mult": 2})  # a file from before W
    assert plain.job_agent.fairness_in is None and not plain.cfg.fairness_input


def test_an_urgency_reading_network_needs_the_urgency_and_the_fairness_input():
    with pytest.raises(ValueError, match="needs fairness_input"):
        NetConfig(urgency_input=True)
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2, layers=1, fairness_input=True, urgency_input=True)).eval()
    obs = {**_obs(phase=[0, 0, 1]), "fairness": torch.full((3, 1), 0.5)}
    with pytest.raises(ValueError, match="urgency"):
        net(obs)
    calm, _ = net({**obs, "urgency": torch.zeros(3, 8)})
    urgent = torch.zeros(3, 8)
    urgent[:, 2] = 1.0  # one job's user is far behind the others
    tense, _ = net({**obs, "urgency": urgent})
    valid = obs["action_mask"].bool()
    assert not torch.allclose(calm[valid], tense[valid])
    assert (calm[~valid] == tense[~valid]).all()  # masks do not move with urgency
    plain = AttentiveNet.from_spec({"d_model": 32, "heads": 2, "layers": 1, "ff_mult": 2, "fairness_input": True})
    assert plain.job_agent.urgency_in is None and not plain.cfg.urgency_input  # a file from before the urgency


def test_the_urgency_bias_is_the_look_aheads_smith_ratio_shape():
    """The pointer bias is linear in u and W * u: with weight (0, b) the log-odds of an
    urgent job against a calm one grow by b * u per unit of W, and vanish at W = 0."""
    torch.manual_seed(0)
    net = _urgency_net()
    obs = _obs(B=1, phase=[0])
    u = torch.zeros(1, 8)
    u[0, 2] = 1.0
    for w, gap in ((0.0, 0.0), (1.0, 3.0)):
        enc = _urgent(net, obs, w, u)
        base = _urgent(net, obs, w, torch.zeros(1, 8))
        odds = (enc.logits[0, 2] - enc.logits[0, 3]) - (base.logits[0, 2] - base.logits[0, 3])
        assert float(odds) == pytest.approx(gap, abs=1e-5)


def test_the_urgency_bias_never_moves_wait():
    """The bias picks which job starts, never whether one does: P(WAIT) is the unbiased
    pointer's for any urgencies, including a queue of well-served users only (which idled
    the cluster when the bias lowered every job against WAIT) and one urgent job that
    cannot start (which idled it when WAIT moved with the largest bias)."""
    torch.manual_seed(0)
    net = _urgency_net()
    obs = _obs(B=1, phase=[0])  # slot 1 holds a job that cannot start
    base = torch.softmax(_urgent(net, obs, 1.0, torch.zeros(1, 8)).logits.masked_fill(~_feasible(obs), -1e8), -1)
    infeasible_urgent = torch.zeros(1, 8)
    infeasible_urgent[0, 1] = 3.0
    for u in (-torch.ones(1, 8), infeasible_urgent, torch.linspace(-3, 3, 8)[None]):
        p = torch.softmax(_urgent(net, obs, 1.0, u).logits.masked_fill(~_feasible(obs), -1e8), -1)
        assert float(p[0, -1]) == pytest.approx(float(base[0, -1]), abs=1e-6)
    # Through the whole network too: the action distribution's WAIT column is unchanged.
    obs["urgency"], obs["fairness"] = infeasible_urgent, torch.tensor([[1.0]])
    with torch.no_grad():
        logits, _ = net(obs)
    assert float(torch.softmax(logits, -1)[0, 8]) == pytest.approx(float(base[0, -1]), abs=1e-6)


def _urgency_net() -> AttentiveNet:
    """A small urgency model whose bias is (0, 3): 3 * W * u, the urgency token input off."""
    net = AttentiveNet(NetConfig(d_model=32, heads=2, layers=1, fairness_input=True, urgency_input=True)).eval()
    agent = net.job_agent
    assert agent.urgency_in is not None and agent.urgency_bias is not None
    with torch.no_grad():
        agent.urgency_in.weight.zero_()
        agent.urgency_in.bias.zero_()
        agent.urgency_bias.copy_(torch.tensor([0.0, 3.0]))
    return net


def _feasible(obs: dict[str, torch.Tensor]) -> torch.Tensor:
    return obs["action_mask"][:, :9].bool()


def _urgent(net: AttentiveNet, obs: dict[str, torch.Tensor], w: float, u: torch.Tensor):
    with torch.no_grad():
        return net.job_agent(obs["jobs"], obs["summary"], obs["job_valid"].bool(), fairness=torch.tensor([[w]]),
                             urgency=u, feasible=_feasible(obs)[:, :8])


def test_a_plan_reading_network_starts_at_its_teachers_choice():
    """The plan's mark enters each slot's logit (and WAIT's) with weight `PLAN_PRIOR`: with
    the token input silenced, marking a job raises its log-odds against another job by
    exactly that much, and marking WAIT raises WAIT's. The input needs W, a missing plan is
    an error, and a file from before the input has none."""
    from attentived.agents.networks import PLAN_PRIOR

    with pytest.raises(ValueError, match="needs fairness_input"):
        NetConfig(plan_input=True)
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2, layers=1, fairness_input=True, plan_input=True)).eval()
    agent = net.job_agent
    assert agent.plan_in is not None
    with torch.no_grad():
        agent.plan_in.weight.zero_()
        agent.plan_in.bias.zero_()
    obs = {**_obs(B=1, phase=[0]), "fairness": torch.tensor([[0.5]])}
    with pytest.raises(ValueError, match="plan"):
        net(obs)
    with torch.no_grad():
        base, _ = net({**obs, "plan": torch.zeros(1, 9)})
        first = torch.zeros(1, 9)
        first[0, 3] = 1.0
        marked, _ = net({**obs, "plan": first})
        wait = torch.zeros(1, 9)
        wait[0, 8] = 1.0
        held, _ = net({**obs, "plan": wait})
    gap = (marked[0, 3] - marked[0, 4]) - (base[0, 3] - base[0, 4])
    assert float(gap) == pytest.approx(PLAN_PRIOR, abs=1e-5)
    assert float((held[0, 8] - held[0, 3]) - (base[0, 8] - base[0, 3])) == pytest.approx(PLAN_PRIOR, abs=1e-5)
    assert (marked[obs["action_mask"] == 0] == base[obs["action_mask"] == 0]).all()  # masks do not move
    plain = AttentiveNet.from_spec({"d_model": 32, "heads": 2, "layers": 1, "ff_mult": 2, "fairness_input": True})
    assert plain.job_agent.plan_in is None and not plain.cfg.plan_input


@pytest.mark.parametrize("w", [0.0, 0.25, 1.0])
def test_a_plan_scaled_by_fairness_is_unseen_at_w_0_and_whole_at_w_1(w):
    """With `plan_by_fairness` the plan's marks are scaled by W: the bias moves a job's
    log-odds by W x `PLAN_PRIOR`, and at W = 0 the plan changes no logit at all (token
    input included: the network decides alone). It needs the plan input, and a file
    without the key reads the same marks at every W."""
    from attentived.agents.networks import PLAN_PRIOR

    with pytest.raises(ValueError, match="needs plan_input"):
        NetConfig(fairness_input=True, plan_by_fairness=True)
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2, layers=1, fairness_input=True, plan_input=True,
                                 plan_by_fairness=True)).eval()
    assert net.job_agent.plan_in is not None
    with torch.no_grad():
        net.job_agent.plan_in.weight.zero_()
        net.job_agent.plan_in.bias.zero_()
    obs = {**_obs(B=1, phase=[0]), "fairness": torch.tensor([[w]])}
    first = torch.zeros(1, 9)
    first[0, 3] = 1.0
    with torch.no_grad():
        base, _ = net({**obs, "plan": torch.zeros(1, 9)})
        marked, _ = net({**obs, "plan": first})
    gap = (marked[0, 3] - marked[0, 4]) - (base[0, 3] - base[0, 4])
    assert float(gap) == pytest.approx(w * PLAN_PRIOR, abs=1e-5)
    with torch.no_grad():
        net.job_agent.plan_in.weight.normal_()
        net.job_agent.plan_in.bias.normal_()
        seen, _ = net({**obs, "plan": first})
        unseen, _ = net({**obs, "plan": torch.zeros(1, 9)})
    assert torch.equal(seen, unseen) == (w == 0.0)
    old = AttentiveNet.from_spec({"d_model": 32, "heads": 2, "layers": 1, "ff_mult": 2, "fairness_input": True,
                                  "plan_input": True})
    assert not old.cfg.plan_by_fairness
