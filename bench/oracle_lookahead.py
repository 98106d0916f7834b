"""`bench/fairness_knob.py` with the look-ahead told the true durations: how far better
duration estimates could take the look-ahead family, and so every student of it.

Every policy here estimates a job's run time as its time limit x its user's limit accuracy
(`agents.order.estimated_runtimes`), because that is what Slurm shows. `sjf-oracle` already
bounds the gain of exact estimates for an ordering rule; this bounds it for the look-ahead,
which also uses them to predict when running jobs give their GPUs back. An upper bound no
live scheduler has, never a baseline: the policies report as ``oracle:NAME``.

The look-ahead sees a copy of each snapshot in which every job's time limit is its true
duration at the ideal placement (``PendingJob.oracle_duration``, remembered from the
job's pending days once it runs) and every user's limit accuracy is 1, so its estimates
are the true durations (a job slowed by its placement still ends later than that).

    .venv/bin/python bench/oracle_lookahead.py --oracle portfolio:fairness=0 [--oracle ...] \\
        --fairness "" --windows 8 --skip 0 --out FILE     # then fairness_knob.py --merge
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import fairness_knob  # noqa: E402

from attentived.agents.plan import Plan  # noqa: E402
from attentived.agents.state import ClusterState, QueueArrays, UserStats  # noqa: E402


class OracleEstimates:
    """``inner`` deciding on snapshots whose time limits are the true durations."""

    needs_oracle = True

    def __init__(self, inner: Any, name: str) -> None:
        self.inner, self.name = inner, name
        self.duration: dict[str, float] = {}

    def decide(self, state: ClusterState) -> Plan:
        pending = []
        for job in state.pending:
            if job.oracle_duration is None:
                raise ValueError(f"{self.name} needs true durations: run it in the simulator's oracle mode")
            self.duration[job.job_id] = job.oracle_duration
            pending.append(replace(job, time_limit=job.oracle_duration))
        running = tuple(replace(r, time_limit=self.duration.get(r.job_id, r.time_limit)) for r in state.running)
        queue = QueueArrays.of(pending)
        users = {u: _exact(s) for u, s in state.users.items()}
        return self.inner.decide(replace(state, pending=pending, running=running, users=users, queue_arrays=queue,
                                         release_order=None, user_accuracy=np.ones(len(queue.users))))


def _exact(stats: UserStats) -> UserStats:
    """``stats`` with a limit accuracy of 1 (the limits are the durations now)."""
    out = replace(stats)
    object.__setattr__(out, "limit_accuracy", 1.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--oracle", action="append", default=[], help="a policy name to run with true durations (repeatable)")
    args, rest = ap.parse_known_args()
    if not args.oracle:
        ap.error("give at least one --oracle POLICY (e.g. portfolio:fairness=0)")
    from attentived.agents.registry import make_policy
    from attentived.agents.spec import BadPolicyName

    for name in args.oracle:  # a bad name is refused before any window is replayed
        try:
            make_policy(name, seed=0)
        except BadPolicyName as e:
            ap.error(f"--oracle {name}: {e}")

    def build(name: str):
        return lambda seed: OracleEstimates(make_policy(name, seed=seed), f"oracle:{name}")

    fairness_knob.main(extra={f"oracle:{n}": build(n) for n in args.oracle}, argv=rest)


if __name__ == "__main__":
    main()
