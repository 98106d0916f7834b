"""The batched forward pass that PPO trains through gives what the network gave one
transition at a time, and training stays reproducible under a seed.

`AttentiveNet.forward` cuts each batch to the job slots and nodes in use and runs the job
agent once per group of similar queue lengths (`attentived.agents.networks`); the
reference below is the forward pass as it was before, on one stored transition at a time
with all the window's padding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attentived.agents.checkpoint import load_model
from attentived.agents.networks import _MASKED, AttentiveNet, NetConfig, _groups
from attentived.simulator.engine import prepare_jobs
from attentived.simulator.trace import load_trace
from attentived.topology import uniform
from attentived.training.gym_env import Episode, FixedEpisode, SchedulingEnv
from attentived.training.ppo import _minibatches, train
from attentived.training.teacher import teacher_action

from .test_ppo import tiny_config, write_toy_trace


def _reference(net: AttentiveNet, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward pass before batching by queue length, for a batch of one: the whole
    padded window through the job agent, the whole padded node list through the GPU agent."""
    cfg = net.cfg
    enc = net.job_agent(obs["jobs"], obs["summary"], obs["job_valid"].bool(),
                        fairness=obs["fairness"] if cfg.fairness_input else None,
                        urgency=obs["urgency"] if cfg.urgency_input else None,
                        feasible=obs["action_mask"][:, : obs["job_valid"].shape[1]].bool(),
                        plan=obs["plan"] if cfg.plan_input else None)
    mask = obs["action_mask"].bool()
    logits = torch.full(mask.shape, _MASKED)
    chosen = torch.zeros_like(enc.context)
    if int(obs["phase"]) == 0:
        logits[:, : enc.logits.shape[1]] = enc.logits
    else:
        chosen = enc.jobs[:, int(obs["job"])]
        cand, _ = net.gpu_agent(chosen, obs["nodes"], obs["node_valid"].bool(), obs["candidates"], obs["share"])
        logits[:, : cand.shape[1]] = cand
    value = net.critic(torch.cat([enc.context, chosen], dim=-1)).squeeze(-1)
    return logits.masked_fill(~mask, _MASKED), value


