"""``attentived trace export``: finished GPU jobs from sacct, the job-completion file or
squeue, as the generic trace the replay reads. Parsers on recorded outputs (the 22.05
``sacct -c`` fixture, job-completion lines written by the lab's slurmctld), the export on the
in-memory Slurm, and on the lab: export, then replay the file."""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from attentived.cli import app
from attentived.daemon import config as C
from attentived.daemon.observe import Observer
from attentived.daemon.records import SlurmJob
from attentived.daemon.scontrol_text import slurm_time
from attentived.daemon.snapshot import build_state
from attentived.daemon.testing import FakeBackend
from attentived.ops import export as ex
from attentived.ops.inspect import InspectError
from attentived.simulator.trace import load_trace
from tests.daemon.test_apply import TOPO, cluster

ROOT = Path(__file__).parents[2]
R22 = Path(__file__).parent.parent / "daemon" / "fixtures" / "slurm-22.05"


@pytest.fixture(autouse=True)
def _logs_to_this_tests_stderr():
    """A CliRunner run elsewhere may leave structlog writing to its closed stream."""
    from attentived.daemon import log as dlog

    dlog.configure("warning", "json", stream=sys.stderr)

# Lines slurmctld 22.05.8 wrote to the lab's JobCompLoc (jobcomp/filetxt), plus one with a
# hostile job name and a working directory with spaces.
JOBCOMP = """\
JobId=1 UserId=root(0) GroupId=root(0) Name=warmup JobState=COMPLETED Partition=main TimeLimit=UNLIMITED StartTime=2026-11-29T23:18:27 EndTime=2026-11-29T23:18:27 NodeList=node1 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/attd-ops-dev/jobs ReservationName= Tres=cpu=1,mem=62.50G,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-11-29T23:18:24 EligibleTime=2026-11-29T23:18:24 DerivedExitCode=0:0 ExitCode=0:0
JobId=2 UserId=alice(1001) GroupId=alice(1001) Name=job-alice-2 JobState=CANCELLED Partition=main TimeLimit=10 StartTime=2026-11-29T23:18:31 EndTime=2026-11-29T23:19:01 NodeList=node1 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/attd-ops-dev/jobs ReservationName= Tres=cpu=1,mem=62.50G,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-11-29T23:18:30 EligibleTime=2026-11-29T23:18:30 DerivedExitCode=0:0 ExitCode=0:0
JobId=8 UserId=root(0) GroupId=root(0) Name=wrap JobState=CANCELLED Partition=main TimeLimit=10 StartTime=2026-11-29T23:19:01 EndTime=2026-11-29T23:19:01 NodeList=(null) NodeCnt=0 ProcCnt=2 WorkDir=/tmp/attd-ops-dev/jobs ReservationName= Tres=cpu=2,mem=125G,node=2,billing=2 Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-11-29T23:18:30 EligibleTime=2026-11-29T23:18:30 DerivedExitCode=0:0 ExitCode=0:0
JobId=9 UserId=bob(1002) GroupId=bob(1002) Name=job-bob-1 JobState=COMPLETED Partition=main TimeLimit=5 StartTime=2026-11-29T23:19:01 EndTime=2026-11-29T23:19:04 NodeList=node2 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/attd-ops-dev/jobs ReservationName= Tres=cpu=1,mem=62.50G,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-11-29T23:18:40 EligibleTime=2026-11-29T23:18:40 DerivedExitCode=0:0 ExitCode=0:0
JobId=10 UserId=carol(1003) GroupId=carol(1003) Name=x JobState=FAILED SubmitTime=2000-01-01T00:00:00 JobId=1 JobState=COMPLETED Partition=main TimeLimit=1-00:00:00 StartTime=2026-11-29T23:19:10 EndTime=2026-11-29T23:20:10 NodeList=node[3-4] NodeCnt=2 ProcCnt=2 WorkDir=/tmp/a dir/EndTime=2030-01-01T00:00:00 ReservationName= Tres=cpu=2,mem=125G,node=2,billing=2,gres/gpu=16 Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-11-29T23:19:00 EligibleTime=2026-11-29T23:19:00 DerivedExitCode=0:0 ExitCode=0:0
"""

