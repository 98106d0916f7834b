"""The look-ahead guided by the attentive job agent: the ``attentive-lookahead`` policy.

Expert iteration's other half. Training pulls the network toward the `Portfolio`
look-ahead at each fairness setting W (`attentived.training.teacher`), then PPO moves it
on; at decision time this chooser hands the network's ranking back to the look-ahead as
two more starting solutions beside the heuristic ones: the window in the job agent's
order, and the same order with the jobs that fit now first (the starts the agent would
make before holding GPUs for anyone). The look-ahead's modelled cost picks among all of
them, so the network's proposal is followed only where the model expects it to beat every
heuristic order; otherwise the decision is `Portfolio`'s.

One encoding of the queue per decision (`TwoPhasePolicy.ranking`, the cost of one
`choose`), not a whole plan: a plan re-encodes after every start, which at 1,000 pending
jobs on 1,024 GPUs takes hundreds of milliseconds, against a 50 ms budget. Placement is
the look-ahead's (consolidate), as for the other look-ahead policies; the GPU agent is
not asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .metaheuristic import Portfolio
from .objective import LookAhead
from .placement import Consolidate
from .policy import Scheduler
from .state import ClusterState
from .two_phase import TwoPhasePolicy


def look_ahead_teacher(fairness: float) -> Scheduler:
    """The `Portfolio` look-ahead at setting W with consolidated placement and no
    backfill: the attentive agent's teacher in training (`attentived.training.teacher`)
    and the plan a model with `NetConfig.plan_input` reads, in training and live alike."""
    return Scheduler(Portfolio(seed=0, fairness=fairness), Consolidate(), backfill=False, name="look-ahead-teacher")


@dataclass
class GuidedPortfolio(Portfolio):
    """`Portfolio` whose starting solutions include ``agent``'s ranking of the window."""

    name: str = "attentive-lookahead"
    agent: TwoPhasePolicy | None = field(default=None, repr=False)

    def proposals(self, state: ClusterState, look: LookAhead) -> list[tuple[int, ...]]:
        if self.agent is None:
            raise ValueError("attentive-lookahead needs the job agent whose ranking it judges")
        where = np.empty(len(state.pending), dtype=np.int64)
        where[self.agent.ranking(state)] = np.arange(len(state.pending))
        ranked = tuple(sorted(range(look.size), key=lambda i: where[look.rows[i]]))
        fits_first = tuple(sorted(ranked, key=lambda i: look.gpus[i] > look.total_free))  # stable
        return [ranked, fits_first]
