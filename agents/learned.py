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

``attentive-lookahead`` runs an attentive model too: its job agent's ranking is one more
starting solution of the `Portfolio` look-ahead (`attentived.agents.guided`).

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
from .guided import GuidedPortfolio
from .mlp import DeepRMNet, ProximityNet
from .networks import AttentiveNet
from .objective import DEFAULT_FAIRNESS, PROTECT_OFF
from .placement import Consolidate
from .policy import Policy, Scheduler
from .proximity import ProximityPlacer


def _attentive(model: LoadedModel, seed: int, threads: int | None, fairness: float | None = None,
               protect: float = PROTECT_OFF) -> AttentivePolicy:
    assert isinstance(model.net, AttentiveNet)
    try:
        return AttentivePolicy(model.net, fairness, window=model.window, max_candidates=model.max_candidates, seed=seed,
                               threads=threads, protect=protect)
    except ValueError as e:  # a setting the model cannot take: the model file's problem
        raise CheckpointError(str(e)) from None


def _lookahead(model: LoadedModel, seed: int, threads: int | None, fairness: float | None = None,
               protect: float = PROTECT_OFF) -> Policy:
    """The look-ahead at W (default `DEFAULT_FAIRNESS`) and ``protect``, the network at
    the same W when it takes the input (and at none when it does not: it only proposes)."""
    assert isinstance(model.net, AttentiveNet)
    agent = _attentive(model, seed, threads, fairness if model.net.cfg.fairness_input else None)
    w = DEFAULT_FAIRNESS if fairness is None else fairness
    return Scheduler(GuidedPortfolio(seed=seed, fairness=w, protect=protect, agent=agent), Consolidate(), backfill=False,
                     name="attentive-lookahead")


def _deeprm(model: LoadedModel, seed: int, threads: int | None, protect: float = PROTECT_OFF) -> Policy:
    assert isinstance(model.net, DeepRMNet)
    return DeepRMPolicy(model.net, seed=seed, threads=threads, protect=protect)


def _proximity(model: LoadedModel, seed: int, threads: int | None) -> Policy:
    if threads is not None:
        torch.set_num_threads(threads)
    net = model.net
    assert isinstance(net, ProximityNet)
    return Scheduler(ORDERS[net.order](seed), ProximityPlacer(net, seed=seed), backfill=False, name="proximity-drl")


POLICIES: dict[str, Callable[..., Policy]] = {
    "attentive": _attentive,
    "attentive-lookahead": _lookahead,
    "deeprm": _deeprm,
    "proximity-drl": _proximity,
}
"""The policy that runs a trained network, by policy name, given the model, a seed, the
number of torch threads (``None``: leave torch's setting) and the policy's parameters
(`registry.LEARNED_PARAMETERS`, less ``model``) as keywords."""

AGENT_OF: dict[str, str] = {"attentive-lookahead": "attentive"}
"""The agent whose model a learned policy runs, where the two names differ."""


def default_model_path(policy: str) -> Path:
    """The model shipped for learned policy ``policy`` (its agent's,
    ``attentived/data/models/<agent>-default.pt``)."""
    return Path(str(files("attentived.data") / "models" / f"{AGENT_OF.get(policy, policy)}-default.pt"))


def load_learned(policy: str | None, path: str | os.PathLike[str] | None = None, seed: int = 0,
                 threads: int | None = 1, fairness: float | None = None, protect: float | None = None) -> Policy:
    """Learned policy ``policy`` (``None``: the one of the model's agent) on a trained
    model: the file at ``path`` (default: the shipped model). A model of another agent is
    refused (`CheckpointError`), so ``--policy deeprm --model attentive.pt`` fails instead
    of mis-loading. ``fairness`` and ``protect`` are the policy's parameters of those names
    (``None``: not given)."""
    if path is None:
        if policy is None:
            raise ValueError("name a policy or a model file")
        path = default_model_path(policy)
    model = load_model(path)
    agent = None if policy is None else AGENT_OF.get(policy, policy)
    if agent is not None and model.agent != agent:
        raise CheckpointError(f"{path}: a model of the {model.agent} agent, not {agent}; run it as --policy {model.agent}")
    try:
        given = {"fairness": fairness, "protect": protect}
        params = {k: v for k, v in given.items() if v is not None}
        return POLICIES[policy or model.agent](model, seed, threads, **params)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from None
