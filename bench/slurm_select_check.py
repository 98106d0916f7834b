"""How often `SlurmSelect` gives the GPUs and socket the lab's Slurm gave, start by start,
and how often `tree_nodes` gives the nodes Slurm alone's run got.

`attentived demo --out` keeps ``squeue-<run>.json``: every job's GPUs and, under
``job_resources``, its socket and core. For every single-node start of a run this rebuilds
the node as it was (the jobs running on it, each holding its recorded socket's core),
asks `SlurmSelect` for the job's GPUs and compares GPUs and socket with Slurm's. Records
are whole seconds, so a start is *ambiguous* when another job on the same node started or
ended within a second of it (which of them came first is unknown); those are counted
apart. ``--lowest`` scores the lowest free indices instead (the rule before).

Nodes: for every start of Slurm alone's run (where Slurm chose the nodes), the nodes as
they were at the scheduling pass (jobs that started at an earlier pass and had not ended)
and the rule's choice. Starts of one pass are taken in whichever order the rule explains
(slurmctld's order within a pass is not recorded), and a job that ended in the same
second as the pass may or may not have been gone; a start counts if the rule gives its
nodes either way. Scored for `tree_nodes` (``topology/tree``) and `first_fit_nodes` (the
lowest nodes with room, the rule before).

    .venv/bin/python bench/slurm_select_check.py bench/results/demo-seeds-80/seed-*

Prints the counts per run kind; the last stdout line is a JSON object.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path


def _squeue(folder: Path, run: str) -> dict:
    for name in (f"squeue-{run}.json", f"squeue-{run}.json.gz"):
        p = folder / name
        if p.is_file():
            return json.loads(gzip.decompress(p.read_bytes()) if name.endswith(".gz") else p.read_text())
    raise SystemExit(f"{folder}: no squeue-{run}.json(.gz): run attentived demo --out")


def check(folder: Path, run: str, lowest: bool) -> dict[str, int]:
    import numpy as np

    from attentived.agents.slurm_select import SlurmSelect
    from attentived.agents.state import ClusterState, RunningJob
    from attentived.ops.demo.workload import demo_topology

    topo = demo_topology()
    doc = json.loads((folder / "demo.json").read_text())
    sockets = {}
    for j in _squeue(folder, run)["jobs"]:
        nodes = (j.get("job_resources") or {}).get("allocated_nodes") or []
        sockets[j["name"]] = [(topo.node_index[a["nodename"]], int(s)) for a in nodes for s in a["sockets"]]
    jobs = [(j["name"], j["live"]) for j in doc["runs"][run]["jobs"] if j["name"] in sockets and j["live"]["gpu_ids"]]
    out = {"match": 0, "starts": 0, "ambiguous_match": 0, "ambiguous": 0}
    for name, r in jobs:
        node = int(topo.gpu_node[r["gpu_ids"][0]])
        if any(int(topo.gpu_node[g]) != node for g in r["gpu_ids"]) or len(r["gpu_ids"]) == topo.nodes[node].num_gpus:
            continue  # multi-node or a whole node: nothing to choose
        others = [(n, x) for n, x in jobs if n != name and any(int(topo.gpu_node[g]) == node for g in x["gpu_ids"])]
        ambiguous = any(abs(x["end"] - r["start"]) < 1.01 or abs(x["start"] - r["start"]) < 0.01 for _, x in others)
        running = [(n, x) for n, x in others if x["start"] < r["start"] < x["end"]]
        free = np.ones(topo.num_gpus, dtype=bool)
        select = SlurmSelect()
        held = []
        for n, x in running:
            free[x["gpu_ids"]] = False
            held.append(RunningJob(n, x["user"], tuple(x["gpu_ids"]), x["submit"], x["start"], 600.0, cpus=1))
            select.hold(n, [(nd, s, 1) for nd, s in sockets[n]], r["start"])
        state = ClusterState(now=r["start"], topology=topo, free=free, pending=(), running=tuple(held))
        if lowest:
            lo = int(topo.node_first_gpu[node])
            got, socket = tuple(int(g) + lo for g in np.flatnonzero(free[lo:lo + 8])[: r["gpus"]]), None
        else:
            got = select.gpus(name, 1, [(node, r["gpus"])], free, state)
            socket = select.held(name)[0][1]
        ok = tuple(sorted(got)) == tuple(sorted(r["gpu_ids"])) and (socket is None or socket == sockets[name][0][1])
        key = "ambiguous" if ambiguous else "starts"
        out[key] += 1
        out["ambiguous_match" if ambiguous else "match"] += ok
    return out


def check_nodes(folder: Path) -> dict[str, int]:
    """Slurm alone's starts whose nodes each rule gives (see the module notes)."""
    import numpy as np

    from attentived.agents.placement import first_fit_nodes, tree_nodes
    from attentived.ops.demo.workload import demo_topology

    topo = demo_topology()
    rules = {"tree_nodes": lambda j, free: tree_nodes(j, free, topo.node_switch),
             "lowest_nodes": first_fit_nodes}
    doc = json.loads((folder / "demo.json").read_text())
    jobs = [(j["name"], j["live"]) for j in doc["runs"]["slurm"]["jobs"] if j["live"] and j["live"]["gpu_ids"]]

    def nodes_of(r: dict) -> list[int]:
        return sorted({int(topo.gpu_node[g]) for g in r["gpu_ids"]})

    passes: dict[float, list[tuple[str, dict]]] = {}
    for name, r in jobs:
        passes.setdefault(round(r["start"], 2), []).append((name, r))
    out = dict.fromkeys(rules, 0) | {"starts": len(jobs)}
    whole = np.array([n.num_gpus for n in topo.nodes])
    for t, group in sorted(passes.items()):
        # free GPUs per node without and with the jobs that ended in the pass's second
        before = [whole.copy(), whole.copy()]
        for _, x in jobs:
            if x["start"] < t - 0.01 and x["end"] > t - 0.01:
                for g in x["gpu_ids"]:
                    before[0][int(topo.gpu_node[g])] -= x["end"] > t + 0.01
                    before[1][int(topo.gpu_node[g])] -= 1
        for rule, fn in rules.items():
            states = [free.copy() for free in before]
            left = list(group)
            while left:
                hit = next((i for i, (n, r) in enumerate(left)
                            if any(_picked(fn, n, r, len(nodes_of(r)), free) == nodes_of(r) for free in states)), None)
                if hit is None:
                    break
                _, r = left.pop(hit)
                out[rule] += 1
                for free in states:
                    for g in r["gpu_ids"]:
                        free[int(topo.gpu_node[g])] -= 1
    return out


