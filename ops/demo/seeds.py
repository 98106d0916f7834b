"""``attentived demo --seeds 1,2,3``: several demos, and what they say together.

One demo's difference between Slurm alone and attentived can be noise: a workload of 80
jobs on 32 GPUs, whole-second records. Run on several seeds (each its own trace window
and job models), the mean change and its spread say whether the gain is larger than the
seed-to-seed variation; the simulator's prediction error per run and seed says how far
the offline replays can be trusted (issue 15's target: within 10% for avg JCT and wait).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from .measure import relative_change
from .runs import RUN_NAMES, DemoResult

__all__ = ["PREDICTED_KEYS", "parse_seeds", "seeds_summary"]

#: The figures whose prediction error is reported.
PREDICTED_KEYS = ("avg_jct", "avg_wait")


def parse_seeds(text: str) -> list[int]:
    """``"1,2,3"`` -> [1, 2, 3]; ValueError naming what is wrong (a repeat, a non-number)."""
    seeds = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ValueError(f"--seeds: {part!r} is not a whole number >= 0 (expected e.g. 1,2,3)")
        if int(part) in seeds:
            raise ValueError(f"--seeds: seed {part} given twice")
        seeds.append(int(part))
    return seeds


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def seeds_summary(results: Sequence[DemoResult]) -> dict[str, Any]:
    """Per seed: each run's live avg JCT / wait, the prediction and its error, and
    attentived's change against Slurm alone; over seeds: mean, std, min and max of those."""
    per_seed = []
    for r in results:
        row: dict[str, Any] = {"seed": r.options.seed, "runs": {}}
        for name in RUN_NAMES:
            run = r.runs[name]
            row["runs"][name] = {
                key: {"live": run.summary.get(key), "predicted": run.predicted.get(key),
                      "error": relative_change(run.summary.get(key), run.predicted.get(key))}
                for key in PREDICTED_KEYS
            }
        a, b = (row["runs"][n]["avg_jct"]["live"] for n in RUN_NAMES)
        row["jct_change"] = relative_change(a, b)  # attentived / Slurm alone - 1
        per_seed.append(row)
    overall: dict[str, Any] = {"jct_change": _spread([s["jct_change"] for s in per_seed if s["jct_change"] is not None])}
    for name in RUN_NAMES:
        for key in PREDICTED_KEYS:
            cells = [s["runs"][name][key] for s in per_seed]
            overall[f"{name}.{key}"] = _spread([c["live"] for c in cells if c["live"] is not None])
            overall[f"{name}.{key}.error"] = _spread([c["error"] for c in cells if c["error"] is not None])
    errors = [abs(s["runs"][n][k]["error"]) for s in per_seed for n in RUN_NAMES for k in PREDICTED_KEYS
              if s["runs"][n][k]["error"] is not None]
    overall["worst_prediction_error"] = max(errors) if errors else None
    return {"seeds": [s["seed"] for s in per_seed], "per_seed": per_seed, "overall": overall}
