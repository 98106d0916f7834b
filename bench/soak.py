"""Soak: thousands of daemon cycles against a churning queue (issue 7, item 8).

Two targets:

- ``fake`` (default, 2,000 cycles): the in-memory Slurm of ``daemon/testing.py`` on a
  4-node x 8-GPU cluster. Between cycles jobs arrive (alice/bob/carol, 1-8 GPUs), the jobs
  the plan starts are started where it put them, running jobs finish after a few cycles, and
  now and then a job is cancelled while pending, so every cycle plans starts, holds,
  renewals and clean-ups.
- ``lab`` (``--lab``, e.g. 200 cycles): the real local Slurm lab (root); short sbatch jobs
  (sleep 1-4 s) arrive between cycles and Slurm starts and ends them by itself.

Measured: RSS at cycle 100 and at the end (growth), open file descriptors (start / max /
end), journal size on disk (max and end, with small ``journal_max_rows`` so rotation is
exercised), failed cycles, and leaked reservations: after the run the queue drains and the
daemon's reservations must all be gone (0), and at every cycle each ``attentived-<job>``
reservation must belong to a pending job. Writes bench/results/soak.json (one key per
target, so the two runs do not overwrite each other).

    .venv/bin/python bench/soak.py                    # 2,000 cycles, in-memory Slurm
    sudo .venv/bin/python bench/soak.py --lab --cycles 200
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "soak.json"


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def journal_bytes(state: Path) -> int:
    return sum(p.stat().st_size for p in state.glob("journal.sqlite*"))


class Watch:
    """What both soaks record per cycle: the cycle's actions and failures (in ``stats``),
    RSS at cycle 100, the most file descriptors and the largest journal on disk."""

    def __init__(self, state: Path, **counters: int) -> None:
        self.state = state
        self.stats = dict(failed_cycles=0, failed_actions=0, actions=0, leak_checks=0, leaks=0, **counters)
        self.rss0, self.fd0 = rss_mib(), fds()
        self.rss100, self.fd_max, self.jmax = 0.0, 0, 0

    def cycle(self, c: int, res) -> None:
        self.stats["actions"] += len(res.outcomes)
        self.stats["failed_actions"] += res.failed
        if not res.ok and res.error_kind != "apply":
            self.stats["failed_cycles"] += 1
        if c == 99:
            gc.collect()
            self.rss100 = rss_mib()
        self.fd_max = max(self.fd_max, fds())
        self.jmax = max(self.jmax, journal_bytes(self.state))

    def report(self) -> dict:
        gc.collect()
        end = rss_mib()
        return dict(rss_mib_start=round(self.rss0, 1), rss_mib_at_100=round(self.rss100, 1), rss_mib_end=round(end, 1),
                    rss_growth_after_100_mib=round(end - self.rss100, 1) if self.rss100 else None,
                    fds_start=self.fd0, fds_max=self.fd_max, fds_end=fds(), journal_bytes_max=self.jmax,
                    journal_bytes_end=journal_bytes(self.state), **self.stats)


def soak_fake(cycles: int, seed: int, state: Path) -> dict:
    from attentived.daemon import config as C
    from attentived.daemon import log as dlog
    from attentived.daemon.cycle import CycleRunner
    from attentived.daemon.records import SlurmJob, SlurmNode
    from attentived.daemon.testing import FakeBackend
    from attentived.topology import uniform

    dlog.configure(level="error", fmt="json", stream=open(os.devnull, "w"))
    rng = random.Random(seed)
    topo = uniform(4, 8, nodes_per_switch=2)
    nodes = [SlurmNode(f"node{i}", "IDLE", gpus=8, gpu_type="h100", partitions=("main",)) for i in range(1, 5)]
    now = 1_000_000.0
    fake = FakeBackend([], nodes, now=now)
    eng = CycleRunner(C.Config(state_dir=str(state), partitions=("main",), metrics_port=0, interval=1.0,
                          journal_max_rows=1000, journal_max_plans=50, log_level="error"),
                 backend=fake, topology=topo)
    watch = Watch(state, submitted=0, started=0, finished=0, cancelled=0)
    ends: dict[str, float] = {}
    next_id, stats = 1, watch.stats
    max_pending = max_holds = 0
    t0 = time.monotonic()
    for c in range(cycles):
        fake.now = now = now + 30
        # arrivals
        for _ in range(rng.choice((0, 0, 0, 1, 1, 2))):
            g = rng.choice((1, 1, 2, 2, 4, 8))
            fake.submit(SlurmJob(str(next_id), user=rng.choice(("alice", "bob", "carol")), partition="main",
                                 state="PENDING", reason="Priority", gpus=g, gpus_per_node=g, per_node_fixed=True,
                                 num_nodes=1, submit_time=now, priority=1, time_limit=3600.0))
            next_id += 1
            stats["submitted"] += 1
        # ends and cancellations
        for jid, at in list(ends.items()):
            if c >= at:
                fake.finish(jid, at=now)
                del ends[jid]
                stats["finished"] += 1
        pend = [j for j in fake.jobs.values() if j.pending]
        if pend and rng.random() < 0.05:
            fake.finish(rng.choice(pend).job_id, at=now, state="CANCELLED")
            stats["cancelled"] += 1
        # forget long-finished jobs, as Slurm's MinJobAge does
        for jid in [j.job_id for j in fake.jobs.values() if j.finished and (j.end_time or now) < now - 300]:
            del fake.jobs[jid]
        res = eng.run_cycle()
        fake.calls.clear()  # the in-memory Slurm's own write log is the bench's, not the daemon's
        watch.cycle(c, res)
        max_pending = max(max_pending, res.counts.get("pending", 0))
        max_holds = max(max_holds, sum(1 for h in (res.plan_doc or {}).get("holds", []) if h["reservation"]))
        # Slurm starts what the plan starts, where the plan put it
        for s in (res.plan_doc or {}).get("starts", []):
            job = fake.jobs.get(s["job"])
            if job is None or not job.pending:
                continue
            placement: dict[str, list[int]] = {}
            for name in s["gpus"]:
                node, _, idx = name.partition(":")
                placement.setdefault(node, []).append(int(idx))
            try:
                fake.start(s["job"], placement, at=now)
            except Exception:
                continue
            ends[s["job"]] = c + rng.randint(3, 15)
            stats["started"] += 1
        # every attentived reservation belongs to a pending job
        stats["leak_checks"] += 1
        for name in fake.reservations:
            if name.startswith("attentived-"):
                j = fake.jobs.get(name[len("attentived-"):])
                if j is None or not (j.pending or j.active):
                    stats["leaks"] += 1
    elapsed = time.monotonic() - t0
    # drain: every job ends, the daemon must leave no reservation behind
    for j in list(fake.jobs.values()):
        if j.pending or j.active:
            fake.finish(j.job_id, at=now)
    for _ in range(3):
        fake.now = now = now + 30
        eng.run_cycle()
    left = [n for n in fake.reservations if n.startswith("attentived-")]
    out = dict(target="fake (daemon/testing.py, 4 nodes x 8 GPUs)", cycles=cycles, seconds=round(elapsed, 1),
               cycles_per_second=round(cycles / elapsed, 1), **watch.report(),
               journal_rows=dict(cycles=len(eng.journal.cycles(100_000))), journal_max_rows=1000,
               reservations_left_after_drain=len(left), max_pending=max_pending, max_holds=max_holds)
    eng.journal.close()
    return out


def soak_lab(cycles: int, seed: int, state: Path) -> dict:
    from attentived.daemon import config as C
    from attentived.daemon import log as dlog
    from attentived.daemon.cycle import CycleRunner
    from attentived.ops.lab import Lab

    dlog.configure(level="error", fmt="json", stream=open(os.devnull, "w"))

    rng = random.Random(seed)
    lab = Lab()
    with lab.exclusive():
        started_lab = False
        if not lab.is_running():
            lab.start()
            started_lab = True
        lab.reset()
        eng = CycleRunner(C.Config(state_dir=str(state), partitions=("main",), metrics_port=0, interval=0.2,
                              slurm_conf=str(lab.slurm_conf), journal_max_rows=1000, journal_max_plans=50,
                              log_level="error"))
        watch = Watch(state, submitted=0)
        stats = watch.stats
        t0 = time.monotonic()
        for c in range(cycles):
            for _ in range(rng.choice((0, 0, 1, 1, 2))):
                lab.submit(rng.choice(("alice", "bob", "carol")), rng.choice((1, 2, 4, 8)),
                           script=f"sleep {rng.randint(1, 4)}")
                stats["submitted"] += 1
            watch.cycle(c, eng.run_cycle())
            if c % 10 == 0:
                stats["leak_checks"] += 1
                pending = {k for k, v in _jobs(lab).items() if v in ("PENDING", "RUNNING", "CONFIGURING")}
                for name in lab.reservations():
                    if name.startswith("attentived-") and name[len("attentived-"):] not in pending:
                        stats["leaks"] += 1
            time.sleep(0.2)
        elapsed = time.monotonic() - t0
        lab.run(["scancel", "--user=alice", "--user=bob", "--user=carol"], check=False)
        for u in ("alice", "bob", "carol"):
            lab.run(["scancel", "-u", u], check=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(v in ("PENDING", "RUNNING", "COMPLETING") for v in _jobs(lab).values()):
            time.sleep(0.5)
        for _ in range(3):
            eng.run_cycle()
        left = [n for n in lab.reservations() if n.startswith("attentived-")]
        out = dict(target="lab (real Slurm 22.05, 4 nodes x 8 GPUs)", cycles=cycles, seconds=round(elapsed, 1),
                   **watch.report(), reservations_left_after_drain=len(left))
        eng.journal.close()
        if started_lab:
            lab.stop()
        return out


def _jobs(lab) -> dict[str, str]:
    return {str(j["job_id"]): (j["job_state"] if isinstance(j["job_state"], str) else j["job_state"][0])
            for j in lab.squeue_json()["jobs"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", action="store_true", help="soak against the real local Slurm lab (root)")
    ap.add_argument("--cycles", type=int, default=None, help="default 2000 (fake) / 200 (lab)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args()
    cycles = a.cycles or (200 if a.lab else 2000)
    with tempfile.TemporaryDirectory(prefix="attentived-soak-") as tmp:
        res = (soak_lab if a.lab else soak_fake)(cycles, a.seed, Path(tmp) / "state")
    out = Path(a.out)
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc["lab" if a.lab else "fake"] = dict(res, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    bad = res["leaks"] or res["reservations_left_after_drain"] or res["failed_cycles"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