def _picked(rule, name: str, r: dict, nodes: int, free) -> list[int] | None:
    from attentived.agents.state import PendingJob

    got = rule(PendingJob(name, r["user"], r["gpus"], 0.0, 600.0, num_nodes=nodes), free)
    return None if got is None else sorted(n for n, _ in got)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="demo --out folders")
    ap.add_argument("--lowest", action="store_true", help="score the lowest free indices instead")
    a = ap.parse_args()
    total: dict[str, dict[str, int]] = {}
    for folder in a.folders:
        for run in ("slurm", "attentived"):
            got = check(folder, run, a.lowest)
            agg = total.setdefault(run, dict.fromkeys(got, 0))
            for k, v in got.items():
                agg[k] += v
    for run, t in total.items():
        print(f"{run:10} unambiguous starts: {t['match']} of {t['starts']} as Slurm chose; "
              f"ambiguous: {t['ambiguous_match']} of {t['ambiguous']}")
    nodes: dict[str, int] = {}
    for folder in a.folders:
        for k, v in check_nodes(folder).items():
            nodes[k] = nodes.get(k, 0) + v
    print(f"Slurm alone's nodes: tree_nodes gives them on {nodes['tree_nodes']} of {nodes['starts']} starts, "
          f"the lowest nodes with room on {nodes['lowest_nodes']}")
    print(json.dumps({"rule": "lowest free" if a.lowest else "SlurmSelect", "runs": total, "nodes": nodes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
