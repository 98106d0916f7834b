"""Policy names, as the CLI and the config file spell them.

A name is a preset (``fifo``, ``slurm``, ...), a learned policy (``attentive``, ...) or a
composition ``ORDER+PLACER`` with an optional ``+backfill``, e.g.
``sjf+consolidate+backfill``; any of them followed by parameters where the policy takes
some (``portfolio:fairness=0.5``, ``attentive:model=best.pt``; see `spec`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from .catalog import ORDERS, PLACERS, SEARCH_ORDERS
from .metaheuristic import DEFAULT_BUDGET_MS, DEFAULT_MAX_EVALUATIONS
from .objective import DEFAULT_FAIRNESS, check_fairness, check_protect
from .one_node import OneNode
from .pack import Pack
from .policy import Policy, Scheduler
from .slurm_backfill import SlurmBackfill
from .spec import BadPolicyName, Parameter, PolicySpec, model_file, parse

__all__ = ["ALL", "COMMON_PARAMETERS", "LEARNED", "ORDERS", "PLACERS", "PRESETS", "Preset", "UnknownPolicy", "expand",
           "make_policy", "own_parameters", "parameters", "parse_name", "runnable", "unsupported"]


@dataclass(frozen=True)
class Preset:
    order: str
    placer: str
    backfill: bool
    summary: str


PRESETS: dict[str, Preset] = {
    "fifo": Preset("fifo", "first-fit", False, "first come first served, first-fit placement"),
    "sjf": Preset("sjf", "first-fit", False, "shortest estimated job first (from time limits), first-fit"),
    "fair-share": Preset("fair-share", "first-fit", False, "least-served user first, first-fit"),
    "tiresias": Preset("tiresias", "consolidate", False, "Tiresias-style discretized LAS, consolidated placement"),
    "slurm": Preset("slurm-multifactor", "slurm-select", True,
                    "emulated Slurm site: fair-share+age+size multifactor, Slurm's backfill (every job it tests "
                    "reserves), topology/tree's nodes with Slurm's socket and GPU choice"),
    "fifo+consolidate": Preset("fifo", "consolidate", False, "FIFO with topology-aware best-fit placement"),
    "sjf+consolidate": Preset("sjf", "consolidate", False, "SJF with topology-aware best-fit placement"),
    "fair-share+consolidate": Preset("fair-share", "consolidate", False, "fair-share with topology-aware placement"),
    "fifo+random": Preset("fifo", "random", False, "FIFO with random GPUs: the placement floor"),
    # the look-ahead searches: consolidating placer, no backfill (the chooser's ``startable``
    # prefix is the whole start decision)
    **{name: Preset(name, "consolidate", False, what) for name, (_, what) in SEARCH_ORDERS.items()},
}

#: Learned policies: loaded from a model file (``--model``; default the shipped one).
LEARNED: dict[str, str] = {
    "attentive": "dual attention agents (job agent + topology-aware GPU agent), PPO-trained; the shipped model by default",
    "attentive-lookahead": "the portfolio look-ahead with the attentive job agent's ranking as one more candidate "
                           "order (one network call a decision); consolidated placement",
    "deeprm": "DRL baseline: DeepRM-style MLP over 10 job slots picks jobs, consolidated placement; same PPO, reward, data",
    "proximity-drl": "DRL baseline: Proximity-DRL-style MLP picks GPUs one at a time (<= 128 GPUs), FIFO order; same PPO",
}

#: What ``--policy all`` runs: every preset and the shipped agent (the oracle is an upper
#: bound, never "all").
ALL = tuple(PRESETS) + tuple(LEARNED)


class UnknownPolicy(BadPolicyName):
    pass


FAIRNESS = Parameter(
    "fairness", "how much the worst-off users are protected: 0 = completion time only, 1 = as much as possible",
    "a number from 0 to 1", check_fairness, f"{DEFAULT_FAIRNESS:g}")
AGENT_FAIRNESS = Parameter(
    "fairness", FAIRNESS.summary + "; an input of the network, so only a model trained with it takes it",
    FAIRNESS.accepted, check_fairness, f"{DEFAULT_FAIRNESS:g} (a model trained without the input takes none)")
PROTECT = Parameter(
    "protect", "a job whose wait has slowed it down this much ((wait + estimate) / estimate) goes first, with GPUs "
    "kept for it; only jobs that do not delay it start before it", "0 (off) or a number >= 1", check_protect,
    "0 (off)")
MODEL = Parameter("model", "the model file to run (`attentived train --out`)", "an existing model file", model_file,
                  "the shipped model")


def _positive(text: str) -> float:
    v = float(text)
    if not 0 < v < float("inf"):
        raise ValueError(text)
    return v


def _count(text: str) -> int:
    v = int(text)
    if v < 1:
        raise ValueError(text)
    return v


def _non_negative(text: str) -> float:
    v = float(text)
    if not 0 <= v < float("inf"):
        raise ValueError(text)
    return v


def _flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(text)
    return text == "1"


ONE_NODE = Parameter(
    "one_node", "1: a job that fits on one node runs on one node (decided as if it had asked `sbatch -N 1`); jobs that "
    "fixed their node count or where they may run keep what they asked", "0 or 1", _flag, "0")

PACK = Parameter(
    "pack", "1: start a job only where it is as packed as on an empty cluster (fewest NVLink islands and nodes); the "
    "first job in the policy's order that cannot is held where it will be, and behind it jobs start packed or when "
    "they end in time (EASY backfill). Idles GPUs that only spread placements could use", "0 or 1", _flag, "0")

EVALUATIONS = Parameter(
    "evaluations", f"cost evaluations of the search per decision; its CPU-time cap ({DEFAULT_BUDGET_MS:g} ms per "
    f"{DEFAULT_MAX_EVALUATIONS}) and patience scale with it. More suits replays, not a live scheduler's budget",
    "a whole number >= 1", _count, f"{DEFAULT_MAX_EVALUATIONS}")


#: The Slurm emulation's site settings (slurm.conf's names in the summaries).
SLURM_PARAMETERS: dict[str, Parameter] = {
    "calc_period": Parameter("calc_period", "seconds between slurmctld's fair-share usage sums (PriorityCalcPeriod)",
                             "a number of seconds > 0", _positive, "300"),
    "calc_offset": Parameter("calc_offset", "seconds after the replay's start of a calculation tick (slurmctld's "
                             "start, modulo calc_period)", "a number of seconds >= 0", _non_negative, "0"),
    "usage_at_end": Parameter("usage_at_end", "1: a job's whole run counts toward fair-share when it ends "
                              "(AccountingStorageEnforce with limits); 0: only the time it ran at a calculation tick, "
                              "as slurmctld 22.05 charges without limits", "0 or 1", _flag, "1"),
    "weight_fairshare": Parameter("weight_fairshare", "PriorityWeightFairshare (0: a site without slurmdbd)",
                                  "a number >= 0", _non_negative, "10000"),
}

#: sched/backfill's settings (SchedulerParameters' names), taken by the ``slurm`` preset's
#: backfill (`SlurmBackfill`), not by its priority order.
BACKFILL_PARAMETERS: dict[str, Parameter] = {
    "bf_resolution": Parameter("bf_resolution", "seconds of the backfill's time grid (bf_resolution)",
                               "a number of seconds > 0", _positive, "60"),
    "bf_window": Parameter("bf_window", "seconds ahead the backfill reserves for (bf_window, in minutes in slurm.conf)",
                           "a number of seconds > 0", _positive, "86400"),
    "bf_max_job_test": Parameter("bf_max_job_test", "pending jobs the backfill considers, in priority order",
                                 "a whole number >= 1", _count, "500"),
    "bf_clock_phase": Parameter("bf_clock_phase", "slurmctld's clock at the replay's start, modulo 30 s (the will-run "
                                "test behind each reservation batches running jobs' ends in windows from its multiples "
                                "of 30 s)", "a number of seconds >= 0", _non_negative, "0"),
}

LEARNED_PARAMETERS: dict[str, dict[str, Parameter]] = {
    "attentive": {"fairness": AGENT_FAIRNESS, "protect": PROTECT, "model": MODEL},
    "attentive-lookahead": {"fairness": FAIRNESS, "protect": PROTECT, "model": MODEL},
    "deeprm": {"protect": PROTECT, "model": MODEL},
    "proximity-drl": {"model": MODEL},
}
"""What each learned policy takes; the look-ahead orders take ``fairness`` and ``protect`` (`parameters`)."""


def _composition(name: str) -> tuple[str, str, bool] | None:
    """(order, placer, backfill) of a preset or an ``ORDER+PLACER[+backfill]`` name."""
    if name in PRESETS:
        p = PRESETS[name]
        return p.order, p.placer, p.backfill
    parts = name.split("+")
    backfill = parts[-1] == "backfill"
    if backfill:
        parts = parts[:-1]
    if len(parts) == 1:
        parts.append("first-fit")
    if len(parts) != 2 or parts[0] not in ORDERS or parts[1] not in PLACERS:
        return None
    return parts[0], parts[1], backfill


#: What every policy takes besides its own (`own_parameters`).
COMMON_PARAMETERS: dict[str, Parameter] = {"one_node": ONE_NODE, "pack": PACK}


def parameters(name: str) -> Mapping[str, Parameter] | None:
    """The parameters policy ``name`` (without parameters) takes; ``None`` when no such
    policy exists."""
    own = own_parameters(name)
    return None if own is None else {**own, **COMMON_PARAMETERS}


def own_parameters(name: str) -> Mapping[str, Parameter] | None:
    """The parameters policy ``name`` takes besides `COMMON_PARAMETERS`."""
    if name in LEARNED:
        return LEARNED_PARAMETERS[name]
    parts = _composition(name)
    if parts is None:
        return None
    if parts[0] == "slurm-multifactor":
        return {**SLURM_PARAMETERS, **BACKFILL_PARAMETERS} if parts[2] else SLURM_PARAMETERS
    if parts[0] not in SEARCH_ORDERS:
        return {}
    look_ahead = {"fairness": FAIRNESS, "protect": PROTECT}
    return look_ahead if parts[0] == "portfolio" else {**look_ahead, "evaluations": EVALUATIONS}  # portfolio: no search


def parse_name(text: str) -> PolicySpec:
    """The policy ``text`` names, its parameters checked (`BadPolicyName`, `UnknownPolicy`)."""
    spec = parse(text, parameters)
    if parameters(spec.base) is None:
        raise UnknownPolicy(
            f"unknown policy {spec.base!r}: use a preset ({', '.join(PRESETS)}), a learned policy "
            f"({', '.join(LEARNED)}) or ORDER+PLACER[+backfill] "
            f"with ORDER in {', '.join(ORDERS)} and PLACER in {', '.join(PLACERS)}"
        )
    return spec


def expand(requested: Sequence[str]) -> list[str]:
    """Canonical names of ``requested``, ``all`` expanded to `ALL`. A policy named twice
    (in any spelling) is an error; one that ``all`` also brings runs once."""
    out: list[str] = []
    named: set[str] = set()
    for p in requested:
        if p == "all":
            out.extend(ALL)
            continue
        name = parse_name(p).name
        if name in named:
            raise BadPolicyName(f"policy {name} given twice")
        named.add(name)
        out.append(name)
    return list(dict.fromkeys(out))


def make_policy(text: str, seed: int = 0, model: str | None = None) -> Policy:
    """Build a policy from its name (with parameters); `UnknownPolicy` lists what exists,
    `BadPolicyName` says what a parameter accepts. ``model`` is the model file of a
    learned policy named without ``model=`` (``None``: the shipped one). The policy's
    ``name`` is the canonical spelling (`PolicySpec.name`)."""
    spec = parse_name(text)
    params = spec.kwargs()
    one_node = params.pop("one_node", False)
    pack = params.pop("pack", False)
    parts = _composition(spec.base)
    if parts is None:  # a learned policy (parse_name refused every other name)
        from .learned import load_learned  # torch is imported only when asked for

        path = params.get("model", model)
        policy = load_learned(spec.base, None if path is None else str(path), seed=seed,
                              fairness=cast("float | None", params.get("fairness")),
                              protect=cast("float | None", params.get("protect")))
    else:
        order, placer, backfill = parts
        if order == "slurm-multifactor" and backfill:  # Slurm's own backfill, reservations for every job
            bf = {k[3:]: params.pop(k) for k in list(params) if k in BACKFILL_PARAMETERS}
            policy = SlurmBackfill(ORDERS[order](seed, **params), PLACERS[placer](seed), **cast("dict[str, Any]", bf),
                                   name=spec.base)
        else:
            policy = Scheduler(ORDERS[order](seed, **params), PLACERS[placer](seed), backfill, name=spec.base)
    if pack:  # inside one_node: packing reads the jobs as one_node shows them
        policy = Pack(policy, spec.name)
    if one_node:
        policy = OneNode(policy, spec.name)
    policy.name = spec.name
    return policy


def unsupported(policy: Policy, topology) -> str | None:
    """Why ``policy`` cannot schedule ``topology`` (``None`` when it can). Policies, choosers
    and placers with a fixed-size input (the proximity-drl network) say so through an
    optional ``unsupported(topology)`` method; `Scheduler` asks its parts."""
    for part in (policy, getattr(policy, "chooser", None), getattr(policy, "placer", None)):
        check = getattr(part, "unsupported", None)
        reason = check(topology) if callable(check) else None
        if reason:
            return reason
    return None


def runnable(names: list[str], policies: list[Policy], explicit: set[str], topology) -> tuple[list[Policy], list[str]]:
    """The policies that can run on ``topology``, and a note for each one dropped. A policy
    that came from ``all`` and cannot run is dropped; one named explicitly (``explicit``) is
    an error (``UnknownPolicy``, naming the reason)."""
    keep, notes = [], []
    for name, policy in zip(names, policies):
        reason = unsupported(policy, topology)
        if reason is None:
            keep.append(policy)
        elif name in explicit:
            raise UnknownPolicy(f"policy {name}: {reason}")
        else:
            notes.append(f"skipping {name}: {reason}")
    return keep, notes
