"""Daemon cycle at scale without Slurm (issue 16): 16,384 GPUs, 10,000 pending jobs.

A synthetic Slurm answers the daemon's real ``CliBackend`` through stand-in ``squeue``,
``sinfo`` and ``scontrol`` programs in a temporary bin dir. Their output is cloned from the
recorded fixtures (``tests/daemon/fixtures/slurm-22.05``, ``slurm-24.11`` and ``slurm-26.05``):
one RUNNING job with ``gres_detail``, one PENDING job and one node record per version, with
only the fields that must differ changed and every version-specific shape kept (plain numbers
on 22.05, ``{"set","infinite","number"}`` from 24.11 on; strings vs lists; 26.05 as the daemon
reads it there, data_parser v0.0.44). The cluster is
``topology.uniform(gpus // 8, 8, nodes_per_switch=4)``, about 97 % of its GPUs busy with
single-node jobs of 1-8 GPUs (30 min to 3 day limits), plus ``pending`` jobs of 1-32 GPUs
from 12 users in partition ``main``.

The daemon's ``CycleRunner`` runs live (not dry run), so apply runs: the stub ``scontrol``
accepts every update (stdin batches are consumed, other writes exit 0), and the bench plays
Slurm between cycles: the updates the daemon made stick, the planned starts start where the
plan put them, some running jobs end and a few new jobs arrive. The first cycle is cold
(every pending job gets its first priority); the steady cycles after it are what a running
daemon sees.

    .venv/bin/python bench/slurm_scale.py                                  # every version, attentive
    .venv/bin/python bench/slurm_scale.py --version 24.11 --policy fifo+consolidate --cycles 4
    .venv/bin/python bench/slurm_scale.py --gpus 1024 --pending 500        # a quick look

Prints a table per version and, as its last line, a JSON object with every number.
``measure_cycles()`` returns the same numbers for one version (``bench/scale.py`` imports it).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import random
import resource
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attentived.atomic import write_text

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "daemon" / "fixtures"

USERS = tuple(f"user{i:02d}" for i in range(1, 13))
#: Pending jobs' GPU counts and their shares (16 and 32 GPUs: 8 per node on 2 and 4 nodes).
PENDING_MIX = ((1, 0.85), (2, 0.04), (4, 0.04), (8, 0.04), (16, 0.015), (32, 0.015))
#: Running jobs' GPU counts (single node) and their shares.
RUNNING_MIX = ((1, 0.35), (2, 0.2), (3, 0.05), (4, 0.2), (6, 0.05), (8, 0.15))
LIMITS_MIN = (30, 60, 120, 240, 480, 720, 1440, 2880, 4320)
MODELS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3", "resnet50", "vgg16")
GPUS_PER_NODE = 8
NODES_PER_SWITCH = 4
BUSY = 0.97

#: (fixture dir, node file) of each version's templates: every recording holds record.sh's mix,
#: whose scenario.json names the templates, the running job "run_a" (4 GPUs on node1, a MIXED
#: node) and the pending job "pend_a".
TEMPLATES = {
    "22.05": ("slurm-22.05", "sinfo.json"),
    "24.11": ("slurm-24.11", "scontrol-show-nodes.json"),
    "26.05": ("slurm-26.05", "scontrol-show-nodes.json"),
}
#: The files the stub commands serve, per version: (jobs, nodes, reservations).
FILES = {
    "22.05": ("squeue.json", "sinfo.json", "scontrol-show-reservation.txt"),
    "24.11": ("squeue.json", "scontrol-show-nodes.json", "scontrol-show-reservation.json"),
    "26.05": ("squeue.json", "scontrol-show-nodes.json", "scontrol-show-reservation.json"),
}

STUB = r"""#!/bin/bash
# Stand-in for a Slurm command (bench/slurm_scale.py): reads answer from the generated files,
# writes succeed. Each call logs one line (its argv) so the bench can count processes.
name=$(basename "$0")
echo "$name $*" >> "$STUB_LOG"
case "$name $*" in
  "scontrol --version") echo "slurm $STUB_VERSION" ;;
  "squeue --json -t all"|"squeue --json=v0.0.44 -t all") cat "$STUB_DIR/squeue.json" ;;
  "sinfo --json") cat "$STUB_DIR/sinfo.json" ;;
  "scontrol show nodes --json") cat "$STUB_DIR/scontrol-show-nodes.json" ;;
  "scontrol show reservation --json") cat "$STUB_DIR/scontrol-show-reservation.json" ;;
  "scontrol -o show reservation") cat "$STUB_DIR/scontrol-show-reservation.txt" ;;
  "scontrol show config") cat "$STUB_CONFIG" ;;
  "scontrol -a -o show partition") echo "PartitionName=main Default=YES" ;;
  "scontrol ") cat > /dev/null ;;
  scontrol*) exit 0 ;;
  *) echo "stub: unexpected $name $*" >&2; exit 2 ;;
