"""How well the simulator predicts the live lab: saved demos replayed with today's simulator.

`attentived demo --out DIR` (or `--seeds ... --out DIR`: one `seed-S` folder each) keeps
Slurm's records of both live runs in `demo.json`. This replays each saved workload under the
current simulator exactly as the demo predicts it (`ops/demo/measure.predict`: the `slurm`
preset with the run's own calculation ticks for Slurm alone, the daemon's policy pinned to
nodes for attentived, Slurm's one-second passes) and prints, per run, the live and predicted
avg JCT and avg wait and the error `sim / live - 1`; issue 15's target is within 10% on every
seed. A change to the engine, the `slurm` preset or the prediction is judged on the same
live runs this way, without running the lab again (a demo takes five minutes a seed).

    .venv/bin/python bench/demo_prediction.py bench/results/demo-seeds/seed-*   # the 10 recorded seeds
    .venv/bin/python bench/demo_prediction.py --json DIR...                # + bench/results/demo_prediction.json

The workload is rebuilt from the recorded seed, scale and load and checked job by job against
the recorded one; a folder whose workload does not rebuild the same is refused. The
attentived run is predicted with the model that ran it: ``--model PATH`` (default: the shipped
one) must be the file demo.json records (its sha256), else the folder is refused. Demos saved
before the model was recorded (the five of bench/results/demo-seeds-35b47f0 and seeds 1-3 of
demo-seeds-load2.4, run with the model shipped at 35b47f0) are predicted with ``--model`` as
given and reported as unrecorded:

    git show 35b47f0:attentived/data/models/attentive-default.pt > /tmp/attentive-35b47f0.pt
    .venv/bin/python bench/demo_prediction.py --model /tmp/attentive-35b47f0.pt bench/results/demo-seeds-35b47f0/seed-*
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


def replay(folder: Path, model: Path | None) -> dict:
    from attentived.ops.demo.measure import LiveClocks, predict, relative_change
    from attentived.ops.demo.runs import DemoOptions, bf_clock_phase, model_identity
    from attentived.ops.demo.workload import build_workload, demo_topology

    doc = json.loads((folder / "demo.json").read_text())
    learned = model_identity(doc["policy"] if model is None else _with_model(doc["policy"], model))
    ran = doc.get("model")
    if learned is not None and ran is not None and ran["sha256"] != learned["sha256"]:
        raise SystemExit(f"{folder}: its attentived run ran the model {ran['path']} (sha256 "
                         f"{ran['sha256'][:12]}), not {learned['path']} ({learned['sha256'][:12]}); "
                         "give that model with --model")
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
    out = {"folder": str(folder), "seed": w["seed"], "runs": {},
           "model": None if learned is None else {**learned, "recorded": ran is not None}}
    daemon = doc["runs"]["attentived"].get("daemon") or {}
    clocks = LiveClocks(daemon_cycle=daemon.get("interval") or defaults.interval)
    for name, run in doc["runs"].items():
        policy = run["predicted_by"]
        if name == "attentived" and model is not None and learned is not None:
            policy = _with_model(policy, model)
        if name == "slurm" and "bf_resolution" not in policy:  # recorded before the preset ran Slurm's backfill
            policy = policy.replace("slurm:", "slurm:bf_resolution=1,", 1)
        if name == "slurm" and "usage_at_end" not in policy:  # the lab never enforced limits: recorded before it was modelled
            policy += ",usage_at_end=0"
        if name == "slurm" and "bf_clock_phase" not in policy:  # recorded before the will-run windows were modelled
            policy += f",{bf_clock_phase(run['started_at'])}"
        sim = predict(workload, policy, topo, w["seed"], clocks, pinned=name == "attentived").summary
        out["runs"][name] = {k: {"live": run["live"][k], "predicted": sim[k],
                                 "error": relative_change(run["live"][k], sim[k])} for k in KEYS}
        out["runs"][name]["policy"] = policy
    return out


def _with_model(policy: str, model: Path) -> str:
    """``policy`` run with the model file ``model`` (``attentive`` -> ``attentive:model=...``)."""
    return f"{policy}{',' if ':' in policy else ':'}model={model}"


def _pct(error: float | None) -> str:
    return "     -" if error is None else f"{100 * error:+5.0f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="demo --out folders (each holding demo.json)")
    ap.add_argument("--json", action="store_true", help=f"also write {RESULT.relative_to(ROOT)}")
    ap.add_argument("--model", type=Path, help="the model file the attentived runs ran (default: the shipped one)")
    a = ap.parse_args()
    missing = [str(f) for f in a.folders if not (f / "demo.json").is_file()]
    if missing:
        ap.error(f"no demo.json in {', '.join(missing)}")
    if a.model is not None and not a.model.is_file():
        ap.error(f"--model {a.model}: no such file")
    rows = [replay(f, a.model) for f in a.folders]
    unrecorded = [str(r["seed"]) for r in rows if r["model"] is not None and not r["model"]["recorded"]]
    if unrecorded:
        used = rows[0]["model"]
        print(f"seeds {', '.join(unrecorded)}: demo.json does not record the model; the attentived runs are predicted "
              f"with {used['path']} (sha256 {used['sha256'][:12]})")
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
