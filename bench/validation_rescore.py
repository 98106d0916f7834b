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
    .venv/bin/python bench/validation_rescore.py runs/s2 ... --episodes 12 --every 4 --out FILE

``--episodes N`` replays N validation windows instead of the run's own (its first windows are
the run's, the rest more windows of the same days), to see whether a larger validation picks
better checkpoints; ``--every K`` scores only every K-th kept model and the last, to bound
the cost (about 2 s per replay on one core).

``--out`` (default bench/results/validation_rescore.json) is also read back first: a
checkpoint already scored there at every power, and not written again since, is not
replayed, so a stopped rescore continues where it stopped. Its p = 2 scores are the
run's own validation scores; on runs trained with another torch (the lent machine's
2.11 against 2.13 here) one decision in a replay can differ (1 of 117 scores so far, in
the third decimal).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from attentived.agents.checkpoint import CheckpointError, load_model
from attentived.atomic import write_text
from attentived.training.config import PPOConfig
from attentived.training.gym_env import Episode
from attentived.training.kinds import kind_defaults
from attentived.training.ppo import (
    load_training_trace,
    validation_episodes,
    validation_mean,
    validation_replay,
    validation_runs,
    validation_score,
)
from attentived.training.reward import RewardWeights

OUT = Path(__file__).parent / "results" / "validation_rescore.json"
_VALIDATION_FIELDS = ("train_trace", "val_days", "val_episodes", "val_jobs", "val_nodes", "val_large", "fairness_range",
                      "torch_threads")


def run_config(run: Path) -> PPOConfig:
    """The run's settings that decide its validation (its windows, settings, reward weights
    and threads), from its ``summary.json``."""
    summary = run / "summary.json"
    if not summary.is_file():
        raise ValueError(f"{run}: no summary.json (not a finished `attentived train` run)")
    try:
        saved = json.loads(summary.read_text())["config"]
        base = replace(PPOConfig(), **kind_defaults(saved["agent"]), reward=RewardWeights(**saved["reward"]))
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{summary}: not the summary of an `attentived train` run ({type(e).__name__}: {e})") from None
    settings: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items() if k in _VALIDATION_FIELDS}
    return replace(base, **settings)


def checkpoints(run: Path, every: int = 1) -> list[Path]:
    """The run's kept models, every ``every``-th of them and always the last."""
    kept = sorted((run / "validated").glob("update-*.pt"))
    if not kept:
        raise ValueError(f"{run}: no validated/update-*.pt (train with keep_validated = true)")
    return kept[::every] + ([kept[-1]] if (len(kept) - 1) % every else [])


def rescore(model_path: Path, cfg: PPOConfig, groups: list[list[Episode]], powers: list[float]) -> dict[str, float]:
    """The validation score of one model at each power, from one set of replays, by the
    training's own `validation_runs`, `validation_score` and `validation_mean`."""
    model = load_model(model_path)
    replays = [(e, w, validation_replay(cfg, model, e, w)) for e, w in validation_runs(cfg, groups)]
    scores = {}
    for p in powers:
        weights = replace(cfg.reward, fairness_power=p)
        scores[str(p)] = validation_mean([validation_score(records, e, weights, w) for e, w, records in replays], cfg, groups)
    return scores


def stamp(path: Path) -> str:
    """What tells a kept model from another written at the same path since (a resumed run
    rewinds and writes its kept models again)."""
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def picks(scores: dict[str, dict[str, Any]], models: list[Path], powers: list[float]) -> dict[str, str]:
    """Per power, the one of ``models`` (one run's kept models) with the best score."""
    return {str(p): str(max(models, key=lambda m: scores[str(m)][str(p)])) for p in powers}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="output folders of `attentived train` runs with keep_validated")
    ap.add_argument("--powers", default="2,8", help="fairness_power values to score at, comma-separated (default 2,8)")
    ap.add_argument("--episodes", type=int, default=None,
                    help="validation windows to replay (default: the run's own val_episodes)")
    ap.add_argument("--every", type=int, default=1, help="score every K-th kept model and the last (default 1: all)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if (args.episodes is not None and args.episodes < 1) or args.every < 1:
        ap.error("--episodes and --every take a positive whole number")
    try:
        powers = [float(x) for x in args.powers.split(",")]
    except ValueError:
        ap.error(f"--powers takes numbers separated by commas, e.g. 2,8 (got {args.powers!r})")
    try:
        for p in powers:
            RewardWeights(fairness_power=p)  # refuses a power outside [1, 16]
        configs = {run: run_config(run) for run in args.runs}
        if args.episodes is not None:
            configs = {run: replace(cfg, val_episodes=args.episodes) for run, cfg in configs.items()}
        models = {run: checkpoints(run, args.every) for run in args.runs}
    except ValueError as e:
        ap.error(str(e))
    doc: dict[str, Any] = (json.loads(args.out.read_text()) if args.out.is_file()
                           else {"benchmark": "validation_rescore", "episodes": args.episodes, "scores": {}})
    if doc.get("episodes") != args.episodes:  # scores of another validation set are not comparable
        ap.error(f"{args.out} holds scores over --episodes {doc.get('episodes')}; name another --out for {args.episodes}")
    scores: dict[str, dict[str, Any]] = doc["scores"]
    for run in args.runs:
        groups: list[list[Episode]] | None = None  # built once per run, when a model needs them
        for path in models[run]:
            known, written = scores.get(str(path), {}), stamp(path)
            if known.get("stamp") != written:
                known = {}  # another model at this path since: score it afresh
            if all(str(p) in known for p in powers):
                continue
            groups = groups or validation_episodes(configs[run], load_training_trace(configs[run]))
            try:
                scores[str(path)] = {**known, **rescore(path, configs[run], groups, powers), "stamp": written}
            except CheckpointError as e:
                ap.error(f"{path}: {e}")
            print(f"{path}: " + ", ".join(f"p={p}: {scores[str(path)][str(p)]:.3f}" for p in powers), flush=True)
            write_text(args.out, json.dumps(doc, indent=1) + "\n")
    doc["picks"] = {str(run): picks(scores, models[run], powers) for run in args.runs}
    write_text(args.out, json.dumps(doc, indent=1) + "\n")
    print(f"\n{'run':<40}" + "".join(f"{'pick at p=' + format(p, 'g'):>22}" for p in powers))
    for run, chosen in doc["picks"].items():
        print(f"{run:<40}" + "".join(f"{Path(chosen[str(p)]).stem:>22}" for p in powers))
    return doc


if __name__ == "__main__":
    main()
