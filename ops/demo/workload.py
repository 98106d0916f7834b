"""The demo's workload: a window of the Philly trace, time-compressed for the lab's cluster.

``demo_topology`` is the lab's cluster as the simulator sees it; ``placement_signature`` and
``slowdown_table`` price every placement a job can get with the simulator's speed model (the
table each job script reads); ``build_workload`` picks and scales the jobs (``DemoJob``,
``Workload``).
"""

from __future__ import annotations

import itertools
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from attentived.simulator.engine import SimJob
from attentived.simulator.trace import TraceJob
from attentived.topology import Topology, uniform
from attentived.topology.speed import SpeedModel, resolve_model

__all__ = [
    "DemoJob",
    "Workload",
    "build_workload",
    "demo_topology",
    "placement_signature",
    "slowdown_table",
]

DEMO_USERS = ("alice", "bob", "carol")
JOB_PREFIX = "demo-"
#: CPUs of a lab node (slurm.conf: Sockets=2 CoresPerSocket=4): Slurm's job-size factor counts them
LAB_CPUS_PER_NODE = 8


def demo_topology() -> Topology:
    """The lab's cluster as the simulator sees it: 4 nodes x 8 GPUs (islands 0-3, 4-7) and 8
    CPUs (2 sockets x 4 cores), two nodes per leaf switch."""
    topo = uniform(4, 8, nodes_per_switch=2)
    return replace(topo, nodes=tuple(replace(n, cpus=LAB_CPUS_PER_NODE) for n in topo.nodes))


# ---- placement signatures and slowdown tables -------------------------------------------------


def _node_split(topo: Topology, node: int, local: Iterable[int]) -> str:
    """GPUs per NVLink island of one node, largest first: ``"4+2"`` (islands without GPUs
    count as 0: ``"2+0"``)."""
    islands = topo.nodes[node].islands
    where = {g: k for k, isl in enumerate(islands) for g in isl}
    counts = [0] * len(islands)
    for g in local:
        counts[where[int(g)]] += 1
    return "+".join(str(c) for c in sorted(counts, reverse=True))


def placement_signature(topo: Topology, gpus: Sequence[int]) -> str:
    """What the speed model's price of a placement depends on, as the job script computes
    it: ``"<leaf switches>:<split of node A>,<split of node B>..."`` with node splits sorted,
    e.g. ``"1:2+0"`` (2 GPUs in one island), ``"2:4+4,4+4"`` (two full nodes on two switches).
    """
    by_node: dict[int, list[int]] = {}
    for g in gpus:
        by_node.setdefault(int(topo.gpu_node[int(g)]), []).append(int(topo.gpu_local[int(g)]))
    switches = len({int(topo.node_switch[n]) for n in by_node})
    splits = sorted(_node_split(topo, n, loc) for n, loc in by_node.items())
    return f"{switches}:{','.join(splits)}"


def _compositions(total: int, caps: Sequence[int]) -> list[tuple[int, ...]]:
    """Ways to spread ``total`` GPUs over islands of sizes ``caps``, as sorted counts."""
    out = set()
    for combo in itertools.product(*(range(c + 1) for c in caps)):
        if sum(combo) == total:
            out.add(tuple(sorted(combo, reverse=True)))
    return sorted(out)


def slowdown_table(topo: Topology, speed: SpeedModel, model: str, num_gpus: int, num_nodes: int) -> dict[str, float]:
    """Slowdown of ``model`` for every placement signature a job of this shape (``num_nodes``
    nodes x ``num_gpus / num_nodes`` GPUs) can get on ``topo``. The topology is uniform, so
    one representative GPU set per signature prices them all (a unit test checks this
    against random placements)."""
    per = num_gpus // num_nodes
    node0 = topo.nodes[0]
    caps = [len(isl) for isl in node0.islands]
    splits = _compositions(per, caps)
    # one representative set of nodes per number of leaf switches touched
    reps: dict[int, tuple[int, ...]] = {}
    for combo in itertools.combinations(range(len(topo.nodes)), num_nodes):
        reps.setdefault(len({int(topo.node_switch[n]) for n in combo}), combo)
    table: dict[str, float] = {}
    for nodes in reps.values():
        for assign in itertools.combinations_with_replacement(splits, num_nodes):
            gpus: list[int] = []
            for n, split in zip(nodes, assign):
                node = topo.nodes[n]
                for island, count in zip(node.islands, split):
                    gpus.extend(topo.gpu_id(node.name, g) for g in island[:count])
            table[placement_signature(topo, gpus)] = round(speed.slowdown(model, gpus), 4)
    return table


