"""Parsers for ``scontrol`` text output: ``scontrol -o show job|node|reservation|partition``
(one ``Key=Value`` record per line) and ``scontrol show config`` (``Key = Value``).

Slurm 22.05 has no ``scontrol ... --json``, so reservations (and the configuration) are read
here. Jobs are always read from ``squeue --json`` by the daemon: in text output a user
controls job names, comments and paths, and a value such as ``x JobState=COMPLETED`` is
indistinguishable from a real field by syntax alone. ``parse_line`` therefore takes the
*last* occurrence of a known key and never lets a key that Slurm prints *before* a free-text
field start inside it, so ids, states and priorities cannot be spoofed; a free-text value
that contains ``Key=`` may still come back cut short. A newline inside a job name breaks
``-o``'s one-record-per-line promise: continuation lines are joined back.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

from .records import SlurmJob, SlurmNode, SlurmParseError, SlurmPartition, SlurmReservation
from .slurm_json import gpu_indices, hosts, state_of, tres_gpus, words

#: The order ``scontrol -o -d show job`` prints its keys in (22.05; later versions add keys,
#: which are accepted as they come). Free-text fields a user controls are marked below.
JOB_KEYS = (
    "JobId", "ArrayJobId", "ArrayTaskId", "ArrayTaskThrottle", "JobName", "UserId", "GroupId", "MCS_label",
    "Priority", "Nice", "Account", "QOS", "JobState", "Reason", "Dependency", "Requeue", "Restarts",
    "BatchFlag", "Reboot", "ExitCode", "DerivedExitCode", "RunTime", "TimeLimit", "TimeMin", "SubmitTime",
    "EligibleTime", "AccrueTime", "StartTime", "EndTime", "Deadline", "SuspendTime", "SecsPreSuspend",
    "LastSchedEval", "Scheduler", "Partition", "AllocNode:Sid", "ReqNodeList", "ExcNodeList", "NodeList",
    "SchedNodeList", "BatchHost", "NumNodes", "NumCPUs", "NumTasks", "CPUs/Task", "ReqB:S:C:T", "TRES",
    "Socks/Node", "NtasksPerN:B:S:C", "CoreSpec", "JOB_GRES", "Nodes", "CPU_IDs", "Mem", "GRES",
    "MinCPUsNode", "MinMemoryNode", "MinMemoryCPU", "MinTmpDiskNode", "Features", "DelayBoot",
    "Reservation", "OverSubscribe", "Contiguous", "Licenses", "Network", "Command", "WorkDir",
    "AdminComment", "Comment", "StdErr", "StdIn", "StdOut", "Power", "TresPerNode", "TresPerJob",
    "TresPerTask", "TresPerSocket", "MailUser", "MailType",
)
_JOB_FREE_TEXT = frozenset({"JobName", "Comment", "AdminComment", "Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Reason",
                            "MailUser", "Dependency", "Features"})
_JOB_GROUP = ("Nodes", "CPU_IDs", "Mem", "GRES")  # repeated once per node group with -d

_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_:/().]*)=(.*)$", re.S)
_RECORD_START = re.compile(r"^(JobId|NodeName|ReservationName|PartitionName)=\S")


def parse_line(line: str, order: tuple[str, ...] = (), free_text: frozenset[str] = frozenset(),
               groups: tuple[str, ...] = ()) -> dict[str, str]:
    """One ``Key=Value Key2=Value two`` record -> dict.

    A word without ``=`` continues the previous value (``Reason=cable cut``). With ``order``
    (the keys in print order): inside a free-text field, a known key that Slurm prints before
    that field is text, not a field; a known key seen twice keeps its last value. Keys in
    ``groups`` repeat on purpose (per-node blocks): their values are joined with ``|``.
    """
    rank = {k: i for i, k in enumerate(order)}
    out: dict[str, str] = {}
    key: str | None = None
    for word in line.split(" "):
        m = _KEY.match(word)
        if m and key is not None and order:
            k = m.group(1)
            if key in free_text and k in rank and key in rank and rank[k] <= rank[key]:
                m = None  # e.g. "JobId=1" inside a Comment: text
        if m:
            k, v = m.group(1), m.group(2)
            if k in groups and k in out:
                out[k] = out[k] + "|" + v
            else:
                out[k] = v
            key = k
        elif key is not None:
            out[key] += " " + word
    return {k: v.strip() if k not in _JOB_FREE_TEXT else v for k, v in out.items()}


def records(text: str) -> Iterator[str]:
    """Logical records of ``scontrol -o`` output: a line that does not start a record
    (``JobId=``, ``NodeName=``, ...) continues the previous one (a newline in a job name)."""
    cur: str | None = None
    for line in text.splitlines():
        if _RECORD_START.match(line):
            if cur is not None:
                yield cur
            cur = line
        elif cur is not None:
            cur += "\n" + line
        elif line.strip() and not line.startswith(("No ", "slurm_load")):
            raise SlurmParseError("scontrol -o", f"output does not start with a record: {line[:60]!r}")
    if cur is not None:
        yield cur


def parse_lines(text: str, source: str = "scontrol -o") -> list[dict[str, str]]:
    """Every record of ``scontrol -o show ...`` as a plain dict (no key order applied)."""
    return [parse_line(r) for r in records(text)]


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key = Value`` lines (section headers and the
    ``Slurmctld(primary) at ... is UP`` footer are skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if " = " not in line and not re.match(r"^\S+\s+=\s*$", line):
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        if key and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", key):
            out.setdefault(key, value.strip())
    if not out:
        raise SlurmParseError("scontrol show config", "no 'Key = Value' lines")
    return out


def slurm_time(value: str) -> float | None:
    """``2026-11-29T22:16:22`` (slurmctld's local time) -> Unix seconds; None for
    ``Unknown``/``None``/``N/A``/``(null)``."""
    value = value.strip()
    if not value or value in ("Unknown", "None", "N/A", "(null)", "0"):
        return None
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        raise SlurmParseError("scontrol", f"bad time {value[:40]!r}") from None


def slurm_duration(value: str) -> float | None:
    """``UNLIMITED`` -> None; ``[D-]HH:MM:SS`` / ``MM:SS`` / ``MM`` -> seconds."""
    value = value.strip()
    if value in ("UNLIMITED", "INFINITE", "NONE", "N/A", "Partition_Limit", ""):
        return None
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+)(?::(\d+))?", value)
    if not m:
        raise SlurmParseError("scontrol", f"bad duration {value[:40]!r}")
    days, a, b, c = m.groups()
    if c is not None:  # [D-]HH:MM:SS
        h, mi, s = int(a or 0), int(b), int(c)
    elif a is not None:  # MM:SS or D-HH:MM
        h, mi, s = (int(a), int(b), 0) if days else (0, int(a), int(b))
    else:  # MM or D-HH
        h, mi, s = (int(b), 0, 0) if days else (0, int(b), 0)
    return float(int(days or 0) * 86400 + h * 3600 + mi * 60 + s)


def parse_reservations(text: str, source: str = "scontrol -o show reservation") -> tuple[SlurmReservation, ...]:
    out = []
    for rec in records(text):
        d = parse_line(rec)
        name = d.get("ReservationName", "")
        if not name:
            raise SlurmParseError(source, f"record without ReservationName: {rec[:60]!r}")
        src = f"{source}: reservation {name}"
        out.append(SlurmReservation(
            name=name, nodes=hosts(d.get("Nodes"), "Nodes", src),
            users=words(d.get("Users"), "Users", src), flags=words(d.get("Flags", "").upper(), "Flags", src),
            start_time=slurm_time(d.get("StartTime", "")), end_time=slurm_time(d.get("EndTime", "")),
            partition="" if d.get("PartitionName") in (None, "(null)") else d["PartitionName"],
            state=d.get("State", ""),
        ))
    return tuple(out)


def parse_partitions(text: str) -> tuple[SlurmPartition, ...]:
    """``scontrol -a -o show partition``: the same text on 22.05 and 24.11. (24.11's ``--json``
    shows ``defaults.job`` empty and ``select_type`` without its memory flag, recorded in
    tests/daemon/fixtures/README.md, so it is not used.)"""
    out = []
    for rec in records(text):
        d = parse_line(rec)  # `records` has checked that it starts with PartitionName=
        unset = ("", "(null)", "NONE")
        out.append(SlurmPartition(
            d["PartitionName"], default=d.get("Default", "").upper() == "YES",
            job_defaults="" if d.get("JobDefaults", "") in unset else d["JobDefaults"],
            select_type="" if d.get("SelectTypeParameters", "").upper() in unset else d["SelectTypeParameters"].upper()))
    return tuple(out)


def parse_nodes(text: str, source: str = "scontrol -o show nodes") -> tuple[SlurmNode, ...]:
    """``scontrol -o [-d] show nodes`` (``GresUsed=`` with ``-d`` gives used indices)."""
    out = []
    for rec in records(text):
        d = parse_line(rec)
        name = d.get("NodeName", "")
        src = f"{source}: node {name}"
        base, flags = state_of(d.get("State", "UNKNOWN"), None, "State", src)
        try:
            _i, total = gpu_indices(d.get("Gres", "") if d.get("Gres") != "(null)" else "")
            used_idx, used = gpu_indices(d.get("GresUsed", "") if d.get("GresUsed") != "(null)" else "")
        except ValueError as e:
            raise SlurmParseError(src, str(e)) from None
        out.append(SlurmNode(
            name=name, state=base, flags=flags, gpus=total, gpus_used=used, used_indices=used_idx or (),
            features=words(d.get("ActiveFeatures", d.get("AvailableFeatures")), "features", src),
            partitions=words(d.get("Partitions"), "Partitions", src), reason=d.get("Reason", ""),
            alloc_cpus=int(d["CPUAlloc"]) if d.get("CPUAlloc", "").isdigit() else 0,
        ))
    return tuple(out)


def parse_jobs(text: str, source: str = "scontrol -o -d show job") -> tuple[SlurmJob, ...]:
    """Jobs from text output (a fallback and for tools; the daemon reads ``squeue --json``)."""
    out = []
    for rec in records(text):
        d = parse_line(rec, JOB_KEYS, _JOB_FREE_TEXT, _JOB_GROUP)
        jid = d.get("JobId", "")
        if not jid.isdigit():
            raise SlurmParseError(source, f"record with a bad JobId: {rec[:60]!r}")
        src = f"{source}: job {jid}"
        state = d.get("JobState", "").split()[0] if d.get("JobState") else "UNKNOWN"
        nodes = hosts(d.get("NodeList"), "NodeList", src)
        num_nodes = int(d["NumNodes"].split("-")[0]) if d.get("NumNodes", "").split("-")[0].isdigit() else max(1, len(nodes))
        per_node = tres_gpus(d.get("TresPerNode", ""))
        per_job = tres_gpus(d.get("TresPerJob", ""))
        indices: dict[str, tuple[int, ...]] = {}
        if "GRES" in d and "Nodes" in d:
            for group_nodes, gres in zip(d["Nodes"].split("|"), d["GRES"].split("|")):
                try:
                    idx, _n = gpu_indices(gres) if gres else (None, 0)
                except ValueError as e:
                    raise SlurmParseError(src, f"GRES {gres!r}: {e}") from None
                if idx:
                    for node in hosts(group_nodes, "Nodes", src):
                        indices[node] = idx
        user = d.get("UserId", "").split("(")[0]
        reason = d.get("Reason", "")
        prio = int(d["Priority"]) if d.get("Priority", "").isdigit() else 0
        out.append(SlurmJob(
            job_id=jid, name=d.get("JobName", ""), user=user,
            account="" if d.get("Account") == "(null)" else d.get("Account", ""),
            partition=d.get("Partition", ""), state=state, reason=reason,
            gpus=per_node * num_nodes if per_node else per_job, gpus_per_node=per_node,
            per_node_fixed=bool(per_node), num_nodes=num_nodes,
            time_limit=slurm_duration(d.get("TimeLimit", "")),
            submit_time=slurm_time(d.get("SubmitTime", "")), start_time=slurm_time(d.get("StartTime", "")) if state != "PENDING" else None,
            end_time=slurm_time(d.get("EndTime", "")) if state not in ("PENDING", "RUNNING") else None,
            priority=prio, required_nodes=hosts(d.get("ReqNodeList"), "ReqNodeList", src),
            excluded_nodes=hosts(d.get("ExcNodeList"), "ExcNodeList", src),
            features="" if d.get("Features") in (None, "(null)") else d["Features"],
            nodes=nodes, gpu_indices=indices,
            reservation="" if d.get("Reservation") in (None, "(null)") else d["Reservation"],
            held=reason.startswith("JobHeld"),
            comment="" if d.get("Comment") in (None, "(null)") else d["Comment"],
            admin_comment="" if d.get("AdminComment") in (None, "(null)") else d["AdminComment"],
        ))
    return tuple(out)
