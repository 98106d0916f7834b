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
tests/daemon/fixtures/README.md). A job submitted to several partitions is planned with the
most any of them gives: slurmctld starts it in whichever fits, so that plan is never refused.
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
    #: whether slurmctld allocates memory (``CR_*_Memory``); None: not known (the config
    #: not read), so memory is planned as asked
    memory_consumable: bool | None = None
    mem_per_gpu: int = 0  # MB, the cluster's DefMemPerGPU (0: none)
    cpus_per_gpu: int = 0  # the cluster's DefCpuPerGPU (0: none)
    #: the partitions that give their jobs otherwise, with what they give (the cluster's
    #: settings where they set none)
    partitions: Mapping[str, JobDefaults] = field(default_factory=dict)

    @classmethod
    def of(cls, slurm_config: Mapping[str, str], partitions: Iterable[SlurmPartition] = ()) -> JobDefaults:
        """From ``scontrol show config`` (empty when it could not be read: nothing known) and
        the partitions (``scontrol -a -o show partition``)."""
        if not slurm_config:
            return cls()
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
        return replace(cluster, partitions=own)

    def _scopes(self, partition: str) -> list[tuple[str, JobDefaults]]:
        """(name, defaults) of each partition of a job's ``partition`` field (``a,b``); the
        cluster's ("") where a partition sets nothing of its own."""
        return [(p, self.partitions[p]) if p in self.partitions else ("", self) for p in partition.split(",") if p] or [("", self)]

    def origin(self, partition: str, setting: str) -> str:
        """Whose ``setting`` (a field name) a job of ``partition`` is planned with, the most
        of its partitions': "the cluster's" or "partition gpu's" (for ``explain``)."""
        cluster = getattr(self, setting)
        scopes = [(name if getattr(d, setting) != cluster else "", getattr(d, setting) or 0)
                  for name, d in self._scopes(partition)]
        most = max(value for _name, value in scopes)
        names = list(dict.fromkeys(name for name, value in scopes if value == most))
        return "the cluster's" if "" in names else f"partition {', '.join(names)}'s"

    def allocation(self, job: SlurmJob) -> Allocation:
        """The CPUs and memory slurmctld gives ``job``, and whether it keeps its nodes whole
        (a CPU job too); ``job``'s own where it set them. A job of several partitions that
        give otherwise is planned with the most of each, since a pinned node may be in only
        one of them."""
        if not self.partitions:
            return self._allocation(job, self)
        scopes = self._scopes(job.partition)
        if len(scopes) == 1:
            return self._allocation(job, scopes[0][1])
        each = [self._allocation(job, d) for _name, d in scopes]
        return Allocation(max(a.cpus for a in each), max(a.mem_per_node for a in each), max(a.mem_per_cpu for a in each),
                          max(a.mem_per_gpu for a in each), any(a.exclusive for a in each))

    @staticmethod
    def _allocation(job: SlurmJob, d: JobDefaults) -> Allocation:
        """`allocation` under one partition's defaults ``d``.

        A memory per GPU, the job's or a default, replaces a default per node or CPU that
        squeue shows (``DefMemPerCPU``, ``DefMemPerNode``, set at submission) unless the
        user set ``--mem`` or ``--mem-per-cpu``: cons_tres relies on the GPUs' alone. Until
        slurmctld has tested the job (no memory per GPU shown yet), its first test checks the
        shown default before it sets the per-GPU one (``_verify_node_state`` runs before
        ``_set_gpu_defaults``), so the larger of the two is planned. Where the partition
        allocates no memory, none is planned: slurmctld checks none."""
        cpus = job.cpus
        if d.cpus_per_gpu and not job.cpus_set and job.gpus > 0:
            cpus = max(cpus, d.cpus_per_gpu * job.gpus)
        if d.memory_consumable is False:
            return Allocation(cpus, 0, 0, 0, job.exclusive)
        per_gpu = job.mem_per_gpu or d.mem_per_gpu
        if per_gpu and not job.mem_set and job.gpus > 0:
            shown = job.mem_per_node * max(1, job.num_nodes) + job.mem_per_cpu * cpus
            if job.mem_per_gpu or shown <= per_gpu * job.gpus:
                return Allocation(cpus, 0, 0, per_gpu, job.exclusive)
            return Allocation(cpus, job.mem_per_node, job.mem_per_cpu, 0, job.exclusive)
        if job.mem_per_node or job.mem_per_cpu or job.mem_per_gpu:
            return Allocation(cpus, job.mem_per_node, job.mem_per_cpu, job.mem_per_gpu, job.exclusive)
        return Allocation(cpus, 0, 0, 0, job.exclusive or bool(d.memory_consumable))

    def applied(self, job: SlurmJob) -> SlurmJob:
        """``job`` with the CPUs and memory slurmctld will allocate it (`allocation`)."""
        got = self.allocation(job)
        if got == (job.cpus, job.mem_per_node, job.mem_per_cpu, job.mem_per_gpu, job.exclusive):
            return job
        return replace(job, **got._asdict())


def _given(job_defaults: str) -> dict[str, int]:
    """``DefCpuPerGPU=2,DefMemPerGPU=4096`` -> {key: value} (other or odd items left out)."""
    given = {}
    for item in job_defaults.split(","):
        key, _, value = item.partition("=")
        if value.strip().isdigit():
            given[key.strip()] = int(value)
    return given