def _stored_transitions(tmp_path: Path, steps: int = 240, plan: bool = False) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Observations and actions of a rollout that mixes the teacher's actions with random
    ones, on 1 to 4 nodes (padded to 4) with a window of 32: queues of every length."""
    trace = load_trace(write_toy_trace(tmp_path / "toy.csv", n=300))
    rng = np.random.default_rng(0)
    obs_rows, actions = [], []
    for nodes in (1, 2, 4):
        jobs = prepare_jobs(trace.jobs[: 60 * nodes], seed=nodes)
        env = SchedulingEnv(FixedEpisode(Episode(tuple(jobs), uniform(nodes, 8), "toy")), window=32, max_nodes=4,
                            urgency=True, plan=plan)
        obs, _ = env.reset(seed=nodes)
        for _ in range(steps // 3):
            teacher = "look-ahead" if plan else "smallest-gpu-time"
            a = teacher_action(env, teacher) if rng.random() < 0.7 else int(rng.choice(np.flatnonzero(obs["action_mask"])))
            obs_rows.append(obs)
            actions.append(a)
            obs, _, done, _, _ = env.step(a)
            if done:
                obs, _ = env.reset()
    batch = {k: torch.as_tensor(np.stack([np.asarray(o[k]) for o in obs_rows])) for k in obs_rows[0]}
    return batch, torch.tensor(actions)


@pytest.mark.parametrize(("conditioned", "plan"), [(False, False), (True, False), (True, True)],
                         ids=["plain", "fairness-and-urgency", "and-plan"])
def test_batched_log_probs_values_and_entropy_equal_the_per_transition_computation(tmp_path, conditioned, plan):
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2, fairness_input=conditioned, urgency_input=conditioned,
                                 plan_input=plan)).train()
    if conditioned:
        with torch.no_grad():
            net.job_agent.urgency_bias.copy_(torch.tensor([0.7, -1.3]))  # a trained model's bias is not 0
    obs, actions = _stored_transitions(tmp_path, plan=plan)
    if plan:
        assert (obs["plan"][:, -1] > 0).any() and (obs["plan"][:, :-1] > 0).any()  # starts and WAITs marked
    used = (obs["job_valid"].bool() * torch.arange(1, 33)).amax(1)
    assert used.min() <= 2 and used.max() >= 16 and (obs["phase"] == 1).any()  # the grouping is exercised
    with torch.no_grad():
        logits, value = net(obs)
        reference = [_reference(net, {k: v[i : i + 1] for k, v in obs.items()}) for i in range(len(actions))]
    ref_logits, ref_value = torch.cat([r[0] for r in reference]), torch.cat([r[1] for r in reference])
    dist, ref = torch.distributions.Categorical(logits=logits), torch.distributions.Categorical(logits=ref_logits)
    close = dict(rtol=0.0, atol=1e-5)
    torch.testing.assert_close(dist.log_prob(actions), ref.log_prob(actions), **close)
    torch.testing.assert_close(value, ref_value, **close)
    torch.testing.assert_close(dist.entropy(), ref.entropy(), **close)


def test_batched_gradients_equal_the_per_transition_gradients(tmp_path):
    """What the optimizer sees: the gradient of a PPO-shaped loss over the stored batch."""
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2)).train()
    obs, actions = _stored_transitions(tmp_path, steps=90)

    def loss(logits: torch.Tensor, value: torch.Tensor, i: slice) -> torch.Tensor:
        dist = torch.distributions.Categorical(logits=logits)
        return -(dist.log_prob(actions[i]) + 0.01 * dist.entropy()).sum() + 0.5 * (value**2).sum()

    def grads() -> list[torch.Tensor]:
        out = [p.grad.clone() for p in net.parameters()]
        net.zero_grad()
        return out

    loss(*net(obs), slice(None)).backward()
    batched = grads()
    for i in range(len(actions)):
        loss(*_reference(net, {k: v[i : i + 1] for k, v in obs.items()}), slice(i, i + 1)).backward()
    for a, b in zip(batched, grads()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_plan_an_environment_shows_is_the_one_its_look_ahead_teacher_labels_from(tmp_path):
    """With ``plan=True`` the observation marks the job the look-ahead teacher starts first
    (or WAIT when it starts nothing), so a plan-reading network sees its label's source:
    in every job phase the teacher's action is the marked one, or a fallback when the
    plan's first start is not in the window."""
    trace = load_trace(write_toy_trace(tmp_path / "toy.csv", n=300))
    env = SchedulingEnv(FixedEpisode(Episode(tuple(prepare_jobs(trace.jobs[:120], seed=2)), uniform(2, 8), "toy")),
                        window=8, max_nodes=2, urgency=True, plan=True, fairness=(0.0, 1.0))
    obs, _ = env.reset(seed=2)
    marked = job_phases = 0
    for _ in range(150):
        a = teacher_action(env, "look-ahead")
        if env.phase == 0:
            job_phases += 1
            plan = env.encoder.plan_of(env.state)
            assert plan is not None
            assert float(obs["plan"][a]) == 1.0 or (plan.starts and plan.starts[0].job_id not in
                                                    {env.state.pending[int(i)].job_id for i in env.jobs.index if i >= 0})
            marked += float(obs["plan"][a]) == 1.0
            assert float(obs["plan"].max()) == 1.0 and int((obs["plan"] == 1.0).sum()) == 1
        obs, _, done, _, _ = env.step(a)
        if done:
            obs, _ = env.reset()
    assert job_phases > 50 and marked >= 0.9 * job_phases


def test_groups_cover_every_row_once_at_a_width_that_holds_it():
    used = torch.tensor([0, 1, 64, 3, 2, 40, 5, 1, 17, 33, 9, 64] * 30)
    groups = _groups(used)
    rows = torch.cat([r for r, _ in groups])
    assert sorted(rows.tolist()) == list(range(len(used)))
    assert all(w == max(int(used[r].max()), 1) for r, w in groups)  # cut to the widest row
    assert len(groups) > 1  # 360 rows: worth several encoder calls
    (few,) = _groups(torch.tensor([3, 1, 2]))  # too few rows to pay for more calls: one, in order
    assert few[0].tolist() == [0, 1, 2] and few[1] == 3