# ---- the workload -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoJob:
    """One job of the demo workload; times in demo seconds."""

    index: int
    trace_id: str  # the Philly job (philly-<line>)
    tenant: str  # its Philly virtual cluster
    user: str  # the demo user it runs as
    num_gpus: int
    num_nodes: int
    submit: float  # seconds after the run starts
    duration: float  # run time at the ideal placement
    time_limit: float  # seconds (whole minutes: what sbatch --time gets)
    model: str
    slowdowns: Mapping[str, float] = field(repr=False, default_factory=dict)

    @property
    def name(self) -> str:
        return f"{JOB_PREFIX}{self.index:03d}"

    @property
    def worst_slowdown(self) -> float:
        return max(self.slowdowns.values(), default=1.0)

    def table_arg(self) -> str:
        return " ".join(f"{k}={v:g}" for k, v in sorted(self.slowdowns.items()))


@dataclass(frozen=True)
class Workload:
    jobs: tuple[DemoJob, ...]
    trace: str
    seed: int
    time_scale: float  # trace seconds per demo second (durations)
    arrival_scale: float  # trace seconds per demo second (submit gaps)
    offered_load: float  # GPU-seconds asked / (cluster GPUs x submit span)
    window_hours: tuple[float, float]  # first and last submission, hours into the trace
    num_gpus: int

    @property
    def users(self) -> tuple[str, ...]:
        return tuple(sorted({j.user for j in self.jobs}))

    @property
    def by_name(self) -> dict[str, DemoJob]:
        return {j.name: j for j in self.jobs}

    @property
    def span(self) -> float:
        return max(j.submit for j in self.jobs)

    def sim_jobs(self) -> list[SimJob]:
        """The same workload for the simulator (same users, shapes, times, limits, models)."""
        return [
            # as sbatch gets it: -N fixed, one task (one CPU) per node
            SimJob(TraceJob(j.name, j.submit, j.user, j.num_gpus, j.duration, j.model, j.index + 1, cpus=j.num_nodes,
                            num_nodes=j.num_nodes), j.time_limit, j.model)
            for j in self.jobs
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "trace": self.trace, "seed": self.seed, "time_scale": self.time_scale,
            "arrival_scale": self.arrival_scale, "offered_load": self.offered_load,
            "window_hours": list(self.window_hours),
            "jobs": [{k: v for k, v in asdict(j).items() if k != "slowdowns"} | {"name": j.name} for j in self.jobs],
        }


@lru_cache(maxsize=2)
def _trace_jobs(path: str) -> tuple[TraceJob, ...]:
    from attentived.simulator.trace import load_trace

    return load_trace(path).jobs


