"""What slurmctld allocates a job beyond what squeue shows it asking, from ``scontrol show config``.

Two settings make the difference, and a plan that missed them pins jobs where slurmctld
refuses them while GPUs idle:

- ``JobDefaults=DefMemPerGPU=M``: cons_tres gives a job that set no memory M MB per GPU.
  squeue shows it (``memory_per_tres`` ``gpu:M``) only once slurmctld has tested the job,
  so a job it has not looked at yet reads as asking none.
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

    @classmethod
    def of(cls, slurm_config: Mapping[str, str]) -> JobDefaults:
        """From ``scontrol show config`` (empty when it could not be read: nothing known)."""
        per_gpu = 0
        for item in slurm_config.get("JobDefaults", "").split(","):
            key, _, value = item.partition("=")
            if key.strip() == "DefMemPerGPU" and value.strip().isdigit():
                per_gpu = int(value)
        return cls("MEMORY" in slurm_config.get("SelectTypeParameters", "").upper(), per_gpu)

    def allocation(self, job: SlurmJob) -> tuple[int, bool]:
        """The memory per GPU slurmctld gives ``job`` and whether it keeps its nodes whole
        (``--exclusive``, or no memory asked where memory is allocated: a CPU job too):
        ``job``'s own when it set memory. Plain values, so that a queue of thousands pays
        no new record per job."""
        if job.mem_per_node or job.mem_per_cpu or job.mem_per_gpu:
            return job.mem_per_gpu, job.exclusive
        if self.mem_per_gpu and not job.mem_set and job.gpus > 0:
            return self.mem_per_gpu, job.exclusive
        return 0, job.exclusive or self.memory_consumable

    def applied(self, job: SlurmJob) -> SlurmJob:
        """``job`` with the memory slurmctld will allocate it (`allocation`)."""
        mem_per_gpu, exclusive = self.allocation(job)
        if (mem_per_gpu, exclusive) == (job.mem_per_gpu, job.exclusive):
            return job
        return replace(job, mem_per_gpu=mem_per_gpu, exclusive=exclusive)
