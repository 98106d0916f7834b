"""Daemon cycle latency on a real Slurm (issue 4's benchmark): snapshot + decide + apply.

For each case a private Slurm lab starts (own run dir and port base, so it never collides
with a test lab), root's blockers fill most GPUs, and alice/bob/carol queue N pending jobs
(1-8 GPUs, 30-minute limits). The daemon's cycle runner then runs in this process:

- one *cold* cycle: every pending job gets its first priority (N updates in one batch);
- ``--cycles`` *steady* cycles with churn between them: one running job ends and two new
  jobs arrive, so each cycle plans real starts, holds and priority insertions.

Reported: p50 / p99 / max of the steady cycles (whole cycle and per phase), the cold cycle,
actions per cycle and the peak RSS of the process (the daemon's cycle runner plus the bench).
Prints a table and writes bench/results/daemon_cycle.json. Needs root (the lab).

The labs run slurmdbd and MariaDB, as sites run Slurm; ``--no-accounting`` leaves them out.
With slurmdbd, Slurm 22.05 holds an update of a job slurmdbd is still registering (new jobs,
every 5 s) and retries it each second inside slurmctld, so a cycle that updates jobs
submitted a moment ago can take a second longer (daemon/unregistered.py).

    sudo .venv/bin/python bench/daemon_cycle.py                 # 200 on 4 nodes, 1000 on 16
    sudo .venv/bin/python bench/daemon_cycle.py --no-accounting # the same without slurmdbd
    sudo .venv/bin/python bench/daemon_cycle.py --case 1000 --cycles 50
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "daemon_cycle.json"
CASES = {200: dict(nodes=4, nodes_per_switch=2), 1000: dict(nodes=16, nodes_per_switch=4)}
PORT_BASE = 19417


def _stderr(p: subprocess.Popen) -> str:
    """The first 300 characters of a finished sbatch's error output."""
    return p.stderr.read().decode()[:300] if p.stderr is not None else ""


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))
    return s[k]


