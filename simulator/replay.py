"""Replay one trace under several policies on one cluster: the offline job of attentived.

Every policy sees the identical workload (same modelled time limits and models, drawn
from the seed), so differences in the table come from decisions alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from attentived.agents.policy import Policy
from attentived.topology import Topology
from attentived.topology.speed import SpeedModel

from .engine import SimResult, Simulation, UnstartableJob, prepare_jobs
from .metrics import SUMMARY_KEYS, summarize
from .trace import Trace, TraceError, check_fits


@dataclass(frozen=True)
class PolicyRun:
    result: SimResult
    summary: dict[str, float]


@dataclass(frozen=True)
class Replay:
    trace: Trace
    topology: Topology
    seed: int
    runs: dict[str, PolicyRun]

    def as_json(self) -> dict:
        """The documented ``replay --json`` shape: exactly these keys."""
        return {
            "trace": self.trace.name,
            "cluster": {"nodes": len(self.topology.nodes), "gpus": self.topology.num_gpus},
            "policies": {name: {k: run.summary[k] for k in SUMMARY_KEYS} for name, run in self.runs.items()},
        }


def replay(
    trace: Trace,
    topology: Topology,
    policies: Sequence[Policy],
    *,
    seed: int = 0,
    on_policy: Callable[[str], Callable[[int], None] | None] | None = None,
) -> Replay:
    """Run each policy; ``on_policy(name)`` may return a progress callback for that run.

    A job that could never start on ``topology`` (more GPUs than it has, or CPUs, memory,
    a GPU type, features or ``-w`` nodes no node offers) is a TraceError at its line."""
    check_fits(trace, topology.num_gpus)
    jobs = prepare_jobs(trace.jobs, seed)
    speed = SpeedModel(topology)
    runs: dict[str, PolicyRun] = {}
    for policy in policies:
        if policy.name in runs:
            raise ValueError(f"policy {policy.name} given twice")
        progress = on_policy(policy.name) if on_policy else None
        try:
            sim = Simulation(jobs, topology, policy, speed=speed, progress=progress)
        except UnstartableJob as e:
            line = next(j.line for j in trace.jobs if j.job_id == e.job_id)
            raise TraceError(trace.path, str(e), line=line) from None
        result = sim.run()
        runs[policy.name] = PolicyRun(result, summarize(result.records, topology.num_gpus))
    return Replay(trace, topology, seed, runs)
