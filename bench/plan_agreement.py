"""How closely a plan-reading model follows its look-ahead teacher, decision by decision.

Issue 14: a model trained with ``plan_input`` reads the `portfolio` look-ahead's plan at
its W, and its teacher's labels come from that plan. Whether it then *does* what its
teacher does is a question of each decision, not of the window's averages: this replays
one held-out window of the knob bench (`fairness_knob.matched_windows`) under the model
and, at every state it decides on, asks the teacher (`guided.look_ahead_teacher` at the
same W) too. It counts the decisions where both start nothing, where the first job started
is the same or another, where the sets of jobs started are equal, and where the teacher
starts nothing and the model starts jobs anyway (through its WAIT's fill, or a job of its
own); and how many of the model's starts that the teacher also makes take the same GPUs.
The teacher replays the same window on its own for the outcome it would have had.

    .venv/bin/python bench/plan_agreement.py --model runs/plan2/best.pt --fairness 1 [--window 0] [--seed 0] [--follow]

``--follow`` sets the model's plan bias to `FOLLOW_BIAS` nats, so it takes its plan's job
(or WAIT) wherever the plan has one: what is then left between the model and its teacher
is the decision loop's doing (its window, its GPU agent, how it carries a plan), not the
network's. It is how the re-planned look-ahead was found (docs/agents.md, "A plan holds
for its instant").

Prints the counts and both runs' avg JCT and worst user's mean wait; ``--json FILE``
writes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from attentived.agents.attentive import AttentivePolicy
from attentived.agents.guided import look_ahead_teacher
from attentived.agents.plan import Plan
from attentived.agents.registry import make_policy
from attentived.agents.spec import BadPolicyName
from attentived.agents.state import ClusterState
from attentived.simulator.replay import replay

sys.path.insert(0, str(Path(__file__).parent))

from fairness_knob import matched_windows  # noqa: E402

FOLLOW_BIAS = 100.0
"""``--follow``'s plan bias: far above the network's own logits (within +-10)."""


def follow(model: AttentivePolicy) -> None:
    """Make ``model`` take its plan's choice wherever the plan has one (``--follow``)."""
    bias = model.net.job_agent.plan_bias
    assert bias is not None, "follow needs a model that reads the plan"
    with torch.no_grad():
        bias.fill_(FOLLOW_BIAS)


class Probe:
    """The model's policy, asking its teacher at every state it decides on."""

    needs_oracle = False

    def __init__(self, model: AttentivePolicy, fairness: float) -> None:
        self.model = model
        self.name = model.name
        self.teacher = look_ahead_teacher(fairness)
        self.counts: Counter[str] = Counter()

    def decide(self, state: ClusterState) -> Plan:
        taught = self.teacher.decide(state)
        plan = self.model.decide(state)
        c = self.counts
        c["decisions"] += 1
        mine, theirs = [s.job_id for s in plan.starts], [s.job_id for s in taught.starts]
        if not mine and not theirs:
            c["both start nothing"] += 1
        elif not theirs:
            c["teacher starts nothing, model starts jobs"] += 1
        elif not mine:
            c["teacher starts jobs, model starts nothing"] += 1
        elif mine[0] == theirs[0]:
            c["same first job"] += 1
        else:
            c["another first job"] += 1
        c["same set of jobs"] += set(mine) == set(theirs)
        gpus = {s.job_id: tuple(sorted(s.gpus)) for s in taught.starts}
        for s in plan.starts:
            if s.job_id in gpus:
                c["starts the teacher also makes"] += 1
                c["same GPUs"] += gpus[s.job_id] == tuple(sorted(s.gpus))
        return plan


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a model file trained with plan_input")
    ap.add_argument("--fairness", type=float, default=1.0, help="the setting W of both (default 1)")
    ap.add_argument("--window", type=int, default=0, help="which of the knob bench's held-out windows (default 0)")
    ap.add_argument("--seed", type=int, default=0, help="the bench seed: time limits and models (default 0)")
    ap.add_argument("--follow", action="store_true",
                    help=f"set the model's plan bias to {FOLLOW_BIAS:g} nats: it takes its plan's choice wherever it can")
    ap.add_argument("--json", help="write the counts and outcomes here")
    args = ap.parse_args(argv)
    if args.window < 0:
        ap.error(f"--window must be >= 0 (got {args.window})")
    try:
        model = make_policy(f"attentive:model={args.model},fairness={args.fairness:g}", seed=args.seed)
    except BadPolicyName as e:
        ap.error(str(e))
    if not isinstance(model, AttentivePolicy) or model.encoder.planner is None:
        ap.error(f"{args.model}: this model does not read the look-ahead's plan (train it with plan_input = true)")
    if args.follow:
        follow(model)
    topo, (trace,) = matched_windows(1, args.window)
    probe = Probe(model, args.fairness)
    teacher = make_policy(f"portfolio:fairness={args.fairness:g}", seed=args.seed)
    result = replay(trace, topo, [probe, teacher], seed=args.seed)
    out: dict[str, Any] = {"window": trace.name, "seed": args.seed, "fairness": args.fairness, "model": args.model,
                           "follow": args.follow,
                           "counts": dict(probe.counts), "runs": {}}
    for name, run in result.runs.items():
        out["runs"][name] = {k: float(run.summary[k]) for k in ("avg_jct", "max_user_wait")}
        print(f"{name}: avg JCT {run.summary['avg_jct'] / 3600:.2f} h, worst user's mean wait "
              f"{run.summary['max_user_wait'] / 3600:.2f} h")
    for key, n in probe.counts.items():
        print(f"  {key:45s} {n}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
