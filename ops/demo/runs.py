"""Running the demo live: two runs of one workload on a fresh lab cluster each, Slurm alone
and steered by ``attentived start`` (``Demo``, ``run_demo``), and their results
(``RunResult``, ``DemoResult``)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attentived.agents.slurm_backfill import WILL_RUN_WINDOW
from attentived.simulator.engine import JobRecord
from attentived.topology import Topology

from .jobscript import job_script, parse_job_output
from .measure import TABLE_KEYS, Allocations, LiveClocks, Prediction, measure, predict, summary_of
from .workload import DEMO_USERS, Workload, build_workload, demo_topology

__all__ = [
    "DEMO_PORT_BASE",
    "DEMO_RUN_DIR",
    "DemoError",
    "DemoOptions",
    "DemoResult",
    "RunResult",
    "default_policy",
    "run_demo",
]

DEMO_RUN_DIR = "/tmp/attentived-demo"
DEMO_PORT_BASE = 18617  # the test lab uses 17817.., bench/daemon_cycle.py 19417..
RUN_NAMES = ("slurm", "attentived")
RUN_TITLES = {"slurm": "Slurm alone", "attentived": "attentived"}

#: The "Slurm alone" run as a GPU site with accounting configures it: backfill, and multifactor
#: priorities led by fair-share (the lab's slurmdbd; users in one account, billed their GPUs),
#: then job size and age. The simulator's ``slurm`` preset models these factors (agents/order.py
#: ``SlurmMultifactor``). PriorityCalcPeriod is Slurm's shortest, 1 minute: the demo
#: compresses hours into seconds, and a site's 5 minutes would freeze fair-share for a run.
SLURM_ALONE_SCHED = "sched/backfill"
SLURM_ALONE_WEIGHTS = {"PriorityWeightFairshare": "10000", "PriorityWeightAge": "1000", "PriorityWeightJobSize": "1000",
                       "PriorityMaxAge": "7-0", "PriorityDecayHalfLife": "7-0", "PriorityCalcPeriod": "1"}
SLURM_ALONE_CONF = "\n".join(f"{k}={v}" for k, v in SLURM_ALONE_WEIGHTS.items())
#: The simulator preset that stands for Slurm alone in the prediction: usage summed each
#: minute, charged only for the jobs running at those minutes (the lab's
#: AccountingStorageEnforce=associations has no ``limits``, `SlurmMultifactor`), the
#: backfill on the one-second grid of DEMO_SCHED_PARAMS.
SLURM_ALONE_PRESET = "slurm:bf_resolution=1,calc_period=60,usage_at_end=0"


def slurm_alone_preset(lab: Any, t0: float) -> str:
    """``SLURM_ALONE_PRESET`` with its ticks where the run's slurmctld had them, relative to
    the run's start ``t0``. Its decay thread sums usage and recomputes priorities every
    PriorityCalcPeriod and writes ``priority_last_decay_ran`` into the state directory each
    time, so that file's modification time is the last tick to the millisecond. Without it,
    the process's start: /proc counts it from a boot time in whole seconds, and the thread
    starts later still (on the lab 0.5-1 s: enough to charge a job that ended in between).
    sdiag's "Data since" would not do: it is reset at midnight UTC. The backfill's will-run
    windows sit on multiples of 30 s of slurmctld's clock, which is the epoch: ``t0``'s
    remainder places them (``bf_clock_phase``)."""
    preset = f"{SLURM_ALONE_PRESET},{bf_clock_phase(t0)}"
    tick = _modified(lab.run_dir / "state" / "priority_last_decay_ran")
    if tick is None:
        tick = _process_start(lab.run_dir / "pid" / "slurmctld.pid")
    if tick is None:
        return preset
    return f"{preset},calc_offset={(tick - t0) % 60:.1f}"


def bf_clock_phase(t0: float) -> str:
    """The ``slurm`` preset's ``bf_clock_phase`` setting for a run that started at the epoch
    second ``t0``: slurmctld's clock there, modulo its will-run window."""
    return f"bf_clock_phase={t0 % WILL_RUN_WINDOW:.1f}"


def _modified(path: Path) -> float | None:
    """``path``'s modification time, or None when it is not there."""
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _read_text(path: Path) -> str:
    """``path``'s text, or "" when it cannot be read (a lab without that log)."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _process_start(pid_file: Path) -> float | None:
    """Unix time at which the process in ``pid_file`` started (/proc: boot time + its start
    in clock ticks); None when it cannot be read."""
    try:
        pid = int(pid_file.read_text().strip())
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")
#: The heuristic the demo runs when the learned model cannot be loaded.
FALLBACK_POLICY = "fifo+consolidate"

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNSUPPORTED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class DemoError(RuntimeError):
    """The demo cannot run or failed; ``code`` is the exit status the CLI uses."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


