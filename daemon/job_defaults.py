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

A partition's own ``JobDefaults`` are not read; its jobs show them once slurmctld has
looked at them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from .records import SlurmJob


@dataclass(frozen=True)
class JobDefaults:
    memory_consumable: bool = False
    mem_per_gpu: int = 0  # MB, the cluster's DefMemPerGPU (0: none)
    cpus_per_gpu: int = 0  # the cluster's DefCpuPerGPU (0: none)

    @classmethod
    def of(cls, slurm_config: Mapping[str, str]) -> JobDefaults:
        """From ``scontrol show config`` (empty when it could not be read: nothing known)."""
        given = {}
        for item in slurm_config.get("JobDefaults", "").split(","):
            key, _, value = item.partition("=")
            if value.strip().isdigit():
                given[key.strip()] = int(value)
        return cls("MEMORY" in slurm_config.get("SelectTypeParameters", "").upper(),
                   given.get("DefMemPerGPU", 0), given.get("DefCpuPerGPU", 0))

    def allocation(self, job: SlurmJob) -> tuple[int, int, bool]:
        """The CPUs and memory per GPU slurmctld gives ``job``, and whether it keeps its
        nodes whole (``--exclusive``, or no memory asked where memory is allocated: a CPU
        job too); ``job``'s own where it set them. Plain values, so that a queue of
        thousands pays no new record per job."""
        cpus = job.cpus
        if self.cpus_per_gpu and not job.cpus_set and job.gpus > 0:
            cpus = max(cpus, self.cpus_per_gpu * job.gpus)
        if job.mem_per_node or job.mem_per_cpu or job.mem_per_gpu:
            return cpus, job.mem_per_gpu, job.exclusive
        if self.mem_per_gpu and not job.mem_set and job.gpus > 0:
            return cpus, self.mem_per_gpu, job.exclusive
        return cpus, 0, job.exclusive or self.memory_consumable

    def applied(self, job: SlurmJob) -> SlurmJob:
        """``job`` with the CPUs and memory slurmctld will allocate it (`allocation`)."""
        cpus, mem_per_gpu, exclusive = self.allocation(job)
        if (cpus, mem_per_gpu, exclusive) == (job.cpus, job.mem_per_gpu, job.exclusive):
            return job
        return replace(job, cpus=cpus, mem_per_gpu=mem_per_gpu, exclusive=exclusive)
