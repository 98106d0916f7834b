"""The bookkeeping of jobs Slurm refuses to update until slurmdbd registers them
(daemon/unregistered.py), without Slurm: the stand-in ``scontrol`` of test_backend.py
refuses every job 88xxx as Slurm 22.05 does ("the DB index is being set") and takes the
others. The same on the real lab: test_unregistered_slurm.py."""

from __future__ import annotations

from pathlib import Path

from attentived.daemon.apply import Action, Outcome
from attentived.daemon.records import SlurmJob
from attentived.daemon.unregistered import Unregistered, probe_update

from .test_backend import FIX, _argv_log, _stubs

REFUSED = "Job update not available right now, the DB index is being set, try again in a bit for job 88001"


def test_an_update_refused_for_the_db_index_is_not_a_failure():
    refused = Outcome(Action("priority", "88001", value="5"), False, REFUSED)
    other = Outcome(Action("priority", "5", value="5"), False, "Invalid job id specified")
    raced = Outcome(Action("priority", "88002", value="5"), False, REFUSED, overtaken=True)
    assert refused.unregistered and not other.unregistered and not raced.unregistered
    assert not Outcome(Action("priority", "88001", value="5"), True).unregistered


def test_noted_jobs_are_left_out_until_they_leave_the_queue():
    u = Unregistered(retry=60)
    assert u.note(["9", "10", "9"], now=100.0) == ["10", "9"]
    assert u.note(["10", "11"], now=105.0) == ["11"]
    assert u.leave_out() == {"9", "10", "11"} and u.next_probe == 160.0  # the first refusal sets the clock
    assert u.forget_gone(["10", "11", "12"]) == ["9"]
    assert u.leave_out() == {"10", "11"} and u.next_probe == 160.0
    assert u.forget_gone([]) == ["10", "11"]
    assert u.leave_out() == frozenset() and u.next_probe == 0.0


def test_probe_waits_for_retry_then_stops_at_the_first_job_still_refused(tmp_path, monkeypatch):
    be, log = _stubs(tmp_path, "22.05.8", FIX / "slurm-22.05", monkeypatch)
    jobs = {j: SlurmJob(j, excluded_nodes=("node4",) if j == "7" else ()) for j in ("5", "7", "88001", "88002")}
    u = Unregistered(retry=30)
    u.note(["7"], now=0.0)
    u.note(["88002", "88001"], now=1.0)
    u.note(["5"], now=2.0)
    assert u.probe(be, jobs, now=29.0) == [] and not _argv_log(log)  # not due
    # oldest refusal first (job ids in number order within one time); 88001 is still refused
    assert u.probe(be, jobs, now=30.0) == ["7"]
    probes = [a for a in _argv_log(log) if a[:2] == ["scontrol", "update"]]
    assert probes == [["scontrol", "update", "JobId=7", "ExcNodeList=node4"],
                      ["scontrol", "update", "JobId=88001", "ExcNodeList="]]
    assert u.leave_out() == {"88001", "88002", "5"} and u.next_probe == 60.0
    assert Path(f"{log}.times").read_text().count("start") == 1


def test_probe_writes_back_the_jobs_own_exclusions():
    assert probe_update(SlurmJob("12", excluded_nodes=("node3", "node4"))).args() == [
        "update", "JobId=12", "ExcNodeList=node3,node4"]
    assert probe_update(SlurmJob("13")).args() == ["update", "JobId=13", "ExcNodeList="]
