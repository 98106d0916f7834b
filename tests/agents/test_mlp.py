"""The DRL baselines' networks: shapes, masks, the DeepRM GPU phase, spec round trips."""

from __future__ import annotations

import numpy as np
import torch

from attentived.agents.mlp import DeepRMNet, MlpConfig, ProximityNet
from attentived.agents.proximity import GLOBAL_FEATURES, GPU_FEATURES
from attentived.topology import uniform
from attentived.training.gym_env import Episode, FixedEpisode, SchedulingEnv

from ..training.test_gym_env import toy_jobs


def _batch(obs_list):
    return {k: torch.as_tensor(np.stack([np.asarray(o[k]) for o in obs_list])) for k in obs_list[0]}


def test_deeprm_masks_and_takes_consolidate_in_the_gpu_phase():
    env = SchedulingEnv(FixedEpisode(Episode(tuple(toy_jobs(20)), uniform(2, 8, nodes_per_switch=1), "toy")),
                        window=10, max_nodes=4)
    torch.manual_seed(0)
    net = DeepRMNet(10, MlpConfig(hidden=32))
    obs, _ = env.reset(seed=0)
    job_obs = obs
    slot = int(np.flatnonzero(obs["action_mask"])[0])
    gpu_obs, *_ = env.step(slot)
    assert gpu_obs["phase"] == 1
    logits, value = net(_batch([job_obs, gpu_obs]))
    assert logits.shape == (2, env.action_space.n) and value.shape == (2,)
    forbidden = ~torch.as_tensor(np.stack([job_obs["action_mask"], gpu_obs["action_mask"]])).bool()
    assert (logits[forbidden] <= -1e7).all()
    # In the GPU phase exactly one action is open: the consolidate candidate.
    open_ = (logits[1] > -1e7).nonzero().view(-1).tolist()
    assert open_ == [next(k for k, c in enumerate(env.placements) if "consolidate" in c.sources)]


def test_proximity_net_shapes_and_mask():
    net = ProximityNet(16, MlpConfig(hidden=32))
    obs = {"gpus": torch.rand(3, 16, GPU_FEATURES), "globals": torch.rand(3, GLOBAL_FEATURES),
           "action_mask": torch.zeros(3, 16, dtype=torch.int8)}
    obs["action_mask"][:, 5:9] = 1
    logits, value = net(obs)
    assert logits.shape == (3, 16) and value.shape == (3,)
    assert (logits[:, :5] <= -1e7).all() and (logits[:, 5:9] > -1e7).all()


def test_specs_rebuild_the_same_shapes():
    for net in (DeepRMNet(10, MlpConfig(hidden=16, layers=3)), ProximityNet(32, MlpConfig(hidden=16), order="sjf")):
        again = type(net).from_spec(net.spec())
        again.load_state_dict(net.state_dict())  # raises if any shape differs
        assert again.spec() == net.spec()
