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

A partition may set its own (``scontrol -o show partition``): ``JobDefaults`` replace the
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
    memory_consumable: bool = False
    mem_per_gpu: int = 0  # MB, the cluster's DefMemPerGPU (0: none)
    cpus_per_gpu: int = 0  # the cluster's DefCpuPerGPU (0: none)
    #: the partitions that give their jobs otherwise, with what they give (the cluster's
    #: settings where they set none)
    partitions: Mapping[str, JobDefaults] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_of_field", {})  # a job's partition field -> its defaults

    @classmethod
    def of(cls, slurm_config: Mapping[str, str], partitions: Iterable[SlurmPartition] = ()) -> JobDefaults:
        """From ``scontrol show config`` (empty when it could not be read: nothing known) and
        the partitions (``scontrol -o show partition``)."""
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

    def _for(self, partition: str) -> JobDefaults:
        """The defaults of a job's ``partition`` field (``a,b``: the most any of them gives)."""
        known: dict[str, JobDefaults] = self._of_field  # type: ignore[attr-defined]
        found = known.get(partition)
        if found is None:
            each = [self.partitions.get(p, self) for p in partition.split(",") if p] or [self]
            found = known[partition] = JobDefaults(any(d.memory_consumable for d in each),
                                                   max(d.mem_per_gpu for d in each), max(d.cpus_per_gpu for d in each))
        return found

    def origin(self, partition: str, setting: str) -> str:
        """Whose ``setting`` (a field name) a job of ``partition`` gets: "the cluster's" or
        "partition gpu's" (for ``explain``)."""
        own = [p for p in partition.split(",") if p in self.partitions
               and getattr(self.partitions[p], setting) != getattr(self, setting)]
        return f"partition {', '.join(own)}'s" if own else "the cluster's"

    def allocation(self, job: SlurmJob) -> Allocation:
        """The CPUs and memory slurmctld gives ``job``, and whether it keeps its nodes whole
        (a CPU job too); ``job``'s own where it set them. A memory per GPU, the job's or a
        default, replaces a default per node or CPU that squeue shows (``DefMemPerCPU``,
        ``DefMemPerNode``, set at submission) unless the user set ``--mem`` or
        ``--mem-per-cpu``: cons_tres relies on the GPUs' alone (``_verify_node_state``)."""
        d = self._for(job.partition) if self.partitions else self
        cpus = job.cpus
        if d.cpus_per_gpu and not job.cpus_set and job.gpus > 0:
            cpus = max(cpus, d.cpus_per_gpu * job.gpus)
        per_gpu = job.mem_per_gpu or d.mem_per_gpu
        if per_gpu and not job.mem_set and job.gpus > 0:
            return Allocation(cpus, 0, 0, per_gpu, job.exclusive)
        if job.mem_per_node or job.mem_per_cpu or job.mem_per_gpu:
            return Allocation(cpus, job.mem_per_node, job.mem_per_cpu, job.mem_per_gpu, job.exclusive)
        return Allocation(cpus, 0, 0, 0, job.exclusive or d.memory_consumable)

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
