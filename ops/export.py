"""``attentived trace export``: the site's finished GPU jobs as a trace the simulator replays.

Where the jobs come from (``--from``; ``auto``, the default, takes the first that exists):

1. **accounting** (``AccountingStorageType`` is not ``accounting_storage/none``):
   ``sacct -a -X -P -o JobIDRaw,User,...,AllocTRES`` over the window; GPUs from
   ``AllocTRES`` (``gres/gpu=N``).
2. **the job-completion file** (``JobCompType=jobcomp/filetxt``, path ``JobCompLoc``): read
   directly, because ``sacct -c`` (the same file through sacct) reports the start time as
   the submit time on Slurm 22.05 (checked on the lab: ``Submit`` = ``Start`` for every job),
   which would make every wait zero. When the file cannot be read directly, ``sacct -c`` is
   the fallback and the summary says that waits are lost.
3. **slurmctld's memory**: the finished jobs ``squeue --json -t all`` still shows
   (``MinJobAge``).

The job-completion file records no GRES on 22.05 (``Tres=cpu=..,mem=..,node=..``), so GPU
counts come from ``squeue --json`` while slurmctld remembers the job, and from the shadow
observations (``<state_dir>/shadow.sqlite``) when the daemon watched it; a job whose GPU
count no source knows is skipped and counted. Only jobs that ran (a start, an end, nodes)
with at least one GPU are written; a job shorter than one second counts one second.

The file is the generic CSV the replay reads (``job_id,submit_time,user,num_gpus,
duration[,model]``, times in Unix seconds; the loader re-bases them), plus
``start_time,end_time,state,partition,time_limit,nodes`` that the loader ignores and
training can use. ``model`` is written only when the job names a known speed profile
(``model=NAME`` in its comment, or a job name that is a profile name). Users are kept, or
with ``hash_users`` replaced by ``u`` + 12 hex digits of BLAKE2b(salt, user): the same
salt (``--salt`` / ``$ATTENTIVED_TRACE_SALT``) gives the same names across exports; without
one a random salt is used and not stored. The file is written to a temporary name beside
the target and renamed: a failed export leaves nothing behind.
"""

from __future__ import annotations

import csv
import hashlib
import os
import pwd
import re
import secrets
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from attentived.daemon import config as cfgmod
from attentived.daemon.backend import Backend
from attentived.daemon.checks import keeps_accounting
from attentived.daemon.records import SlurmError, SlurmJob
from attentived.daemon.scontrol_text import parse_line, slurm_duration, slurm_time
from attentived.daemon.slurm_json import tres_gpus
from attentived.daemon.snapshot import job_model
from attentived.topology.speed import load_profiles

from . import inspect as _inspect
from .inspect import InspectError

HEADER = ("job_id", "submit_time", "user", "num_gpus", "duration", "model", "start_time", "end_time", "state",
          "partition", "time_limit", "nodes")

#: Keys of a ``jobcomp/filetxt`` line in the order slurmctld writes them (22.05 .. 24.11).
JOBCOMP_ORDER = ("JobId", "UserId", "GroupId", "Name", "JobState", "Partition", "TimeLimit", "StartTime", "EndTime",
                 "NodeList", "NodeCnt", "ProcCnt", "WorkDir", "ReservationName", "Tres", "Account", "QOS", "WcKey",
                 "Cluster", "SubmitTime", "EligibleTime", "ArrayJobId", "ArrayTaskId", "DerivedExitCode", "ExitCode")
_JOBCOMP_FREE = frozenset({"Name", "WorkDir"})

SACCT_FIELDS = ("JobIDRaw", "User", "Partition", "State", "Submit", "Start", "End", "AllocTRES", "JobName",
                "TimelimitRaw", "NodeList", "Comment")
SACCT_C_FIELDS = ("JobID", "UID", "User", "JobName", "Partition", "State", "Submit", "Start", "End", "NodeList",
                  "Timelimit")
#: The columns of the recorded fixture ``tests/daemon/fixtures/slurm-22.05/sacct-c.txt``.
RECORDED_SACCT_C = ("JobID", "UID", "JobName", "Partition", "State", "Start", "End", "NodeList")


