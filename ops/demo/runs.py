"""``attentived demo``: the live daemon on the project's own Slurm, against Slurm alone.

One workload, run twice on an identical fresh lab cluster (``ops/lab.py``: 4 nodes x 8
GPUs, two NVLink islands per node, two leaf switches; its own run dir and ports):

1. **Slurm alone**: ``sched/backfill`` + ``priority/multifactor`` with the age and job-size
   weights a default site sets (``SLURM_ALONE_CONF``), Slurm's own placement.
2. **attentived**: the lab's ``sched/builtin`` (exact plan order) with ``attentived start``
   running as a subprocess (a cycle every 0.5 s), steering Slurm by priorities, pins and
   reservations.

The workload (`build_workload`) is a window of the bundled Philly trace, time-compressed;
each job is a batch script (`job_script`) that reads the GPUs Slurm actually gave it and
sleeps its scaled duration stretched by the simulator's speed model for that placement, so
placement changes how long it runs. The result (`measure`) comes from Slurm's own records
(``squeue --json -t all``: submit/start/end times, nodes; GPU indices while the job runs)
through the same ``simulator.metrics.summarize`` the replays use, next to the simulator's
prediction for the same workload (`predict`).

Python API: ``DemoOptions`` + ``run_demo(options, on_event=...)`` -> ``DemoResult``; the CLI
renders it (``attentived/render_demo.py``). Documentation: ``docs/demo.md``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
from attentived.simulator.engine import JobRecord, SimJob, Simulation
from attentived.simulator.metrics import summarize, user_mean_waits
from attentived.simulator.trace import TraceJob
from attentived.topology import Topology, uniform
from attentived.topology.speed import SpeedModel, resolve_model

__all__ = [
    "DEMO_PORT_BASE",
    "DEMO_RUN_DIR",
    "DemoError",
    "DemoJob",
    "DemoOptions",
    "DemoResult",
    "RunResult",
    "Workload",
    "build_workload",
    "default_policy",
    "demo_topology",
    "measure",
    "placement_signature",
    "predict",
    "run_demo",
    "slowdown_table",
]

DEMO_RUN_DIR = "/tmp/attentived-demo"
DEMO_PORT_BASE = 18617  # the test lab uses 17817.., bench/daemon_cycle.py 19417..
DEMO_USERS = ("alice", "bob", "carol")
JOB_PREFIX = "demo-"
RUN_NAMES = ("slurm", "attentived")
RUN_TITLES = {"slurm": "Slurm alone", "attentived": "attentived"}

#: slurm.conf lines of the "Slurm alone" run: backfill and the multifactor weights a default
#: site sets (age and job size; no fair-share without slurmdbd), as the simulator's ``slurm``
#: preset models them (agents/order.py ``SlurmMultifactor``).
SLURM_ALONE_SCHED = "sched/backfill"
SLURM_ALONE_CONF = "PriorityWeightAge=1000\nPriorityWeightJobSize=1000\nPriorityMaxAge=7-0"
#: The simulator preset that stands for Slurm alone in the prediction.
SLURM_ALONE_PRESET = "slurm"
#: The heuristic the demo runs when the learned model cannot be loaded.
FALLBACK_POLICY = "fifo+consolidate"

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNSUPPORTED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class DemoError(RuntimeError):
    """The demo cannot run or failed; ``code`` is the exit status the CLI uses."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def demo_topology() -> Topology:
    """The lab's cluster as the simulator sees it: 4 nodes x 8 GPUs (islands 0-3, 4-7), two
    nodes per leaf switch."""
    return uniform(4, 8, nodes_per_switch=2)


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
            SimJob(TraceJob(j.name, j.submit, j.user, j.num_gpus, j.duration, j.model, j.index + 1), j.time_limit, j.model)
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


# ---- the job script ---------------------------------------------------------------------------