esac
"""


# ---- the synthetic cluster -------------------------------------------------------------------


@dataclass
class Job:
    """One job of the synthetic Slurm. ``alloc`` (running jobs): node -> GPU indices."""

    job_id: int
    user: str
    name: str
    gpus: int
    limit_min: int
    submit: int
    state: str = "PENDING"
    start: int = 0
    end: int = 0
    priority: int = 1
    alloc: dict[str, tuple[int, ...]] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()

    @property
    def node_count(self) -> int:
        return len(self.alloc) if self.alloc else max(1, self.gpus // GPUS_PER_NODE)

    @property
    def per_node(self) -> int:
        return self.gpus // self.node_count


def _draw(rng: random.Random, mix: Sequence[tuple[int, float]]) -> int:
    """A GPU count from a (count, share) mix."""
    return rng.choices([g for g, _ in mix], weights=[w for _, w in mix])[0]


class SyntheticSlurm:
    """What slurmctld would show for a cluster of ``gpus`` GPUs: nodes, running jobs,
    ``pending`` pending jobs, and the jobs that ended since the last cycle (``squeue -t all``
    shows finished jobs for ``MinJobAge``). ``step()`` moves it on between cycles."""

    def __init__(self, gpus: int, pending: int, seed: int = 0, now: int | None = None) -> None:
        if gpus < GPUS_PER_NODE or gpus % GPUS_PER_NODE:
            raise ValueError(f"gpus must be a positive multiple of {GPUS_PER_NODE}, got {gpus}")
        self.rng = random.Random(seed)
        self.nodes = [f"node{i + 1}" for i in range(gpus // GPUS_PER_NODE)]
        self.jobs: dict[int, Job] = {}
        self.finished: list[Job] = []
        self.next_id = 1
        self._used: dict[str, set[int]] | None = None  # node -> GPU indices in use, built on demand
        now = int(time.time()) if now is None else now
        self._fill_running(now)
        for _ in range(pending):
            self._arrive(now - self.rng.randint(0, 2 * 86400))
        self._renumber()

    # -- building --
    def _new_job(self, gpus: int, submit: int) -> Job:
        job = Job(self.next_id, self.rng.choice(USERS), self.rng.choice(MODELS), gpus, self.rng.choice(LIMITS_MIN), submit)
        self.next_id += 1
        self.jobs[job.job_id] = job
        return job

    def _fill_running(self, now: int) -> None:
        """About ``BUSY`` of the GPUs in single-node jobs; the free GPUs are spread at random."""
        total = len(self.nodes) * GPUS_PER_NODE
        free_per_node = [0] * len(self.nodes)
        for slot in self.rng.sample(range(total), total - round(BUSY * total)):
            free_per_node[slot // GPUS_PER_NODE] += 1
        for node, free in zip(self.nodes, free_per_node):
            idx = 0
            while idx < GPUS_PER_NODE - free:
                size = min(_draw(self.rng, RUNNING_MIX), GPUS_PER_NODE - free - idx)
                limit = self.rng.choice(LIMITS_MIN)
                start = now - self.rng.randint(0, int(limit * 60 * 0.9))
                job = self._new_job(size, start - self.rng.randint(0, 3600))
                job.limit_min, job.state, job.start = limit, "RUNNING", start
                job.alloc = {node: tuple(range(idx, idx + size))}
                idx += size

    def _arrive(self, submit: int) -> Job:
        return self._new_job(_draw(self.rng, PENDING_MIX), submit)

    def _renumber(self) -> None:
        """Job ids in submit order, as Slurm hands them out."""
        jobs = sorted(self.jobs.values(), key=lambda j: j.submit)
        self.jobs = {}
        for i, job in enumerate(jobs, start=1):
            job.job_id = i
            self.jobs[i] = job
        self.next_id = len(jobs) + 1

    # -- between cycles --
    def apply(self, outcomes: Iterable[Any]) -> None:
        """The updates the daemon made (its cycle's ``outcomes``) as slurmctld keeps them."""
        for o in outcomes:
            a = o.action
            job = self.jobs.get(int(a.job_id)) if a.job_id else None
            if not o.ok or job is None or job.state != "PENDING":
                continue
            if a.kind == "priority":
                job.priority = int(a.value)
            elif a.kind in ("pin", "unpin"):
                job.required = tuple(a.nodes) if a.kind == "pin" else ()
            elif a.kind in ("exclude", "unexclude"):
                job.excluded = tuple(a.nodes) if a.kind == "exclude" else ()

    def start(self, job_id: str, gpus: dict[str, tuple[int, ...]], now: int) -> bool:
        """A planned start happens (False when the job is gone or a GPU is taken)."""
        job = self.jobs.get(int(job_id))
        if job is None or job.state != "PENDING" or any(set(i) & self.used(n) for n, i in gpus.items()):
            return False
        job.state, job.start, job.alloc = "RUNNING", now, dict(gpus)
        for n, idx in gpus.items():
            self.used(n).update(idx)
        return True

    def step(self, starts: dict[str, dict[str, tuple[int, ...]]], *, ends: int, arrivals: int,
             now: int | None = None) -> dict[str, int]:
        """One interval of Slurm: the planned ``starts`` (job -> node -> indices) start,
        ``ends`` random running jobs end, ``arrivals`` new jobs are submitted."""
        now = int(time.time()) if now is None else now
        started = sum(self.start(j, g, now) for j, g in starts.items())
        running = [j for j in self.jobs.values() if j.state == "RUNNING"]
        self.finished = self.rng.sample(running, min(ends, len(running)))
        for job in self.finished:
            job.state, job.end = "COMPLETED", now
            del self.jobs[job.job_id]
        self._used = None
        for _ in range(arrivals):
            self._arrive(now)
        return {"started": started, "ended": len(self.finished), "arrived": arrivals}

    def used(self, node: str) -> set[int]:
        """GPU indices in use on ``node``."""
        if self._used is None:
            self._used = {}
            for job in self.jobs.values():
                if job.state == "RUNNING":
                    for n, idx in job.alloc.items():
                        self._used.setdefault(n, set()).update(idx)
        return self._used.setdefault(node, set())

    def counts(self) -> dict[str, int]:
        """The cluster's shape now: nodes, GPUs, busy GPUs, running and pending jobs."""
        running = [j for j in self.jobs.values() if j.state == "RUNNING"]
        return {"nodes": len(self.nodes), "gpus": len(self.nodes) * GPUS_PER_NODE,
                "busy_gpus": sum(j.gpus for j in running), "running": len(running),
                "pending": sum(1 for j in self.jobs.values() if j.state == "PENDING")}

    # -- output --
    def write(self, directory: Path, version: str, now: int | None = None) -> None:
        """The three read commands' outputs for ``version``, into ``directory``."""
        now = int(time.time()) if now is None else now
        render = Renderer(version)
        jobs, nodes, resv = FILES[version]
        write_text(directory / jobs, render.squeue(self, now))
        write_text(directory / nodes, render.nodes(self))
        write_text(directory / resv, render.reservations())


# ---- Slurm's JSON, cloned from the recordings -----------------------------------------------


def _num(template: Any, n: int) -> Any:
    """``n`` in the shape the template field has: plain on 22.05, wrapped on 24.11."""
    if isinstance(template, dict):
        return {**template, "set": True, "infinite": False, "number": n}
    return n


def _words(template: Any, items: Sequence[str]) -> Any:
    """A list where the template has a list, else a comma string."""
    return list(items) if isinstance(template, list) else ",".join(items)


def _state(template: Any, state: str) -> Any:
    """A state in the template's shape: ``["RUNNING"]`` or ``"RUNNING"`` (``"mixed"`` where
    the template writes it in lower case)."""
    if isinstance(template, list):
        return [state]
    return state.lower() if template == template.lower() else state


def _idx(indices: Sequence[int]) -> str:
    """``0-3`` / ``0,2-3``: GPU indices as Slurm prints them in ``IDX:``."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


class Renderer:
    """Clones the fixtures' job and node records for one Slurm version."""

    def __init__(self, version: str) -> None:
        if version not in TEMPLATES:
            raise ValueError(f"version must be one of {', '.join(TEMPLATES)}, got {version!r}")
        self.version = version
        folder, node_file = TEMPLATES[version]
        scenario = json.loads((FIXTURES / folder / "scenario.json").read_text())["jobs"]
        squeue = json.loads((FIXTURES / folder / "squeue.json").read_text())
        by_id = {j["job_id"]: j for j in squeue["jobs"]}
        self.squeue_head = {k: v for k, v in squeue.items() if k != "jobs"}
        self.running, self.pending = by_id[scenario["run_a"]], by_id[scenario["pend_a"]]
        nodes = json.loads((FIXTURES / folder / node_file).read_text())
        self.nodes_head = {k: v for k, v in nodes.items() if k != "nodes"}
        self.node = next(n for n in nodes["nodes"] if n["name"] == "node1")
        self.gres_type = self.running["gres_detail"][0].split(":")[1]  # gpu:h100:4(IDX:0-3) -> h100
        self.tres_prefix = self.running["tres_per_node"].rsplit(":", 1)[0]  # gres:gpu / gres/gpu

    def squeue(self, slurm: SyntheticSlurm, now: int) -> str:
        jobs = [self.job(j, now) for j in (*slurm.jobs.values(), *slurm.finished)]
        return json.dumps({**self.squeue_head, "jobs": jobs})

    def job(self, job: Job, now: int) -> dict[str, Any]:
        t = self.pending if job.state == "PENDING" else self.running
        rec = dict(t)
        nodes = list(job.alloc)
        rec.update(
            job_id=job.job_id, user_name=job.user, name=job.name, job_state=_state(t["job_state"], job.state),
            nodes=hostlist_compress(nodes), node_count=_num(t["node_count"], job.node_count),
            tres_per_node=f"{self.tres_prefix}:{job.per_node}", time_limit=_num(t["time_limit"], job.limit_min),
            submit_time=_num(t["submit_time"], job.submit), eligible_time=_num(t["eligible_time"], job.submit),
            accrue_time=_num(t["accrue_time"], job.submit), start_time=_num(t["start_time"], job.start),
            end_time=_num(t["end_time"], job.end or (job.start + 60 * job.limit_min if job.start else 0)),
            last_sched_evaluation=_num(t["last_sched_evaluation"], now),
            priority=_num(t["priority"], job.priority), cpus=_num(t["cpus"], job.node_count),
            tasks=_num(t["tasks"], job.node_count),
            required_nodes=hostlist_compress(job.required), excluded_nodes=hostlist_compress(job.excluded),
            state_reason="Priority" if job.state == "PENDING" else "None",
            gres_detail=[f"gpu:{self.gres_type}:{len(i)}(IDX:{_idx(i)})" for i in job.alloc.values()]
            if job.state == "RUNNING" else [],
            batch_host=nodes[0] if nodes else "",
        )
        if nodes:
            rec["job_resources"] = self._resources(t["job_resources"], nodes)
        return rec

    def _resources(self, template: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
        """``job_resources`` naming the job's nodes (22.05: ``allocated_nodes``; 24.11:
        ``nodes.allocation``), one entry per node as Slurm writes it."""
        res = copy.deepcopy(template)
        if isinstance(res.get("nodes"), dict):  # 24.11
            one = res["nodes"]["allocation"][0]
            res["nodes"].update(count=len(nodes), list=hostlist_compress(nodes),
                                allocation=[{**one, "index": i, "name": n} for i, n in enumerate(nodes)])
        else:  # 22.05
            one = res["allocated_nodes"][0]
            res.update(nodes=hostlist_compress(nodes), allocated_hosts=len(nodes),
                       allocated_nodes=[{**one, "nodename": n} for n in nodes])
        return res

    def nodes(self, slurm: SyntheticSlurm) -> str:
        jobs_on: dict[str, int] = {}
        for job in slurm.jobs.values():
            if job.state == "RUNNING":
                for n in job.alloc:
                    jobs_on[n] = jobs_on.get(n, 0) + 1
        t = self.node
        out = []
        for i, name in enumerate(slurm.nodes):
            used = sorted(slurm.used(name))
            switch = i // NODES_PER_SWITCH + 1
            features = _words(t["features"], (f"rack{(switch + 7) // 8}", f"sw{switch}"))
            state = "ALLOCATED" if len(used) == GPUS_PER_NODE else ("MIXED" if used else "IDLE")
            out.append({**t, "name": name, "state": _state(t["state"], state),
                        "gres_used": f"gpu:{self.gres_type}:{len(used)}(IDX:{_idx(used) if used else 'N/A'})",
                        "alloc_cpus": jobs_on.get(name, 0), "partitions": _words(t["partitions"], ["main"]),
                        "features": features, "active_features": features})
        return json.dumps({**self.nodes_head, "nodes": out})

    def reservations(self) -> str:
        """No reservations: 22.05 text says so in words, 24.11 JSON has an empty list."""
        if self.version == "22.05":
            return "No reservations in the system\n"
        return json.dumps({"reservations": [], **{k: v for k, v in self.squeue_head.items() if k in ("meta", "errors", "warnings")}})


def hostlist_compress(names: Iterable[str]) -> str:
    """Slurm's compressed host list (``node[1-3]``), "" for none."""
    from attentived.topology import hostlist

    names = list(names)
    return hostlist.compress(names) if names else ""


# ---- the daemon against it -------------------------------------------------------------------


def install_stubs(bin_dir: Path) -> None:
    """``squeue``, ``sinfo`` and ``scontrol`` stand-ins (bash, one process per call, as
    Slurm's own clients are)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("squeue", "sinfo", "scontrol"):
        p = bin_dir / name
        p.write_text(STUB)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)


def planned_starts(res: Any, topo: Any) -> dict[str, dict[str, tuple[int, ...]]]:
    """A cycle's planned starts as Slurm would make them: job -> node -> GPU indices."""
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for s in (res.plan.starts if res.plan is not None else ()):
        per: dict[str, list[int]] = {}
        for g in s.gpus:
            ni = int(topo.gpu_node[int(g)])
            per.setdefault(topo.nodes[ni].name, []).append(int(g) - int(topo.node_first_gpu[ni]))
        out[s.job_id] = {n: tuple(sorted(i)) for n, i in per.items()}
    return out


def pct(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank)."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


#: The phases reported, in cycle order (``snapshot_*``: parts of ``snapshot``).
PHASES = ("cycle", "snapshot", "snapshot_read", "snapshot_parse", "state", "decide", "read_back", "apply", "other",
          "record")


def phases(res: Any, wall: float) -> dict[str, float]:
    """One cycle's phases: the daemon's own timings (``read_back``: Slurm read again after a
    decision over 0.5 s), plus what they leave out (``other``: the rest of the cycle,
    stall checks, stabilisation, placements; ``record``: journal and status after it)."""
    t = res.timings
    out = {k: t.get(k, 0.0) for k in PHASES if k not in ("cycle", "other", "record")}
    out["other"] = max(0.0, res.duration - sum(out[k] for k in ("snapshot", "state", "decide", "read_back", "apply")))
    out["record"] = max(0.0, wall - res.duration)
    out["cycle"] = wall
    return out


def measure_cycles(version: str = "24.11", gpus: int = 16384, pending: int = 10000, cycles: int = 5,
                   policy: str = "attentive", seed: int = 0, ends: int | None = None,
                   arrivals: int | None = None) -> dict[str, Any]:
    """Run one cold and ``cycles - 1`` steady daemon cycles against the synthetic Slurm.

    Between cycles ``ends`` running jobs end (default 1 % of them) and ``arrivals`` jobs
    arrive (default 0.2 % of ``pending``, at least 1). Returns the cold cycle, p50/p99/max
    of the steady ones (whole cycle and per phase), actions and ``scontrol`` processes per
    cycle, and the peak RSS of this process (the bench's generator included)."""
    from attentived.daemon import log as dlog
    from attentived.topology import uniform

    dlog.configure("error", "json")
    topo = uniform(gpus // GPUS_PER_NODE, GPUS_PER_NODE, nodes_per_switch=NODES_PER_SWITCH)
    slurm = SyntheticSlurm(gpus, pending, seed=seed)
    assert [n.name for n in topo.nodes] == slurm.nodes, "the JSON must name nodes as the topology does"
    ends = max(1, slurm.counts()["running"] // 100) if ends is None else ends
    arrivals = max(1, pending // 500) if arrivals is None else arrivals
    with tempfile.TemporaryDirectory(prefix="attentived-scale-") as tmp:
        base = Path(tmp)
        install_stubs(base / "bin")
        data = base / "slurm"
        data.mkdir()
        log = base / "argv.log"
        log.touch()
        with environ(STUB_LOG=str(log), STUB_DIR=str(data), STUB_VERSION=version,
                     STUB_CONFIG=str(FIXTURES / "slurm-22.05" / "scontrol-show-config.txt")):
            rows, shape, setup_s, squeue_bytes = _run(base, slurm, topo, version, cycles, policy, seed, ends, arrivals)
    return summarize(version, gpus, pending, policy, rows, shape, setup_s, squeue_bytes)


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    """Set environment variables for the stub commands (the backend passes the process
    environment on), and put the old values back after."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run(base: Path, slurm: SyntheticSlurm, topo: Any, version: str, cycles: int, policy: str, seed: int,
         ends: int, arrivals: int) -> tuple[list[dict[str, Any]], dict[str, int], float, int]:
    """The cycles themselves: (per-cycle rows, the cluster's shape, setup seconds, bytes of
    the first ``squeue`` output)."""
    from attentived.agents.registry import make_policy
    from attentived.daemon import config as C
    from attentived.daemon import heap
    from attentived.daemon.cli_backend import CliBackend
    from attentived.daemon.cycle import CycleRunner

    data, log = base / "slurm", base / "argv.log"
    cfg = C.Config(state_dir=str(base / "state"), partitions=("main",), metrics_port=0, policy=policy)
    backend = CliBackend(bin_dir=str(base / "bin"), timeout=120)
    runner = CycleRunner(cfg, backend=backend, topology=topo, policy=make_policy(policy, seed=seed))
    t = time.monotonic()
    runner.setup()  # the policy's warm-up, as the service does before its first cycle
    setup_s = time.monotonic() - t
    rows: list[dict[str, Any]] = []
    shape = slurm.counts()
    squeue_bytes = 0
    try:
        for i in range(cycles):
            slurm.write(data, version)
            squeue_bytes = squeue_bytes or (data / FILES[version][0]).stat().st_size
            calls_before = len(log.read_text().splitlines())
            t = time.monotonic()
            res = runner.run_cycle()
            wall = time.monotonic() - t
            if not res.ok:
                raise RuntimeError(f"cycle {i} failed: {res.error_kind}: {res.error}")
            calls = log.read_text().splitlines()[calls_before:]
            rows.append(_row(res, wall, calls))
            if i == 0:
                heap.settle()  # as the service does after its first good snapshot
            slurm.apply(res.outcomes)
            rows[-1]["churn"] = slurm.step(planned_starts(res, topo), ends=ends, arrivals=arrivals)
    finally:
        backend.close()
        runner.journal.close()
    return rows, shape, setup_s, squeue_bytes


def _row(res: Any, wall: float, calls: list[str]) -> dict[str, Any]:
    """One cycle's numbers: phases, actions by kind, plan size, and the ``scontrol``
    processes that wrote (``calls``: the stub log's lines of this cycle)."""
    kinds: dict[str, int] = {}
    for o in res.outcomes:
        kinds[o.action.kind] = kinds.get(o.action.kind, 0) + 1
    return {**phases(res, wall), "actions": len(res.outcomes), "kinds": kinds,
            "starts": len(res.plan.starts) if res.plan else 0, "holds": len(res.plan.holds) if res.plan else 0,
            "write_processes": sum(1 for c in calls if c.startswith("scontrol") and not _is_read(c)),
            "managed": res.counts.get("managed", 0), "running": res.counts.get("running", 0)}


def _is_read(call: str) -> bool:
    """Whether a logged ``scontrol`` call only read."""
    return call.startswith(("scontrol --version", "scontrol show", "scontrol -o show"))


def summarize(version: str, gpus: int, pending: int, policy: str, rows: list[dict[str, Any]],
              shape: dict[str, int], setup_s: float, squeue_bytes: int) -> dict[str, Any]:
    """The numbers of one run: the cold cycle, then percentiles over the steady ones."""
    steady = rows[1:]
    out: dict[str, Any] = {
        "version": version, "gpus": gpus, "pending": pending, "policy": policy, "cycles": len(rows),
        "cluster": shape, "setup_s": round(setup_s, 3), "squeue_mib": round(squeue_bytes / 2**20, 1),
        "cold": {k: round(v, 4) if isinstance(v, float) else v for k, v in rows[0].items()},
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    for k in PHASES:
        vals = [r[k] for r in steady]
        out[f"{k}_p50_s"] = round(pct(vals, 50), 4)
        out[f"{k}_p99_s"] = round(pct(vals, 99), 4)
        out[f"{k}_max_s"] = round(max(vals), 4) if vals else float("nan")
    out["steady_actions"] = [r["actions"] for r in steady]
    out["steady_kinds"] = [r["kinds"] for r in steady]
    out["steady_write_processes"] = [r["write_processes"] for r in steady]
    out["steady_starts"] = [r["starts"] for r in steady]
    out["actions_mean"] = round(statistics.mean(out["steady_actions"]), 1) if steady else 0
    return out


def table(result: dict[str, Any]) -> str:
    """A plain-text summary of one ``measure_cycles`` result."""
    r = result
    c = r["cluster"]
    lines = [
        f"Slurm {r['version']}  policy {r['policy']}  {c['gpus']} GPUs on {c['nodes']} nodes "
        f"({c['busy_gpus']} busy, {c['running']} running jobs), {c['pending']} pending; "
        f"{r['cycles']} cycles (1 cold); squeue output {r['squeue_mib']} MiB; setup {r['setup_s']:.2f} s; peak RSS {r['peak_rss_mib']:.0f} MiB",
        f"{'phase':<16}{'cold':>9}{'p50':>9}{'p99':>9}{'max':>9}",
    ]
    for k in PHASES:
        lines.append(f"{k:<16}{r['cold'][k]:>9.3f}{r[f'{k}_p50_s']:>9.3f}{r[f'{k}_p99_s']:>9.3f}{r[f'{k}_max_s']:>9.3f}")
    lines.append(f"actions: cold {r['cold']['actions']} {r['cold']['kinds']}, "
                 f"steady {r['steady_actions']} (scontrol write processes {r['steady_write_processes']}, "
                 f"cold {r['cold']['write_processes']}); planned starts {r['steady_starts']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", action="append", choices=sorted(TEMPLATES),
                    help="Slurm version to imitate (repeat for several; default: all)")
    ap.add_argument("--gpus", type=int, default=16384)
    ap.add_argument("--pending", type=int, default=10000)
    ap.add_argument("--cycles", type=int, default=5, help="cycles per version, the first one cold")
    ap.add_argument("--policy", default="attentive", help="policy name (e.g. attentive, fifo+consolidate)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.cycles < 2:
        ap.error("--cycles must be at least 2 (one cold, one steady)")
    results = []
    for version in args.version or sorted(TEMPLATES):
        r = measure_cycles(version, args.gpus, args.pending, args.cycles, args.policy, args.seed)
        print(table(r), flush=True)
        print(flush=True)
        results.append(r)
    print(json.dumps({"results": results, "python": sys.version.split()[0], "cpus": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
