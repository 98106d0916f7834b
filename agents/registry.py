"""Policy names, as the CLI and the config file spell them.

A name is a preset (``fifo``, ``slurm``, ...) or a composition ``ORDER+PLACER`` with an
optional ``+backfill``, e.g. ``sjf+consolidate+backfill``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import ORDERS, PLACERS, SEARCH_ORDERS
from .policy import Policy, Scheduler

__all__ = ["ALL", "LEARNED", "ORDERS", "PLACERS", "PRESETS", "Preset", "UnknownPolicy", "make_policy", "runnable",
           "unsupported"]


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
    "slurm": Preset("slurm-multifactor", "first-fit", True, "emulated default Slurm: age+size multifactor, backfill, first-fit"),
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
    "deeprm": "DRL baseline: DeepRM-style MLP over 10 job slots picks jobs, consolidated placement; same PPO, reward, data",
    "proximity-drl": "DRL baseline: Proximity-DRL-style MLP picks GPUs one at a time (<= 128 GPUs), FIFO order; same PPO",
}

#: What ``--policy all`` runs: every preset and the shipped agent (the oracle is an upper
#: bound, never "all").
ALL = tuple(PRESETS) + tuple(LEARNED)


class UnknownPolicy(ValueError):
    pass


def make_policy(spec: str, seed: int = 0, model: str | None = None) -> Policy:
    """Build a policy from its name; ``UnknownPolicy`` lists what exists. ``model`` is the
    model file of a learned policy (``None``: the shipped one)."""
    if spec in LEARNED:
        from .learned import load_learned  # torch is imported only when asked for

        return load_learned(spec, model, seed=seed)
    if spec in PRESETS:
        p = PRESETS[spec]
        return Scheduler(ORDERS[p.order](seed), PLACERS[p.placer](seed), p.backfill, name=spec)
    parts = spec.split("+")
    backfill = parts[-1] == "backfill"
    if backfill:
        parts = parts[:-1]
    if len(parts) == 1:
        parts.append("first-fit")
    if len(parts) != 2 or parts[0] not in ORDERS or parts[1] not in PLACERS:
        raise UnknownPolicy(
            f"unknown policy {spec!r}: use a preset ({', '.join(PRESETS)}), a learned policy "
            f"({', '.join(LEARNED)}) or ORDER+PLACER[+backfill] "
            f"with ORDER in {', '.join(ORDERS)} and PLACER in {', '.join(PLACERS)}"
        )
    return Scheduler(ORDERS[parts[0]](seed), PLACERS[parts[1]](seed), backfill, name=spec)


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