_JOB_SCRIPT = r'''#!/bin/bash
# attentived demo job (written by attentived.ops.demo). Usage:
#   job.sh BASE 'SIGNATURE=SLOWDOWN ...'
# Reads the GPUs Slurm gave this job (scontrol -d show job: node and GPU indices; else
# SLURM_JOB_NODELIST + CUDA_VISIBLE_DEVICES), prices the placement with the table the demo
# computed from the simulator's speed model, and sleeps BASE x slowdown seconds.
t0=$(date +%s.%N)
base=$1
table=${2:-}
export LC_ALL=C
@TOPOLOGY@
expand() {  # "0-2,5" -> "0 1 2 5"
    local part i out=""
    local -a parts
    IFS=, read -ra parts <<< "$1"
    for part in "${parts[@]}"; do
        if [[ $part == *-* ]]; then
            for ((i = ${part%-*}; i <= ${part#*-}; i++)); do out+="$i "; done
        elif [ -n "$part" ]; then
            out+="$part "
        fi
    done
    echo $out
}
split_of() {  # NODE IDX... -> GPUs per NVLink island, largest first ("4+2")
    local node=$1 i
    shift
    local -a isl=($(islands_of "$node")) cnt=()
    for ((i = 0; i < $(nislands_of "$node"); i++)); do cnt[i]=0; done
    for i in "$@"; do cnt[${isl[i]}]=$((cnt[${isl[i]}] + 1)); done
    printf '%s\n' "${cnt[@]}" | sort -rn | paste -sd+ -
}
alloc="" src=scontrol node=""
for w in $(scontrol -o -d show job "$SLURM_JOB_ID" 2>/dev/null); do
    case "$w" in
        Nodes=*) node=${w#Nodes=};;
        GRES=*IDX:*)
            idx=${w#*IDX:}; idx=${idx%%)*}
            for n in $(scontrol show hostnames "$node"); do alloc+="$n $(expand "$idx");"; done;;
    esac
done
if [ -z "$alloc" ]; then
    src=env
    for n in $(scontrol show hostnames "${SLURM_JOB_NODELIST:-}"); do alloc+="$n $(expand "${CUDA_VISIBLE_DEVICES:-}");"; done
fi
sws="" splits=""
IFS=';' read -ra entries <<< "$alloc"
for e in "${entries[@]}"; do
    set -- $e
    [ $# -ge 1 ] || continue
    sws+="$(switch_of "$1")"$'\n'
    splits+="$(split_of "$@")"$'\n'
done
sig="$(printf '%s' "$sws" | sort -u | grep -c .):$(printf '%s' "$splits" | sort | paste -sd, -)"
slow=1 known=0
for kv in $table; do
    if [ "${kv%=*}" = "$sig" ]; then slow=${kv##*=}; known=1; fi
done
[ -n "$table" ] || known=1
rest=$(awk -v b="$base" -v s="$slow" -v t0="$t0" -v now="$(date +%s.%N)" \
    'BEGIN { r = b * s - (now - t0); if (r < 0) r = 0; printf "%.3f", r }')
echo "demo-job job=${SLURM_JOB_ID} sig=$sig slowdown=$slow known=$known base=$base sleep=$rest source=$src alloc=${alloc// /:}"
sleep "$rest"
echo "demo-job done"
'''


def job_script(topo: Topology) -> str:
    """The demo's batch script with ``topo``'s node -> leaf switch and GPU -> island maps."""
    sw, isl, nisl = [], [], []
    for ni, node in enumerate(topo.nodes):
        where = {g: k for k, group in enumerate(node.islands) for g in group}
        sw.append(f'        {node.name}) echo {topo.switch_names[int(topo.node_switch[ni])]};;')
        isl.append(f'        {node.name}) echo "{" ".join(str(where[g]) for g in range(node.num_gpus))}";;')
        nisl.append(f'        {node.name}) echo {len(node.islands)};;')
    fn = []
    for name, cases in (("switch_of", sw), ("islands_of", isl), ("nislands_of", nisl)):
        fn.append(f'{name}() {{\n    case "$1" in\n' + "\n".join(cases) + '\n        *) echo "?";;\n    esac\n}')
    return _JOB_SCRIPT.replace("@TOPOLOGY@", "\n".join(fn))


