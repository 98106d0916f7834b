"""Saving and loading trained models (the attentive agents and the DRL baselines), safely
and with checks that fail clearly.

A model file is a plain dict written by ``torch.save`` and read with
``torch.load(weights_only=True)``, which unpickles only tensors and plain containers: a
model file cannot run code when it is loaded. Besides the weights it records:

* ``format`` and ``version``: what wrote it; a file of another format or a newer version
  is refused rather than half-loaded;
* ``dims``: the feature widths the weights were trained on. They are compared with the
  widths this attentived computes, so a model trained on other features fails with a
  message naming the mismatch instead of producing silent garbage;
* ``agent``: which network the weights belong to (``attentive``, ``deeprm``,
  ``proximity-drl``; files written before the baselines existed have none and are
  attentive), so a model is never loaded into the wrong policy;
* ``net`` (what rebuilds the network: layer sizes, fixed input sizes), ``window``,
  ``max_candidates`` and ``meta`` (how it was trained).

Training checkpoints (`save_training` / `load_training`) add the optimizer, the update
counter and RNG states, so ``attentived train --resume`` continues where a run stopped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attentived.atomic import write_file

from .mlp import DeepRMNet, ProximityNet
from .networks import AttentiveNet

FORMAT = "attentived.attentive"
VERSION = 1


class CheckpointError(ValueError):
    """A model file that cannot be used here; the message says why and what to do."""


Net = AttentiveNet | DeepRMNet | ProximityNet
"""The networks a model file can hold."""

NETS: dict[str, type[Net]] = {cls.kind: cls for cls in (AttentiveNet, DeepRMNet, ProximityNet)}
"""Network classes by the ``agent`` name a model file records."""


def feature_dims(agent: str = "attentive") -> dict[str, int]:
    """The feature widths this version of attentived computes for ``agent``'s network."""
    return NETS[agent].dims()


@dataclass(frozen=True)
class LoadedModel:
    net: Net  # as ``agent`` says
    window: int
    max_candidates: int
    meta: dict[str, Any]
    agent: str = "attentive"


def _payload(net: Net, window: int, max_candidates: int, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "agent": net.kind,
        "dims": net.dims(),
        "net": net.spec(),
        "window": window,
        "max_candidates": max_candidates,
        "state_dict": {k: v.detach().cpu() for k, v in net.state_dict().items()},
        "meta": meta,
    }


def save_model(path: str | os.PathLike[str], net: Net, *, window: int, max_candidates: int, meta: dict[str, Any]) -> Path:
    """Write an inference model (weights and checks, no optimizer). ``meta`` must hold only
    plain values (str, int, float, bool, None, lists and dicts of them)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = _payload(net, window, max_candidates, meta)
    write_file(path, lambda tmp: torch.save(payload, tmp))  # never a half-written model where a reader looks
    return path


def save_training(
    path: str | os.PathLike[str],
    net: Net,
    optimizer: torch.optim.Optimizer,
    *,
    window: int,
    max_candidates: int,
    meta: dict[str, Any],
    progress: dict[str, Any],
) -> Path:
    """A model file plus what resuming needs: optimizer state and ``progress`` (counters,
    RNG states; plain values and tensors only)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = _payload(net, window, max_candidates, meta)
    payload["optimizer"] = optimizer.state_dict()
    payload["progress"] = progress
    write_file(path, lambda tmp: torch.save(payload, tmp))
    return path


def _read(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such model file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated or foreign files
        raise CheckpointError(f"{path}: not a readable attentived model ({type(e).__name__}: {e})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an attentived attentive model (format {_get(payload, 'format')!r})")
    version = payload.get("version")
    if version != VERSION:
        raise CheckpointError(
            f"{path}: model format version {version!r}, this attentived reads version {VERSION}; "
            "retrain the model or use the attentived release that wrote it"
        )
    for key in ("dims", "net", "window", "max_candidates", "state_dict", "meta"):
        if key not in payload:
            raise CheckpointError(f"{path}: model file lacks {key!r} (truncated or hand-edited?)")
    agent = payload.get("agent", "attentive")
    if agent not in NETS:
        raise CheckpointError(f"{path}: a model of agent {agent!r}, which this attentived does not know ({', '.join(NETS)})")
    payload["agent"] = agent
    dims, expected = payload["dims"], feature_dims(agent)
    wrong = [f"{k}: model {dims.get(k)!r}, features {v}" for k, v in expected.items() if dims.get(k) != v]
    if wrong:
        raise CheckpointError(
            f"{path}: the model was trained on other input dimensions ({'; '.join(wrong)}); "
            "retrain it with this version of attentived"
        )
    return payload


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else type(obj).__name__


_MAX_SIZE = 65_536  # no layer of a model attentived trains comes near this


def _build(path: str | os.PathLike[str], payload: dict[str, Any]) -> Net:
    spec = payload["net"]
    if not isinstance(spec, dict) or not all(
        isinstance(v, (str, bool)) or (isinstance(v, int) and 0 < v <= _MAX_SIZE) for v in spec.values()
    ):  # sizes, names and switches (``fairness_input``)
        raise CheckpointError(f"{path}: implausible network sizes {spec!r} (corrupt or hand-edited?)")
    try:
        net = NETS[payload["agent"]].from_spec(spec)
        net.load_state_dict(payload["state_dict"])
    except Exception as e:  # torch asserts on some impossible shapes (heads not dividing d_model)
        raise CheckpointError(f"{path}: weights do not fit the recorded network sizes: {e}") from None
    net.eval()
    return net


def load_model(path: str | os.PathLike[str]) -> LoadedModel:
    """Read and check a model file (either kind); raises `CheckpointError` with the reason."""
    payload = _read(path)
    net = _build(path, payload)
    return LoadedModel(net, int(payload["window"]), int(payload["max_candidates"]), dict(payload["meta"]), payload["agent"])


def load_training(path: str | os.PathLike[str]) -> tuple[LoadedModel, dict[str, Any], dict[str, Any]]:
    """A training checkpoint: the model, the optimizer state dict and the progress dict."""
    payload = _read(path)
    if "optimizer" not in payload or "progress" not in payload:
        raise CheckpointError(f"{path}: an inference model, not a training checkpoint (nothing to resume)")
    net = _build(path, payload)
    model = LoadedModel(net, int(payload["window"]), int(payload["max_candidates"]), dict(payload["meta"]), payload["agent"])
    return model, payload["optimizer"], payload["progress"]
