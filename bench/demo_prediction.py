"""How well the simulator predicts the live lab: saved demos replayed with today's simulator.

`attentived demo --out DIR` (or `--seeds ... --out DIR`: one `seed-S` folder each) keeps
Slurm's records of both live runs in `demo.json`. This replays each saved workload under the
current simulator exactly as the demo predicts it (`ops/demo/measure.predict`: the `slurm`
preset with the run's own calculation ticks for Slurm alone, the daemon's policy pinned to
nodes for attentived, Slurm's one-second passes) and prints, per run, the live and predicted
avg JCT and avg wait and the error `sim / live - 1`; issue 15's target is within 10% on every
seed. A change to the engine, the `slurm` preset or the prediction is judged on the same
live runs this way, without running the lab again (a demo takes five minutes a seed).

    .venv/bin/python bench/demo_prediction.py bench/results/demo-seeds/seed-*   # the 5 recorded seeds
    .venv/bin/python bench/demo_prediction.py --json DIR...                # + bench/results/demo_prediction.json

The workload is rebuilt from the recorded seed, scale and load and checked job by job against
the recorded one; a folder whose workload does not rebuild the same is refused.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "bench" / "results" / "demo_prediction.json"
KEYS = ("avg_jct", "avg_wait")


def replay(folder: Path) -> dict:
    from attentived.ops.demo.measure import predict, relative_change, summary_of
    from attentived.ops.demo.runs import SCHED_PASS, DemoOptions
    from attentived.ops.demo.workload import build_workload, demo_topology

    doc = json.loads((folder / "demo.json").read_text())
    w = doc["workload"]
    users = len({j["user"] for j in w["jobs"]})
    topo = demo_topology()
    defaults = DemoOptions()
    workload = build_workload(len(w["jobs"]), users, w["time_scale"], w["seed"], target_span=defaults.target_span,
                              max_duration=defaults.max_duration, load=w["offered_load"], topology=topo)
    rebuilt = [(j.name, round(j.submit, 6), j.num_gpus) for j in workload.jobs]
    recorded = [(j["name"], round(j["submit"], 6), j["num_gpus"]) for j in w["jobs"]]
    if rebuilt != recorded:
        raise SystemExit(f"{folder}: the recorded workload does not rebuild the same (demo options changed since?)")
    out = {"folder": str(folder), "seed": w["seed"], "runs": {}}
    for name, run in doc["runs"].items():
        policy = run["predicted_by"]
        records = predict(workload, policy, topo, w["seed"], SCHED_PASS, pinned=name == "attentived")
        sim = summary_of(records, topo)
        out["runs"][name] = {k: {"live": run["live"][k], "predicted": sim[k],
                                 "error": relative_change(run["live"][k], sim[k])} for k in KEYS}
        out["runs"][name]["policy"] = policy
    return out


def _pct(error: float | None) -> str:
    return "     -" if error is None else f"{100 * error:+5.0f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="demo --out folders (each holding demo.json)")
    ap.add_argument("--json", action="store_true", help=f"also write {RESULT.relative_to(ROOT)}")
    a = ap.parse_args()
    missing = [str(f) for f in a.folders if not (f / "demo.json").is_file()]
    if missing:
        ap.error(f"no demo.json in {', '.join(missing)}")
    rows = [replay(f) for f in a.folders]
    print(f"{'seed':>4} {'run':10} {'avg JCT live / sim':>20} {'err':>6} {'avg wait live / sim':>20} {'err':>6}")
    for r in rows:
        for name, v in r["runs"].items():
            j, w = v["avg_jct"], v["avg_wait"]
            print(f"{r['seed']:>4} {name:10} {j['live']:9.1f} / {j['predicted']:7.1f}s {_pct(j['error'])} "
                  f"{w['live']:9.1f} / {w['predicted']:7.1f}s {_pct(w['error'])}")
    summary = {}
    for name in rows[0]["runs"]:
        for k in KEYS:
            errs = [e for r in rows if (e := r["runs"][name][k]["error"]) is not None]  # None: a live 0
            if not errs:
                continue
            summary[f"{name}.{k}"] = {"mean_abs": statistics.fmean(abs(e) for e in errs), "worst": max(errs, key=abs),
                                      "within_10pct": sum(abs(e) <= 0.10 for e in errs), "seeds": len(errs)}
    for key, s in summary.items():
        print(f"{key:22} mean |error| {100 * s['mean_abs']:4.1f}%, worst {100 * s['worst']:+5.1f}%, "
              f"within 10% on {s['within_10pct']} of {s['seeds']} seeds")
    doc = {"runs": rows, "summary": summary}
    if a.json:
        RESULT.parent.mkdir(parents=True, exist_ok=True)
        RESULT.write_text(json.dumps(doc, indent=1))
    print(json.dumps({"summary": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
