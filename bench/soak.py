"""Soak: thousands of daemon cycles against a churning queue (issue 7, item 8).

Two targets:

- ``fake`` (default, 2,000 cycles): the in-memory Slurm of ``daemon/testing.py`` on a
  4-node x 8-GPU cluster. Between cycles jobs arrive (alice/bob/carol, 1-8 GPUs), the jobs
  the plan starts are started where it put them, running jobs finish after a few cycles, and
  now and then a job is cancelled while pending, so every cycle plans starts, holds,
  renewals and clean-ups.
- ``lab`` (``--lab``, e.g. 200 cycles): the real local Slurm lab (root); short sbatch jobs
  (sleep 1-4 s) arrive between cycles and Slurm starts and ends them by itself. The mix is
  what real users send (issue 13): ``-c``, ``--exclusive``, typed GPUs, ``--gpus``, ``-w``,
  arrays, jobs held right after submission and released later, a maintenance reservation
  and an operator's reservation carrying the daemon's prefix, a user reservation with a job
  of partition ``other`` in it. Measured besides the above: how many started jobs ran on
  their planned nodes (journal ``placements``), actions naming anything the daemon does not
  own, failed actions in the first cycle, the most times one job's pin or hold was moved,
  cycles in which a job fit idle GPUs for longer than two intervals, stalls, and the pins
  and exclusions left after the daemon's exit clean-up.

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


def soak_lab(cycles: int, seed: int, state: Path, policy: str = "attentive") -> dict:
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
                              log_level="error", policy=policy))
        watch = Watch(state, submitted=0, first_cycle_failed=0, idle_cycles=0, stalls=0, foreign_actions=0)
        stats = watch.stats
        foreign = _foreign_setup(lab)
        moves: dict[str, int] = {}
        held: list[str] = []
        user_pinned: set[str] = set()
        errors: dict[str, int] = {}
        raced: set[str] = set()  # pin or hold refused because Slurm had started the job meanwhile
        stall_reasons: dict[str, int] = {}
        t0 = time.monotonic()
        for c in range(cycles):
            for _ in range(rng.choice((0, 0, 1, 1, 2))):
                jid, user_pin = _submit_realistic(lab, rng)
                stats["submitted"] += 1
                if user_pin:
                    user_pinned.add(jid)
                if rng.random() < 0.05:  # a user holds a job right after submitting it
                    lab.run(["scontrol", "hold", jid], check=False)
                    held.append(jid)
            if held and rng.random() < 0.2:
                lab.run(["scontrol", "release", held.pop(0)], check=False)
            res = eng.run_cycle()
            watch.cycle(c, res)
            if c == 0:
                stats["first_cycle_failed"] = res.failed
            for o in res.outcomes:
                if not o.ok:
                    key = f"{o.action.kind}: {' '.join(o.error.split()[:6])}"
                    errors[key] = errors.get(key, 0) + 1
                    if o.action.kind in ("pin", "exclude") and ("no longer pending" in o.error
                                                                or "Invalid node name" in o.error):
                        raced.add(o.action.job_id)
            for st in (res.plan_doc or {}).get("stalls", []):
                if st["since"] == (res.plan_doc or {}).get("now"):
                    stall_reasons[st["reason"]] = stall_reasons.get(st["reason"], 0) + 1
            for a in res.actions:
                if a.reservation in foreign["reservations"] or a.job_id in foreign["jobs"]:
                    stats["foreign_actions"] += 1
                if a.kind in ("pin", "exclude"):
                    moves[a.job_id] = moves.get(a.job_id, 0) + 1
            doc = res.plan_doc or {}
            stats["idle_cycles"] += doc.get("idle_with_queue_s", 0.0) > 2 * (0.2 + 0.2) + 1.0
            stats["stalls"] = int(eng.metrics.stalls.value())
            if c % 10 == 0:
                stats["leak_checks"] += 1
                pending = {k for k, v in _jobs(lab).items() if v in ("PENDING", "RUNNING", "CONFIGURING")}
                for name in lab.reservations():
                    if name.startswith("attentived-") and name not in foreign["reservations"] \
                            and name[len("attentived-"):] not in pending:
                        stats["leaks"] += 1
            time.sleep(0.2)
        elapsed = time.monotonic() - t0
        eng.hand_back(pins_only=True)  # what SIGTERM does by default (clear_pins_on_exit)
        left_pins = {j: d for j, d in _pending_constraints(lab).items() if j not in foreign["jobs"] | user_pinned and d}
        placements = [p["match"] for p in eng.journal.iter_placements() if p.get("match") not in (None, "not_placed")]
        on_plan = sum(m in ("exact", "same_nodes") for m in placements)
        off = {p["job_id"] for p in eng.journal.iter_placements() if p.get("match") in ("other_nodes", "unplanned")}
        reached = len(placements) - len(off & raced)
        placed: dict[str, object] = dict(started_checked=len(placements), on_planned_nodes=on_plan,
                     on_planned_nodes_pct=round(100.0 * on_plan / max(1, len(placements)), 1),
                     off_plan_raced=len(off & raced),
                     on_planned_nodes_when_applied_pct=round(100.0 * on_plan / max(1, reached), 1),
                     unplanned=sum(m == "unplanned" for m in placements),
                     not_placed=sum(1 for p in eng.journal.iter_placements() if p.get("match") == "not_placed"),
                     off_plan=[(p["job_id"], p["match"], p["planned_nodes"], p["actual_nodes"])
                               for p in eng.journal.iter_placements() if p.get("match") in ("other_nodes", "unplanned")],
                     other_nodes=sum(m == "other_nodes" for m in placements),
                     max_moves_per_job=max(moves.values(), default=0), pins_left_after_exit=len(left_pins),
                     pins_left=left_pins, action_errors=errors, stall_reasons=stall_reasons,
                     foreign_intact=_foreign_intact(lab, foreign))
        lab.run(["scancel", "--user=alice", "--user=bob", "--user=carol"], check=False)
        for u in ("alice", "bob", "carol"):
            lab.run(["scancel", "-u", u], check=False)
        for name in foreign["reservations"]:
            lab.run(["scontrol", "delete", f"reservation={name}"], check=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(v in ("PENDING", "RUNNING", "COMPLETING") for v in _jobs(lab).values()):
            time.sleep(0.5)
        for _ in range(3):
            eng.run_cycle()
        left = [n for n in lab.reservations() if n.startswith("attentived-")]
        out = dict(target="lab (real Slurm 22.05, 4 nodes x 8 GPUs)", policy=policy, cycles=cycles, seconds=round(elapsed, 1),
                   **watch.report(), **placed, reservations_left_after_drain=len(left))
        eng.journal.close()
        if started_lab:
            lab.stop()
        return out


def _submit_realistic(lab, rng: random.Random) -> tuple[str, bool]:
    """One job as users send them: GPUs by --gres or --gpus, sometimes CPUs, a GPU type,
    --exclusive, a node list or an array. Returns (job id, whether the user set -w)."""
    user = rng.choice(("alice", "bob", "carol"))
    gpus = rng.choice((1, 1, 2, 2, 4, 8))
    args = ["--time", "5"]
    kind = rng.random()
    if kind < 0.15:
        args += ["-c", str(rng.choice((2, 4, 6)))]
    elif kind < 0.22:
        args += ["--exclusive"]
    elif kind < 0.30:
        args += [f"--gres=gpu:h100:{gpus}"]
        gpus = 0
    elif kind < 0.40:
        args += [f"--gpus={gpus}"]
        gpus = 0
    elif kind < 0.45:
        args += ["-w", rng.choice(lab.node_names())]
    elif kind < 0.50:
        args += ["--array=0-2"]
    jid = str(lab.submit(user, gpus, nodes=1 if gpus else None, script=f"sleep {rng.randint(1, 4)}",
                         extra_args=args))
    return jid, "-w" in args


def _foreign_setup(lab) -> dict:
    """What the daemon must never touch: a MAINT reservation and an operator's one with its
    prefix (starting after the run, so they take no GPUs from it), a user's reservation with a
    job of partition ``other`` waiting in it."""
    names = ("attentived-maint", "attentived-999", "team")
    for name, flags, users, node in ((names[0], "MAINT,IGNORE_JOBS", "root", "node4"),
                                     (names[1], "IGNORE_JOBS", "root", "node3"), (names[2], "IGNORE_JOBS", "alice", "node2")):
        lab.run(["scontrol", "create", "reservation", f"ReservationName={name}", "StartTime=now+3600",
                 "Duration=60", f"Users={users}", f"Nodes={node}", f"Flags={flags}"])
    job = str(lab.submit("alice", 1, partition="other", script="sleep 1", extra_args=["--reservation=team"]))
    return {"reservations": set(names), "jobs": {job}, "before": lab.reservations()}


def _foreign_intact(lab, foreign: dict) -> bool:
    now = lab.reservations()
    return all(name in now and now[name].get("Nodes") == foreign["before"][name].get("Nodes")
               and now[name].get("StartTime") == foreign["before"][name].get("StartTime")
               for name in foreign["reservations"])


def _pending_constraints(lab) -> dict[str, tuple[str, str]]:
    """Pending jobs' ReqNodeList / ExcNodeList that are set (what a pin or hold leaves)."""
    out = {}
    for line in lab.scontrol("-o", "show", "job").splitlines():
        if "JobState=PENDING" not in line:
            continue
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        req, exc = fields.get("ReqNodeList", "(null)"), fields.get("ExcNodeList", "(null)")
        out[fields["JobId"]] = tuple(v for v in (req, exc) if v not in ("(null)", ""))
    return out


def _jobs(lab) -> dict[str, str]:
    return {str(j["job_id"]): (j["job_state"] if isinstance(j["job_state"], str) else j["job_state"][0])
            for j in lab.squeue_json()["jobs"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", action="store_true", help="soak against the real local Slurm lab (root)")
    ap.add_argument("--cycles", type=int, default=None, help="default 2000 (fake) / 200 (lab)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--policy", default="attentive", help="the daemon's policy in the lab soak")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args()
    cycles = a.cycles or (200 if a.lab else 2000)
    with tempfile.TemporaryDirectory(prefix="attentived-soak-") as tmp:
        res = soak_lab(cycles, a.seed, Path(tmp) / "state", a.policy) if a.lab else soak_fake(cycles, a.seed, Path(tmp) / "state")
    out = Path(a.out)
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc["lab" if a.lab else "fake"] = dict(res, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    bad = res["leaks"] or res["reservations_left_after_drain"] or res["failed_cycles"]
    if a.lab:
        bad = bad or res["foreign_actions"] or not res["foreign_intact"] or res["pins_left_after_exit"] \
            or res["first_cycle_failed"] or res["on_planned_nodes_pct"] < 95
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
