"""Decision latency of the attentive policy: 1,000 pending jobs on a 1,024-GPU cluster.

Target (issue 3): one full decision -- features, job agent, candidate placements, GPU
agent -- has p99 < 50 ms under ``torch.set_num_threads(1)``. Each sample is a fresh
random state: 128 nodes x 8 GPUs (32 leaf switches), about 75% of the GPUs busy with
running jobs whose time limits end over the next days, 1,000 pending jobs whose sizes and
limits follow the Philly trace's mix, 12 users with finished-job histories.

Timed per state: ``choose`` (one decision: what the target is about), for reference
``decide`` (a whole plan: every job the agents start at this instant, usually several),
the same plan with the slowdown guard ``protect=2`` (jobs their wait has slowed down twice
go first: the random states' waits make most jobs such), and the whole plan of
``attentive-lookahead`` (the portfolio look-ahead judging the job agent's ranking: one
network call, the look-ahead's evaluations and the consolidating placements; it answers
within the same 50 ms), and one decision of ``attentive:one_node=1`` with the view that shows
jobs fitting one node as ``-N 1`` jobs built for it (`agents.one_node`). Prints a table and writes
bench/results/agents_latency.json.

    .venv/bin/python bench/agents_latency.py [--model PATH] [--states 200]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

RESULTS = Path(__file__).parent / "results" / "agents_latency.json"
GUARDED = 2.0  # the ``protect`` setting of the guarded plan's row


def random_state(rng: np.random.Generator, topo, pending: int = 1000, busy_share: float = 0.75):
    from attentived.agents.state import ClusterState, PendingJob, RunningJob, UserStats

    sizes, weights = [1, 2, 4, 8, 16, 32], [0.85, 0.04, 0.04, 0.04, 0.015, 0.015]
    limits = [900.0, 3600.0, 4 * 3600.0, 86_400.0, 3 * 86_400.0, None]
    now = 1e6
    free = np.ones(topo.num_gpus, bool)
    running = []
    order = rng.permutation(topo.num_gpus)
    at = 0
    while at < busy_share * topo.num_gpus:
        n = int(rng.choice(sizes[:4], p=np.array(weights[:4]) / sum(weights[:4])))
        gpus = tuple(sorted(int(g) for g in order[at : at + n]))
        at += n
        limit = limits[int(rng.integers(0, len(limits)))]
        running.append(RunningJob(f"r{at}", f"u{rng.integers(12)}", gpus, now - 5000.0, now - float(rng.uniform(0, 3600)), limit))
        free[list(gpus)] = False
    models = [None, "bert", "imagenet", "cifar10", "ncf", "yolov3", "deepspeech2"]
    jobs = tuple(
        PendingJob(
            f"p{i}", f"u{rng.integers(12)}", int(rng.choice(sizes, p=weights)), now - float(rng.exponential(20_000)),
            limits[int(rng.integers(0, len(limits)))], model=models[int(rng.integers(0, len(models)))],
        )
        for i in range(pending)
    )
    users = {f"u{u}": UserStats(jobs=int(rng.integers(1, 500)), gpu_seconds=float(rng.exponential(1e7)),
                                wait_seconds=float(rng.exponential(1e6)), run_seconds=float(rng.exponential(1e6)),
                                limit_seconds=float(rng.exponential(3e6)), limited_jobs=int(rng.integers(1, 400)))
             for u in range(12)}
    return ClusterState(now=now, topology=topo, free=free, pending=jobs, running=tuple(running), users=users)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model file (default: the shipped model)")
    ap.add_argument("--states", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from attentived.agents.attentive import AttentivePolicy
    from attentived.agents.learned import load_learned
    from attentived.agents.one_node import OneNode
    from attentived.topology import uniform

    torch.set_num_threads(1)
    policy = load_learned("attentive", args.model)
    assert isinstance(policy, AttentivePolicy)  # choose() is the attentive policy's single decision
    topo = uniform(128, 8, nodes_per_switch=4)
    rng = np.random.default_rng(args.seed)
    states = [random_state(rng, topo) for _ in range(args.states)]
    for s in states[:5]:  # warm-up: lazy caches, allocator
        policy.choose(s)
    guarded = load_learned("attentive", args.model, protect=GUARDED)
    lookahead = load_learned("attentive-lookahead", args.model)
    lookahead.decide(states[0])
    guarded.decide(states[0])
    one_node = OneNode(policy, "attentive:one_node=1")
    policy.choose(one_node.view(states[0]))
    choose_ms, decide_ms, guarded_ms, lookahead_ms, one_node_ms, starts = [], [], [], [], [], []
    for s in states:
        t0 = time.perf_counter()
        policy.choose(s)
        choose_ms.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        policy.choose(one_node.view(s))
        one_node_ms.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        lookahead.decide(s)
        lookahead_ms.append((time.perf_counter() - t0) * 1e3)
    for s in states[: max(20, args.states // 5)]:
        t0 = time.perf_counter()
        plan = policy.decide(s)
        decide_ms.append((time.perf_counter() - t0) * 1e3)
        starts.append(len(plan.starts))
        t0 = time.perf_counter()
        guarded.decide(s)
        guarded_ms.append((time.perf_counter() - t0) * 1e3)

    def stats(xs: list[float]) -> dict[str, float]:
        a = np.asarray(xs)
        return {"p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
                "p99": float(np.percentile(a, 99)), "max": float(a.max()), "n": len(a)}

    doc: dict[str, Any] = {
        "benchmark": "agents_latency",
        "cluster": "128 nodes x 8 GPUs (1,024 GPUs), 32 leaf switches",
        "pending_jobs": 1000,
        "torch_threads": torch.get_num_threads(),
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "cpu": platform.processor() or platform.machine()},
        "choose_ms": stats(choose_ms),
        "decide_ms": stats(decide_ms),
        "decide_mean_starts": float(np.mean(starts)),
        "decide_protect": GUARDED,
        "decide_protect_ms": stats(guarded_ms),
        "lookahead_decide_ms": stats(lookahead_ms),
        "one_node_choose_ms": stats(one_node_ms),
        "target_p99_ms": 50.0,
        "meets_target": stats(choose_ms)["p99"] < 50.0,
        "lookahead_meets_target": stats(lookahead_ms)["p99"] < 50.0,
        "one_node_meets_target": stats(one_node_ms)["p99"] < 50.0,
    }
    print(f"{'one decision (job + GPU set)':<30} p50 {doc['choose_ms']['p50']:6.1f} ms  p90 {doc['choose_ms']['p90']:6.1f} ms  "
          f"p99 {doc['choose_ms']['p99']:6.1f} ms  max {doc['choose_ms']['max']:6.1f} ms  (target p99 < 50 ms: "
          f"{'met' if doc['meets_target'] else 'MISSED'})")
    print(f"{'whole plan (decide)':<30} p50 {doc['decide_ms']['p50']:6.1f} ms  p90 {doc['decide_ms']['p90']:6.1f} ms  "
          f"p99 {doc['decide_ms']['p99']:6.1f} ms  max {doc['decide_ms']['max']:6.1f} ms  "
          f"({doc['decide_mean_starts']:.1f} starts per plan on average)")
    g = doc["decide_protect_ms"]
    print(f"{f'whole plan, protect={GUARDED:g}':<30} p50 {g['p50']:6.1f} ms  p90 {g['p90']:6.1f} ms  "
          f"p99 {g['p99']:6.1f} ms  max {g['max']:6.1f} ms")
    la = doc["lookahead_decide_ms"]
    print(f"{'attentive-lookahead plan':<30} p50 {la['p50']:6.1f} ms  p90 {la['p90']:6.1f} ms  "
          f"p99 {la['p99']:6.1f} ms  max {la['max']:6.1f} ms  (p99 < 50 ms: "
          f"{'met' if doc['lookahead_meets_target'] else 'MISSED'})")
    o = doc["one_node_choose_ms"]
    print(f"{'one decision, one_node=1':<30} p50 {o['p50']:6.1f} ms  p90 {o['p90']:6.1f} ms  "
          f"p99 {o['p99']:6.1f} ms  max {o['max']:6.1f} ms  (p99 < 50 ms: "
          f"{'met' if doc['one_node_meets_target'] else 'MISSED'})")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