def _shape(gpus: int, per_node: int) -> int | None:
    """Nodes for a job of ``gpus`` (as few as fit, an even split), None when it cannot split."""
    nodes = max(1, -(-gpus // per_node))
    return nodes if gpus % nodes == 0 else None


def build_workload(
    num_jobs: int = 40,
    users: int = 3,
    time_scale: float | None = None,
    seed: int = 0,
    *,
    trace_path: str | os.PathLike[str] | None = None,
    topology: Topology | None = None,
    target_span: float = 75.0,
    load: float = 1.6,
    min_duration: float = 4.0,
    max_duration: float = 40.0,
    max_gpus: int = 16,
) -> Workload:
    """A window of the Philly trace, time-compressed for the demo cluster.

    - **Window**: from a start drawn by ``seed``, consecutive jobs of at most ``max_gpus``
      GPUs that split evenly over whole nodes; every multi-GPU job is kept and 1-GPU jobs
      only while they do not outnumber them (95% of Philly's jobs use one GPU, which
      placement cannot speed up).
    - **Users**: Philly's virtual clusters, by number of jobs in the window, go round-robin
      to ``alice``, ``bob``, ``carol`` (the first ``users`` of them), so the tenants' imbalance
      stays.
    - **Time**: durations are divided by ``time_scale`` (trace seconds per demo second) and
      clipped to ``[min_duration, max_duration]`` (Philly spans 1 s to 53 days); ``None``
      picks the scale that fills ``target_span`` seconds at the offered ``load``. Submit gaps
      keep their proportions, compressed so the window offers ``load`` times the cluster's
      capacity (the 32-GPU lab is far smaller than Philly's cluster).
    - **Limits**: what ``sbatch --time`` gets, in whole minutes: the trace's modelled limit
      (``simulator/limits.py``) scaled, but never below the slowest placement's run time
      plus 30 s, so no job is killed for being badly placed.
    """
    from attentived.simulator.limits import time_limit
    from attentived.simulator.samples import sample_path

    if num_jobs < 1:
        raise ValueError(f"--jobs must be at least 1 (got {num_jobs})")
    if not 1 <= users <= len(DEMO_USERS):
        raise ValueError(f"--users must be 1..{len(DEMO_USERS)} (the demo users are {', '.join(DEMO_USERS)}; got {users})")
    if time_scale is not None and not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"--time-scale must be a positive number (got {time_scale})")
    if seed < 0:
        raise ValueError(f"--seed must be at least 0 (got {seed})")
    if not (math.isfinite(load) and load > 0):
        raise ValueError(f"--load must be a positive number (got {load})")
    topo = topology or demo_topology()
    per_node = topo.gpus_per_node
    max_gpus = min(max_gpus, topo.num_gpus)
    path = str(trace_path or sample_path("philly"))
    trace = _trace_jobs(path)
    usable = [j for j in trace if j.num_gpus <= max_gpus and _shape(j.num_gpus, per_node)]
    multi_total = sum(1 for j in usable if j.num_gpus > 1)
    if multi_total < 1 and num_jobs > 1:
        raise ValueError(f"{path}: no multi-GPU jobs of at most {max_gpus} GPUs")
    rng = np.random.default_rng(seed)
    # leave room for the window: about two trace jobs per kept multi-GPU job ... and the 1-GPU
    # ones between them; the start is drawn from the first 90% of the trace
    start = int(rng.integers(0, max(1, int(len(usable) * 0.9))))
    picked: list[TraceJob] = []
    singles = multis = 0
    for j in itertools.chain(usable[start:], usable[:start]):
        if j.num_gpus > 1:
            multis += 1
        elif singles < multis:
            singles += 1
        else:
            continue
        picked.append(j)
        if len(picked) == num_jobs:
            break
    if len(picked) < num_jobs:
        raise ValueError(f"{path}: only {len(picked)} suitable jobs (asked for {num_jobs})")
    # wrapped around the end of the trace: keep the order but make time run forward
    t_rel, t = [], 0.0
    for a, b in zip([None, *picked[:-1]], picked):
        t += 0.0 if a is None else max(0.0, b.submit_time - a.submit_time)
        t_rel.append(t)

    tenants = Counter(j.user for j in picked)
    ranked = sorted(tenants, key=lambda u: (-tenants[u], u))
    user_of = {u: DEMO_USERS[k % users] for k, u in enumerate(ranked)}
    durations = np.array([j.duration for j in picked])
    gpus = np.array([j.num_gpus for j in picked], dtype=float)

    def work(scale: float) -> float:
        return float((gpus * np.clip(durations / scale, min_duration, max_duration)).sum())

    if time_scale is None:
        time_scale = _auto_scale(durations, work, topo.num_gpus * load * target_span, min_duration, max_duration)
    scaled = np.clip(durations / time_scale, min_duration, max_duration)
    total_work = float((gpus * scaled).sum())
    span_real = t_rel[-1]
    span = total_work / (topo.num_gpus * load)
    arrival_scale = span_real / span if span_real > 0 and len(picked) > 1 else 1.0
    offered = total_work / (topo.num_gpus * span) if span_real > 0 and len(picked) > 1 else float("inf")
    speed = SpeedModel(topo)
    jobs = []
    for k, (j, t, dur) in enumerate(zip(picked, t_rel, scaled)):
        nodes = _shape(j.num_gpus, per_node) or 1
        model = resolve_model(j.model, j.job_id, j.num_gpus, seed)
        table = slowdown_table(topo, speed, model, j.num_gpus, nodes) if j.num_gpus > 1 else {}
        dur = round(float(dur), 2)
        worst = max(table.values(), default=1.0)
        limit = max(time_limit(j.job_id, j.duration, seed) / time_scale, dur * worst + 30.0)
        jobs.append(DemoJob(
            index=k, trace_id=j.job_id, tenant=j.user, user=user_of[j.user], num_gpus=j.num_gpus,
            num_nodes=nodes, submit=round(t / arrival_scale, 2), duration=dur,
            time_limit=60.0 * math.ceil(limit / 60.0), model=model, slowdowns=table,
        ))
    return Workload(
        jobs=tuple(jobs), trace=Path(path).name, seed=seed, time_scale=float(time_scale),
        arrival_scale=float(arrival_scale), offered_load=round(offered, 3),
        window_hours=(round(picked[0].submit_time / 3600, 2), round(picked[-1].submit_time / 3600, 2)),
        num_gpus=topo.num_gpus,
    )


def _auto_scale(durations: np.ndarray, work: Callable[[float], float], want: float, lo_d: float, hi_d: float) -> float:
    """The time scale whose clipped work is ``want`` GPU-seconds, kept where at most a
    quarter of the jobs are clipped at either end (so durations keep the trace's spread);
    two significant digits."""
    s_min = float(np.percentile(durations, 75)) / hi_d  # below: over 25% at the cap
    s_max = float(np.percentile(durations, 25)) / lo_d  # above: over 25% at the floor
    if s_min > s_max:
        s_min = s_max = math.sqrt(s_min * s_max)
    lo, hi = max(s_min, 1e-6), max(s_max, 1e-6)
    if work(lo) <= want:
        scale = lo
    elif work(hi) >= want:
        scale = hi
    else:
        for _ in range(100):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if work(mid) > want else (lo, mid)
        scale = hi
    return float(f"{max(scale, 1e-3):.2g}")
