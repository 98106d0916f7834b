"""Block topologies live: does the daemon's plan keep to the blocks slurmctld allocates by?

An 8-node lab (no accounting) runs ``TopologyPlugin=topology/block`` with blocks of two nodes
and ``BlockSizes=2,4`` (the topology.conf of ``tests/daemon/fixtures/record_blocks.sh``). One
workload of 33 jobs (1 to 24 GPUs; two- and three-node jobs among them, some that fix no node
count) is submitted at once and the daemon steers it under ``sjf+consolidate`` with 2 s
cycles, twice, each on a fresh lab:

* ``blocks``: the daemon reads the lab's topology.conf, blocks and rule (docs/daemon.md,
  "Block topologies");
* ``switches``: the daemon is given the same blocks as plain leaf switches (``topology_conf``
  of ``SwitchName=`` lines), as it read a block topology.yaml before it knew the rule.

Counted until the queue is empty: the makespan, the polls (every 2 s) that found a job
pending with reason ``BadConstraints`` (a pin slurmctld refused), the starts the daemon
logged as stalled, and its cycles.

    sudo .venv/bin/python bench/blocks_live.py                      # Slurm 24.11, once each
    sudo .venv/bin/python bench/blocks_live.py --slurm 26.05 --repeats 2 --out blocks.json

Needs root and the lab (docs/slurm-lab.md); about 4 minutes per run. Prints a table and, as
its last line, a JSON object with every number.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attentived.atomic import write_text
from attentived.ops.lab import Lab

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = (ROOT / "tests" / "daemon" / "fixtures" / "slurm-24.11" / "topology-block.conf").read_text()
AS_SWITCHES = "".join(f"SwitchName=b{k} Nodes=node[{2 * k - 1}-{2 * k}]\n" for k in range(1, 5)) + \
    "SwitchName=root Switches=b[1-4]\n"
#: (count, user, sbatch options, seconds): submitted in this order, all at once
WORKLOAD = (
    (6, "alice", ("--gpus=4",), 40),
    (8, "alice", ("--gpus=1",), 20),
    (10, "bob", ("-N2", "--gres=gpu:8"), 30),
    (6, "carol", ("--gpus=12",), 30),
    (3, "carol", ("-N3", "--gres=gpu:8"), 30),
)


def run_once(lab: Lab, variant: str, workdir: Path, limit: float) -> dict:
    lab.start()
    try:
        for count, user, options, seconds in WORKLOAD:
            for _ in range(count):
                lab.run(["sbatch", "--parsable", "-p", "main", "-o", "/dev/null", *options,
                         "--wrap", f"sleep {seconds}"], user=user)
        state = workdir / variant
        state.mkdir(parents=True, exist_ok=True)
        lines = [f'slurm_conf = "{lab.slurm_conf}"', 'partitions = ["main"]', f'state_dir = "{state}"',
                 "interval = 2.0", "metrics_port = 0", 'policy = "sjf+consolidate"']
        if lab.client_bin.is_dir():
            lines.append(f'slurm_bin_dir = "{lab.client_bin}"')
        if variant == "switches":
            write_text(workdir / "as-switches.conf", AS_SWITCHES)
            lines.append(f'topology_conf = "{workdir / "as-switches.conf"}"')
        write_text(state / "config.toml", "\n".join(lines) + "\n")
        log = state / "daemon.log"
        start = time.monotonic()
        with log.open("w") as out:
            daemon = subprocess.Popen([sys.executable, "-m", "attentived", "start", "-c", str(state / "config.toml")],
                                      stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        refused = polls = 0
        left = -1
        try:
            while time.monotonic() - start < limit:
                reasons = lab.run(["squeue", "-h", "-p", "main", "-o", "%R"]).stdout.split()
                left = len(reasons)
                refused += sum("BadConstraints" in r for r in reasons)
                polls += 1
                if not left:
                    break
                time.sleep(2)
        finally:
            makespan = time.monotonic() - start
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
        events = [json.loads(line).get("event") for line in log.read_text().splitlines() if line.startswith("{")]
        return {"variant": variant, "makespan_s": round(makespan, 1), "jobs_left": left, "polls": polls,
                "refused_polls": refused, "stalls": events.count("placement.stalled"),
                "cycles": events.count("cycle.done")}
    finally:
        lab.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slurm", default="24.11", help="Slurm version of the lab (24.11 or 26.05: topology/block needs 23.11+)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each variant, alternated")
    ap.add_argument("--run-dir", default="/tmp/attentived-lab-blocks-bench", help="the lab's run directory")
    ap.add_argument("--port-base", type=int, default=19817)
    ap.add_argument("--limit", type=float, default=600.0, help="seconds a run may take before it is cut")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("blocks_live.py: the lab needs root")
    lab = Lab(args.run_dir, nodes=8, port_base=args.port_base, extra_conf="TopologyPlugin=topology/block",
              topology=BLOCKS, accounting=False, slurm=args.slurm)
    rows = []
    with tempfile.TemporaryDirectory(prefix="blocks-bench-") as tmp:
        for r in range(args.repeats):
            for variant in ("blocks", "switches"):
                row = {"repeat": r, **run_once(lab, variant, Path(tmp) / f"r{r}", args.limit)}
                rows.append(row)
                print(f"{row['variant']:9} run {r}: {row['makespan_s']:6.1f} s, {row['jobs_left']} left, "
                      f"{row['refused_polls']} refused polls, {row['stalls']} stalls, {row['cycles']} cycles", flush=True)
    print("\n| variant | makespan s | refused polls | stalls | jobs left |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['variant']} | {row['makespan_s']} | {row['refused_polls']} | {row['stalls']} | {row['jobs_left']} |")
    result = {"benchmark": "blocks_live", "command": " ".join(["python", *sys.argv]), "slurm": args.slurm,
              "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "workload": [list(w) for w in WORKLOAD],
              "runs": rows}
    if args.out:
        write_text(Path(args.out), json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
