"""What slurmctld allocates a job beyond what squeue shows it asking, from ``scontrol show config``.

Two settings make the difference, and a plan that missed them pins jobs where slurmctld
refuses them while GPUs idle:

- ``JobDefaults=DefMemPerGPU=M,DefCpuPerGPU=C``: cons_tres gives a job that set no memory
  M MB per GPU, and one that set no CPUs per task or per GPU C CPUs per GPU. squeue shows
  them (``memory_per_tres``/``cpus_per_tres`` ``gpu:N``) only once slurmctld has tested the
  job, so a job it has not looked at yet reads as asking none and one CPU (recorded on
  22.05 and 24.11, tests/daemon/fixtures/README.md).
- ``SelectTypeParameters=CR_*_Memory``: memory is allocated, and a job that asks for none
  (``--mem=0``, or no ``--mem`` and no default) gets all of each node's and starts only
  where none is allocated (cons_tres ``_verify_node_state``; recorded on 22.05 and 24.11,
  tests/daemon/fixtures/README.md). Every job there holds memory, so such a node is an
  idle one, whatever its size, and nothing else starts on it until the job ends: the job is
  planned, and kept, as ``--exclusive``.

A partition may set its own (``scontrol -a -o show partition``): ``JobDefaults`` replace the
cluster's key by key for its jobs, and its ``SelectTypeParameters`` replace whether memory is
allocated where the cluster's is a ``CR_Core``/``CR_Socket`` type (cons_tres
``_set_gpu_defaults`` and ``_setup_cr_type``; recorded on 22.05 and 24.11,
tests/daemon/fixtures/README.md). A job submitted to several partitions is planned to suit
each of them, since a node it is pinned to may be in one only.

A default memory per CPU or node (``DefMemPerCPU``, ``DefMemPerNode``) shows on a job from
its submission; where a memory per GPU applies, cons_tres allocates that alone
(`JobDefaults._allocation`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from .records import SlurmJob, SlurmPartition

#: The cluster-wide types a partition's own SelectTypeParameters may replace (others ignore it).
_PARTITION_TYPES = frozenset({"CR_CORE", "CR_CORE_MEMORY", "CR_SOCKET", "CR_SOCKET_MEMORY"})


class Allocation(NamedTuple):
    """What slurmctld gives a job (`JobDefaults.allocation`): a tuple, so that a queue of
    thousands pays no record per job."""

    cpus: int
    mem_per_node: int
    mem_per_cpu: int
    mem_per_gpu: int
    exclusive: bool  # its nodes whole: ``--exclusive``, or no memory asked where memory is allocated


@dataclass(frozen=True)
class JobDefaults:
    memory_consumable: bool = False  # slurmctld allocates memory (``CR_*_Memory``)
    mem_per_gpu: int = 0  # MB, the cluster's DefMemPerGPU (0: none)
    cpus_per_gpu: int = 0  # the cluster's DefCpuPerGPU (0: none)
    #: the partitions that give their jobs otherwise, with what they give (the cluster's
    #: settings where they set none)
    partitions: Mapping[str, JobDefaults] = field(default_factory=dict)
    known: bool = False  # read from Slurm (`of`); not: nothing is assumed away

    @classmethod
    def of(cls, slurm_config: Mapping[str, str], partitions: Iterable[SlurmPartition] = ()) -> JobDefaults:
        """From ``scontrol show config`` (empty when it could not be read: nothing known) and
        the partitions (``scontrol -a -o show partition``)."""
        select = slurm_config.get("SelectTypeParameters", "").upper()
        given = _given(slurm_config.get("JobDefaults", ""))
        cluster = cls("MEMORY" in select, given.get("DefMemPerGPU", 0), given.get("DefCpuPerGPU", 0))
        replaceable = not _PARTITION_TYPES.isdisjoint(t.strip() for t in select.split(","))
        own = {}
        for p in partitions:
            given = _given(p.job_defaults)
            mine = cls(("MEMORY" in p.select_type) if p.select_type and replaceable else cluster.memory_consumable,
                       given.get("DefMemPerGPU", cluster.mem_per_gpu), given.get("DefCpuPerGPU", cluster.cpus_per_gpu))
            if mine != cluster:
                own[p.name] = mine
        return replace(cluster, partitions=own, known=True)

    def _scopes(self, partition: str) -> list[tuple[str, JobDefaults]]:
        """(name, defaults) of each partition of a job's ``partition`` field (``a,b``); the
        cluster's ("") where a partition sets nothing of its own."""
        return [(p, self.partitions[p]) if p in self.partitions else ("", self) for p in partition.split(",") if p] or [("", self)]

    def origin(self, partition: str, setting: str) -> str:
        """Whose ``setting`` (a field name) a job of ``partition`` is planned with, the most
        of its partitions': "the cluster's" or "partition gpu's" (for ``explain``)."""
        cluster = getattr(self, setting)
        scopes = [(name if getattr(d, setting) != cluster else "", getattr(d, setting)) for name, d in self._scopes(partition)]
        most = max(value for _name, value in scopes)
        names = list(dict.fromkeys(name for name, value in scopes if value == most))
        return "the cluster's" if "" in names else f"partition {', '.join(names)}'s"

    def allocates_memory(self, partition: str) -> bool:
        """Whether slurmctld allocates memory to the jobs of ``partition`` (a running job's
        partition): a job where it does not holds none of a node's memory, so none comes
        back when it ends. Not known: it does, as a node's allocated memory may say."""
        if not self.known:
            return True
        if not self.partitions:
            return self.memory_consumable
        return any(d.memory_consumable for _name, d in self._scopes(partition))

    def allocation(self, job: SlurmJob) -> Allocation:
        """The CPUs and memory slurmctld gives ``job``, and whether it keeps its nodes whole
        (a CPU job too); ``job``'s own where it set them. A job of several partitions that
        give otherwise is planned with the most of each, since a pinned node may be in only
        one of them.

        The memory is of one kind, per node, per CPU or per GPU, as `agents.fit` checks it.
        Where more than one must hold (each partition's, or before slurmctld has tested the
        job, below), it is the one kind that covers them all (`_covering`)."""
        if not self.partitions:
            return self._allocation(job, self)
        scopes = self._scopes(job.partition)
        if len(scopes) == 1:
            return self._allocation(job, scopes[0][1])
        each = [self._allocation(job, d) for _name, d in scopes]
        cpus = max(a.cpus for a in each)
        return Allocation(cpus, *_covering(job, cpus, [a[1:4] for a in each]), any(a.exclusive for a in each))

    @staticmethod
    def _allocation(job: SlurmJob, d: JobDefaults) -> Allocation:
        """`allocation` under one partition's defaults ``d``.

        A memory per GPU, the job's or a default, replaces a default per node or CPU that
        squeue shows (``DefMemPerCPU``, ``DefMemPerNode``, set at submission) unless the
        user set ``--mem`` or ``--mem-per-cpu``: cons_tres relies on the GPUs' alone. Until
        slurmctld has tested the job (no memory per GPU shown yet), its first test checks the
        shown default before it sets the per-GPU one (``_verify_node_state`` runs before
        ``_set_gpu_defaults``), so both are planned for. Memory is planned where the partition
        allocates none too: slurmctld still checks a request per node against each node's
        configured memory (``_build_node_list``)."""
        cpus = job.cpus
        if d.cpus_per_gpu and not job.cpus_set and job.gpus > 0:
            cpus = max(cpus, d.cpus_per_gpu * job.gpus)
        per_gpu = job.mem_per_gpu or d.mem_per_gpu
        if per_gpu and not job.mem_set and job.gpus > 0:
            if job.mem_per_gpu:  # tested: the per-GPU memory is all
                return Allocation(cpus, 0, 0, per_gpu, job.exclusive)
            shown = (job.mem_per_node, job.mem_per_cpu, 0)
            return Allocation(cpus, *_covering(job, cpus, [shown, (0, 0, per_gpu)]), job.exclusive)
        if job.mem_per_node or job.mem_per_cpu or job.mem_per_gpu:
            return Allocation(cpus, job.mem_per_node, job.mem_per_cpu, job.mem_per_gpu, job.exclusive)
        return Allocation(cpus, 0, 0, 0, job.exclusive or d.memory_consumable)

    def applied(self, job: SlurmJob) -> SlurmJob:
        """``job`` with the CPUs and memory slurmctld will allocate it (`allocation`)."""
        got = self.allocation(job)
        if got == (job.cpus, job.mem_per_node, job.mem_per_cpu, job.mem_per_gpu, job.exclusive):
            return job
        return replace(job, **got._asdict())


