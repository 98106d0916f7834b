"""The learned policies: a trained model file in, the `Policy` that runs its network out.

Each agent's network is built by `checkpoint.load_model` (the file records which agent it
belongs to); this module turns it into the policy the simulator and the daemon call:

================  ===========================  ==========================
agent             network                      policy
================  ===========================  ==========================
attentive         `AttentiveNet` (attention    `AttentivePolicy`
                  over jobs, GPU agent)
deeprm            `DeepRMNet` (MLP over 10     `DeepRMPolicy` (job MLP,
                  job slots)                   consolidate placement)
proximity-drl     `ProximityNet` (MLP over     `Scheduler(<its order>,
                  128 GPU slots)               ProximityPlacer)`
================  ===========================  ==========================

Training (`attentived.training`) builds on this; nothing here knows how a model was trained.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

import torch

from .attentive import AttentivePolicy
from .catalog import ORDERS
from .checkpoint import CheckpointError, LoadedModel, load_model
from .deeprm import DeepRMPolicy
from .mlp import DeepRMNet, ProximityNet
from .networks import AttentiveNet
from .policy import Policy, Scheduler
from .proximity import ProximityPlacer


def _attentive(model: LoadedModel, seed: int, threads: int | None, fairness: float | None = None) -> Policy:
    assert isinstance(model.net, AttentiveNet)
    try:
        return AttentivePolicy(model.net, fairness, window=model.window, max_candidates=model.max_candidates, seed=seed,
                               threads=threads)
    except ValueError as e:  # a setting the model cannot take: the model file's problem
        raise CheckpointError(str(e)) from None


def _deeprm(model: LoadedModel, seed: int, threads: int | None) -> Policy:
    assert isinstance(model.net, DeepRMNet)
    return DeepRMPolicy(model.net, seed=seed, threads=threads)


def _proximity(model: LoadedModel, seed: int, threads: int | None) -> Policy:
    if threads is not None:
        torch.set_num_threads(threads)
    net = model.net
    assert isinstance(net, ProximityNet)
    return Scheduler(ORDERS[net.order](seed), ProximityPlacer(net, seed=seed), backfill=False, name="proximity-drl")


POLICIES: dict[str, Callable[..., Policy]] = {
    "attentive": _attentive,
    "deeprm": _deeprm,
    "proximity-drl": _proximity,
}
"""The policy that runs each agent's trained network, given the model, a seed, the
number of torch threads (``None``: leave torch's setting) and the policy's parameters
(`registry.LEARNED_PARAMETERS`, less ``model``) as keywords."""


def default_model_path(agent: str) -> Path:
    """The model shipped for ``agent`` (``attentived/data/models/<agent>-default.pt``)."""
    return Path(str(files("attentived.data") / "models" / f"{agent}-default.pt"))


def load_learned(agent: str | None, path: str | os.PathLike[str] | None = None, seed: int = 0,
                 threads: int | None = 1, fairness: float | None = None) -> Policy:
    """The policy of a trained model: the file at ``path`` (default: ``agent``'s shipped
    model). With ``agent`` named, a model of another agent is refused (`CheckpointError`),
    so ``--policy deeprm --model attentive.pt`` fails instead of mis-loading. ``fairness``
    is the policy's parameter of that name (``None``: not given)."""
    if path is None:
        if agent is None:
            raise ValueError("name an agent or a model file")
        path = default_model_path(agent)
    model = load_model(path)
    if agent is not None and model.agent != agent:
        raise CheckpointError(f"{path}: a model of the {model.agent} agent, not {agent}; run it as --policy {model.agent}")
    try:
        params = {} if fairness is None else {"fairness": fairness}
        return POLICIES[model.agent](model, seed, threads, **params)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from None
