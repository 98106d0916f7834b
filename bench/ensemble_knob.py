"""`bench/fairness_knob.py` with ensembles of attentive models as more policies.

An ensemble decides with the mean of its members' log-probabilities, in both agents: each
member encodes the queue, the job agent's choice maximises the mean over members, and the
GPU agent's placement likewise (each member scoring the candidates from its own encoding
of the chosen job). Averaging models rather than weights (docs/agents.md, "Choosing a
checkpoint": the mean weights did not help) asks whether the spread between checkpoints
and seeds is noise that a vote removes (docs/agents.md, "Five seeds at the shipped
scale"). The members must share their inputs (window, candidates, urgency).

    .venv/bin/python bench/ensemble_knob.py --ensemble final5=runs/s2/final.pt+runs/s3/final.pt+... \\
        [--ensemble NAME=A.pt+B.pt,fairness=1 ...] [fairness_knob.py options] --out FILE

Each ensemble reports as ``ensemble:NAME`` (``ensemble:NAME,fairness=W`` with a setting).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).parent))

import fairness_knob  # noqa: E402

from attentived.agents.attentive import AttentivePolicy  # noqa: E402
from attentived.agents.checkpoint import CheckpointError, load_model  # noqa: E402
from attentived.agents.features import GpuView, JobView  # noqa: E402
from attentived.agents.networks import AttentiveNet  # noqa: E402
from attentived.agents.objective import check_fairness  # noqa: E402


class Encodings(NamedTuple):
    """Every member's encoding of one queue, and the job agent's mean log-probabilities."""

    members: list[Any]
    logits: torch.Tensor


class EnsemblePolicy(AttentivePolicy):
    """`AttentivePolicy` over several networks: the mean of their log-probabilities."""

    def __init__(self, nets: list[AttentiveNet], fairness: float | None = None, **kwargs: Any) -> None:
        super().__init__(nets[0], fairness, **kwargs)
        self.nets = [n.eval() for n in nets]

    def _each(self, score: Callable[[int], Any]) -> list[Any]:
        """``score(i)`` with member ``i`` as ``self.net`` (what `AttentivePolicy` reads), for each."""
        try:
            out = []
            for i, net in enumerate(self.nets):
                self.net = net
                out.append(score(i))
            return out
        finally:
            self.net = self.nets[0]

    def _encode(self, view: JobView, need_weights: bool = False) -> Encodings:  # type: ignore[override]
        members = self._each(lambda _: AttentivePolicy._encode(self, view))
        return Encodings(members, torch.stack([torch.log_softmax(e.logits, -1) for e in members]).mean(0))

    def _gpu_logits(self, enc: Encodings, slot: int, gv: GpuView) -> torch.Tensor:  # type: ignore[override]
        scores = self._each(lambda i: torch.log_softmax(AttentivePolicy._gpu_logits(self, enc.members[i], slot, gv), -1))
        return torch.stack(scores).mean(0)


def ensemble(spec: str):
    """``NAME=A.pt+B.pt[,fairness=W]`` -> (report name, a builder from a seed); ValueError
    saying what is wrong with ``spec``."""
    label, _, rest = spec.partition("=")
    paths, _, setting = rest.partition(",")
    if not label or not paths or (setting and not setting.startswith("fairness=")):
        raise ValueError(f"--ensemble {spec}: expected NAME=A.pt+B.pt[,fairness=W]")
    try:
        fairness = check_fairness(setting.removeprefix("fairness=")) if setting else None
        models = [load_model(p) for p in paths.split("+")]
    except (ValueError, CheckpointError) as e:  # a W that is no number in [0, 1], a missing or bad model file
        raise ValueError(f"--ensemble {label}: {e}") from None
    nets = [m.net for m in models if isinstance(m.net, AttentiveNet)]
    if len(nets) < len(models):
        raise ValueError(f"--ensemble {label}: every member must be an attentive model")
    if len({(m.window, m.max_candidates, n.cfg.urgency_input) for m, n in zip(models, nets)}) > 1:
        raise ValueError(f"--ensemble {label}: the members differ in window, candidates or urgency input")
    first = models[0]

    def build(seed: int) -> EnsemblePolicy:
        return EnsemblePolicy(nets, fairness, window=first.window, max_candidates=first.max_candidates, seed=seed, threads=1)

    return f"ensemble:{label}" + (f",fairness={fairness:g}" if setting else ""), build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ensemble", action="append", default=[], help="NAME=A.pt+B.pt[,fairness=W] (repeatable)")
    args, rest = ap.parse_known_args()
    if not args.ensemble:
        ap.error("name at least one --ensemble (the other options are fairness_knob.py's)")
    try:
        extra = dict(ensemble(s) for s in args.ensemble)
    except ValueError as e:
        ap.error(str(e))
    fairness_knob.main(extra, rest)


if __name__ == "__main__":
    main()
