"""A training run's settings from a TOML file, so runs are reproducible from one file.

Top-level keys are ``PPOConfig`` fields with plain values (``seed``, ``total_steps``,
``learning_rate``, ``train_days = [0, 30]``, ...); ``[reward]`` sets the reward weights
(``jct``, ``fairness``, ``comm``, and ``fairness_power``, the power of the fairness
term's mean over users); ``[[curriculum]]`` tables, one per stage in order, replace
the whole curriculum (``start``, the fraction of the steps it begins at, 0 for the first;
``nodes``, the cluster sizes it draws from; ``jobs`` and ``load``, [low, high] of the window
length and offered load). Unknown keys and wrong types are errors naming the key.
"""

from __future__ import annotations

import tomllib
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from .config import PPOConfig, Stage
from .reward import RewardWeights

_NESTED = {"curriculum", "net", "mlp", "reward"}  # not settable as plain values
_STAGE_KEYS = {f.name for f in fields(Stage)}  # start, nodes, jobs, load


class TrainConfigError(ValueError):
    pass


def load_train_config(path: str | Path, base: PPOConfig | None = None) -> PPOConfig:
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise TrainConfigError(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise TrainConfigError(f"{path}: not valid TOML: {e}") from None
    return apply_settings(base or PPOConfig(), doc, str(path))


def apply_settings(cfg: PPOConfig, doc: dict[str, Any], source: str = "config") -> PPOConfig:
    known = {f.name: f for f in fields(PPOConfig)}
    changes: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "reward":
            changes["reward"] = _reward(cfg.reward, value, source)
            continue
        if key == "curriculum":
            changes["curriculum"] = _curriculum(value, source)
            continue
        if key not in known or key in _NESTED:
            raise TrainConfigError(f"{source}: {key}: unknown training setting")
        current = getattr(cfg, key)
        changes[key] = _coerce(current, value, f"{source}: {key}")
    try:
        return replace(cfg, **changes)
    except ValueError as e:  # PPOConfig's own checks (ranges, names)
        raise TrainConfigError(f"{source}: {e}") from None


_REWARD_FIELDS = tuple(f.name for f in fields(RewardWeights))
_REWARD_KEYS = ", ".join(_REWARD_FIELDS)


def _reward(current: RewardWeights, table: Any, source: str) -> RewardWeights:
    if not isinstance(table, dict):
        raise TrainConfigError(f"{source}: reward: must be a table with {_REWARD_KEYS}")
    out = {}
    for key, value in table.items():
        if key not in _REWARD_FIELDS:
            raise TrainConfigError(f"{source}: reward.{key}: unknown reward setting ({_REWARD_KEYS})")
        out[key] = _coerce(getattr(current, key), value, f"{source}: reward.{key}")
    try:
        return replace(current, **out)
    except ValueError as e:
        raise TrainConfigError(f"{source}: reward: {e}") from None


def _curriculum(stages: Any, source: str) -> tuple[Stage, ...]:
    if not isinstance(stages, list) or not stages or not all(isinstance(t, dict) for t in stages):
        raise TrainConfigError(f"{source}: curriculum: must be [[curriculum]] tables, one per stage")
    out: list[Stage] = []
    for i, table in enumerate(stages, 1):
        where = f"{source}: curriculum stage {i}"
        missing = _STAGE_KEYS - set(table)
        unknown = set(table) - _STAGE_KEYS
        if missing or unknown:
            raise TrainConfigError(f"{where}: needs start, nodes, jobs and load"
                                   + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else ""))
        nodes = table["nodes"]
        if not isinstance(nodes, list) or not nodes or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in nodes):
            raise TrainConfigError(f"{where}: nodes: expected a list of positive integers, got {nodes!r}")
        stage = Stage(_coerce(0.0, table["start"], f"{where}: start"), tuple(nodes),
                      _coerce((0, 0), table["jobs"], f"{where}: jobs"), _coerce((0.0, 0.0), table["load"], f"{where}: load"))
        if not stage.jobs[0] <= stage.jobs[1] or stage.jobs[0] < 1 or not 0 < stage.load[0] <= stage.load[1]:
            raise TrainConfigError(f"{where}: jobs and load must be [low, high] with 0 < low <= high")
        if not (stage.start == 0.0 if i == 1 else out[-1].start < stage.start < 1.0):
            raise TrainConfigError(f"{where}: start: the first stage starts at 0 and each later one after the one "
                                   f"before, below 1, got {stage.start}")
        out.append(stage)
    return tuple(out)


def _coerce(current: Any, value: Any, where: str) -> Any:
    if isinstance(current, bool) or isinstance(value, bool):
        if isinstance(current, bool) and isinstance(value, bool):
            return value
        raise TrainConfigError(f"{where}: expected {type(current).__name__}, got {value!r}")
    if current is None and isinstance(value, list):  # an optional range (fairness_range)
        if len(value) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise TrainConfigError(f"{where}: expected a list of 2 numbers, got {value!r}")
        return (float(value[0]), float(value[1]))
    if isinstance(current, tuple):
        if not isinstance(value, list) or len(value) != len(current):
            raise TrainConfigError(f"{where}: expected a list of {len(current)} numbers, got {value!r}")
        return tuple(_coerce(c, v, where) for c, v in zip(current, value))
    if isinstance(current, float) or (current is None and isinstance(value, (int, float))):
        if not isinstance(value, (int, float)):
            raise TrainConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if isinstance(current, int):
        if not isinstance(value, int):
            raise TrainConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if isinstance(current, str):
        if not isinstance(value, str):
            raise TrainConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise TrainConfigError(f"{where}: cannot be set from a file")
