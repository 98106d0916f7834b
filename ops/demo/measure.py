"""Measuring a run from Slurm's own records (``measure``: ``squeue --json -t all`` ->
``JobRecord`` -> ``simulator.metrics.summarize``, plus ``extra_metrics``), and the simulator's
prediction for the same workload (``predict``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attentived.agents.slurm_select import SlurmSelect
from attentived.simulator.engine import JobRecord, MainPasses, Relay, Simulation
from attentived.simulator.metrics import summarize, user_mean_waits
from attentived.simulator.slurm_gpus import SlurmPicksGpus
from attentived.topology import Topology
from attentived.topology.speed import SpeedModel

from .workload import JOB_PREFIX, Workload, demo_topology

__all__ = [
    "LiveClocks",
    "Prediction",
    "mean_summary",
    "measure",
    "predict",
    "relative_change",
]


@dataclass
class Allocations:
    """GPU indices of the demo's jobs, seen while they ran (22.05's ``squeue --json`` drops
    ``gres_detail`` once a job ends): job name -> {node: indices}."""

    by_name: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)

    def observe(self, jobs: Iterable[Any]) -> None:
        for j in jobs:
            if j.name.startswith(JOB_PREFIX) and j.gpu_indices and j.name not in self.by_name:
                self.by_name[j.name] = {n: tuple(ix) for n, ix in j.gpu_indices.items()}


def _alloc_from_output(info: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """``alloc=node1:0:1;node2:4:5;`` (what the job read from ``scontrol -d show job``)."""
    out: dict[str, tuple[int, ...]] = {}
    for part in str(info.get("alloc", "")).split(";"):
        bits = [b for b in part.split(":") if b]
        if len(bits) >= 2 and all(b.isdigit() for b in bits[1:]):
            out[bits[0]] = tuple(int(b) for b in bits[1:])
    return out


@dataclass
class Measured:
    records: list[JobRecord]
    states: dict[str, str]  # job name -> Slurm's final state
    slurm_ids: dict[str, str]  # job name -> Slurm job id
    nodes: dict[str, tuple[str, ...]]
    alloc_source: dict[str, str]  # job name -> "squeue" | "job" (where the GPU indices came from)
    missing: list[str]  # workload jobs Slurm has no finished record of


def measure(squeue_raw: str | bytes, workload: Workload, topo: Topology, t0: float,
            allocations: Allocations | None = None, outputs: Mapping[str, Mapping[str, Any]] | None = None) -> Measured:
    """JobRecords of the workload's jobs from Slurm's records: ``squeue --json -t all`` (submit,
    start and end times, user, nodes, time limit, state) plus the GPU indices Slurm reported
    while each job ran (``allocations``; else the ones the job read from ``scontrol -d``).
    Times become seconds after ``t0`` (the run's start)."""
    from attentived.daemon.slurm_json import parse_squeue

    by_name = workload.by_name
    allocations = allocations or Allocations()
    outputs = outputs or {}
    parsed = parse_squeue(squeue_raw)
    allocations.observe(parsed.jobs)
    records: list[JobRecord] = []
    states: dict[str, str] = {}
    ids: dict[str, str] = {}
    nodes: dict[str, tuple[str, ...]] = {}
    source: dict[str, str] = {}
    for j in parsed.jobs:
        demo = by_name.get(j.name)
        if demo is None or j.user != demo.user:
            continue
        if j.name in ids and int(ids[j.name]) > int(j.job_id):
            continue  # resubmitted: the later one counts
        ids[j.name] = j.job_id
        states[j.name] = j.state
        nodes[j.name] = tuple(j.nodes)
        if not j.finished or j.start_time is None or j.end_time is None or j.submit_time is None:
            continue
        idx = allocations.by_name.get(j.name)
        source[j.name] = "squeue"
        if not idx:
            idx = _alloc_from_output(outputs.get(j.name, {}))
            source[j.name] = "job"
        gpus = tuple(sorted(topo.gpu_id(n, i) for n, ix in idx.items() for i in ix))
        if len(gpus) != demo.num_gpus:
            source[j.name] = "unknown"
        records.append(JobRecord(
            job_id=j.name, user=j.user, num_gpus=demo.num_gpus, model=demo.model,
            submit_time=j.submit_time - t0, start_time=j.start_time - t0, end_time=j.end_time - t0,
            ideal_duration=demo.duration, time_limit=j.time_limit or demo.time_limit, gpus=gpus,
        ))
    records.sort(key=lambda r: r.job_id)
    done = {r.job_id for r in records}
    return Measured(records, states, ids, nodes, source, [n for n in by_name if n not in done])


def extra_metrics(records: Sequence[JobRecord], topo: Topology) -> dict[str, float]:
    """Beside ``summarize``: the speed model's slowdown of the GPUs each multi-GPU job got
    (placement quality without timing noise), how many multi-GPU jobs touched more islands,
    nodes or leaf switches than on an empty cluster (stricter than `packed`, the rule of
    ``pack=1``, which leaves switches to Consolidate), and how many crossed a node or a
    switch."""
    speed = SpeedModel(topo)
    multi = [r for r in records if r.num_gpus > 1 and len(r.gpus) == r.num_gpus]
    slow = [speed.slowdown(r.model, r.gpus) for r in multi]
    spread = [topo.spread(r.gpus) for r in multi]
    return {
        "placement_slowdown": float(np.mean(slow)) if slow else 1.0,
        "multi_gpu_jobs": len(multi),
        "split_more_than_needed": sum(1 for r, s in zip(multi, spread)
                                      if any(a > b for a, b in zip(s, topo.least_spread(r.num_gpus)))),
        "cross_node": sum(1 for s in spread if s[1] > 1),
        "cross_switch": sum(1 for s in spread if s[2] > 1),
    }


def summary_of(records: Sequence[JobRecord], topo: Topology) -> dict[str, Any]:
    return {**summarize(records, topo.num_gpus), **extra_metrics(records, topo),
            "user_mean_wait": user_mean_waits(records)}


#: The figures the side-by-side table shows, in order.
TABLE_KEYS = ("avg_jct", "p99_jct", "avg_wait", "jain_fairness", "max_user_wait", "jain_slowdown", "placement_slowdown",
              "multi_gpu_slowdown",
              "makespan", "utilization")


# ---- the simulator's prediction ----------------------------------------------------------------


def relative_change(base: float | None, other: float | None) -> float | None:
    """``other / base - 1``: a prediction's error against the live figure, or one run's
    change against another; None when either is missing or ``base`` is 0."""
    if base is None or other is None or not base:
        return None
    return other / base - 1.0


@dataclass(frozen=True)
class LiveClocks:
    """The lab's clocks a prediction replays, as its logs show them.

    - ``slurm_pass``: slurmctld starts a batch job only at a scheduling pass, run by its
      background thread (and backfill by its own) about once a second: a second's sleep
      plus the work, so the passes drift. On the eleven 80-job seeds consecutive passes
      came 1.0025 s apart on average (backfill in Slurm alone's runs, the main passes in
      attentived's). Never at submission (docs/demo.md).
    - ``main_offset``: in Slurm alone's runs two loops start jobs: the backfill pass and,
      on a clock of its own, the main scheduler, which starts jobs in priority order up
      to the first that does not fit (`MainPasses`). Its passes that started jobs came a
      median 0.33 s after the backfill pass (113 passes of the eleven 80-job seeds;
      quartiles 0.28 and 0.42 s: the two clocks drift apart within a run).
    - ``job_overhead``: a job's record in Slurm runs 0.03 s beyond its sleep (launch and
      epilog; the logs' allocation to completion less the modelled run, 0.027-0.043 s per
      run). With the drift it decides whether a job of whole seconds frees its GPUs before
      the pass that whole seconds after its start, or only for the next.
    - ``daemon_cycle``: the daemon re-plans from scratch at every cycle (the demo's
      ``interval``); what Slurm starts at a pass is the plan of the last cycle whose
      updates reached it in time. So the daemon decides for a pass a lag before it, between
      ``daemon_delay`` and ``daemon_delay + daemon_cycle`` by how the two clocks fall.
    - ``daemon_delay``: from the state a cycle reads to its updates in slurmctld's log; the
      lab's logs put a job's first update a median 0.29 s after its submission (half a
      0.5 s cycle plus about 0.05 s; the 80-job seeds 13-20).
    - ``phases``: both phases are unknown before a run; a prediction is the mean over this
      many replays, Slurm's passes and the daemon's lag each spread evenly over a period.
    """

    slurm_pass: float = 1.0025
    main_offset: float = 0.33
    daemon_cycle: float = 0.5
    daemon_delay: float = 0.05
    job_overhead: float = 0.03
    phases: int = 4

    def offsets(self) -> list[tuple[float, float]]:
        """(phase of Slurm's passes, the daemon's lag before a pass) of each replay; the
        lag runs down as the phase runs up, so no two replays share either."""
        n = self.phases
        return [((k + 0.5) / n * self.slurm_pass, self.daemon_delay + (n - k - 0.5) / n * self.daemon_cycle)
                for k in range(n)]


@dataclass
class Prediction:
    """The replays of one run at each of Slurm's phases: ``summary`` is the mean of their
    summaries, ``records`` the first phase's (the per-job view beside the live records)."""

    records: list[JobRecord]
    summary: dict[str, Any]


def predict(workload: Workload, policy: str, topo: Topology | None = None, seed: int = 0,
            clocks: LiveClocks | None = None, pinned: bool = False) -> Prediction:
    """The simulator's replay of the demo workload under ``policy`` (any registry name, the
    learned ones included; records named like the live jobs).

    ``clocks`` (`LiveClocks`; ``None``: decisions and starts at once, one replay) are the
    lab's. Slurm alone decides and starts at Slurm's passes (backfill), and starts the head of
    its priority order at its main scheduler's (`MainPasses`). ``pinned``: the daemon's
    run, where the policy only pins nodes and Slurm picks the GPU indices there
    (`SlurmPicksGpus`); the policy decides for each of Slurm's passes the daemon's lag
    before it, and Slurm starts that plan at the pass (`Relay`). A job that arrives while
    nothing else is pending is decided alone, at its arrival (`Simulation`'s
    ``at_submit``): the daemon's cycle sees such a job before the rest of its batch is
    submitted, sbatch after sbatch."""
    topo = topo or demo_topology()
    if clocks is None:
        records = _replay(workload, policy, topo, seed, pinned, None, 0.0, 0.0)
        return Prediction(records, summary_of(records, topo))
    runs = [_replay(workload, policy, topo, seed, pinned, clocks, *offset) for offset in clocks.offsets()]
    return Prediction(runs[0], mean_summary([summary_of(r, topo) for r in runs]))


def _replay(workload: Workload, policy: str, topo: Topology, seed: int, pinned: bool,
            clocks: LiveClocks | None, phase: float, lag: float) -> list[JobRecord]:
    from attentived.agents.registry import make_policy

    select = SlurmSelect()  # the cores every start holds, whichever wrapper started it

    def build(name: str) -> Any:
        made = make_policy(name, seed)
        return SlurmPicksGpus(made, select) if pinned else made

    jobs = workload.sim_jobs()
    if clocks is None:
        return list(Simulation(jobs, topo, build(policy)).run().records)
    if not pinned:
        slurm = build(policy)
        return list(Simulation(jobs, topo, slurm, cadence=clocks.slurm_pass, phase=phase, overhead=clocks.job_overhead,
                               main=MainPasses(clocks.main_offset, slurm)).run().records)
    # The daemon decides ``lag`` before each pass, and Slurm starts its plan at the pass.
    # A job submitted onto an empty queue is decided alone, at once (its own policy
    # instance: a policy's state must not see these extra decisions), and started at the
    # first pass at least ``lag`` later.
    relay = Relay(clocks.slurm_pass, phase, lag)
    return list(Simulation(jobs, topo, build(policy), cadence=clocks.slurm_pass, phase=phase - lag,
                           at_submit=build(policy), relay=relay, overhead=clocks.job_overhead).run().records)


def mean_summary(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each figure's mean over ``summaries`` (per user for a dict of users' figures); a
    count all agree on stays an int, a figure some lack (None) is None."""
    out: dict[str, Any] = {}
    for key, first in summaries[0].items():
        values: list[Any] = [s.get(key) for s in summaries]
        if isinstance(first, Mapping):
            out[key] = mean_summary([v if isinstance(v, Mapping) else {} for v in values])
        elif any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
            out[key] = first if all(v == first for v in values) else None
        elif all(v == first for v in values):
            out[key] = first
        else:
            out[key] = float(np.mean(values))
    return out
