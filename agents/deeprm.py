"""The DeepRM-style baseline: an MLP over a fixed window of job slots chooses the next job.

After DeepRM (Mao et al., HotNets 2016), whose policy network reads the first ``M`` job
slots of the queue (plus a backlog count and the cluster's resource image) and picks one
slot or "nothing more now". Here the slots are the same window and features the attentive
job agent reads (`attentived.agents.features.JobView`, 10 slots by default, as DeepRM's
M = 10; the summary rows play the resource image and carry the queue length), flattened
into an MLP (`attentived.agents.mlp.DeepRMNet`). DeepRM schedules abstract resources, not
GPUs on a topology, so placement is the `Consolidate` heuristic: the baseline isolates
what attention over the queue adds to job choice.

It runs through `TwoPhasePolicy`, the attentive agents' own decision loop, and trains on
the same `SchedulingEnv` with the same PPO loop, reward and data.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .features import Context, JobView
from .mlp import DeepRMNet
from .objective import PROTECT_OFF
from .placement import Consolidate
from .state import PendingJob
from .two_phase import TwoPhasePolicy


class _Encoded(NamedTuple):
    logits: torch.Tensor  # [1, W + 1]


class DeepRMPolicy(TwoPhasePolicy):
    """`Policy` over a trained `DeepRMNet`: MLP job choice, consolidated placement."""

    name = "deeprm"

    def __init__(self, net: DeepRMNet, *, deterministic: bool = True, seed: int = 0, threads: int | None = 1,
                 protect: float = PROTECT_OFF) -> None:
        super().__init__(window=net.window, max_candidates=1, deterministic=deterministic, seed=seed, threads=threads,
                         protect=protect)
        self.net = net.eval()
        self._placer = Consolidate()

    def _encode(self, view: JobView) -> _Encoded:
        return _Encoded(self.net.job_logits(
            torch.from_numpy(view.jobs)[None], torch.from_numpy(view.summary)[None], torch.from_numpy(view.valid)[None]
        ))

    def _place(self, ctx: Context, encoded: _Encoded, slot: int, job: PendingJob) -> tuple[int, ...]:
        gpus = self._placer.place(job, ctx.room(job).free, ctx.state)
        assert gpus is not None, "the job agent offers only jobs that fit"
        return tuple(int(g) for g in gpus)
