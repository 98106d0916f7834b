"""The cli backend without Slurm: stand-in ``squeue``/``sinfo``/``scontrol`` programs in a
temporary bin dir replay the recorded outputs and log the argv they were given."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from attentived.daemon import slurm_json
from attentived.daemon.cli_backend import CliBackend
from attentived.daemon.connect import make_backend
from attentived.daemon.records import (
    NOT_SENT,
    JobUpdate,
    SlurmCommandError,
    SlurmParseError,
    SlurmUnavailable,
    SlurmVersion,
    check_name,
)

FIX = Path(__file__).parent / "fixtures"

STUB = r"""#!/bin/bash
# stand-in for a Slurm command: log argv (one JSON list per line, in one write: the backend
# runs commands in parallel, and an unbuffered print writes the newline separately), answer
# from fixtures
python3 -c 'import json,sys; sys.stdout.write(json.dumps(sys.argv[1:]) + "\n")' "$(basename "$0")" "$@" >> "$STUB_LOG"
name=$(basename "$0")
case "$name $*" in
  "scontrol --version") echo "slurm $STUB_VERSION" ;;
  "squeue --json -t all") cat "$STUB_FIX/squeue.json" ;;
  "squeue --json=v0.0.44 -t all") cat "$STUB_FIX/squeue.json" ;;
  "sinfo --json") cat "$STUB_FIX/sinfo.json" ;;
  "scontrol show nodes --json") cat "$STUB_FIX/scontrol-show-nodes.json" ;;
  "scontrol show reservation --json") cat "$STUB_FIX/scontrol-show-reservation.json" ;;
  "scontrol -o show reservation") cat "$STUB_FIX/scontrol-show-reservation.txt" ;;
  "scontrol show config") cat "$STUB_FIX/scontrol-show-config.txt" ;;
  "scontrol -a -o show partition") echo "PartitionName=other Default=NO"; echo "PartitionName=main Default=YES" ;;
  "scontrol sleep") sleep 5 ;;
  "scontrol ") rc=0
     while IFS= read -r line; do
       echo "stdin: $line" >> "$STUB_LOG"
       echo "scontrol: $line"
       case "$line" in *JobId=99999*) echo "Invalid job id specified for job 99999" >&2; rc=1 ;; esac
       case "$line" in *JobId=77777*) echo "Unexpected message" >&2; rc=1 ;; esac
       case "$line" in *JobId=88*) sleep 1 ;; esac
       case "$line" in *JobId=666*) echo "Unable to contact slurm controller (connect failure)" >&2; rc=1 ;; esac
     done; exit $rc ;;
  "scontrol update JobId=77777"*) echo "Unexpected message" >&2; exit 1 ;;
  "scontrol update JobId=99999"*) echo "Invalid job id specified for job 99999" >&2; exit 1 ;;
  "scontrol update JobId=88"*) echo "start $(date +%s.%N)" >> "$STUB_LOG.times"; sleep 1
     echo "end $(date +%s.%N)" >> "$STUB_LOG.times"
     echo "Job update not available right now, the DB index is being set, try again in a bit for job ${2#JobId=}" >&2; exit 1 ;;
  "scontrol update JobId=666"*) sleep 0.5; echo "Unable to contact slurm controller (connect failure)" >&2; exit 1 ;;
  scontrol*) exit 0 ;;
  *) echo "stub: unexpected $name $*" >&2; exit 2 ;;
