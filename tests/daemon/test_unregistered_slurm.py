"""Jobs Slurm refuses to update until slurmdbd has registered them (daemon/unregistered.py),
on the real lab (Slurm 22.05 with slurmdbd and MariaDB).

slurmdbd is stopped with SIGSTOP, the way a slurmdbd busy with a long rollup or a locked
table looks to slurmctld: a job submitted then gets its database index requested and
never answered, and slurmctld holds each update of it for 5 s before refusing it.

- a slow slurmdbd: the refused job is left to Slurm (the cycle is not a failure, the other
  jobs' updates land, the next cycle sends nothing for it), and once slurmdbd answers, the
  probe (its own ``ExcNodeList`` written back) finds it registered and the daemon manages
  it again;
- a slurmctld SIGKILLed while the request was out (the state it restarts from marks the
  job "being set" for good): the daemon converges around the job (an ``ok`` cycle, then one
  with nothing to send) instead of failing every cycle;
- a job left to Slurm while it waits in a hold reservation of the daemon's (attached in
  the seconds before its index was requested): the reservation is ended, not left to hold
  its nodes until the lease runs out, and Slurm unlinks the job when it ends.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from attentived.daemon.cycle import CycleRunner
from attentived.daemon.unregistered import probe_update
from attentived.topology import hostlist

from .test_daemon_slurm import busy_cluster, config_for, held_in_reservation, jobs_now, ours, wait_until
from .test_faults_slurm import _restart_slurmctld, _slurmctld_pid, lab_version, nodes_responding

pytestmark = [pytest.mark.slurm, pytest.mark.faults]

#: slurmctld asks slurmdbd for new jobs' database indices every 5 s (22.05's dbinx thread)
DBINX_PERIOD = 5.0


@contextmanager
def slurmdbd_stopped(lab) -> Iterator[None]:
    pid = int((lab.run_dir / "pid" / "slurmdbd.pid").read_text().strip())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.fixture
def refusing_slurm(clean_lab) -> None:
    """What these tests drive is Slurm's before 24.11: from 24.11 on slurmctld makes a job's
    index itself and refuses no update for it (on 26.05: the updates were taken)."""
    version = lab_version(clean_lab)
    if version.tuple >= (24, 11):
        pytest.skip(f"Slurm {version} refuses no update of a job slurmdbd has not registered")


def _runner(lab, tmp_path) -> CycleRunner:
    # command_timeout above Slurm's 5 s hold of a refused update: the daemon must see the refusal
    return CycleRunner(config_for(lab, tmp_path, command_timeout=15, backoff_max=1))


def _sent_for(res, job_id: str) -> list:
    return [o for o in res.outcomes if o.action.job_id == job_id]


def _unregistered_job(lab) -> str:
    """A pending job whose database index slurmctld is waiting for (slurmdbd is stopped)."""
    job = str(lab.submit("carol", 2, script="sleep 120"))
    time.sleep(DBINX_PERIOD + 1.5)  # the dbinx thread has sent its request, and waits
    return job


@pytest.mark.usefixtures("refusing_slurm")
def test_job_refused_while_slurmdbd_is_slow_is_left_to_slurm_then_managed(clean_lab, tmp_path):
    lab = clean_lab
    nodes_responding(lab)
    busy_cluster(lab)
    registered = [str(lab.submit(u, g, script="sleep 120")) for u, g in (("alice", 2), ("bob", 1))]
    time.sleep(DBINX_PERIOD + 1.5)  # registered while slurmdbd still answers
    eng = _runner(lab, tmp_path)
    with slurmdbd_stopped(lab):
        x = _unregistered_job(lab)
        slurms_priority = jobs_now(lab)[x]["Priority"]
        first = eng.run_cycle()
        print("first cycle:", [(o.action.kind, o.action.job_id, o.ok, o.error) for o in first.outcomes])
        refused = _sent_for(first, x)
        assert refused and all(o.unregistered for o in refused), refused
        assert first.ok and first.failed == 0 and first.unregistered == len(refused), first.error
        for j in registered:  # the registered jobs' updates landed in the same cycle
            assert _sent_for(first, j) and all(o.ok for o in _sent_for(first, j))
        assert jobs_now(lab)[x]["Priority"] == slurms_priority  # left as Slurm set it
        second = eng.run_cycle()
        assert second.ok and not _sent_for(second, x), second.outcomes
        assert second.counts["unregistered"] == 1 and x not in (second.plan.order if second.plan else ())
    # slurmdbd answers: a later probe finds the job registered and the plan takes it back
    managed = wait_until(lambda: (r := eng.run_cycle()).ok and r.counts.get("unregistered") == 0 and r,
                         timeout=60, poll=0.5, what="the job managed again")
    assert x in managed.plan.order
    assert not eng.unregistered.since
    assert int(jobs_now(lab)[x]["Priority"]) >= eng.config.priority_floor  # the daemon orders it again
    eng.journal.close()


def test_probe_changes_nothing(clean_lab, tmp_path):
    lab = clean_lab
    busy_cluster(lab)
    plain = str(lab.submit("alice", 2, script="sleep 120"))
    excluding = str(lab.submit("bob", 2, script="sleep 120", extra_args=["--exclude", "node3,node4"]))
    eng = _runner(lab, tmp_path)
    before = jobs_now(lab)
    snap = eng.backend.snapshot()
    results = eng.backend.update_jobs([probe_update(snap.jobs_by_id[j]) for j in (plain, excluding)])
    assert all(r.ok for r in results), results
    after = jobs_now(lab)

    def seen(d: dict[str, str]) -> tuple:
        return tuple(tuple(sorted(hostlist.expand(d[k]))) if d[k] != "(null)" else () for k in ("ExcNodeList", "ReqNodeList")) \
            + (d["Priority"],)

    assert [seen(after[j]) for j in (plain, excluding)] == [seen(before[j]) for j in (plain, excluding)]
    assert seen(after[excluding])[0] == ("node3", "node4")
    eng.journal.close()


def test_reservation_a_job_left_to_slurm_waits_in_is_ended_and_slurm_unlinks_the_job(clean_lab, tmp_path):
    lab = clean_lab
    eng, a, b = held_in_reservation(lab, tmp_path, command_timeout=15, backoff_max=600)
    resv = f"attentived-{a}"
    # Slurm refuses the job's updates from now on (the refusal itself: the tests above);
    # no probe asks again within the test (backoff_max)
    eng.unregistered.note([a], time.time())
    res = eng.run_cycle()
    print("cycle:", [(o.action.kind, o.action.job_id, o.action.reservation, o.ok, o.error) for o in res.outcomes])
    assert res.ok and not _sent_for(res, a)
    assert [(o.action.kind, o.ok) for o in res.outcomes if o.action.reservation == resv] == [("reservation_end", True)]
    unlinked = wait_until(lambda: (d := jobs_now(lab)[a]).get("Reservation") in (None, "", "(null)") and d,
                          timeout=60, poll=1, what="Slurm unlinking the job from its ended reservation")
    assert unlinked["JobState"] == "PENDING" and resv not in ours(lab)
    # the next job's hold, on the nodes the ended reservation covered, is made once it is gone
    assert all(eng.run_cycle().ok for _ in range(2)) and list(ours(lab)) == [f"attentived-{b}"]
    eng.journal.close()


@pytest.mark.usefixtures("refusing_slurm")
def test_job_left_unregistered_by_a_slurmctld_crash_does_not_stop_convergence(clean_lab, tmp_path):
    lab = clean_lab
    nodes_responding(lab)
    busy_cluster(lab)
    other = str(lab.submit("alice", 2, script="sleep 120"))
    time.sleep(DBINX_PERIOD + 1.5)
    try:
        with slurmdbd_stopped(lab):
            x = _unregistered_job(lab)
            lab.scontrol("update", f"JobId={other}", "Comment=save-state")  # a job state save is due
            time.sleep(4)  # slurmctld saves job state (x marked "being set") within a few seconds
            os.kill(_slurmctld_pid(lab), signal.SIGKILL)
            wait_until(lambda: not lab.is_running(), timeout=10, what="slurmctld gone")
        _restart_slurmctld(lab)
        eng = _runner(lab, tmp_path)
        first = eng.run_cycle()
        print("first cycle:", [(o.action.kind, o.action.job_id, o.ok, o.error) for o in first.outcomes])
        assert first.ok and first.unregistered >= 1 and all(o.unregistered for o in _sent_for(first, x))
        assert all(o.ok for o in _sent_for(first, other)) and _sent_for(first, other)
        second = eng.run_cycle()
        assert second.ok and second.counts["unregistered"] == 1
        # probes (every backoff_max = 1 s) keep finding it refused; nothing else is left to send
        time.sleep(1.5)
        third = eng.run_cycle()
        assert third.ok and len(third.outcomes) == 0 and third.counts["unregistered"] == 1, third.outcomes
        assert x in eng.unregistered.since
        eng.journal.close()
    finally:
        lab.stop()  # a restarted controller leaves the lab unsettled: give later tests a fresh one
        lab.start()