def parse_job_output(text: str) -> dict[str, Any]:
    """The ``demo-job`` line a job printed: its signature, slowdown, source and allocation."""
    for line in text.splitlines():
        if line.startswith("demo-job job="):
            out: dict[str, Any] = {}
            for word in line.split()[1:]:
                k, _, v = word.partition("=")
                out[k] = v
            out["slowdown"] = float(out.get("slowdown", "nan"))
            out["known"] = out.get("known") == "1"
            out["done"] = "demo-job done" in text
            return out
    return {}


# ---- measuring: Slurm's records -> JobRecords -> summarize -----------------------------------


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
    (placement quality without timing noise) and how many multi-GPU jobs crossed an island,
    a node or a switch."""
    speed = SpeedModel(topo)
    multi = [r for r in records if r.num_gpus > 1 and len(r.gpus) == r.num_gpus]
    slow = [speed.slowdown(r.model, r.gpus) for r in multi]
    spread = [topo.spread(r.gpus) for r in multi]
    ideal = {r.job_id: topo.spread(topo.ideal_gpus(r.num_gpus)) for r in multi}
    return {
        "placement_slowdown": float(np.mean(slow)) if slow else 1.0,
        "multi_gpu_jobs": len(multi),
        "split_more_than_needed": sum(1 for r, s in zip(multi, spread) if s > ideal[r.job_id]),
        "cross_node": sum(1 for s in spread if s[1] > 1),
        "cross_switch": sum(1 for s in spread if s[2] > 1),
    }


def summary_of(records: Sequence[JobRecord], topo: Topology) -> dict[str, float]:
    return {**summarize(records, topo.num_gpus), **extra_metrics(records, topo),
            "user_mean_wait": user_mean_waits(records)}


# ---- the simulator's prediction ----------------------------------------------------------------


def make_demo_policy(name: str, seed: int = 0) -> Any:
    """A policy by name, ``attentive`` included (the shipped model)."""
    from attentived.daemon.config import is_learned

    if is_learned(name):
        from attentived.agents.learned import load_learned

        return load_learned("attentive", None, seed=seed)
    from attentived.agents.registry import make_policy

    return make_policy(name, seed)


def predict(workload: Workload, policy: str, topo: Topology | None = None, seed: int = 0) -> list[JobRecord]:
    """The simulator's replay of the demo workload under ``policy`` (records named like the
    live jobs)."""
    topo = topo or demo_topology()
    return list(Simulation(workload.sim_jobs(), topo, make_demo_policy(policy, seed)).run().records)


def check_policy(name: str) -> None:
    """DemoError (exit 2) for a policy name the daemon would not accept; cheap (no torch)."""
    from attentived.agents.registry import UnknownPolicy, make_policy
    from attentived.daemon.config import is_learned

    if is_learned(name):
        from attentived.agents.learned import default_model_path

        if not default_model_path("attentive").is_file():
            raise DemoError(f"policy {name}: no shipped model at {default_model_path('attentive')}", EXIT_BAD_INPUT)
        return
    try:
        make_policy(name)
    except UnknownPolicy as e:
        raise DemoError(str(e), EXIT_BAD_INPUT) from None


def default_policy() -> str:
    """``attentive`` when its shipped model is there, else ``FALLBACK_POLICY``."""
    try:
        from attentived.agents.learned import default_model_path

        if default_model_path("attentive").is_file():
            return "attentive"
    except Exception:  # the learned agent's module cannot load (torch missing...)
        pass
    return FALLBACK_POLICY


# ---- running it live ----------------------------------------------------------------------------

#: SchedulerParameters of the demo's runs: the lab's fast cadence, and for backfill a pass every
#: second at a 1 s resolution (Slurm's defaults, 30 s and 60 s, are negligible next to jobs of
#: hours, but not next to the demo's compressed jobs of seconds).
DEMO_SCHED_PARAMS = "sched_interval=1,sched_min_interval=0,batch_sched_delay=0,max_rpc_cnt=0,bf_interval=1,bf_resolution=1"


@dataclass
class DemoOptions:
    jobs: int = 40
    users: int = 3
    time_scale: float | None = None  # None: picked so a run lasts about two minutes
    policy: str | None = None  # None: default_policy()
    seed: int = 0
    keep_cluster: bool = False
    run_dir: str = field(default_factory=lambda: os.environ.get("ATTENTIVED_DEMO_RUN") or DEMO_RUN_DIR)
    port_base: int = field(default_factory=lambda: int(os.environ.get("ATTENTIVED_DEMO_PORT_BASE") or DEMO_PORT_BASE))
    interval: float = 0.5  # the daemon's cycle (seconds)
    target_span: float = 50.0  # seconds of submissions when time_scale is None
    max_duration: float = 40.0  # longest job (demo seconds at the ideal placement)
    load: float = 1.6  # offered load while jobs arrive (x the cluster's GPUs)
    install: bool = True  # install Slurm and munge (apt) when missing
    poll: float = 0.5


@dataclass
class RunResult:
    name: str  # "slurm" or "attentived"
    title: str
    scheduler: str  # what decided, in words
    policy: str  # the simulator policy that predicts it
    records: list[JobRecord]
    summary: dict[str, Any]
    predicted_records: list[JobRecord]
    predicted: dict[str, Any]
    states: dict[str, str]
    slurm_ids: dict[str, str]
    alloc_source: dict[str, str]
    job_outputs: dict[str, dict[str, Any]]
    missing: list[str]
    wall_seconds: float
    started_at: float
    squeue_raw: str = field(repr=False, default="")
    daemon: dict[str, Any] | None = None
    leftover_reservations: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.missing and all(s == "COMPLETED" for s in self.states.values())

    def as_json(self) -> dict[str, Any]:
        live = {r.job_id: r for r in self.records}
        sim = {r.job_id: r for r in self.predicted_records}
        jobs = []
        for name in sorted(set(live) | set(sim) | set(self.states)):
            row: dict[str, Any] = {"name": name, "slurm_job_id": self.slurm_ids.get(name),
                                   "state": self.states.get(name)}
            for key, recs in (("live", live), ("predicted", sim)):
                r = recs.get(name)
                row[key] = None if r is None else {
                    "user": r.user, "gpus": r.num_gpus, "model": r.model, "submit": r.submit_time,
                    "start": r.start_time, "end": r.end_time, "wait": r.wait, "jct": r.jct,
                    "runtime": r.runtime, "ideal": r.ideal_duration, "gpu_ids": list(r.gpus),
                }
            out = self.job_outputs.get(name)
            if out:
                row["job_read"] = {"signature": out.get("sig"), "slowdown": out.get("slowdown"),
                                   "source": out.get("source")}
            row["gpu_indices_from"] = self.alloc_source.get(name)
            jobs.append(row)
        return {
            "title": self.title, "scheduler": self.scheduler, "predicted_by": self.policy,
            "complete": self.complete, "wall_seconds": self.wall_seconds, "started_at": self.started_at,
            "live": self.summary, "predicted": self.predicted, "daemon": self.daemon,
            "leftover_reservations": self.leftover_reservations, "jobs": jobs,
        }


@dataclass
class DemoResult:
    workload: Workload
    topology: Topology = field(repr=False)
    policy: str
    runs: dict[str, RunResult]
    wall_seconds: float
    options: DemoOptions

    def as_json(self) -> dict[str, Any]:
        from attentived import __version__

        comparison = {}
        if set(RUN_NAMES) <= set(self.runs):
            a, b = (self.runs[n].summary for n in RUN_NAMES)
            pa, pb = (self.runs[n].predicted for n in RUN_NAMES)
            for key in TABLE_KEYS:
                comparison[key] = {"slurm": a[key], "attentived": b[key],
                                   "slurm_predicted": pa[key], "attentived_predicted": pb[key]}
        return {
            "attentived": __version__,
            "cluster": {"nodes": len(self.topology.nodes), "gpus": self.topology.num_gpus,
                        "shape": "4 nodes x 8 GPUs, NVLink islands 0-3 and 4-7, two nodes per leaf switch"},
            "policy": self.policy, "seed": self.options.seed, "wall_seconds": self.wall_seconds,
            "workload": self.workload.as_json(),
            "comparison": comparison,
            "runs": {n: r.as_json() for n, r in self.runs.items()},
        }


#: The figures the side-by-side table shows, in order.
TABLE_KEYS = ("avg_jct", "p99_jct", "avg_wait", "jain_fairness", "placement_slowdown", "multi_gpu_slowdown",
              "makespan", "utilization")


Event = Callable[..., None]


class _Submitter(threading.Thread):
    """Submits the workload's jobs at their (scaled) submit times, each as its user."""

    def __init__(self, lab: Any, workload: Workload, script: str, t0: float, stop: threading.Event) -> None:
        super().__init__(name="demo-submitter", daemon=True)
        self.lab, self.workload, self.script, self.t0, self.stop = lab, workload, script, t0, stop
        self.submitted: dict[str, tuple[int, float]] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for job in sorted(self.workload.jobs, key=lambda j: (j.submit, j.index)):
                delay = self.t0 + job.submit - time.time()
                if self.stop.wait(max(0.0, delay)):
                    return
                job_id = self.lab.submit(
                    job.user, job.num_gpus, nodes=job.num_nodes, name=job.name, partition="main",
                    script=f"exec /bin/bash {self.script} {job.duration:g} {shlex.quote(job.table_arg())}",
                    extra_args=["--time", str(max(1, int(job.time_limit // 60))), "--comment", f"model={job.model}"],
                )
                self.submitted[job.name] = (job_id, time.time())
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e

    @property
    def done(self) -> bool:
        return len(self.submitted) == len(self.workload.jobs)


class Demo:
    """One demo: both runs, their clean-up and the result. ``run()`` does it all."""

    def __init__(self, options: DemoOptions, on_event: Event | None = None) -> None:
        self.o = options
        self.emit: Event = on_event or (lambda *a, **k: None)
        self.topo = demo_topology()
        self.lab: Any = None
        self.daemon: subprocess.Popen[bytes] | None = None
        self.daemon_log: Path | None = None
        self.submitter: _Submitter | None = None
        self.stop = threading.Event()

    # ---- the lab ----------------------------------------------------------------------------
    def _lab(self, kind: str) -> Any:
        from .lab import Lab

        if kind == "slurm":
            return Lab(self.o.run_dir, port_base=self.o.port_base, sched_type=SLURM_ALONE_SCHED,
                       sched_params=DEMO_SCHED_PARAMS, extra_conf=SLURM_ALONE_CONF, users=DEMO_USERS)
        return Lab(self.o.run_dir, port_base=self.o.port_base, sched_params=DEMO_SCHED_PARAMS, users=DEMO_USERS)

    def check_machine(self) -> None:
        """Root and Slurm (installed here when missing), or a DemoError saying why not."""
        from .lab import LabError, install, slurm_installed

        if os.geteuid() != 0:
            where = "installed" if slurm_installed() else "not installed"
            raise DemoError(
                "the demo runs its own Slurm cluster on this machine (slurmctld, 4 slurmd, munged), whose "
                f"daemons must run as root (Slurm is {where} here): run it as root, e.g. "
                f"'sudo {sys.executable} -m attentived demo'", EXIT_UNSUPPORTED)
        if slurm_installed():
            return
        if not self.o.install:
            raise DemoError("Slurm and munge are not installed (bash attentived/slurmlab/install.sh installs them)",
                            EXIT_UNSUPPORTED)
        self.emit("phase", run=None, text="installing Slurm and munge from the distribution's packages (apt-get)")
        try:
            install()
        except LabError as e:
            raise DemoError(f"Slurm is not installed and installing it failed:\n{e}", EXIT_UNSUPPORTED) from None
        if not slurm_installed():
            raise DemoError("Slurm was installed but its commands are still missing", EXIT_UNSUPPORTED)

    # ---- the daemon -------------------------------------------------------------------------
    def _start_daemon(self, lab: Any, demo_dir: Path, policy: str) -> dict[str, Any]:
        state_dir = demo_dir / "state"
        cfg = demo_dir / "attentived.toml"
        cfg.write_text(
            "# attentived demo: the daemon steering the demo's own Slurm\n"
            f'partitions = ["main"]\nslurm_conf = "{lab.slurm_conf}"\nstate_dir = "{state_dir}"\n'
            f'interval = {self.o.interval}\npolicy = "{policy}"\nfallback_policy = "{FALLBACK_POLICY}"\n'
            f"seed = {self.o.seed}\nmetrics_port = 0\nlog_format = \"json\"\nlog_level = \"info\"\n")
        self.daemon_log = demo_dir / "attentived.log"
        argv = [sys.executable, "-m", "attentived", "start", "--config", str(cfg)]
        env = dict(os.environ, SLURM_CONF=str(lab.slurm_conf))
        env.pop("NOTIFY_SOCKET", None)
        status = state_dir / "status.json"
        status.unlink(missing_ok=True)  # a kept cluster's earlier run must not pass for this daemon's first cycle
        with open(self.daemon_log, "wb") as log:
            self.daemon = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                           env=env, start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.daemon.poll() is not None:
                raise DemoError(f"attentived start exited with {self.daemon.returncode}:\n{self._log_tail()}")
            try:
                doc = json.loads(status.read_text())
            except (OSError, ValueError):
                doc = {}
            last = doc.get("last_cycle") or {}
            if last.get("ok"):
                return {"pid": self.daemon.pid, "argv": argv, "config": str(cfg), "policy": doc.get("policy"),
                        "policy_fallback": doc.get("policy_fallback"), "interval": self.o.interval}
            time.sleep(0.2)
        raise DemoError(f"attentived start did not complete a good cycle in 120 s:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.daemon_log.read_text(errors="replace").splitlines()[-lines:]) if self.daemon_log else ""
        except OSError:
            return ""

    def _stop_daemon(self) -> int | None:
        proc, self.daemon = self.daemon, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        return proc.returncode

    # ---- one run ------------------------------------------------------------------------------
    def _run(self, kind: str, workload: Workload, predicted: list[JobRecord], sim_policy: str,
             daemon_policy: str) -> RunResult:
        from attentived.daemon.slurm_json import parse_squeue

        from .lab import LabError

        title = RUN_TITLES[kind]
        self.emit("phase", run=kind, text="starting a fresh cluster")
        lab = self.lab = self._lab(kind)
        if lab.is_running():
            lab.stop()
        try:
            lab.start()
        except LabError as e:
            raise DemoError(f"the demo cluster did not start:\n{e}") from None
        demo_dir = lab.run_dir / "demo"
        demo_dir.mkdir(mode=0o755, exist_ok=True)
        os.chmod(demo_dir, 0o755)
        script = demo_dir / "job.sh"
        script.write_text(job_script(self.topo))
        os.chmod(script, 0o755)
        daemon_info = None
        if kind == "attentived":
            self.emit("phase", run=kind, text=f"starting attentived ({daemon_policy}, a cycle every {self.o.interval:g} s)")
            daemon_info = self._start_daemon(lab, demo_dir, daemon_policy)
            if daemon_info.get("policy"):
                scheduler = f"attentived start, policy {daemon_info['policy']}, on sched/builtin"
            else:
                scheduler = "attentived start"
        else:
            scheduler = f"{SLURM_ALONE_SCHED} + priority/multifactor (age, job size), Slurm's placement"
        self.emit("phase", run=kind, text="running")
        total = len(workload.jobs)
        expected = workload.span + sum(j.num_gpus * j.duration * j.worst_slowdown for j in workload.jobs) / self.topo.num_gpus
        timeout = 90 + 3 * (expected + max(j.duration * j.worst_slowdown for j in workload.jobs))
        t0 = time.time()
        self.stop.clear()
        sub = self.submitter = _Submitter(lab, workload, str(script), t0, self.stop)
        sub.start()
        allocations = Allocations()
        names = workload.by_name
        raw = ""
        while True:
            raw = lab.run(["squeue", "--json", "-t", "all"]).stdout
            jobs = [j for j in parse_squeue(raw).jobs if j.name in names]
            allocations.observe(jobs)
            counts = {"queued": total - len(sub.submitted), "pending": 0, "running": 0, "done": 0, "failed": 0}
            for j in jobs:
                if j.pending:
                    counts["pending"] += 1
                elif j.finished:
                    counts["done" if j.state == "COMPLETED" else "failed"] += 1
                else:
                    counts["running"] += 1
            elapsed = time.time() - t0
            self.emit("progress", run=kind, counts=counts, elapsed=elapsed, total=total)
            if sub.error is not None:
                raise DemoError(f"submitting the workload failed: {sub.error}")
            if self.daemon is not None and self.daemon.poll() is not None:
                raise DemoError(f"attentived exited during the run ({self.daemon.returncode}):\n{self._log_tail()}")
            if sub.done and counts["done"] + counts["failed"] >= total:
                break
            if elapsed > timeout:
                raise DemoError(f"{title}: the workload did not finish in {timeout:.0f} s ({counts})")
            time.sleep(self.o.poll)
        wall = time.time() - t0
        sub.join(5)
        if daemon_info is not None:
            daemon_info["exit_code"] = self._stop_daemon()
            daemon_info.update(_daemon_stats(demo_dir / "state" / "status.json", self.daemon_log))
        outputs: dict[str, dict[str, Any]] = {}
        for name, (job_id, _) in sub.submitted.items():
            try:
                outputs[name] = parse_job_output(lab.output(job_id))
            except OSError:
                outputs[name] = {}
        m = measure(raw, workload, self.topo, t0, allocations, outputs)
        leftovers = sorted(r for r in lab.reservations() if r.startswith("attentived-"))
        for r in leftovers:
            lab.run(["scontrol", "delete", f"ReservationName={r}"], check=False)
        self.emit("phase", run=kind, text="done")
        return RunResult(
            name=kind, title=title, scheduler=scheduler, policy=sim_policy, records=m.records,
            summary=summary_of(m.records, self.topo) if m.records else {},
            predicted_records=predicted, predicted=summary_of(predicted, self.topo),
            states=m.states, slurm_ids=m.slurm_ids, alloc_source=m.alloc_source, job_outputs=outputs,
            missing=m.missing, wall_seconds=wall, started_at=t0, squeue_raw=raw, daemon=daemon_info,
            leftover_reservations=leftovers,
        )

    # ---- clean-up ---------------------------------------------------------------------------
    def cleanup(self, stop_cluster: bool) -> None:
        """Stop the submitter and the daemon, cancel the demo's jobs, delete attentived's
        reservations, and stop the cluster when ``stop_cluster``. Never raises; a second Ctrl-C
        while it runs is ignored."""
        old = None
        if threading.current_thread() is threading.main_thread():
            old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self._cleanup(stop_cluster)
        finally:
            if old is not None:
                signal.signal(signal.SIGINT, old)

    def _cleanup(self, stop_cluster: bool) -> None:
        self.stop.set()
        if self.submitter is not None and self.submitter.ident is not None:  # Ctrl-C can land before start()
            self.submitter.join(30)
        try:
            self._stop_daemon()
        except Exception:  # noqa: BLE001
            pass
        lab = self.lab
        if lab is None:
            return
        try:
            if lab.is_running():
                lab.reset()
        except Exception:  # noqa: BLE001 - stopping below ends the jobs anyway
            pass
        if stop_cluster:
            try:
                lab.stop()
            except Exception:  # noqa: BLE001
                pass

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold ``<run_dir>.lock``: two demos never share one cluster."""
        from .lab import Lab, LabError

        lock = Lab(self.o.run_dir, port_base=self.o.port_base).exclusive(timeout=2)
        try:
            lock.__enter__()
        except LabError:
            raise DemoError(f"another attentived demo is using {self.o.run_dir} (lock {self.o.run_dir}.lock); wait "
                            "for it, or give this one ATTENTIVED_DEMO_RUN and ATTENTIVED_DEMO_PORT_BASE") from None
        try:
            yield
        finally:
            lock.__exit__(None, None, None)

    # ---- everything -------------------------------------------------------------------------
    def run(self) -> DemoResult:
        from .lab import LabError

        t_start = time.time()
        o = self.o
        try:
            workload = build_workload(o.jobs, o.users, o.time_scale, o.seed, target_span=o.target_span,
                                      max_duration=o.max_duration, load=o.load, topology=self.topo)
        except ValueError as e:
            raise DemoError(str(e), EXIT_BAD_INPUT) from None
        policy = o.policy or default_policy()
        check_policy(policy)
        self.emit("workload", workload=workload, policy=policy)
        self.check_machine()
        self.emit("phase", run=None, text="simulating the same workload (the prediction)")
        try:
            predicted_slurm = predict(workload, SLURM_ALONE_PRESET, self.topo, o.seed)
            predicted_attentived = predict(workload, policy, self.topo, o.seed)
        except Exception as e:  # noqa: BLE001 - a model that does not load, a policy that fails
            raise DemoError(f"cannot simulate policy {policy!r}: {type(e).__name__}: {e}", EXIT_BAD_INPUT) from None
        ok = False
        with self._locked():
            try:
                runs = {"slurm": self._run("slurm", workload, predicted_slurm, SLURM_ALONE_PRESET, policy)}
                self.emit("run_done", run="slurm", result=runs["slurm"])
                self.lab.stop()
                runs["attentived"] = self._run("attentived", workload, predicted_attentived, policy, policy)
                used = (runs["attentived"].daemon or {}).get("policy")
                if used and used != policy:  # the daemon fell back: predict what really ran
                    runs["attentived"].policy = used
                    runs["attentived"].predicted_records = predict(workload, used, self.topo, o.seed)
                    runs["attentived"].predicted = summary_of(runs["attentived"].predicted_records, self.topo)
                self.emit("run_done", run="attentived", result=runs["attentived"])
                ok = True
            except LabError as e:
                raise DemoError(str(e)) from None
            finally:
                if not ok:
                    text = "stopping: cancelling the demo's jobs, deleting attentived's reservations"
                else:
                    text = "keeping the cluster running" if o.keep_cluster else "stopping the cluster"
                self.emit("phase", run=None, text=text)
                self.cleanup(stop_cluster=not o.keep_cluster)
        return DemoResult(workload, self.topo, policy, runs, time.time() - t_start, o)


def _daemon_stats(status_path: Path, log_path: Path | None) -> dict[str, Any]:
    """Cycles, actions and errors the daemon logged, and its final status."""
    out: dict[str, Any] = {"cycles": 0, "actions": 0, "failed_actions": 0, "cycle_errors": 0,
                           "placements": Counter()}
    try:
        status = json.loads(status_path.read_text())
        out["errors_total"] = status.get("errors_total")
        out["policy"] = status.get("policy") or None
        out["policy_fallback"] = status.get("policy_fallback")
    except (OSError, ValueError):
        pass
    if log_path is not None and log_path.is_file():
        for line in log_path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            ev = rec.get("event")
            if ev == "cycle.done":
                out["cycles"] += 1
                out["actions"] += int(rec.get("actions") or 0)
                out["failed_actions"] += int(rec.get("failed") or 0)
                out["cycle_errors"] += 0 if rec.get("ok") else 1
            elif ev == "job.started" and rec.get("match"):
                out["placements"][rec["match"]] += 1
        out["log"] = str(log_path)
    out["placements"] = dict(out["placements"])
    return out


def run_demo(options: DemoOptions, on_event: Event | None = None) -> DemoResult:
    """Run the demo; Ctrl-C (SIGINT) or SIGTERM stop it cleanly (KeyboardInterrupt is
    re-raised after the clean-up)."""
    demo = Demo(options, on_event)
    old = None
    if threading.current_thread() is threading.main_thread():
        def _term(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        old = signal.signal(signal.SIGTERM, _term)
    try:
        return demo.run()
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