# ---- the policy the daemon runs -----------------------------------------------------------------


def check_policy(name: str) -> None:
    """DemoError (exit 2) for a policy name the daemon would not accept; cheap (no torch)."""
    from attentived.agents.registry import LEARNED, make_policy, parse_name
    from attentived.agents.spec import BadPolicyName

    try:
        spec = parse_name(name)
        if spec.base in LEARNED and not spec.params:
            from attentived.agents.learned import default_model_path

            if not default_model_path(spec.base).is_file():
                raise DemoError(f"policy {name}: no shipped model at {default_model_path(spec.base)}", EXIT_BAD_INPUT)
            return
        make_policy(name)  # with parameters, a learned policy loads: its model must take them
    except BadPolicyName as e:
        raise DemoError(str(e), EXIT_BAD_INPUT) from None


def model_identity(policy: str) -> dict[str, str] | None:
    """The model file a learned policy runs (its ``model=``, else the shipped one) and the
    file's sha256; ``None`` for a heuristic. demo.json records it: a saved demo's
    attentived run can be predicted again only with the model that ran it, and the
    shipped model changes between versions."""
    import hashlib

    from attentived.agents.registry import LEARNED, parse_name

    spec = parse_name(policy)
    if spec.base not in LEARNED:
        return None
    from attentived.agents.learned import default_model_path

    path = Path(str(spec.kwargs().get("model") or default_model_path(spec.base)))
    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


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
    #: 80 jobs offered at 2.4x the cluster's GPUs while they arrive: with 40 at 1.6x the queue
    #: stayed so short that no policy, not even SJF on the true durations, beat fair-share
    #: Slurm by more than the seed-to-seed spread (docs/demo.md, "Why 80 jobs at 2.4x")
    jobs: int = 80
    users: int = 3
    time_scale: float | None = None  # None: picked so the submissions span about target_span
    policy: str | None = None  # None: default_policy()
    seed: int = 0
    keep_cluster: bool = False
    run_dir: str = field(default_factory=lambda: os.environ.get("ATTENTIVED_DEMO_RUN") or DEMO_RUN_DIR)
    port_base: int = field(default_factory=lambda: int(os.environ.get("ATTENTIVED_DEMO_PORT_BASE") or DEMO_PORT_BASE))
    interval: float = 0.5  # the daemon's cycle (seconds)
    target_span: float = 50.0  # seconds of submissions when time_scale is None
    max_duration: float = 40.0  # longest job (demo seconds at the ideal placement)
    load: float = 2.4  # offered load while jobs arrive (x the cluster's GPUs)
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
    #: The run's slurmctld.log: when Slurm's passes ran and what it allocated (the replay
    #: does not know the passes' phase yet, docs/demo.md)
    slurmctld_log: str = field(repr=False, default="")
    daemon: dict[str, Any] | None = None
    leftover_reservations: list[str] = field(default_factory=list)
    #: Slurm's scheduling settings in effect, as `scontrol show config` printed them
    slurm_conf: dict[str, str] = field(default_factory=dict)

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
            "title": self.title, "scheduler": {"summary": self.scheduler, "slurm_conf": self.slurm_conf},
            "predicted_by": self.policy,
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
    model: dict[str, str] | None = None  # `model_identity` of ``policy``

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
            "policy": self.policy, "model": self.model, "seed": self.options.seed, "wall_seconds": self.wall_seconds,
            "workload": self.workload.as_json(),
            "comparison": comparison,
            "runs": {n: r.as_json() for n, r in self.runs.items()},
        }


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


#: `scontrol show config` keys that say how Slurm orders and places jobs (and every Priority*;
#: AccountingStorageEnforce decides when fair-share charges a job, `SlurmMultifactor`)
SCHEDULING_KEYS = ("SchedulerType", "SchedulerParameters", "SelectType", "SelectTypeParameters",
                   "AccountingStorageType", "AccountingStorageTRES", "AccountingStorageEnforce")


def _scheduling_settings(lab: Any) -> dict[str, str]:
    """What the run's slurmctld says it schedules with: the record of "Slurm alone"'s weights."""
    from attentived.daemon.scontrol_text import parse_config

    conf = parse_config(lab.scontrol("show", "config"))
    return {k: v for k, v in conf.items() if k in SCHEDULING_KEYS or k.startswith("Priority")}