def test_same_seed_same_trained_weights(tmp_path):
    weights = []
    for run in ("a", "b"):
        cfg = tiny_config(tmp_path / run, val_every=10**6, checkpoint_every=10**6)
        train(cfg, progress=False)
        weights.append(load_model(Path(cfg.out_dir) / "final.pt").net.state_dict())
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def _rollout_pairs(obs: dict[str, torch.Tensor]) -> np.ndarray:
    """The stored transitions as one environment's rollout ([steps, 1] phases)."""
    return obs["phase"].numpy().reshape(-1, 1)


def test_a_gpu_phase_reading_its_job_phase_encoding_gets_what_encoding_it_again_gives(tmp_path):
    """`queue_of`: the job agent runs once for a job phase and the GPU phase after it (what
    `_minibatches` pairs); logits, values and gradients are those of encoding every row."""
    torch.manual_seed(0)
    net = AttentiveNet(NetConfig(d_model=32, heads=2, fairness_input=True, urgency_input=True)).train()
    obs, actions = _stored_transitions(tmp_path)
    (rows, queue_of), = _minibatches(_rollout_pairs(obs), 1, torch.device("cpu"))
    assert sorted(rows.tolist()) == list(range(len(actions)))
    shared = queue_of != torch.arange(len(rows))
    assert shared.sum() >= 20  # GPU phases that read their job phase's encoding
    batch = {k: v[rows] for k, v in obs.items()}
    for k in ("jobs", "summary", "job_valid", "fairness", "urgency"):  # a reader shows its source's queue
        torch.testing.assert_close(batch[k][shared], batch[k][queue_of[shared]], rtol=0, atol=0)

    def run(**kw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        logits, value = net(batch, **kw)
        dist = torch.distributions.Categorical(logits=logits)
        (-(dist.log_prob(actions[rows]) + 0.01 * dist.entropy()).sum() + 0.5 * (value**2).sum()).backward()
        grads = [p.grad.clone() for p in net.parameters()]
        net.zero_grad()
        return dist.log_prob(actions[rows]).detach(), value.detach(), grads

    once, again = run(queue_of=queue_of), run()
    torch.testing.assert_close(once[0], again[0], rtol=0.0, atol=1e-5)
    torch.testing.assert_close(once[1], again[1], rtol=0.0, atol=1e-5)
    for a, b in zip(once[2], again[2]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_minibatches_shuffle_pairs_and_cover_every_row_once():
    phase = np.zeros((40, 4), np.int64)
    phase[1::2, :2] = 1  # environments 0 and 1 alternate job and GPU phases
    phase[0, 3] = 1  # a GPU phase whose job phase was in the previous rollout
    torch.manual_seed(3)
    batches = _minibatches(phase, 4, torch.device("cpu"))
    assert len(batches) == 4 and all(abs(len(rows) - 40) <= 1 for rows, _ in batches)
    rows = torch.cat([r for r, _ in batches]).tolist()
    assert sorted(rows) == list(range(160))
    flat = phase.reshape(-1)
    for mb, queue_of in batches:
        for i, j in enumerate(queue_of.tolist()):
            if i != j:  # a GPU phase right after its own job phase, one step earlier in its environment
                assert j == i - 1 and flat[mb[i]] == 1 and int(mb[i]) - int(mb[j]) == 4 and flat[mb[j]] == 0
    readers = sum(int((q != torch.arange(len(q))).sum()) for _, q in batches)
    assert readers == 40  # every GPU phase of environments 0 and 1, not the one at step 0
    torch.manual_seed(3)
    assert [r.tolist() for r, _ in _minibatches(phase, 4, torch.device("cpu"))] == [r.tolist() for r, _ in batches]