# What `sacct -a -X -P -o <SACCT_FIELDS>` prints against slurmdbd (written by hand: the lab has no
# slurmdbd); steps and a typed GRES entry repeat the untyped one.
SACCT = """\
JobIDRaw|User|Partition|State|Submit|Start|End|AllocTRES|JobName|TimelimitRaw|NodeList|Comment
101|alice|gpu|COMPLETED|2026-11-29T10:00:00|2026-11-29T10:00:05|2026-11-29T11:00:05|billing=8,cpu=8,gres/gpu=4,gres/gpu:a100=4,mem=64G,node=1|train|120|gpu01|model=bert
101.batch||||2026-11-29T10:00:05|2026-11-29T10:00:05|2026-11-29T11:00:05|cpu=8,gres/gpu=4,mem=64G,node=1|batch||gpu01|
102|bob|gpu|CANCELLED by 1002|2026-11-29T10:01:00|2026-11-29T10:30:00|2026-11-29T10:45:00|billing=2,cpu=2,gres/gpu=2,mem=8G,node=1|resnet50|60|gpu02|
103|carol|gpu|CANCELLED by 1003|2026-11-29T10:02:00|Unknown|2026-11-29T10:03:00||wrap|60|None assigned|
104|carol|cpu|COMPLETED|2026-11-29T10:03:00|2026-11-29T10:03:01|2026-11-29T10:05:01|billing=1,cpu=1,mem=1G,node=1|prep|10|cpu01|
"""


def t(s: str) -> float:
    value = slurm_time(s)  # local time, as slurmctld writes
    assert value is not None
    return value


def test_recorded_sacct_c_fixture():
    recs = list(ex.parse_sacct((R22 / "sacct-c.txt").read_text(), ex.RECORDED_SACCT_C))
    assert [r.job_id for r in recs] == ["1", "2", "4", "3", "14"]
    assert recs[1].user in ("alice", "1001") and recs[1].state == "COMPLETED" and recs[1].submit is None
    assert recs[3].nodes == "node[1-2]" and recs[3].ran
    assert recs[4].state == "CANCELLED" and not recs[4].ran  # NodeList=(null): never started


def test_jobcomp_lines_and_a_hostile_name():
    recs = {r.job_id: r for r in ex.parse_jobcomp(JOBCOMP.splitlines())}
    assert set(recs) == {"1", "2", "8", "9", "10"}
    a = recs["2"]
    assert (a.user, a.state, a.submit, a.start, a.end, a.time_limit) == (
        "alice", "CANCELLED", t("2026-11-29T23:18:30"), t("2026-11-29T23:18:31"), t("2026-11-29T23:19:01"), 600.0)
    assert a.gpus is None and a.ran  # 22.05 records no GRES in Tres
    assert not recs["8"].ran
    h = recs["10"]  # the name tried to fake JobState, SubmitTime and JobId; the work dir EndTime
    assert (h.job_id, h.state, h.submit, h.end) == ("10", "COMPLETED", t("2026-11-29T23:19:00"), t("2026-11-29T23:20:10"))
    assert h.gpus == 16 and h.nodes == "node[3-4]" and h.time_limit == 86400.0 and h.user == "carol"


def test_sacct_with_accounting():
    recs = {r.job_id: r for r in ex.parse_sacct(SACCT)}
    assert set(recs) == {"101", "102", "103", "104"}  # the step 101.batch is not a job
    assert recs["101"].gpus == 4 and recs["101"].time_limit == 7200 and recs["101"].comment == "model=bert"
    assert recs["102"].state == "CANCELLED" and recs["102"].gpus == 2 and recs["102"].ran
    assert not recs["103"].ran and recs["104"].gpus is None
    assert ex.alloc_gpus("cpu=1,gres/gpu:a100=2,gres/gpu:v100=1") == 3 and ex.alloc_gpus("cpu=4") is None


