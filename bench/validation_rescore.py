"""Which checkpoint in-run validation would pick, by the power of its fairness term.

A run's ``best.pt`` is its validated model with the best score: the reward's return on the
validation windows, whose fairness term is the users' power mean wait (``[reward]
fairness_power``, 2 = their RMS). This replays every model such a run kept
(``keep_validated = true``) on the run's own validation windows at its validation settings
(the replays of the in-run validation, one process), scores each replay at each power of
``--powers`` and prints, per run, the checkpoint each power would pick. That separates
what a power does to *training* from what it does to *choosing a checkpoint*
(docs/agents.md, "The worst-off user's share of the fairness signal"). The picks can then
be measured on held-out days with ``bench/fairness_knob.py --policy
attentive:model=RUN/validated/update-NNNN.pt``.

    .venv/bin/python bench/validation_rescore.py runs/s2 runs/s3 ... [--powers 2,8] [--out FILE]

``--out`` (default bench/results/validation_rescore.json) is also read back first: a
checkpoint already scored there at every power is not replayed again, so a stopped
rescore continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from attentived.agents.checkpoint import CheckpointError, load_model
from attentived.agents.learned import POLICIES
from attentived.simulator.engine import Simulation
from attentived.training.config import PPOConfig
from attentived.training.kinds import kind_defaults
from attentived.training.ppo import VALIDATION_FAIRNESS, load_training_trace, score, validation_episodes

OUT = Path(__file__).parent / "results" / "validation_rescore.json"
_VALIDATION_FIELDS = ("train_trace", "val_days", "val_episodes", "val_jobs", "val_nodes", "val_large", "fairness_range")


def run_config(run: Path) -> PPOConfig:
    """The run's settings that decide its validation, from its ``summary.json``."""
    summary = run / "summary.json"
    if not summary.is_file():
        raise ValueError(f"{run}: no summary.json (not a finished `attentived train` run)")
    saved = json.loads(summary.read_text())["config"]
    base = replace(PPOConfig(), **kind_defaults(saved["agent"]))
    settings: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items() if k in _VALIDATION_FIELDS}
    return replace(base, **settings)


def save(out: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` whole or not at all: a stopped rescore leaves the last complete file."""
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(out)


def checkpoints(run: Path) -> list[Path]:
    kept = sorted((run / "validated").glob("update-*.pt"))
    if not kept:
        raise ValueError(f"{run}: no validated/update-*.pt (train with keep_validated = true)")
    return kept


def rescore(model_path: Path, cfg: PPOConfig, powers: list[float]) -> dict[str, float]:
    """The validation score of one model at each power, from one set of replays."""
    model = load_model(model_path)
    settings = VALIDATION_FAIRNESS if cfg.fairness_range is not None else (None,)
    per_group: dict[float, list[float]] = {p: [] for p in powers}
    for group in validation_episodes(cfg, load_training_trace(cfg)):
        scores: dict[float, list[float]] = {p: [] for p in powers}
        for w in settings:
            for episode in group:
                policy = POLICIES[cfg.agent](model, 0, 1, **({} if w is None else {"fairness": w}))
                records = Simulation(episode.jobs, episode.topology, policy).run().records
                for p in powers:
                    weights = replace(cfg.reward, fairness_power=p)
                    scores[p].append(score(records, episode.topology.num_gpus, weights, 1.0 if w is None else w)[0])
        for p in powers:
            per_group[p].append(float(np.mean(scores[p])))
    return {str(p): float(np.mean(per_group[p])) for p in powers}


def picks(scores: dict[str, dict[str, float]], run: Path, powers: list[float]) -> dict[str, str]:
    """Per power, the kept model of ``run`` with the best score."""
    mine = {k: v for k, v in scores.items() if Path(k).parent.parent == run}
    return {str(p): max(mine, key=lambda k: mine[k][str(p)]) for p in powers}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="output folders of `attentived train` runs with keep_validated")
    ap.add_argument("--powers", default="2,8", help="fairness_power values to score at, comma-separated (default 2,8)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    try:
        powers = [float(x) for x in args.powers.split(",")]
        configs = {run: run_config(run) for run in args.runs}
        models = {run: checkpoints(run) for run in args.runs}
        for p in powers:
            replace(PPOConfig().reward, fairness_power=p)  # refuses a power outside [1, 16]
    except ValueError as e:
        ap.error(str(e))
    doc: dict[str, Any] = (json.loads(args.out.read_text()) if args.out.is_file()
                           else {"benchmark": "validation_rescore", "scores": {}})
    scores: dict[str, dict[str, float]] = doc["scores"]
    for run in args.runs:
        for path in models[run]:
            if all(str(p) in scores.get(str(path), {}) for p in powers):
                continue
            try:
                scores[str(path)] = {**scores.get(str(path), {}), **rescore(path, configs[run], powers)}
            except CheckpointError as e:
                sys.exit(f"{path}: {e}")
            print(f"{path}: " + ", ".join(f"p={p}: {scores[str(path)][str(p)]:.3f}" for p in powers), flush=True)
            save(args.out, doc)
    doc["picks"] = {str(run): picks(scores, run, powers) for run in args.runs}
    save(args.out, doc)
    print(f"\n{'run':<40}" + "".join(f"{'pick at p=' + format(p, 'g'):>22}" for p in powers))
    for run, chosen in doc["picks"].items():
        print(f"{run:<40}" + "".join(f"{Path(chosen[str(p)]).stem:>22}" for p in powers))
    return doc


if __name__ == "__main__":
    main()
