"""Training throughput: environment transitions per second of the real PPO loop (issue 14).

Runs `attentived.training.ppo.train` with the shipped defaults (`PPOConfig`: 32
environments x 32 steps per update, stepped in two worker processes; the rollout's
forward pass on one torch thread, the update on two; ``--set FIELD=VALUE`` changes one)
on each curriculum stage in turn (its cluster sizes and queues), for ``--updates`` timed updates after warm-up ones, and reads the wall clock the
loop itself records per update in ``metrics.csv``: transitions/s = transitions of the
timed updates / their wall time, split into the rollout (the environments, the teacher and
the rollout's forward passes) and the update (the PPO epochs); "update alone" is the rate
the update would allow if collecting cost nothing. The warm-up (building the environments, torch's first
calls) lasts until each environment is about half-way through an average episode of the
stage (a job is about two transitions, a job phase and a GPU phase): a step costs more
as an episode's queue grows, so timing episodes' first steps alone overstated stage 2 by
1.5x (506/s against 330/s mid-episode). The final validation is left out, so the
number is what a long run sustains. The headline
``transitions_per_s`` is the whole curriculum's rate: total transitions over total time,
each stage weighted by its share of training. Nothing is kept: run directories are
temporary.

    .venv/bin/python bench/train_speed.py [--agent attentive] [--updates 4] [--set FIELD=VALUE] [--json]

Prints a table and writes bench/results/train_speed.json; with ``--json`` the last stdout
line is that JSON object (``transitions_per_s`` is the figure issue 14 targets: >= 2,000 on
this 2-core machine).
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import math
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "train_speed.json"


def measure(agent: str, updates: int, seed: int, stage: int, settings: dict[str, Any]) -> dict:
    from attentived.training.config import PPOConfig
    from attentived.training.kinds import kind_defaults
    from attentived.training.ppo import train

    with tempfile.TemporaryDirectory(prefix="attentived-train-speed-") as tmp:
        cfg = replace(PPOConfig(), **{**kind_defaults(agent), **settings})
        cfg = replace(cfg, curriculum=(replace(cfg.curriculum[stage], start=0.0),))
        batch = cfg.num_envs * cfg.num_steps
        warmup = max(1, math.ceil(sum(cfg.curriculum[0].jobs) / 2 / cfg.num_steps))
        # total_steps sets the number of updates; validation only after the last one (its
        # row is written before it), checkpoints never in between.
        cfg = replace(cfg, out_dir=tmp, seed=seed, total_steps=batch * (updates + warmup), val_every=10**9,
                      checkpoint_every=10**9, val_episodes=1, val_jobs=50)
        t0 = time.perf_counter()
        train(cfg, progress=False)
        total = time.perf_counter() - t0
        with open(Path(tmp) / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    first, last = rows[warmup - 1], rows[-1]
    steps = int(last["global_step"]) - int(first["global_step"])
    wall = float(last["wall_s"]) - float(first["wall_s"])
    timed = rows[warmup:]
    rollout = sum(float(r["rollout_s"]) for r in timed)
    update = sum(float(r["update_s"]) for r in timed)
    return {
        "agent": agent,
        "stage": stage,
        "nodes": list(cfg.curriculum[0].nodes),
        "num_envs": cfg.num_envs,
        "steps_per_update": batch,
        "warmup_updates": warmup,
        "updates_timed": len(rows) - warmup,
        "transitions": steps,
        "wall_s": round(wall, 2),
        "transitions_per_s": round(steps / wall, 1) if wall > 0 else None,
        "rollout_s": round(rollout, 2),  # environments, teacher, the rollout's forward passes
        "update_s": round(update, 2),  # the PPO epochs
        # the rate if collecting cost nothing: what the update alone allows
        "update_bound_per_s": round(steps / update, 1) if update > 0 else None,
        "warmup_s": float(first["wall_s"]),
        "run_s": round(total, 1),
        "torch_threads": cfg.torch_threads,
        "update_threads": cfg.update_threads,
        "env_workers": cfg.env_workers,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agent", default="attentive", help="attentive, deeprm or proximity-drl")
    ap.add_argument("--updates", type=int, default=4, help="timed updates (after the warm-up ones)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="a PPOConfig field for every stage, e.g. --set num_envs=32 --set env_workers=0 (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON on the last line")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    if a.updates < 1:
        ap.error("--updates must be at least 1")
    from attentived.training.config import PPOConfig

    settings = {}
    for item in a.set:
        field, _, value = item.partition("=")
        if field not in PPOConfig.__dataclass_fields__ or not value:
            ap.error(f"--set {item}: expected FIELD=VALUE with a PPOConfig field")
        try:
            settings[field] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            ap.error(f"--set {item}: {value!r} is not a Python literal")
    curriculum = PPOConfig().curriculum
    shares = [b.start - s.start for s, b in zip(curriculum, curriculum[1:])] + [1.0 - curriculum[-1].start]
    stages = [measure(a.agent, a.updates, a.seed, k, settings) for k in range(len(curriculum))]
    # time to train one transition of the whole curriculum = sum of share / rate per stage
    rate = 1.0 / sum(share / st["transitions_per_s"] for share, st in zip(shares, stages))
    doc = {"benchmark": "train_speed", "command": "python bench/train_speed.py " + " ".join(argv or sys.argv[1:]),
           "machine": {"python": platform.python_version(), "cpu": platform.machine()},
           "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "agent": a.agent,
           "settings": settings, "transitions_per_s": round(rate, 1), "stages": stages, "stage_shares": shares}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{'agent':<14}{'stage':>6}{'nodes':>12}{'timed updates':>15}{'transitions':>13}{'wall s':>9}"
          f"{'rollout s':>11}{'update s':>10}{'transitions/s':>15}{'update alone /s':>17}")
    for st in stages:
        print(f"{st['agent']:<14}{st['stage']:>6}{','.join(map(str, st['nodes'])):>12}{st['updates_timed']:>15}"
              f"{st['transitions']:>13}{st['wall_s']:>9.1f}{st['rollout_s']:>11.1f}{st['update_s']:>10.1f}"
              f"{st['transitions_per_s'] or 0:>15.1f}{st['update_bound_per_s'] or 0:>17.1f}")
    print(f"whole curriculum: {rate:.1f} transitions/s; target (issue 14) >= 2,000: {'met' if rate >= 2000 else 'not met'}")
    if a.json:
        print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