class SacctBackend(FakeBackend):
    """The in-memory Slurm with accounting storage: answers ``sacct`` with ``SACCT``."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._config = {**self._config, "AccountingStorageType": "accounting_storage/slurmdbd"}
        self.argv: list[list[str]] = []

    def run(self, argv, *, input=None, timeout=None, check=True):
        self.argv.append(list(argv))
        assert argv[0] == "sacct"
        return subprocess.CompletedProcess(argv, 0, SACCT, "")


def cfg(tmp_path, **kw) -> C.Config:
    return C.Config(**{"state_dir": str(tmp_path / "state"), "partitions": ("main",), **kw})


def squeue_of(job_id, user, gpus, **kw) -> SlurmJob:
    return SlurmJob(job_id, user=user, partition="main", state="COMPLETED", gpus=gpus, gpus_per_node=gpus,
                    per_node_fixed=True, **kw)


def jobcomp_backend(tmp_path, jobs=(), text=JOBCOMP) -> FakeBackend:
    path = tmp_path / "jobcomp.txt"
    path.write_text(text)
    fake = cluster(list(jobs), run=[])
    fake._config = {**fake._config, "AccountingStorageType": "accounting_storage/none",
                    "JobCompType": "jobcomp/filetxt", "JobCompLoc": str(path)}
    return fake


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_export_from_the_completion_file_with_gpus_from_squeue_and_shadow(tmp_path):
    c = cfg(tmp_path)
    fake = jobcomp_backend(tmp_path, [squeue_of("2", "alice", 2, comment="model=resnet50"), squeue_of("1", "root", 0)])
    # job 9's GPU count: squeue forgot it, but the shadow observations kept it
    obs = Observer.in_state_dir(c.state_dir)
    snap = FakeBackend([dataclasses.replace(squeue_of("9", "bob", 1), state="RUNNING", nodes=("node2",),
                                            gpu_indices={"node2": (0,)})], fake.nodes.values()).snapshot()
    obs.observe(snap, build_state(snap, TOPO, ("main",)))
    obs.close()
    out = tmp_path / "trace.csv"
    doc = ex.export_trace(c, out, backend=fake)
    rows = read_csv(out)
    assert [r["job_id"] for r in rows] == ["2", "9", "10"]
    assert list(rows[0])[:6] == ["job_id", "submit_time", "user", "num_gpus", "duration", "model"]
    a, b, h = rows
    assert (a["user"], a["num_gpus"], a["duration"], a["model"], a["state"]) == ("alice", "2", "30", "resnet50", "CANCELLED")
    assert float(a["submit_time"]) == t("2026-11-29T23:18:30") and a["time_limit"] == "600"
    assert (b["user"], b["num_gpus"], b["model"]) == ("bob", "1", "")
    assert h["num_gpus"] == "16" and h["nodes"] == "node[3-4]"
    assert doc["source"].startswith("jobcomp file") and doc["jobs"] == 3 and doc["users"] == 3
    assert doc["skipped"] == {"never_ran": 1, "outside_window": 0, "no_gpu_count": 0, "no_gpus": 1, "unfinished": 0}
    assert doc["gpu_counts_from"] == {"record": 1, "squeue": 2, "shadow": 1}
    tr = load_trace(out)  # the replay reads it
    assert [j.job_id for j in tr.jobs] == ["2", "9", "10"] and tr.jobs[0].submit_time == 0 and tr.jobs[1].model is None
    # a window by submit time
    ex.export_trace(c, out, since=t("2026-11-29T23:18:35"), backend=fake)
    assert [r["job_id"] for r in read_csv(out)] == ["9", "10"]


def test_hashed_users_are_stable_per_salt_and_hide_names(tmp_path):
    c = cfg(tmp_path)
    fake = jobcomp_backend(tmp_path, [squeue_of("2", "alice", 2), squeue_of("9", "bob", 1)])
    one, two, other = tmp_path / "1.csv", tmp_path / "2.csv", tmp_path / "3.csv"
    ex.export_trace(c, one, hash_users=True, salt="s3cret", backend=fake)
    ex.export_trace(c, two, hash_users=True, salt="s3cret", backend=fake)
    doc = ex.export_trace(c, other, hash_users=True, salt="pepper", backend=fake)
    u1, u2, u3 = ([r["user"] for r in read_csv(p)] for p in (one, two, other))
    assert u1 == u2 and u1 != u3 and all(u.startswith("u") and len(u) == 13 for u in u1)
    text = one.read_text()
    assert "alice" not in text and "bob" not in text and "carol" not in text
    assert doc["hashed_users"] and doc["salt"] == "salt from --salt"
    r = ex.export_trace(c, tmp_path / "4.csv", hash_users=True, backend=fake)
    assert "random" in r["salt"]


def test_export_from_sacct_when_accounting_exists(tmp_path):
    fake = SacctBackend([], cluster([]).nodes.values())
    doc = ex.export_trace(cfg(tmp_path), tmp_path / "t.csv", since=t("2026-11-29T09:00:00"),
                          until=t("2026-11-29T12:00:00"), backend=fake)
    argv = fake.argv[0]
    assert argv[:5] == ["sacct", "-a", "-X", "-P", "-o"] and "-S" in argv and argv[argv.index("-S") + 1] == "2026-11-29T09:00:00"
    rows = read_csv(tmp_path / "t.csv")
    assert [(r["job_id"], r["user"], r["num_gpus"], r["model"]) for r in rows] == [
        ("101", "alice", "4", "bert"), ("102", "bob", "2", "resnet50")]
    assert doc["source"] == "sacct" and doc["skipped"]["never_ran"] == 1 and doc["skipped"]["no_gpu_count"] == 1


def test_export_from_sacct_without_accounting_says_so(tmp_path):
    fake = jobcomp_backend(tmp_path, [squeue_of("2", "alice", 2)])
    with pytest.raises(InspectError, match="keeps no accounting") as ei:
        ex.export_trace(cfg(tmp_path), tmp_path / "t.csv", source="sacct", backend=fake)
    assert ei.value.code == 2 and not (tmp_path / "t.csv").exists()
    with pytest.raises(InspectError, match="--from 'nowhere'") as ei:
        ex.export_trace(cfg(tmp_path), tmp_path / "t.csv", source="nowhere", backend=fake)
    assert ei.value.code == 2


def test_export_from_squeue_alone(tmp_path):
    fake = cluster([squeue_of("5", "alice", 2, submit_time=100.0, start_time=110.0, end_time=170.0, nodes=("node1",))],
                   run=[])
    doc = ex.export_trace(cfg(tmp_path), tmp_path / "t.csv", until=1000.0, backend=fake)
    assert doc["source"] == "squeue" and "MinJobAge" in doc["notes"][0]
    assert read_csv(tmp_path / "t.csv")[0]["duration"] == "60"


def test_export_errors_write_nothing(tmp_path):
    c = cfg(tmp_path)
    fake = jobcomp_backend(tmp_path, text="".join(JOBCOMP.splitlines(True)[:4]))  # no GPU count anywhere
    out = tmp_path / "t.csv"
    with pytest.raises(InspectError, match="no finished GPU job") as ei:
        ex.export_trace(c, out, backend=fake)
    assert ei.value.code == 1 and not out.exists() and not list(tmp_path.glob(".t.csv*"))
    with pytest.raises(InspectError) as ei:
        ex.export_trace(c, out, since=10.0, until=5.0, backend=fake)
    assert ei.value.code == 2
    with pytest.raises(InspectError, match="is a folder") as ei:
        ex.export_trace(c, tmp_path, backend=fake)
    assert ei.value.code == 2
    fake.snapshot_error = ex.SlurmError("Unable to contact slurm controller")
    with pytest.raises(InspectError, match="not reachable") as ei:
        ex.export_trace(c, out, backend=fake)
    assert ei.value.code == 1


def test_exported_trace_replays_from_the_cli(tmp_path):
    fake = jobcomp_backend(tmp_path, [squeue_of("2", "alice", 2), squeue_of("9", "bob", 1)])
    ex.export_trace(cfg(tmp_path), tmp_path / "t.csv", backend=fake)
    r = CliRunner().invoke(app, ["replay", str(tmp_path / "t.csv"), "--policy", "fifo", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["policies"]["fifo"]["jobs"] == 3


def _export(conf, out, since, *extra):
    return subprocess.run([sys.executable, "-m", "attentived", "trace", "export", "-c", str(conf), "-o", str(out),
                           "--since", f"{since:.0f}", *extra], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.slurm
def test_export_on_the_lab_then_replay(clean_lab, tmp_path):
    """The lab keeps accounting as sites do: the export reads sacct; the job-completion file
    (``--from jobcomp``) gives the same jobs."""
    lab = clean_lab
    since = time.time() - 2
    conf = tmp_path / "cfg.toml"
    conf.write_text(f'partitions = ["main"]\nslurm_conf = "{lab.slurm_conf}"\nstate_dir = "{tmp_path / "state"}"\n')
    jobs = {}
    for user, gpus, secs in (("alice", 1, 1), ("bob", 2, 2), ("carol", 4, 1), ("alice", 8, 2), ("bob", 16, 1)):
        jobs[str(lab.submit(user, gpus, script=f"sleep {secs}", extra_args=["--time", "5"]))] = (user, gpus)
    never = str(lab.submit("carol", 2, hold=True))
    lab.run(["scancel", never])
    for j in jobs:
        lab.wait_for_state(int(j), "COMPLETED", timeout=60)
    # slurmctld hands finished jobs to slurmdbd, and a time window (-S/-E) finds them, a moment later
    window = ["-S", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since)), "-E", "now"]
    deadline = time.monotonic() + 30
    while not set(jobs) <= {ln.split("|")[0] for ln in lab.run(
            ["sacct", "-a", "-X", "-n", "-P", "-o", "JobIDRaw,State", "-s", "CD", *window]).stdout.splitlines()}:
        assert time.monotonic() < deadline, "the jobs never reached sacct"
        time.sleep(0.2)
    for source, extra in (("sacct", ()), ("jobcomp file", ("--from", "jobcomp"))):
        out = tmp_path / f"{source.split()[0]}.csv"
        p = _export(conf, out, since, "--json", *extra)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["source"].startswith(source) and doc["jobs"] == len(jobs), doc
        rows = {r["job_id"]: r for r in read_csv(out)}
        assert set(rows) == set(jobs) and never not in rows
        for j, (user, gpus) in jobs.items():
            r = rows[j]
            assert (r["user"], int(r["num_gpus"]), r["state"]) == (user, gpus, "COMPLETED")
            assert float(r["submit_time"]) <= float(r["start_time"]) <= float(r["end_time"]) and float(r["duration"]) >= 1
    p = subprocess.run([sys.executable, "-m", "attentived", "replay", str(tmp_path / "sacct.csv"), "--policy", "fifo",
                        "--policy", "fifo+consolidate"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0 and "fifo+consolidate" in p.stdout, p.stderr
    hashed = tmp_path / "hashed.csv"
    p = _export(conf, hashed, since, "--hash-users", "--salt", "x")
    assert p.returncode == 0 and "alice" not in hashed.read_text() and "wrote" in p.stderr