@dataclass(frozen=True)
class Finished:
    """One finished job as a source reports it (``gpus`` None: the source does not say)."""

    job_id: str
    user: str
    submit: float | None
    start: float | None
    end: float | None
    state: str
    partition: str = ""
    nodes: str = ""
    gpus: int | None = None
    time_limit: float | None = None
    name: str = ""
    comment: str = ""
    source: str = ""

    @property
    def ran(self) -> bool:
        return (self.start is not None and self.end is not None and self.end >= self.start
                and self.nodes not in ("", "(null)", "None", "None assigned"))


# ---- parsers (pure, tested on recorded and written outputs) --------------------------------------


def _user(text: str) -> str:
    """``alice(1001)`` -> ``alice``; a bare uid -> its name when this host knows it."""
    text = text.strip()
    m = re.fullmatch(r"([^()\s]*)\((\d+)\)", text)
    if m:
        return m.group(1) or m.group(2)
    if text.isdigit():
        try:
            return pwd.getpwuid(int(text)).pw_name
        except KeyError:
            return text
    return text


def _time(text: str) -> float | None:
    try:
        return slurm_time(text)
    except SlurmError:
        return None


def _limit(text: str, minutes: bool = False) -> float | None:
    text = (text or "").strip()
    if minutes:
        return float(text) * 60 if text.isdigit() else None
    try:
        return slurm_duration(text)
    except SlurmError:
        return None


def alloc_gpus(tres: str) -> int | None:
    """GPUs in an ``AllocTRES``/``Tres`` string; ``None`` when it names no GPU at all.
    ``gres/gpu=4,gres/gpu:h100=4`` counts 4 (the typed entry repeats the untyped one)."""
    if "gpu" not in tres:
        return None
    untyped = re.search(r"(?:^|,)gres/gpu=(\d+)", tres)
    if untyped:
        return int(untyped.group(1))
    return tres_gpus(tres)


# The fixed part of a jobcomp/filetxt line. Name and WorkDir are free text (user-controlled, may
# hold spaces and "Key=" words): the greedy groups end at the *last* place where the rest of the
# line still has the real layout, so text inside them cannot fake a later field.
_JOBCOMP_LINE = re.compile(
    r"^JobId=(?P<JobId>\d+) UserId=(?P<UserId>\S*) GroupId=(?P<GroupId>\S*) Name=(?P<Name>.*)"
    r" JobState=(?P<JobState>\S+) Partition=(?P<Partition>\S*) TimeLimit=(?P<TimeLimit>\S*)"
    r" StartTime=(?P<StartTime>\S*) EndTime=(?P<EndTime>\S*) NodeList=(?P<NodeList>\S*)"
    r" NodeCnt=(?P<NodeCnt>\S*) ProcCnt=(?P<ProcCnt>\S*) WorkDir=(?P<WorkDir>.*)"
    r" ReservationName=(?P<ReservationName>\S*) Tres=(?P<Tres>\S*)(?P<rest>(?: \S+)*) ?$")


def _jobcomp_fields(line: str) -> dict[str, str]:
    m = _JOBCOMP_LINE.match(line)
    if m is None:  # another layout: key order still guards the free-text fields
        return parse_line(line, order=JOBCOMP_ORDER, free_text=_JOBCOMP_FREE)
    d = {k: v for k, v in m.groupdict().items() if k != "rest"}
    for word in (m.group("rest") or "").split():
        k, sep, v = word.partition("=")
        if sep:
            d[k] = v  # later wins: SubmitTime etc. come after the user-settable WcKey
    return d


def parse_jobcomp(lines: Iterable[str], source: str = "jobcomp") -> Iterator[Finished]:
    """Records of a ``jobcomp/filetxt`` file (one ``Key=Value ...`` line per job). A job name
    or working directory that contains ``Key=`` text cannot fake a field."""
    for line in lines:
        line = line.rstrip("\n")
        if not line.startswith("JobId="):
            continue
        d = _jobcomp_fields(line)
        jid = d.get("JobId", "").strip()
        if not jid.isdigit():
            continue
        yield Finished(
            job_id=jid, user=_user(d.get("UserId", "")), submit=_time(d.get("SubmitTime", "")),
            start=_time(d.get("StartTime", "")), end=_time(d.get("EndTime", "")),
            state=d.get("JobState", "").split()[0] if d.get("JobState") else "", partition=d.get("Partition", ""),
            nodes=d.get("NodeList", "").strip(), gpus=alloc_gpus(d.get("Tres", "")),
            time_limit=_limit(d.get("TimeLimit", "")), name=(d.get("Name") or "").strip(), source=source)


