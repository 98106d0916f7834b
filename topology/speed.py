"""How a job's run time depends on where its GPUs are: the job speed model.

One training step is compute, then an all-reduce of the gradients::

    step(gpus) = compute_s + topology.allreduce_seconds(gpus, grad_gbytes)

Compute does not depend on the placement (every GPU runs the same local batch); the
all-reduce does, through the slowest link inside and between the nodes the job touches
(`Topology.allreduce_seconds`: a ring inside each node, then a ring between the nodes, as
NCCL does it). A trace records how long a job ran, not where, so its duration is taken to be
the run time at the *ideal* (most consolidated) placement of its GPU count, and a job placed
elsewhere runs ``slowdown = step(gpus) / step(ideal)`` times longer. The absolute step time
never matters, only the ratio of communication to compute, which is what the profiles carry.

The shipped profiles (``attentived/data/profiles/models.csv``) come from
``bench/calibrate_speed.py``: six applications fitted on the step times Pollux measured per
placement on its AWS testbed, and the CNN models of the Tiresias trace derived from their
published FLOPs and parameter sizes. ``docs/speed-model.md`` has the tables and the
reasoning; in short, profiles are expressed for the *reference cluster*
(`REFERENCE_BANDWIDTHS`, the defaults of `Bandwidths`): a job split across two nodes of
that cluster pays the communication/compute ratio measured across two nodes of its
testbed, and other link classes are priced by the cluster's own bandwidths.
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from itertools import accumulate
from types import MappingProxyType

import numpy as np

from .model import Bandwidths, Node, Topology

REFERENCE_BANDWIDTHS = Bandwidths()
"""The cluster the shipped profiles are expressed for: `Bandwidths` defaults (NVLink
islands, PCIe 4.0, a cross-socket hop, 100 Gb/s InfiniBand, a 2:1 spine)."""

POLLUX_TESTBED_BANDWIDTHS = Bandwidths(pcie_host=11.0, network=1.0)
"""Pollux's testbed as the all-reduce saw it: AWS g4dn.12xlarge, 4 T4 GPUs per node behind
one PCIe 3.0 host bridge (11 GB/s, nccl-tests busbw for PCIe 3.0 x16), 50 Gb/s Ethernet.
The network figure is *effective*, not the 6.25 GB/s line rate: the measured gradient-sync
times put a 2-GPU all-reduce across two nodes about 12x slower than inside one node (the
calibration script prints the ratio), i.e. about 1 GB/s. With the line rate the model cannot
reproduce the testbed at all (see docs/speed-model.md)."""

_GPUS_PER_TESTBED_NODE = 4

# Jobs per application in the four Pollux workloads (petuum/adaptdl @ de25dcc9,
# simulator/workloads/workload-{1..4}.csv, 640 jobs): the measured mix the six fitted profiles
# come from. NCF only ever runs on one GPU there, so multi-GPU jobs draw from the rest.
_POLLUX_MIX: tuple[tuple[str, int], ...] = (
    ("ncf", 263),
    ("cifar10", 242),
    ("deepspeech2", 58),
    ("bert", 36),
    ("yolov3", 30),
    ("imagenet", 11),
)
_SINGLE_GPU_ONLY = frozenset({"ncf"})

# Spellings that mean a shipped profile, after `_normalize` (lower case, alphanumerics only).
_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "inceptionv3": "inception3",
        "inceptionv4": "inception4",
        "yolo": "yolov3",
        "deepspeech": "deepspeech2",
    }
)


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """What the speed model needs to know about one workload.

    ``compute_s`` is the per-step compute time (placement-independent) and ``grad_gbytes`` the
    gradient volume all-reduced per step, in GB as priced against `REFERENCE_BANDWIDTHS`.
    Only their ratio affects a slowdown.
    """

    name: str
    compute_s: float
    grad_gbytes: float

    def __post_init__(self) -> None:
        if not self.compute_s > 0:
            raise ValueError(f"profile {self.name}: compute_s must be positive, got {self.compute_s}")
        if not self.grad_gbytes >= 0:
            raise ValueError(f"profile {self.name}: grad_gbytes must be non-negative, got {self.grad_gbytes}")


def rebase(profile: ModelProfile, source: Bandwidths, target: Bandwidths) -> ModelProfile:
    """Re-express a profile fitted against ``source`` bandwidths for a ``target`` cluster.

    The rule keeps what was measured, the communication/compute ratio across nodes: a job
    split over two nodes of ``target`` pays the same relative cost as it did on ``source``.
    This is how the Pollux fits (T4 GPUs on an effective 1 GB/s network) become reference
    profiles, and how the tests put them back on the testbed. It assumes the target's GPUs
    are faster than the source's in proportion to its network, which holds roughly for
    T4/AWS versus an A100-class InfiniBand cluster.
    """
    return replace(profile, grad_gbytes=profile.grad_gbytes * target.network / source.network)


def pollux_testbed(nodes: int = 4) -> Topology:
    """Pollux's testbed: ``nodes`` g4dn.12xlarge servers of 4 T4 GPUs (no NVLink, one socket)
    under one switch, with `POLLUX_TESTBED_BANDWIDTHS`."""
    singletons = [[g] for g in range(_GPUS_PER_TESTBED_NODE)]
    built = tuple(Node.from_groups(f"g4dn{i + 1}", singletons) for i in range(nodes))
    return Topology(nodes=built, switch_parent={"sw0": None}, bandwidths=POLLUX_TESTBED_BANDWIDTHS)


def load_profiles() -> dict[str, ModelProfile]:
    """The shipped calibrated profiles, by name (a fresh dict; the parse is cached)."""
    return dict(_shipped_profiles())


@lru_cache(maxsize=1)
def _shipped_profiles() -> Mapping[str, ModelProfile]:
    text = resources.files("attentived.data").joinpath("profiles/models.csv").read_text(encoding="utf-8")
    profiles: dict[str, ModelProfile] = {}
    for row in csv.DictReader(io.StringIO(text)):
        profile = ModelProfile(row["name"], float(row["compute_s"]), float(row["grad_gbytes"]))
        profiles[profile.name] = profile
    return MappingProxyType(profiles)


class SpeedModel:
    """Step times and slowdowns of profiled models on one cluster.

    The simulator asks for a slowdown once per job start, so the ideal step time is cached
    per (model, GPU count) and single-GPU jobs return at once.
    """

    def __init__(self, topology: Topology, profiles: Mapping[str, ModelProfile] | None = None) -> None:
        self._topology = topology
        self._profiles: Mapping[str, ModelProfile] = MappingProxyType(
            dict(_shipped_profiles() if profiles is None else profiles)
        )
        self._ideal_step: dict[tuple[str, int], float] = {}

    @property
    def topology(self) -> Topology:
        return self._topology

    @property
    def profiles(self) -> Mapping[str, ModelProfile]:
        return self._profiles

    def _profile(self, model: str) -> ModelProfile:
        try:
            return self._profiles[model]
        except KeyError:
            raise KeyError(f"no speed profile for model {model!r}; map trace names with resolve_model()") from None

    def step_seconds(self, model: str, gpus: Sequence[int] | np.ndarray) -> float:
        """One training step of ``model`` on exactly these GPUs."""
        p = self._profile(model)
        return p.compute_s + self._topology.allreduce_seconds(gpus, p.grad_gbytes)

    def ideal_step_seconds(self, model: str, num_gpus: int) -> float:
        """One step at the most consolidated placement of ``num_gpus`` GPUs (cached)."""
        key = (model, num_gpus)
        step = self._ideal_step.get(key)
        if step is None:
            step = self._ideal_step[key] = self.step_seconds(model, self._topology.ideal_gpus(num_gpus))
        return step

    def slowdown(self, model: str, gpus: Sequence[int] | np.ndarray) -> float:
        """How many times longer than at the ideal placement a job on ``gpus`` runs.

        Not clamped at 1: a placement the topology model prices below `Topology.ideal_gpus`
        shows up as a speed-up rather than being hidden.
        """
        n = len(gpus)
        if n <= 1:
            return 1.0
        return self.step_seconds(model, gpus) / self.ideal_step_seconds(model, n)

    def runtime(self, model: str, ideal_duration: float, gpus: Sequence[int] | np.ndarray) -> float:
        """Run time on ``gpus`` of a job that takes ``ideal_duration`` at the ideal placement."""
        return ideal_duration * self.slowdown(model, gpus)


def assign_model(job_id: str | int, num_gpus: int, seed: int) -> str:
    """A profile name for a trace job that names no model (Philly has none).

    A draw from the Pollux workload mix (`_POLLUX_MIX`), NCF only for 1-GPU jobs as in those
    workloads. It hashes (seed, job id) with BLAKE2 rather than using Python's salted
    ``hash`` or a shared RNG, so a job gets the same model in every run and whatever order
    jobs are assigned in.
    """
    if num_gpus < 1:
        raise ValueError(f"job {job_id}: num_gpus must be at least 1, got {num_gpus}")
    return _draw(f"{seed}/job:{job_id}", _MIX_ANY if num_gpus == 1 else _MIX_MULTI)


def resolve_model(name: str | None, job_id: str | int, num_gpus: int, seed: int) -> str:
    """The shipped profile for a trace's model name, or a deterministic stand-in.

    Names match case-insensitively ignoring punctuation (``ResNet-50`` is ``resnet50``;
    ``inception_v3`` is ``inception3``). ``resnet50`` stays the CNN-derived profile the
    Tiresias trace means; ``imagenet`` is Pollux's measured ResNet-50. A missing name is
    drawn by `assign_model`. An unknown name is drawn from the multi-GPU part of the mix by
    hashing (seed, name), so every job of that model gets the same stand-in profile.
    """
    if name is None or not name.strip():
        return assign_model(job_id, num_gpus, seed)
    key = _normalize(name)
    known = _known_names()
    if key in known:
        return known[key]
    return _draw(f"{seed}/model:{key}", _MIX_MULTI)


def _normalize(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@lru_cache(maxsize=1)
def _known_names() -> Mapping[str, str]:
    names = {_normalize(n): n for n in _shipped_profiles()}
    names.update({alias: target for alias, target in _ALIASES.items() if target in _shipped_profiles()})
    return MappingProxyType(names)


@dataclass(frozen=True, slots=True)
class _Mix:
    names: tuple[str, ...]
    cumulative: tuple[float, ...]  # upper edges in (0, 1], last = 1.0

    @classmethod
    def of(cls, weights: Sequence[tuple[str, int]]) -> _Mix:
        total = sum(w for _, w in weights)
        edges = tuple(c / total for c in accumulate(w for _, w in weights))
        return cls(tuple(n for n, _ in weights), edges)


_MIX_ANY = _Mix.of(_POLLUX_MIX)
_MIX_MULTI = _Mix.of([(n, w) for n, w in _POLLUX_MIX if n not in _SINGLE_GPU_ONLY])


def _draw(key: str, mix: _Mix) -> str:
    u = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2.0**64
    return mix.names[min(bisect.bisect_right(mix.cumulative, u), len(mix.names) - 1)]
