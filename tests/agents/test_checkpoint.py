from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attentived.agents import checkpoint as ckpt
from attentived.agents.attentive import AttentivePolicy
from attentived.agents.checkpoint import (
    CheckpointError,
    load_model,
    load_training,
    save_model,
    save_training,
)
from attentived.agents.features import JOB_FEATURES
from attentived.agents.learned import load_learned
from attentived.agents.networks import AttentiveNet, NetConfig

from .conftest import RunningJob, job, make_state, short_and_long_waiters
from .test_networks import _obs


def _net(seed=0) -> AttentiveNet:
    torch.manual_seed(seed)
    return AttentiveNet(NetConfig(d_model=32, heads=2))


def _save(tmp_path, net=None, **meta) -> str:
    return str(save_model(tmp_path / "m.pt", net or _net(), window=16, max_candidates=6, meta={"note": "test", **meta}))


def test_round_trip_gives_the_same_decisions(tmp_path, lab):
    net = _net()
    path = _save(tmp_path, net, steps=123)
    loaded = load_model(path)
    assert loaded.window == 16 and loaded.max_candidates == 6 and loaded.meta == {"note": "test", "steps": 123}
    for a, b in zip(net.state_dict().values(), loaded.net.state_dict().values()):
        assert torch.equal(a, b)
    s = make_state(lab, [job(f"j{i}", gpus=1 + i % 5, submit=i) for i in range(9)],
                   running=[RunningJob("r", "x", (0, 1), 0.0, 0.0, 600.0)])
    original = AttentivePolicy(net, window=16, max_candidates=6).decide(s)
    assert load_learned("attentive", path).decide(s) == original


def test_training_checkpoint_round_trip(tmp_path):
    net = _net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    _, value = net(_tiny_obs())
    value.sum().backward()
    opt.step()
    rng = torch.get_rng_state()
    path = save_training(tmp_path / "c.pt", net, opt, window=16, max_candidates=6, meta={},
                         progress={"update": 3, "global_step": 99, "history": [{"score": -1.0}], "torch_rng": rng})
    model, opt_state, progress = load_training(path)
    assert progress["update"] == 3 and torch.equal(progress["torch_rng"], rng)
    opt2 = torch.optim.Adam(model.net.parameters(), lr=1e-3)
    opt2.load_state_dict(opt_state)
    assert opt2.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    assert load_model(path).window == 16  # a training checkpoint is also a model
    with pytest.raises(CheckpointError, match="nothing to resume"):
        load_training(_save(tmp_path))


def _tiny_obs():
    return _obs(B=2, W=16, N=3, K=6)


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="no such model file"):
        load_model(tmp_path / "nope.pt")


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_files_are_refused_clearly(tmp_path, damage):
    path = tmp_path / "m.pt"
    if damage == "garbage":
        path.write_bytes(b"this is not a model" * 100)
    else:
        good = (tmp_path / "good.pt")
        save_model(good, _net(), window=16, max_candidates=6, meta={})
        data = good.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="not a readable attentived model"):
        load_model(path)


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_files_that_would_run_code_are_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": ckpt.FORMAT, "payload": Evil()}, path)
    with pytest.raises(CheckpointError, match="not a readable"):
        load_model(path)


def test_other_formats_and_versions_are_refused(tmp_path):
    other = tmp_path / "other.pt"
    torch.save({"format": "something-else"}, other)
    with pytest.raises(CheckpointError, match="not an attentived attentive model"):
        load_model(other)
    payload = torch.load(_save(tmp_path), weights_only=True)
    payload["version"] = ckpt.VERSION + 1
    newer = tmp_path / "newer.pt"
    torch.save(payload, newer)
    with pytest.raises(CheckpointError, match=f"version {ckpt.VERSION + 1}.*reads version {ckpt.VERSION}"):
        load_model(newer)
    del payload["state_dict"]
    payload["version"] = ckpt.VERSION
    torch.save(payload, newer)
    with pytest.raises(CheckpointError, match="lacks 'state_dict'"):
        load_model(newer)


def test_mismatched_input_dimensions_are_named(tmp_path):
    payload = torch.load(_save(tmp_path), weights_only=True)
    payload["dims"]["job_features"] += 3
    path = tmp_path / "dims.pt"
    torch.save(payload, path)
    wanted = rf"other input dimensions \(job_features: model {JOB_FEATURES + 3}, features {JOB_FEATURES}\)"
    with pytest.raises(CheckpointError, match=wanted):
        load_model(path)


def test_weights_that_do_not_fit_the_recorded_sizes(tmp_path):
    payload = torch.load(_save(tmp_path), weights_only=True)
    payload["net"]["d_model"] = 48
    path = tmp_path / "sizes.pt"
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="do not fit the recorded network sizes"):
        load_model(path)