def parse_sacct(text: str, fields: tuple[str, ...] | None = None, source: str = "sacct") -> Iterator[Finished]:
    """``sacct -P`` output (``|``-separated). ``fields`` names the columns when the output
    has no header (``-n``); otherwise the first line is the header."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if fields is None:
        if not lines:
            return
        fields = tuple(h.strip() for h in lines[0].split("|"))
        lines = lines[1:]
    idx = {f.lower(): i for i, f in enumerate(fields)}

    def get(row: list[str], *names: str) -> str:
        for n in names:
            i = idx.get(n.lower())
            if i is not None and i < len(row):
                return row[i]
        return ""

    for line in lines:
        row = line.split("|")
        if len(row) < len(fields):
            continue
        jid = get(row, "JobIDRaw", "JobID").strip()
        if not jid.isdigit():  # steps (12.batch) and array/het labels are not jobs
            continue
        user = get(row, "User").strip() or _user(get(row, "UID"))
        tl_raw = get(row, "TimelimitRaw")
        yield Finished(
            job_id=jid, user=_user(user), submit=_time(get(row, "Submit")) if "submit" in idx else None,
            start=_time(get(row, "Start")), end=_time(get(row, "End")),
            state=(get(row, "State").split() or [""])[0], partition=get(row, "Partition"),
            nodes=get(row, "NodeList").strip(), gpus=alloc_gpus(get(row, "AllocTRES")) if "alloctres" in idx else None,
            time_limit=_limit(tl_raw, minutes=True) if "timelimitraw" in idx else _limit(get(row, "Timelimit")),
            name=get(row, "JobName"), comment=get(row, "Comment"), source=source)


def from_squeue(jobs: Iterable[SlurmJob]) -> Iterator[Finished]:
    """Finished jobs slurmctld still shows (``MinJobAge``)."""
    for j in jobs:
        if j.finished:
            yield Finished(j.job_id, j.user, j.submit_time, j.start_time, j.end_time, j.state, j.partition,
                           ",".join(j.nodes), j.gpus, j.time_limit, j.name, j.comment, "squeue")


# ---- users and models -----------------------------------------------------------------------------


def hash_user(user: str, salt: str) -> str:
    return "u" + hashlib.blake2b(user.encode(), key=salt.encode()[:64], digest_size=6).hexdigest()


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _model(f: Finished, known: dict[str, str], squeue_job: SlurmJob | None) -> str:
    """A speed-profile name the job declared, or "" (the replay then draws one)."""
    candidates = []
    if squeue_job is not None:
        candidates.append(job_model(squeue_job) or "")
    candidates.append(job_model(SlurmJob(f.job_id, name=f.name, comment=f.comment)) or "")
    for c in candidates:
        if c and _norm(c) in known:
            return known[_norm(c)]
    return ""


# ---- the export -------------------------------------------------------------------------------------


#: sacct's short names of the states a job ends in (a trace holds finished jobs only).
ENDED_STATES = "BF,CA,CD,DL,F,NF,OOM,PR,TO"
#: ``--from``: where the finished jobs come from; ``auto`` takes the first that exists.
SOURCES = ("auto", "sacct", "jobcomp", "squeue")


def _from_sacct(backend: Backend, conf: dict[str, str], since: float | None) -> list[Finished]:
    acct = conf.get("AccountingStorageType", "")
    if not keeps_accounting(acct):
        raise InspectError(f"--from sacct: this Slurm keeps no accounting (AccountingStorageType={acct or '(none)'}); "
                           "use --from jobcomp or --from squeue", 2)
    run = getattr(backend, "run", None)
    if run is None:
        raise InspectError("sacct: this backend runs no Slurm commands", 2)
    # from the epoch's first second: sacct takes the epoch itself (0) for "not given", and then,
    # with -s, finds nothing
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since if since is not None else 1))
    # -s: jobs that ended from --since until now (without it slurmdbd selects by eligibility
    # and, on the lab (22.05), missed jobs that had ended a second or two before the query);
    # the export keeps those submitted before --until, however late they ended
    argv = ["sacct", "-a", "-X", "-P", "-o", ",".join(SACCT_FIELDS), "-s", ENDED_STATES, "-S", start, "-E", "now"]
    try:
        proc = run(argv, timeout=600, check=False)
    except SlurmError as e:
        raise InspectError(f"sacct did not answer: {e}") from None
    records = list(parse_sacct(proc.stdout, source="sacct")) if proc.returncode == 0 else []
    # a down slurmdbd makes sacct exit 1, but a down database behind a live slurmdbd exits 0
    # with an empty answer: both say so only on stderr, with "error" lines
    errors = [ln.strip() for ln in (proc.stderr or "").splitlines() if "error" in ln.lower()]
    if proc.returncode != 0 or (not records and errors):
        why = errors[-1] if errors else f"sacct exit {proc.returncode}"
        raise InspectError(f"sacct could not read the accounting database: {why} (slurmdbd or its database "
                           "is down?); `--from jobcomp` exports from the job-completion file instead")
    return records


def _from_jobcomp(backend: Backend, conf: dict[str, str], notes: list[str]) -> tuple[str, list[Finished]]:
    if conf.get("JobCompType") != "jobcomp/filetxt" or not conf.get("JobCompLoc"):
        raise InspectError(f"no job-completion file: JobCompType={conf.get('JobCompType') or '(none)'} "
                           "(needs jobcomp/filetxt and JobCompLoc)", 2)
    path = Path(conf["JobCompLoc"])
    run = getattr(backend, "run", None)
    try:
        with path.open(errors="replace") as fh:
            return f"jobcomp file {path}", list(parse_jobcomp(fh, source="jobcomp"))
    except OSError as e:
        if run is None:
            raise InspectError(f"{path}: cannot read the job-completion file: {e}") from None
        notes.append(f"{path}: {e.strerror}; read through `sacct -c` instead, which reports no submit times "
                     "(waits are taken from squeue where it still knows the job, else zero)")
        proc = run(["sacct", "-c", "-P", "-o", ",".join(SACCT_C_FIELDS)], timeout=600)
        return "sacct -c", list(parse_sacct(proc.stdout, source="sacct -c"))


def _sources(backend: Backend, conf: dict[str, str], since: float | None, source: str) -> tuple[str, list[Finished], list[str]]:
    notes: list[str] = []
    has_acct = keeps_accounting(conf.get("AccountingStorageType", "")) and getattr(backend, "run", None) is not None
    if source == "sacct" or (source == "auto" and has_acct):
        return "sacct", _from_sacct(backend, conf, since), notes
    if source == "jobcomp" or (source == "auto" and conf.get("JobCompType") == "jobcomp/filetxt" and conf.get("JobCompLoc")):
        name, records = _from_jobcomp(backend, conf, notes)
        return name, records, notes
    why = "no accounting storage and no jobcomp/filetxt: " if source == "auto" else ""
    notes.append(f"{why}only the finished jobs slurmctld still remembers (MinJobAge={conf.get('MinJobAge', '?')} s) "
                 "are exported")
    return "squeue", [], notes


def export_trace(cfg: cfgmod.Config, out: str | os.PathLike[str], *, since: float | None = None,
                 until: float | None = None, hash_users: bool = False, salt: str | None = None,
                 source: str = "auto", backend: Backend | None = None) -> dict[str, Any]:
    """Write the trace; returns a summary (source, jobs written, what was skipped and why).
    ``source``: one of ``SOURCES``. ``InspectError`` when Slurm cannot be read or no job
    qualifies (then nothing is written)."""
    if source not in SOURCES:
        raise InspectError(f"--from {source!r}: expected one of {', '.join(SOURCES)}", 2)
    until = time.time() if until is None else until
    if since is not None and since >= until:
        raise InspectError(f"--since ({since:.0f}) must be before --until ({until:.0f})", 2)
    out = Path(out)
    if out.is_dir():
        raise InspectError(f"{out}: is a folder; give a file name such as trace.csv", 2)
    try:
        backend = backend or _inspect.open_backend(cfg)
        try:
            conf = backend.config()
        except SlurmError:
            conf = {}
        source, records, notes = _sources(backend, conf, since, source)
        snap = backend.snapshot()
    except SlurmError as e:
        raise InspectError(f"Slurm is not reachable: {e}") from None
    squeue = snap.jobs_by_id
    if source == "squeue":
        records = list(from_squeue(snap.jobs))
    observed = _observed_gpus(cfg)
    known = {_norm(n): n for n in load_profiles()}
    by_id: dict[str, Finished] = {}
    for f in records:
        by_id[f.job_id] = f  # the last record of a job wins (requeued jobs appear again)
    skipped = {"never_ran": 0, "outside_window": 0, "no_gpu_count": 0, "no_gpus": 0, "unfinished": 0}
    sources_of_gpus = {"record": 0, "squeue": 0, "shadow": 0}
    rows = []
    salt_note = None
    if hash_users:
        if salt is None:
            salt = os.environ.get("ATTENTIVED_TRACE_SALT") or None
            salt_note = "salt from $ATTENTIVED_TRACE_SALT" if salt else None
        else:
            salt_note = "salt from --salt"
        if salt is None:
            salt = secrets.token_hex(16)
            salt_note = "random salt (not stored): user names differ between exports"
    users = set()
    for f in by_id.values():
        sj = squeue.get(f.job_id)
        if f.submit is None and sj is not None and sj.submit_time:
            f = replace(f, submit=sj.submit_time)
        if not f.ran:
            skipped["never_ran" if f.state else "unfinished"] += 1
            continue
        assert f.start is not None  # f.ran
        submit = f.submit if f.submit is not None and f.submit <= f.start else f.start
        if (since is not None and submit < since) or submit >= until:
            skipped["outside_window"] += 1
            continue
        gpus = f.gpus
        if gpus is not None:
            sources_of_gpus["record"] += 1
        elif sj is not None:
            gpus = sj.gpus
            sources_of_gpus["squeue"] += 1
        elif f.job_id in observed:
            gpus = observed[f.job_id]
            sources_of_gpus["shadow"] += 1
        if gpus is None:
            skipped["no_gpu_count"] += 1
            continue
        if gpus <= 0:
            skipped["no_gpus"] += 1
            continue
        user = hash_user(f.user, salt) if hash_users and salt is not None else f.user
        users.add(user)
        duration = max(1.0, float(f.end) - float(f.start))  # type: ignore[arg-type]
        rows.append((f.job_id, submit, user, gpus, duration, _model(f, known, sj), f.start, f.end, f.state,
                     f.partition, f.time_limit, f.nodes))
    if not rows:
        raise InspectError(f"no finished GPU job to export from {source} ({len(by_id)} record(s) read; skipped: "
                           + ", ".join(f"{k} {v}" for k, v in skipped.items() if v) + ")")
    rows.sort(key=lambda r: (r[1], int(r[0])))
    _write_atomic(out, rows)
    if skipped["no_gpu_count"]:
        notes.append(f"{skipped['no_gpu_count']} job(s) skipped: their GPU count is in no source (the completion file "
                     "records no GRES; squeue forgets jobs after MinJobAge): export more often, or run the daemon "
                     "(shadow observations keep GPU counts)")
    return {"path": str(out), "source": source, "jobs": len(rows), "users": len(users), "hashed_users": hash_users,
            "salt": salt_note, "skipped": skipped, "gpu_counts_from": sources_of_gpus,
            "first_submit": rows[0][1], "last_submit": rows[-1][1], "since": since, "until": until, "notes": notes}


def _observed_gpus(cfg: cfgmod.Config) -> dict[str, int]:
    try:
        from attentived.daemon.observe import ShadowError, read_observations

        rows, _ = read_observations(cfg.state_dir)
    except (ShadowError, Exception):
        return {}
    return {r["job_id"]: int(r["gpus"]) for r in rows if r.get("gpus")}


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.0f}" if v.is_integer() else f"{v:.3f}"
    return str(v)


def _write_atomic(path: Path, rows: list[tuple]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(HEADER)
            for r in rows:
                w.writerow([_fmt(x) for x in r])
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

