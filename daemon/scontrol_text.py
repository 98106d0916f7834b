"""Parsers for ``scontrol`` text output: ``scontrol -o show reservation|partition`` (one
``Key=Value`` record per line), ``scontrol show config`` (``Key = Value``), and the
``Key=Value`` lines of other tools (``ops/export.py`` reads jobcomp/filetxt with them).

Slurm 22.05 has no ``scontrol ... --json``, so reservations and the configuration are read
here; 24.11's partition JSON leaves out what a partition gives its jobs, so partitions are
read here on both. Jobs and nodes are read from JSON only (``slurm_json``): in text output
a user controls job names, comments and paths, and a value such as ``x JobState=COMPLETED``
is indistinguishable from a real field by syntax alone. Where such lines must be read,
``parse_line`` takes the *last* occurrence of a known key and never lets a key printed
*before* a free-text field start inside it, so ids, states and priorities cannot be
spoofed; a free-text value that contains ``Key=`` may still come back cut short. A newline
inside a value breaks ``-o``'s one-record-per-line promise: continuation lines are joined
back.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

from .records import SlurmParseError, SlurmPartition, SlurmReservation
from .slurm_json import hosts, words

_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_:/().]*)=(.*)$", re.S)
_RECORD_START = re.compile(r"^(JobId|NodeName|ReservationName|PartitionName)=\S")


def parse_line(line: str, order: tuple[str, ...] = (), free_text: frozenset[str] = frozenset()) -> dict[str, str]:
    """One ``Key=Value Key2=Value two`` record -> dict.

    A word without ``=`` continues the previous value (``Reason=cable cut``). With ``order``
    (the keys in print order): inside a free-text field, a known key that Slurm prints before
    that field is text, not a field; a known key seen twice keeps its last value. Values
    keep their spaces only in ``free_text`` fields.
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
            out[k] = v
            key = k
        elif key is not None:
            out[key] += " " + word
    return {k: v.strip() if k not in free_text else v for k, v in out.items()}


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
        d = parse_line(rec)
        name = d.get("PartitionName", "")
        if not name:
            raise SlurmParseError("scontrol -o show partition", f"record without PartitionName: {rec[:60]!r}")
        unset = ("", "(null)", "NONE")
        out.append(SlurmPartition(
            name, default=d.get("Default", "").upper() == "YES",
            job_defaults="" if d.get("JobDefaults", "") in unset else d["JobDefaults"],
            select_type="" if d.get("SelectTypeParameters", "").upper() in unset else d["SelectTypeParameters"].upper()))
    return tuple(out)