def _covering(job: SlurmJob, cpus: int, asks: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    """One memory of one kind (per node, per CPU, per GPU) at least each of ``asks`` (each
    of one kind or none) on any node the job may take: per GPU where all are; per CPU where
    none is per node and the job has CPUs (`agents.fit` checks memory per CPU only then), a
    GPU's memory counted on the fewest CPUs that come with it; per node otherwise, at the
    most GPUs the job may put on one node (its share when its node count is fixed, else all
    of them)."""
    asks = [a for a in asks if any(a)]
    if len({(a[0] > 0, a[1] > 0) for a in asks}) <= 1:  # one kind (or none): the most of it
        return (max((a[0] for a in asks), default=0), max((a[1] for a in asks), default=0),
                max((a[2] for a in asks), default=0))
    gpus = job.gpus
    if cpus > 0 and not any(a[0] for a in asks):  # per CPU and per GPU: k GPUs come with at least cpus*k/gpus CPUs
        return 0, max(a[1] or -(-a[2] * gpus // cpus) for a in asks), 0
    split = job.num_nodes if job.num_nodes > 1 and gpus % job.num_nodes == 0 else 1
    k = job.gpus_per_node if job.per_node_fixed and job.gpus_per_node else gpus // split
    on_node = -(-cpus * k // gpus) if gpus else cpus  # the CPUs that come with k GPUs (proportionally)
    return max(a[0] + a[1] * on_node + a[2] * k for a in asks), 0, 0


def _given(job_defaults: str) -> dict[str, int]:
    """``DefCpuPerGPU=2,DefMemPerGPU=4096`` -> {key: value} (other or odd items left out)."""
    given = {}
    for item in job_defaults.split(","):
        key, _, value = item.partition("=")
        if value.strip().isdigit():
            given[key.strip()] = int(value)
    return given