def submit_many(lab, jobs: list[tuple[str, int]], rng: random.Random) -> None:
    """Submit as each user in parallel batches (sbatch is ~10 ms; 1000 jobs take seconds)."""
    procs = []
    for user, gpus in jobs:
        argv = lab.sbatch_argv(user, gpus, script="sleep 3600", extra_args=["--time", str(rng.choice((30, 60, 120)))])
        procs.append(subprocess.Popen(argv, env=lab.user_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        if len(procs) >= 16:
            for p in procs:
                if p.wait(60) != 0:
                    raise RuntimeError(f"sbatch failed: {_stderr(p)}")
            procs = []
    for p in procs:
        if p.wait(60) != 0:
            raise RuntimeError(f"sbatch failed: {_stderr(p)}")


def run_case(pending: int, nodes: int, nodes_per_switch: int, cycles: int, policy: str, seed: int,
             accounting: bool = True) -> dict:
    from attentived.daemon import config as C
    from attentived.daemon import log as dlog
    from attentived.daemon.cycle import CycleRunner
    from attentived.ops.lab import Lab

    dlog.configure("error", "json")
    rng = random.Random(seed)
    run_dir = Path(f"/tmp/attentived-bench-lab-{nodes}")
    lab = Lab(run_dir=run_dir, accounting=accounting, nodes=nodes, nodes_per_switch=nodes_per_switch, port_base=PORT_BASE + 100 * (nodes // 4),
              users=("alice", "bob", "carol"))
    if lab.is_running():
        lab.stop()
    t0 = time.perf_counter()
    lab.start()
    started = time.perf_counter() - t0
    state = Path(tempfile.mkdtemp(prefix="attentived-bench-"))
    try:
        # busy cluster: 6 of 8 GPUs of every node held by long blockers
        for node in lab.node_names():
            lab.submit(None, 6, script="sleep 3600", extra_args=["--nodelist", node, "--time", "120"])
        users = ("alice", "bob", "carol")
        sizes = (1, 1, 2, 2, 4, 8)
        t0 = time.perf_counter()
        submit_many(lab, [(users[i % 3], sizes[rng.randrange(len(sizes))]) for i in range(pending)], rng)
        submitted = time.perf_counter() - t0
        time.sleep(2)
        cfg = C.Config(interval=5, partitions=("main",), policy=policy, state_dir=str(state), slurm_conf=str(lab.slurm_conf),
                       metrics_port=0, log_level="error")
        eng = CycleRunner(cfg)
        cold = eng.run_cycle()
        if not cold.ok:
            raise RuntimeError(f"cold cycle failed: {cold.error}")
        rows = []
        for _ in range(cycles):
            time.sleep(1.0)  # let Slurm start the pinned jobs
            running = [j for j in eng.backend.snapshot().jobs if j.active]
            if running:
                lab.run(["scancel", rng.choice(running).job_id], check=False)
            submit_many(lab, [(users[rng.randrange(3)], sizes[rng.randrange(len(sizes))]) for _ in range(2)], rng)
            res = eng.run_cycle()
            rows.append({"seconds": res.duration, "ok": res.ok, "actions": len(res.outcomes), "failed": res.failed,
                         "pending": res.counts.get("managed", 0), **{k: res.timings.get(k, 0.0) for k in
                                                                     ("snapshot", "decide", "apply")}})
        idle = eng.run_cycle()  # nothing changed since the last cycle (no churn between)
        steady = [r["seconds"] for r in rows]
        out = {
            "pending": pending, "nodes": nodes, "gpus": nodes * 8, "policy": policy, "accounting": accounting,
            "cycles": len(rows),
            "lab_start_s": round(started, 2), "submit_s": round(submitted, 2),
            "cold": {"seconds": round(cold.duration, 4), "actions": len(cold.outcomes), "failed": cold.failed,
                     **{k: round(cold.timings.get(k, 0.0), 4) for k in ("snapshot", "decide", "apply")}},
            "steady": {
                "p50": round(pct(steady, 50), 4), "p99": round(pct(steady, 99), 4), "max": round(max(steady), 4),
                "mean": round(statistics.fmean(steady), 4),
                **{f"{k}_p50": round(pct([r[k] for r in rows], 50), 4) for k in ("snapshot", "decide", "apply")},
                **{f"{k}_p99": round(pct([r[k] for r in rows], 99), 4) for k in ("snapshot", "decide", "apply")},
                "actions_mean": round(statistics.fmean(r["actions"] for r in rows), 1),
                "pending_mean": round(statistics.fmean(r["pending"] for r in rows), 1),
                "all_ok": all(r["ok"] for r in rows),
            },
            "unchanged_cycle": {"seconds": round(idle.duration, 4), "actions": len(idle.outcomes)},
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
        eng.journal.close()
        return out
    finally:
        lab.stop()
        shutil.rmtree(state, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", type=int, choices=sorted(CASES), action="append", help="pending jobs (default: all cases)")
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--policy", default="fifo+consolidate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-accounting", dest="accounting", action="store_false",
                    help="labs without slurmdbd (default: with it, as sites run Slurm; 22.05 then holds a new "
                         "job's first update up to 1 s while slurmdbd registers the job)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:  # one case in a fresh process, so that its peak RSS is its own
        print(json.dumps(run_case(args.child, **CASES[args.child], cycles=args.cycles, policy=args.policy, seed=args.seed,
                                  accounting=args.accounting)))
        return 0
    results = []
    for case in args.case or sorted(CASES):
        proc = subprocess.run([sys.executable, __file__, "--child", str(case), "--cycles", str(args.cycles),
                               "--policy", args.policy, "--seed", str(args.seed),
                               *([] if args.accounting else ["--no-accounting"])], capture_output=True, text=True,
                              cwd=ROOT, timeout=1800)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    head = (f"{'pending':>7} {'nodes':>5} {'cold s':>7} {'p50 s':>7} {'p99 s':>7} {'max s':>7} {'snap p50':>8} "
            f"{'apply p50':>9} {'actions':>7} {'idle':>5} {'RSS MB':>7}")
    print(f"daemon cycle latency, policy {args.policy}, {args.cycles} cycles with churn, "
          f"{'with' if args.accounting else 'without'} slurmdbd, {platform.node()}")
    print(head)
    for r in results:
        s = r["steady"]
        print(f"{r['pending']:>7} {r['nodes']:>5} {r['cold']['seconds']:>7.3f} {s['p50']:>7.3f} {s['p99']:>7.3f} {s['max']:>7.3f} "
              f"{s['snapshot_p50']:>8.3f} {s['apply_p50']:>9.3f} {s['actions_mean']:>7.1f} {r['unchanged_cycle']['actions']:>5} "
              f"{r['peak_rss_mb']:>7.1f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    def key(r: dict) -> tuple:
        return r["pending"], r["policy"], r.get("accounting", False)  # rows before the flag: labs without slurmdbd

    try:  # keep earlier results of other cases / policies / labs
        old = [r for r in json.loads(RESULTS.read_text())["results"] if key(r) not in {key(x) for x in results}]
    except (OSError, ValueError, KeyError):
        old = []
    results = sorted(old + results, key=lambda r: (not r.get("accounting", False), r["policy"] != "fifo+consolidate",
                                                   r["policy"], r["pending"]))
    RESULTS.write_text(json.dumps({
        "command": "sudo .venv/bin/python bench/daemon_cycle.py [--no-accounting]"
                   + (f" --cycles {args.cycles}" if args.cycles != 30 else ""),
        "machine": {"host": platform.node(), "python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "slurm": subprocess.run(["dpkg-query", "-W", "-f=${Version}", "slurmctld"], capture_output=True, text=True).stdout,
        "results": results,
    }, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