class Demo:
    """One demo: both runs, their clean-up and the result. ``run()`` does it all."""

    def __init__(self, options: DemoOptions, on_event: Event | None = None) -> None:
        self.o = options
        self.emit: Event = on_event or (lambda *a, **k: None)
        self.topo = demo_topology()
        self.clocks = LiveClocks(daemon_cycle=options.interval)
        self.lab: Any = None
        self.daemon: subprocess.Popen[bytes] | None = None
        self.daemon_log: Path | None = None
        self.submitter: _Submitter | None = None
        self.stop = threading.Event()

    # ---- the lab ----------------------------------------------------------------------------
    def _lab(self, kind: str) -> Any:
        from ..lab import Lab

        if kind == "slurm":
            return Lab(self.o.run_dir, port_base=self.o.port_base, sched_type=SLURM_ALONE_SCHED,
                       sched_params=DEMO_SCHED_PARAMS, extra_conf=SLURM_ALONE_CONF, users=DEMO_USERS)
        return Lab(self.o.run_dir, port_base=self.o.port_base, sched_params=DEMO_SCHED_PARAMS, users=DEMO_USERS)

    def check_machine(self) -> None:
        """Root and Slurm (installed here when missing), or a DemoError saying why not."""
        from ..lab import LabError, install, slurm_installed

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
        env = lab.env()  # SLURM_CONF, and the lab's own client commands first on PATH (a 24.11 lab's)
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
    def _run(self, kind: str, workload: Workload, daemon_policy: str,
             predicted: Prediction | None = None) -> RunResult:
        """One live run. ``predicted``: the attentived run's replay, made before the runs (a
        policy that cannot be simulated is refused before any cluster starts); Slurm alone's
        is made after its run, with its slurmctld's calculation ticks."""
        from attentived.daemon.slurm_json import parse_squeue

        from ..lab import LabError

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
            scheduler = f"{SLURM_ALONE_SCHED} + priority/multifactor (fair-share, age, job size), Slurm's placement"
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
        if kind == "slurm":  # the prediction with slurmctld's own calculation ticks
            sim_policy = slurm_alone_preset(lab, t0)
            predicted = predict(workload, sim_policy, self.topo, self.o.seed, self.clocks)
        else:
            sim_policy = daemon_policy
        assert predicted is not None, "the attentived run is predicted before it starts"
        leftovers = sorted(r for r in lab.reservations() if r.startswith("attentived-"))
        for r in leftovers:
            lab.run(["scontrol", "delete", f"ReservationName={r}"], check=False)
        self.emit("phase", run=kind, text="done")
        return RunResult(
            name=kind, title=title, scheduler=scheduler, policy=sim_policy, records=m.records,
            summary=summary_of(m.records, self.topo) if m.records else {},
            predicted_records=predicted.records, predicted=predicted.summary,
            states=m.states, slurm_ids=m.slurm_ids, alloc_source=m.alloc_source, job_outputs=outputs,
            missing=m.missing, wall_seconds=wall, started_at=t0, squeue_raw=raw,
            slurmctld_log=_read_text(lab.run_dir / "log" / "slurmctld.log"), daemon=daemon_info,
            leftover_reservations=leftovers, slurm_conf=_scheduling_settings(lab),
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
        from ..lab import Lab, LabError

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
        from ..lab import LabError

        t_start = time.time()
        o = self.o
        try:
            workload = build_workload(o.jobs, o.users, o.time_scale, o.seed, target_span=o.target_span,
                                      max_duration=o.max_duration, load=o.load, topology=self.topo)
        except ValueError as e:
            raise DemoError(str(e), EXIT_BAD_INPUT) from None
        policy = o.policy or default_policy()
        check_policy(policy)
        model = model_identity(policy)
        self.emit("workload", workload=workload, policy=policy)
        self.check_machine()
        self.emit("phase", run=None, text="simulating the same workload (the prediction)")
        try:
            predicted_attentived = predict(workload, policy, self.topo, o.seed, self.clocks, pinned=True)
        except Exception as e:  # noqa: BLE001 - a model that does not load, a policy that fails
            raise DemoError(f"cannot simulate policy {policy!r}: {type(e).__name__}: {e}", EXIT_BAD_INPUT) from None
        ok = False
        with self._locked():
            try:
                runs = {"slurm": self._run("slurm", workload, policy)}
                self.emit("run_done", run="slurm", result=runs["slurm"])
                self.lab.stop()
                runs["attentived"] = self._run("attentived", workload, policy, predicted_attentived)
                used = (runs["attentived"].daemon or {}).get("policy")
                if used and used != policy:  # the daemon fell back: predict what really ran
                    runs["attentived"].policy = used
                    again = predict(workload, used, self.topo, o.seed, self.clocks, pinned=True)
                    runs["attentived"].predicted_records, runs["attentived"].predicted = again.records, again.summary
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
        return DemoResult(workload, self.topo, policy, runs, time.time() - t_start, o, model)


def _daemon_stats(status_path: Path, log_path: Path | None) -> dict[str, Any]:
    """Cycles, actions and errors the daemon logged, and its final status."""
    out: dict[str, Any] = {"cycles": 0, "actions": 0, "failed_actions": 0, "overtaken_actions": 0, "cycle_errors": 0,
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
                out["overtaken_actions"] += int(rec.get("overtaken") or 0)
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