@pytest.mark.parametrize("d_model, message", [
    (191, "do not fit the recorded network sizes"),  # 4 heads do not divide it: torch asserts
    (10**9, "implausible network sizes"),  # would try to allocate before failing
    (0, "implausible network sizes"),
])
def test_impossible_recorded_sizes_are_refused_before_building(tmp_path, d_model, message):
    payload = torch.load(_save(tmp_path), weights_only=True)
    payload["net"]["d_model"] = d_model
    path = tmp_path / "sizes.pt"
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match=message):
        load_model(path)


def test_the_fairness_setting_is_a_parameter_of_a_conditioned_model_only(tmp_path):
    from attentived.agents.networks import AttentiveNet, NetConfig
    from attentived.agents.objective import DEFAULT_FAIRNESS
    from attentived.agents.registry import make_policy

    net = AttentiveNet(NetConfig(d_model=16, heads=2, layers=1, fairness_input=True))
    path = save_model(tmp_path / "w.pt", net, window=16, max_candidates=6, meta={})
    policy = make_policy(f"attentive:model={path},fairness=0.3")
    assert policy.name == f"attentive:fairness=0.3,model={path}"
    assert policy.fairness == pytest.approx(0.3)
    assert make_policy(f"attentive:model={path}").fairness == DEFAULT_FAIRNESS
    plain = _save(tmp_path)
    with pytest.raises(CheckpointError, match="without the fairness input"):
        make_policy(f"attentive:model={plain},fairness=0.3")


def test_a_model_reads_the_urgency_it_was_trained_on(tmp_path):
    """Models trained before 2026-12-02 evening (the model shipped until 2026-12-06 among
    them) weighed users by their wait alone and are fed that, while models trained now
    (`training.kinds`, the shipped one) read the larger of the wait and slowdown ratios.
    On a state where the two differ, each policy's view holds its own definition."""
    from attentived.agents.features import Context, job_urgency
    from attentived.agents.learned import default_model_path
    from attentived.topology import uniform
    from attentived.training.config import PPOConfig
    from attentived.training.kinds import KINDS, kind_defaults

    ctx = Context.of(short_and_long_waiters(uniform(4, 8, nodes_per_switch=2)))
    wait_only, either = job_urgency(ctx, slowdown=False), job_urgency(ctx)
    assert wait_only[1] < wait_only[0] and either[1] > either[0]  # Dana is worse off only by slowdown

    trained_now = KINDS["attentive"].make_net(PPOConfig(**kind_defaults("attentive")))
    assert trained_now.cfg.urgency_input and trained_now.cfg.slowdown_urgency
    path = save_model(tmp_path / "now.pt", trained_now, window=16, max_candidates=6, meta={})
    now = load_learned("attentive", path)
    assert now.encoder.jobs(ctx).urgency[:2] == pytest.approx(either)
    before = AttentiveNet(replace(trained_now.cfg, slowdown_urgency=False))
    earlier = load_learned("attentive", save_model(tmp_path / "before.pt", before, window=16, max_candidates=6, meta={}))
    assert earlier.encoder.jobs(ctx).urgency[:2] == pytest.approx(wait_only)
    if default_model_path("attentive").exists():
        shipped = load_learned("attentive")
        assert shipped.net.cfg.urgency_input and shipped.net.cfg.slowdown_urgency
        assert shipped.encoder.jobs(ctx).urgency[:2] == pytest.approx(either)


def test_a_plan_reading_model_reads_the_look_aheads_plan_at_its_own_w(tmp_path):
    """Loaded by name with ``fairness=W``, a model trained with the plan input reads the
    look-ahead's plan at that W (`plan_marks` of `look_ahead_teacher(W)`), and decides the
    same twice; a model without the input reads no plan."""
    import numpy as np

    from attentived.agents.features import Context, plan_marks
    from attentived.agents.guided import look_ahead_teacher
    from attentived.agents.registry import make_policy
    from attentived.topology import uniform

    state = short_and_long_waiters(uniform(4, 8, nodes_per_switch=2))
    net = AttentiveNet(NetConfig(d_model=16, heads=2, layers=1, fairness_input=True, urgency_input=True, plan_input=True))
    path = save_model(tmp_path / "plan.pt", net, window=16, max_candidates=6, meta={})
    for w in (0.0, 1.0):
        policy = make_policy(f"attentive:model={path},fairness={w}")
        view = policy.encoder.jobs(Context.of(state))
        k = int(view.valid.sum())
        expected = plan_marks(look_ahead_teacher(w).decide(state), state, view.index[:k])
        assert np.array_equal(view.plan[:k], expected[:k]) and view.plan[-1] == expected[-1]
        assert view.plan.max() == 1.0
        assert policy.decide(state) == policy.decide(state)
    plain = AttentiveNet(NetConfig(d_model=16, heads=2, layers=1, fairness_input=True))
    other = make_policy(f"attentive:model={save_model(tmp_path / 'plain.pt', plain, window=16, max_candidates=6, meta={})}")
    assert not other.encoder.jobs(Context.of(state)).plan.any()
