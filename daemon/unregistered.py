"""Jobs Slurm refuses to update until slurmdbd has registered them.

Before 24.11, slurmctld asks slurmdbd for each new job's database index in the background
(every 5 s, all new jobs in one request). While that request is out, every update of those
jobs waits 5 s inside slurmctld and is then refused: "Job update not available right now,
the DB index is being set, try again in a bit". A slow slurmdbd makes this last as long as
it is slow. A slurmctld that dies while the request is out makes it last until the job
starts: the job's "being set" mark is saved with its state, and the restarted slurmctld
never asks again (22.05's ``_set_db_inx_thread`` skips every job whose index is not 0).
24.11 makes the index in slurmctld and no longer refuses.

Sending such a job's updates every cycle would cost 5 s of slurmctld's time per job and
fail every cycle, with nothing the daemon can change. So a refused job is left to Slurm,
like a job the daemon does not manage (no action names it: its priority, node list and any
pin, exclusion or reservation of the daemon's stay as they are), and is probed again every
``retry`` seconds (the daemon's ``backoff_max``) with an update that changes nothing (its
own ``ExcNodeList`` written back); once Slurm takes one, the daemon manages it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .backend import Backend
from .records import JobUpdate, SlurmJob, controller_gone, job_number, refused_for_db_index


def probe_update(job: SlurmJob) -> JobUpdate:
    """An update that changes nothing: the job's own excluded nodes written back (the same
    nodes; Slurm may show them listed one by one afterwards). Slurm checks the database
    index before any field, so it answers exactly the question."""
    return JobUpdate(job.job_id, (("ExcNodeList", ",".join(job.excluded_nodes)),))


@dataclass
class Unregistered:
    """The jobs left to Slurm because it refused their updates (the module doc), and when
    to ask again."""

    retry: float
    since: dict[str, float] = field(default_factory=dict)  # job id -> when first refused
    next_probe: float = 0.0

    def note(self, refused: Iterable[str], now: float) -> list[str]:
        """Record the jobs whose updates Slurm just refused; the newly refused, sorted."""
        new = sorted(j for j in set(refused) if j not in self.since)
        for j in new:
            self.since[j] = now
        if new and not self.next_probe:
            self.next_probe = now + self.retry
        return new

    def forget_gone(self, pending: Iterable[str]) -> list[str]:
        """Drop the jobs no longer pending (started, ended, cancelled): Slurm registers a
        job when it starts, and a gone job needs nothing. The dropped ones, sorted."""
        keep = set(pending)
        gone = sorted(j for j in self.since if j not in keep)
        for j in gone:
            del self.since[j]
        if not self.since:
            self.next_probe = 0.0
        return gone

    def due(self, now: float) -> bool:
        return bool(self.since) and now >= self.next_probe

    def probe(self, backend: Backend, jobs: Mapping[str, SlurmJob], now: float) -> list[str]:
        """When due, ask Slurm again, oldest refusal first, and stop at the first job it
        still refuses (the others were most likely refused for the same request, and each
        refusal costs 5 s). The jobs Slurm takes back, sorted; they are managed again."""
        if not self.due(now):
            return []
        accepted: list[str] = []
        for job_id in sorted(self.since, key=lambda j: (self.since[j], job_number(j), j)):
            job = jobs.get(job_id)
            if job is None:
                continue
            r = backend.update_jobs([probe_update(job)])[0]
            if not r.ok and (refused_for_db_index(r.error) or controller_gone(r.error)):
                break
            accepted.append(job_id)  # taken, or refused for a reason that is not this one
        for j in accepted:
            del self.since[j]
        self.next_probe = now + self.retry if self.since else 0.0
        return sorted(accepted)

    def leave_out(self) -> frozenset[str]:
        """The jobs the plan leaves to Slurm this cycle."""
        return frozenset(self.since)