esac
"""


def _stubs(tmp_path: Path, version: str, fixtures: Path, monkeypatch) -> tuple[CliBackend, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("squeue", "sinfo", "scontrol"):
        p = bin_dir / name
        p.write_text(STUB)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "argv.log"
    log.touch()
    monkeypatch.setenv("STUB_LOG", str(log))
    monkeypatch.setenv("STUB_VERSION", version)
    monkeypatch.setenv("STUB_FIX", str(fixtures))
    return CliBackend(bin_dir=str(bin_dir), timeout=2, slurm_conf="/etc/x/slurm.conf"), log


def _argv_log(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("[")]


def test_snapshot_22_05_uses_sinfo_and_scontrol_text(tmp_path, monkeypatch):
    be, log = _stubs(tmp_path, "22.05.8", FIX / "slurm-22.05", monkeypatch)
    snap = be.snapshot()
    assert snap.version == SlurmVersion(22, 5, 8)
    assert len(snap.jobs) == 14 and len(snap.nodes) == 4 and {r.name for r in snap.reservations} == {"alice_now", "maint_later"}
    calls = _argv_log(log)
    assert ["scontrol", "--version"] in calls and ["sinfo", "--json"] in calls
    assert ["scontrol", "-o", "show", "reservation"] in calls and ["squeue", "--json", "-t", "all"] in calls
    assert be.config()["SchedulerType"] == "sched/builtin" and [p.name for p in be.partitions() if p.default] == ["main"]
    be.close()


def test_snapshot_24_11_uses_scontrol_json(tmp_path, monkeypatch):
    be, log = _stubs(tmp_path, "24.11.5", FIX / "slurm-24.11", monkeypatch)
    snap = be.snapshot()
    assert snap.version == SlurmVersion(24, 11, 5)
    assert {n.name for n in snap.nodes} == {"node1", "node2", "node3", "node4"}
    assert [r.name for r in snap.reservations] == ["alice_now", "maint_later"]
    assert ["scontrol", "show", "nodes", "--json"] in _argv_log(log)
    assert "read_jobs" in snap.timings


def test_snapshot_26_05_asks_squeue_for_the_format_that_says_which_jobs_keep_nodes(tmp_path, monkeypatch):
    """26.05's own JSON (data_parser v0.0.45) prints ``"shared": []`` for every job: recorded
    for jobs under ``--exclusive``, ``--exclusive=user`` and partitions keeping nodes apart,
    which the daemon would read as sharing. Its v0.0.44 says it, so that is what is read."""
    be, log = _stubs(tmp_path, "26.05.5", FIX / "slurm-26.05", monkeypatch)
    snap = be.snapshot()
    assert snap.version == SlurmVersion(26, 5, 5) and len(snap.jobs) == 14
    calls = _argv_log(log)
    assert ["squeue", "--json=v0.0.44", "-t", "all"] in calls and ["squeue", "--json", "-t", "all"] not in calls
    assert ["scontrol", "show", "nodes", "--json"] in calls
    own, read = (slurm_json.parse_squeue((FIX / "slurm-26.05" / name).read_text()).jobs
                 for name in ("squeue-exclusive-own-format.json", "squeue-exclusive.json"))
    assert [j.job_id for j in own] == [j.job_id for j in read]
    assert not any(j.exclusive for j in own) and sum(j.exclusive for j in read) == 5
    assert SlurmVersion(25, 11).squeue_json == SlurmVersion(24, 11).squeue_json == "--json"


def test_batched_updates_go_through_stdin_and_failures_map_to_jobs(tmp_path, monkeypatch):
    be, log = _stubs(tmp_path, "22.05.8", FIX / "slurm-22.05", monkeypatch)
    ups = [JobUpdate("5", (("Priority", "100"),)), JobUpdate("99999", (("Priority", "5"),)),
           JobUpdate("6", (("ReqNodeList", "node1,node2"), ("Priority", "90"))), JobUpdate("7", (("ReqNodeList", ""),))]
    res = be.update_jobs(ups)
    assert [r.ok for r in res] == [True, False, True, True]
    assert "Invalid job id" in res[1].error and res[1].argv[-2:] == ("JobId=99999", "Priority=5")
    text = log.read_text()
    assert "stdin: update JobId=6 ReqNodeList=node1,node2 Priority=90" in text
    assert "stdin: update JobId=7 ReqNodeList=" in text
    assert _argv_log(log).count(["scontrol"]) == 1  # one process for the batch


def test_unmapped_batch_error_retries_each_update_alone(tmp_path, monkeypatch):
    be, log = _stubs(tmp_path, "22.05.8", FIX / "slurm-22.05", monkeypatch)
    res = be.update_jobs([JobUpdate("5", (("Priority", "100"),)), JobUpdate("77777", (("Priority", "5"),))])
    assert [r.ok for r in res] == [True, False] and "Unexpected" in res[1].error
    assert ["scontrol", "update", "JobId=5", "Priority=100"] in _argv_log(log)


def test_batch_without_answer_in_time_retries_jobs_side_by_side(tmp_path, monkeypatch):
    # Slurm before 24.11 holds each update of a job slurmdbd has not registered for 5 s (1 s
    # here) and refuses it: the batch runs out of time (2 s), and the updates retried alone
    # run side by side, each job's own in order
    be, log = _stubs(tmp_path, "22.05.8", FIX / "slurm-22.05", monkeypatch)
    ups = [JobUpdate(str(88001 + i), (("Priority", str(10 + i)),)) for i in range(4)]
    res = be.update_jobs(ups)
    assert [r.ok for r in res] == [False] * 4
    assert all(r.error.endswith(f"for job {u.job_id}") and "DB index is being set" in r.error for r, u in zip(res, ups))
    times = [line.split() for line in Path(f"{log}.times").read_text().splitlines()]
    starts = [float(t) for kind, t in times if kind == "start"]
    ends = [float(t) for kind, t in times if kind == "end"]
    assert len(starts) == 4 and max(starts) < min(ends)  # all four were in Slurm at once


def test_updates_retried_alone_stop_once_slurmctld_is_gone(tmp_path, monkeypatch):
    be, log = _stubs(tmp_path, "22.05.8", FIX / "slurm-22.05", monkeypatch)
    ups = [JobUpdate(str(66601 + i), (("Priority", "5"),)) for i in range(12)]
    res = be.update_jobs(ups)
    singles = [a for a in _argv_log(log) if a[:2] == ["scontrol", "update"]]
    assert not any(r.ok for r in res)
    assert 1 <= len(singles) <= 8  # the first round (8 at a time) shows slurmctld gone: no second round
    assert sum(r.error == NOT_SENT for r in res) == 12 - len(singles)


def test_errors_carry_argv_rc_and_stderr(tmp_path, monkeypatch):
    be, _log = _stubs(tmp_path, "22.05.8", FIX / "slurm-22.05", monkeypatch)
    with pytest.raises(SlurmCommandError) as info:
        be.run(["sinfo", "--bogus"])
    e = info.value
    assert e.argv[-1] == "--bogus" and e.rc == 2 and "unexpected" in e.stderr and "exit 2" in str(e)
    with pytest.raises(SlurmCommandError, match="timed out") as info:
        be.run(["scontrol", "sleep"], timeout=0.3)
    assert info.value.rc is None
    r = be.set_priority("99999", 5)
    assert not r.ok and r.rc == 1 and "Invalid job id" in r.stderr
    with pytest.raises(SlurmUnavailable, match="command not found"):
        CliBackend(bin_dir=str(tmp_path / "nowhere")).run(["squeue"])


def test_reservation_commands(tmp_path, monkeypatch):
    be, log = _stubs(tmp_path, "22.05.8", FIX / "slurm-22.05", monkeypatch)
    assert be.create_reservation("attentived-12", ["node3", "node4"], ["bob"], 15, True).ok
    assert be.update_reservation("attentived-12", Duration="30", Nodes="node3").ok
    assert be.update_reservation("attentived-12", EndTime="now").ok
    assert be.delete_reservation("attentived-12").ok and be.hold(["5", "6"]).ok and be.release(["5"]).ok
    assert be.pin("5", ["node1"]).ok and be.unpin("5").ok and be.attach("5", "attentived-5").ok and be.detach("5").ok
    calls = _argv_log(log)
    assert ["scontrol", "create", "reservation", "ReservationName=attentived-12", "Nodes=node3,node4", "Users=bob",
            "StartTime=now", "Duration=15", "Flags=IGNORE_JOBS,NO_HOLD_JOBS_AFTER"] in calls
    # every update adds the flag too: a reservation made before it was must not hold its jobs when it ends
    assert ["scontrol", "update", "ReservationName=attentived-12", "EndTime=now", "Flags=NO_HOLD_JOBS_AFTER"] in calls
    assert ["scontrol", "update", "ReservationName=attentived-12", "Duration=30", "Nodes=node3",
            "Flags=NO_HOLD_JOBS_AFTER"] in calls
    assert ["scontrol", "hold", "5,6"] in calls and ["scontrol", "update", "JobId=5", "ReqNodeList="] in calls


@pytest.mark.parametrize("bad", ["node1;reboot", "$(x)", "a b", "", "n\n1", "../etc", "-rf"])
def test_values_that_could_reach_a_command_line_are_refused(bad):
    with pytest.raises(ValueError):
        check_name(bad, "node name")
    with pytest.raises(ValueError):
        JobUpdate("5", (("ReqNodeList", bad or ","),))
    with pytest.raises(ValueError):
        CliBackend().create_reservation("r", ["node1"], [bad or " "], 5, False)
    with pytest.raises(ValueError):
        CliBackend().update_reservation("r", Nodes=bad or ",")


def test_job_update_validation():
    for job_id in ("5;x", "-1", "5 6", "", "1_2"):
        with pytest.raises(ValueError):
            JobUpdate(job_id, (("Priority", "1"),))
    with pytest.raises(ValueError):
        JobUpdate("5", (("Command", "x"),))
    with pytest.raises(ValueError):
        JobUpdate("5", (("Priority", "1; x"),))
    with pytest.raises(ValueError):
        CliBackend().set_priority("5", 0)  # 0 would hold the job
    with pytest.raises(ValueError):
        CliBackend().update_reservation("r", Duration="1h")
    with pytest.raises(ValueError):
        CliBackend().update_reservation("r", Flags="IGNORE_JOBS;x")


def test_make_backend():
    assert make_backend("cli").name == "cli"
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend("rest")
    try:
        import pyslurm  # noqa: F401
    except Exception:
        with pytest.raises(SlurmUnavailable, match="pyslurm"):
            make_backend("pyslurm")


def test_parse_errors_surface_from_snapshot(tmp_path, monkeypatch):
    bad = tmp_path / "fix"
    bad.mkdir()
    for f in (FIX / "slurm-22.05").iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    (bad / "squeue.json").write_text((FIX / "slurm-22.05" / "squeue.json").read_text()[:5000])
    be, _ = _stubs(tmp_path, "22.05.8", bad, monkeypatch)
    with pytest.raises(SlurmParseError, match="truncated"):
        be.snapshot()
    assert os.environ["STUB_VERSION"] == "22.05.8"
