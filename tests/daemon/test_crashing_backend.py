"""The fault-injection seam of the Slurm fault tests (``crashing.CrashingBackend``), on the
in-memory Slurm: what counts as a write, one job per update call, reads pass through. Fast,
no marker; the real SIGKILL is exercised by test_faults_slurm.py / test_faults_more.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attentived.daemon.apply import NOT_SENT, Action, execute
from attentived.daemon.records import CommandResult, JobUpdate

from .crashing import CrashingBackend
from .test_apply import cluster, pending


class Killed(Exception):
    pass


def _raise() -> None:
    raise Killed


def _wrapped(crash_after: int, n_jobs: int = 3):
    fake = cluster([pending(str(i), "alice", 1) for i in range(1, n_jobs + 1)])
    return fake, CrashingBackend(fake, crash_after, kill=_raise)


def test_job_updates_go_one_per_call_and_each_counts():
    fake, wrapped = _wrapped(1_000_000)
    calls: list[int] = []
    real = fake.update_jobs

    def counting(updates):
        calls.append(len(updates))
        return real(updates)

    fake.update_jobs = counting
    res = wrapped.update_jobs([JobUpdate(str(i), (("Priority", str(10 + i)),)) for i in (1, 2, 3)])
    assert [r.ok for r in res] == [True, True, True] and calls == [1, 1, 1] and wrapped.writes == 3
    assert [fake.jobs[str(i)].priority for i in (1, 2, 3)] == [11, 12, 13]


def test_kill_lands_between_jobs_of_one_batch():
    fake, wrapped = _wrapped(2)
    with pytest.raises(Killed):
        wrapped.update_jobs([JobUpdate(str(i), (("Priority", str(10 + i)),)) for i in (1, 2, 3)])
    assert [fake.jobs[str(i)].priority for i in (1, 2, 3)] == [11, 12, 1]  # the 3rd never sent


def test_reservation_and_hold_release_writes_count_reads_do_not():
    fake, wrapped = _wrapped(5)
    wrapped.snapshot(), wrapped.config(), wrapped.version(), wrapped.partitions()
    assert wrapped.name == fake.name and wrapped.writes == 0
    assert wrapped.create_reservation("attentived-1", ["node1"], ["alice"], 10, True).ok
    assert wrapped.update_reservation("attentived-1", Duration="20").ok
    wrapped.hold(["1"])
    wrapped.release(["1"])
    assert wrapped.writes == 4
    with pytest.raises(Killed):
        wrapped.delete_reservation("attentived-1")
    assert "attentived-1" not in fake.reservations  # killed right *after* the write
    wrapped.close()  # anything else passes through to the inner backend


def test_execute_through_the_wrapper_counts_jobs_not_actions():
    fake, wrapped = _wrapped(2)
    # job 1: pin + priority in one update (one write), job 2: priority, job 3: priority
    actions = [Action("pin", "1", nodes=("node1",)), Action("priority", "1", value="30"),
               Action("priority", "2", value="20"), Action("priority", "3", value="10")]
    with pytest.raises(Killed):
        execute(actions, wrapped)
    assert fake.jobs["1"].priority == 30 and fake.jobs["1"].required_nodes == ("node1",)
    assert fake.jobs["2"].priority == 20 and fake.jobs["3"].priority == 1


@pytest.mark.parametrize("error", ["Unable to contact slurm controller (connect failure)",
                                   "no answer within 1 s"])  # Slurm's words, and the CLI backend's own timeout
def test_rest_of_a_batch_is_not_sent_once_slurmctld_is_gone(error):
    fake, wrapped = _wrapped(1_000_000)
    sent: list[str] = []

    def gone(updates):
        sent.extend(u.job_id for u in updates)
        return [CommandResult(("scontrol",), False, 1, error) for _ in updates]

    fake.update_jobs = gone
    res = execute([Action("priority", str(i), value=str(10 + i)) for i in (1, 2, 3)], wrapped)
    assert sent == ["1"] and [o.ok for o in res] == [False] * 3
    assert [o.error for o in res[1:]] == [NOT_SENT, NOT_SENT]


def test_launcher_refuses_a_missing_count():
    script = Path(__file__).with_name("crashing_daemon.py")
    p = subprocess.run([sys.executable, str(script), "--once"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--crash-after" in p.stderr
