"""Job traces: load a CSV of past jobs, validate it, and cut the workload a replay runs.

A trace is what the simulator replays: when each job was submitted, by whom, how many GPUs
it asked for and how long it ran. Four CSV layouts are read, told apart by their header row:

generic
    ``job_id,submit_time,user,num_gpus,duration[,model]``; times in seconds. Optional
    columns say what else the job asked Slurm for (an empty cell: nothing): ``cpus`` (in
    all), ``mem_per_node``, ``mem_per_cpu`` or ``mem_per_gpu`` (MB, or with a K/M/G/T
    suffix as Slurm's ``--mem``; one of them in a row, as Slurm), ``exclusive`` (0/1,
    true/false, yes/no), ``gpu_type`` (``--gres=gpu:TYPE:n``), ``nodelist`` and ``exclude`` (Slurm hostlists, ``-w``/``-x``)
    and ``features`` (``-C``: names separated by ``&`` or spaces; ``|`` and the other
    operators are not modelled). Other columns are ignored, so an exported table with
    extra fields loads as it is.
philly
    ``timestamp,duration,num_gpus,gpu_time,cluster``: the Microsoft Philly trace as
    published with Pollux (petuum/adaptdl). ``cluster`` (the virtual-cluster id) is the only
    tenant identity in it, so it is the user; job ids are ``philly-<line>``.
tiresias
    ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``: the Tiresias
    simulator's job list. It has no users, so every job belongs to ``"tiresias"``.
alibaba
    ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
    deletion_time,scheduled_time``: the Alibaba GPU 2023 pod list (cluster-trace-gpu-v2023).
    ``qos`` is the user; ``cpu_milli`` becomes ``cpus`` (rounded up to whole CPUs),
    ``memory_mib`` ``mem_per_node`` (a pod runs on one node) and ``gpu_spec`` the GPU type
    when it names one (a list of alternatives, ``A10|T4``, asks for none in particular).
    Only whole-GPU pods are scheduling jobs in our sense, so pods
    without GPUs, GPU-sharing pods (``gpu_milli`` below 1000; empty or 0 means whole GPUs),
    pods never scheduled or never deleted (an empty or ``nan`` time), and pods deleted in
    the second they were scheduled (the trace has one-second resolution) are skipped and
    counted in `Trace.skipped`. ``pod_phase`` is not used: the published trace lists
    "Running" pods with deletion times, so the timestamps, not the phase, say whether a pod
    ran to an end.

Every other defect is an error, not a skip: a malformed value means the file is not what
the reader thinks it is, and silently dropping rows would bias a scheduling study. Errors
are `TraceError` s naming the file, the 1-based line and the column, so a researcher can
open the file at the right place.

Philly quirks, measured on the 52,849-job Sep-Oct 2017 file: rows are not in time order
(sorted here); 5,148 rows repeat the timestamp of an earlier row and 37 are exact copies of
an earlier row (same second, duration, GPUs and virtual cluster). Both look like batch
submissions (sweeps) and cannot be told from double logging, so every row stays a job and
ties are ordered by job id. Durations run from 1 s to 53.6 days, with no zero or missing
values, so a zero duration is an error here as in every format. ``gpu_time`` equals
``duration * num_gpus`` in every row and is not used. Timestamps carry no zone; they are
read as UTC so that daylight-saving changes cannot distort the gaps between submissions,
which are all a replay uses.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
import re
import zlib
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import date
from functools import partial
from pathlib import Path

from attentived.topology import hostlist

__all__ = [
    "FORMATS",
    "Trace",
    "TraceError",
    "TraceJob",
    "check_fits",
    "load_trace",
    "parse_duration",
]


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace, as measured (the simulator adds time limits and placements)."""

    job_id: str
    submit_time: float
    """Seconds after the first kept job's submission (the first job submits at 0)."""
    user: str
    num_gpus: int
    duration: float
    """Seconds, as measured; taken as the run time at the ideal placement."""
    model: str | None
    """Workload/model name, lower-case, when the trace has one."""
    line: int
    """1-based line in the source file, so later errors can point back at it."""
    cpus: int = 0
    """What else the job asked Slurm for, when the trace says (0 / empty: nothing): CPUs in
    all, memory per node, per CPU or per GPU (MB), whole nodes, a GPU type, nodes it must
    include (``-w``) or avoid (``-x``), and node features it requires (``-C``)."""
    mem_per_node: int = 0
    mem_per_cpu: int = 0
    mem_per_gpu: int = 0
    exclusive: bool = False
    gpu_type: str = ""
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    num_nodes: int | None = None
    """The node count the user fixed (``sbatch -N``; ``num_gpus / num_nodes`` GPUs on each),
    ``None`` when Slurm may spread the GPUs over any nodes."""


@dataclass(frozen=True)
class Trace:
    """A loaded, validated and filtered trace."""

    name: str
    """File name without ``.csv`` / ``.csv.gz``."""
    path: str
    format: str
    """One of `FORMATS`."""
    jobs: tuple[TraceJob, ...]
    """Sorted by (submit_time, job_id)."""
    skipped: int = 0
    """Rows of the file that describe no whole-GPU job (see the module notes); only the
    alibaba format skips rows. Counted over the whole file, before any filter."""


class TraceError(ValueError):
    """A trace that cannot be used, located as ``path:line: field: message``."""

    def __init__(self, path: str, message: str, *, line: int | None = None, field: str | None = None) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.message = message
        location = path if line is None else f"{path}:{line}"
        super().__init__(f"{location}: {field}: {message}" if field else f"{location}: {message}")

    def __reduce__(self) -> tuple[partial[TraceError], tuple[str, str]]:
        # Keeps the error picklable, so it survives being raised in a worker process.
        return partial(TraceError, line=self.line, field=self.field), (self.path, self.message)


# Required columns of each format, in the order the format's files have them.
FORMATS: dict[str, tuple[str, ...]] = {
    "generic": ("job_id", "submit_time", "user", "num_gpus", "duration"),
    "philly": ("timestamp", "duration", "num_gpus", "gpu_time", "cluster"),
    "tiresias": ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval"),
    "alibaba": (
        "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
        "pod_phase", "creation_time", "deletion_time", "scheduled_time",
    ),
}  # fmt: skip
_REQUESTS = ("cpus", "mem_per_node", "mem_per_cpu", "mem_per_gpu", "exclusive", "gpu_type", "nodelist", "exclude", "features")
_OPTIONAL = {"generic": ("model", *_REQUESTS)}

_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2}) (\d{2}):(\d{2}):(\d{2})", re.ASCII)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)", re.ASCII)
_UNIT_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_GZIP_MAGIC = b"\x1f\x8b"
_MEGABYTES = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)b?", re.ASCII | re.IGNORECASE)
_MB_PER_UNIT = {"": 1.0, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0**2}
_TRUE, _FALSE = ("1", "true", "yes", "y"), ("", "0", "false", "no", "n")
_FEATURE_SPLIT = re.compile(r"[\s&]+")
_NOT_A_NAME = re.compile(r"[^\w.+\-]", re.ASCII)  # a GPU type or feature: letters, digits, _ . + -

# What a row asked for besides GPUs, in TraceJob's field order (cpus .. features).
_Requests = tuple[int, int, int, int, bool, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]

# A parsed row: (submit seconds on the trace's own clock, job_id, user, num_gpus, duration,
# model, line, requests or None). Job ids are unique, so plain tuple order is
# (submit_time, job_id) order.
_Row = tuple[float, str, str, int, float, str | None, int, _Requests | None]


def parse_duration(text: str) -> float:
    """Seconds in ``"3600"``, ``"90s"``, ``"45m"``, ``"6h"``, ``"2d"`` or ``"1.5h"``.

    For command-line windows (``--start 2d --end 3d``); a ValueError explains the syntax.
    """
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"invalid duration {text!r}: expected seconds or a number with a unit s, m, h or d "
            "(e.g. 3600, 90s, 45m, 1.5h, 2d)"
        )
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def load_trace(
    path: str | os.PathLike[str],
    *,
    start: float | None = None,
    end: float | None = None,
    users: Collection[str] | None = None,
    load_scale: float = 1.0,
    max_jobs: int | None = None,
) -> Trace:
    """Read a trace file (CSV, optionally gzip-compressed) and cut the workload to replay.

    Filters apply in this order, so each has one meaning whatever the others are:

    1. ``start``/``end``: seconds after the trace's first submission; keeps jobs with
       ``start <= submit < end``.
    2. ``users``: keeps jobs of these users.
    3. ``load_scale``: divides the gaps between submissions, so 2.0 offers twice the load
       with the same jobs.
    4. ``max_jobs``: keeps the first N jobs by submission.

    Submit times are then re-based so the first kept job submits at 0.

    Raises TraceError for an unreadable or malformed file and when no job is left, and
    ValueError for inconsistent arguments (``end <= start``, ``load_scale <= 0``, ...).
    """
    _check_arguments(start, end, load_scale, max_jobs)
    path_text = os.fspath(path)
    rows, fmt, skipped = _parse(path_text, _read_text(path_text))
    first = min(row[0] for row in rows)
    kept = rows
    if start is not None or end is not None:
        kept = [row for row in rows if _in_window(row[0] - first, start, end)]
    if users is not None:
        wanted = set(users)
        kept = [row for row in kept if row[2] in wanted]
    kept = sorted(kept)
    if max_jobs is not None:
        kept = kept[:max_jobs]  # the order is the same before and after load scaling
    if not kept:
        raise TraceError(path_text, _empty_message(rows, first, start, end, users))
    base = kept[0][0]
    jobs = tuple(
        TraceJob(job_id, (submit - base) / load_scale, user, gpus, duration, model, line, *(requests or ()))
        for submit, job_id, user, gpus, duration, model, line, requests in kept
    )
    return Trace(_stem(path_text), path_text, fmt, jobs, skipped)


def check_fits(trace: Trace, max_gpus: int) -> None:
    """Raise TraceError if a job wants more GPUs than the cluster has.

    Such a job could never start and would stall every queue behind it, so a replay checks
    before it begins. The error names the earliest such line of the file and how many jobs
    are affected.
    """
    if max_gpus < 1:
        raise ValueError(f"max_gpus must be at least 1, got {max_gpus}")
    too_big = [job for job in trace.jobs if job.num_gpus > max_gpus]
    if too_big:
        job = min(too_big, key=lambda j: j.line)
        raise TraceError(
            trace.path,
            f"job {job.job_id} asks for {job.num_gpus} GPUs but the cluster has {max_gpus} "
            f"({len(too_big)} of {len(trace.jobs)} jobs ask for more than {max_gpus}); "
            "use a larger cluster or filter the trace",
            line=job.line,
            field="num_gpus",
        )


def _check_arguments(start: float | None, end: float | None, load_scale: float, max_jobs: int | None) -> None:
    for name, value in (("start", start), ("end", end)):
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number of seconds, got {value}")
    if start is not None and end is not None and end <= start:
        raise ValueError(f"end ({end} s) must be after start ({start} s)")
    if not (math.isfinite(load_scale) and load_scale > 0):
        raise ValueError(f"load_scale must be a positive number, got {load_scale}")
    if max_jobs is not None and max_jobs < 1:
        raise ValueError(f"max_jobs must be at least 1, got {max_jobs}")


def _in_window(offset: float, start: float | None, end: float | None) -> bool:
    return (start is None or offset >= start) and (end is None or offset < end)


def _empty_message(
    rows: Sequence[_Row],
    first: float,
    start: float | None,
    end: float | None,
    users: Collection[str] | None,
) -> str:
    """Say what the filters were and what the trace holds, so the next try can hit it."""
    asked = []
    if start is not None:
        asked.append(f"start={start:g}s")
    if end is not None:
        asked.append(f"end={end:g}s")
    if users is not None:
        asked.append("users=" + ",".join(sorted(users)))
    span = max(row[0] for row in rows) - first
    names = sorted({row[2] for row in rows})
    shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
    return (
        f"no jobs left after filters ({' '.join(asked)}); the trace has {len(rows)} jobs "
        f"submitted over {span:g} s by {len(names)} users ({shown})"
    )


def _stem(path: str) -> str:
    name = Path(path).name
    for suffix in (".gz", ".csv"):
        name = name.removesuffix(suffix)
    return name


def _read_text(path: str) -> str:
    """The file's text: gunzipped when it starts with the gzip magic, UTF-8 (BOM allowed)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot read the file: {exc.strerror or exc}") from exc
    if data.startswith(_GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(path, f"not a readable gzip file: {exc}") from exc
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceError(
            path, f"not valid UTF-8 (byte 0x{data[exc.start]:02x}); save the file as UTF-8", line=line
        ) from exc


def _parse(path: str, text: str) -> tuple[list[_Row], str, int]:
    """The file's job rows, its format, and how many rows were skipped."""
    if not text.strip():
        raise TraceError(path, "the file is empty; expected a CSV header row")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [name.strip().lower() for name in next(reader)]
        fmt, columns = _detect(path, header)
        parse_row = _ROW_PARSERS[fmt](_Source(path), columns)
        rows: list[_Row] = []
        skipped = 0
        for fields in reader:
            line = reader.line_num
            if not fields:
                continue  # a blank line
            if len(fields) != len(header):
                raise TraceError(
                    path, f"expected {len(header)} fields as in the header, found {len(fields)}", line=line
                )
            row = parse_row(fields, line)
            if row is None:
                skipped += 1
            else:
                rows.append(row)
    except csv.Error as exc:
        raise TraceError(path, f"not valid CSV: {exc}", line=reader.line_num) from exc
    if not rows:
        if skipped:
            raise TraceError(path, f"all {skipped} rows were skipped: none is a whole-GPU job that ran")
        raise TraceError(path, "the file has a header but no job rows")
    return rows, fmt, skipped


def _detect(path: str, header: list[str]) -> tuple[str, dict[str, int]]:
    """The format whose columns the header has, and each column's index.

    A header that has most of one format's columns is taken to mean that format, so the
    error names the missing columns rather than only listing the layouts.
    """
    known = {name for names in (*FORMATS.values(), *_OPTIONAL.values()) for name in names}
    duplicated = [name for name, n in Counter(header).items() if n > 1 and name in known]
    if duplicated:
        raise TraceError(path, "column appears more than once", line=1, field=duplicated[0])
    present = set(header)
    best = max(FORMATS, key=lambda fmt: len(present.intersection(FORMATS[fmt])) / len(FORMATS[fmt]))
    missing = [name for name in FORMATS[best] if name not in present]
    if not missing:
        return best, {name: header.index(name) for name in FORMATS[best] + _OPTIONAL.get(best, ()) if name in present}
    if len(missing) <= len(FORMATS[best]) / 2:
        raise TraceError(
            path,
            f"missing required column(s) {', '.join(missing)} of the {best} format ({_layout(best)})",
            line=1,
            field=missing[0],
        )
    accepted = "; ".join(f"{fmt}: {_layout(fmt)}" for fmt in FORMATS)
    raise TraceError(path, f"unrecognised header {','.join(header)!r}; accepted headers are {accepted}", line=1)


def _layout(fmt: str) -> str:
    optional = "".join(f"[,{name}]" for name in _OPTIONAL.get(fmt, ()))
    return ",".join(FORMATS[fmt]) + optional


class _Source:
    """Value parsing that reports errors against one file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._midnights: dict[str, float] = {}  # a trace has few distinct days

    def error(self, line: int, field: str, message: str) -> TraceError:
        return TraceError(self.path, message, line=line, field=field)

    def number(self, text: str, line: int, field: str) -> float:
        try:
            value = float(text)
        except ValueError:
            message = f"{text!r} is not a number" if text.strip() else "is empty; expected a number"
            raise self.error(line, field, message) from None
        if not math.isfinite(value):
            raise self.error(line, field, f"{text.strip()!r} is not a finite number")
        if "_" in text or not text.isascii():  # float() also reads 1_000 and non-ASCII digits
            raise self.error(line, field, f"{text!r} is not a plain decimal number")
        return value

    def duration(self, text: str, line: int, field: str) -> float:
        value = self.number(text, line, field)
        if value <= 0:
            raise self.error(line, field, f"duration must be positive, got {text.strip()}")
        return value

    def count(self, text: str, line: int, field: str, minimum: int) -> int:
        """A whole number (``4`` or ``4.0``) of at least ``minimum``."""
        value = self.number(text, line, field)
        if value != int(value):
            raise self.error(line, field, f"{text.strip()} is not a whole number")
        if value < minimum:
            raise self.error(line, field, f"must be at least {minimum}, got {text.strip()}")
        return int(value)

    def megabytes(self, text: str, line: int, field: str) -> int:
        """Memory in MB (rounded up): ``16000``, ``16G``, ``512M``, ``1.5T``; empty is 0."""
        stripped = text.strip()
        if not stripped:
            return 0
        match = _MEGABYTES.fullmatch(stripped)
        if match is None:
            raise self.error(line, field, f"{stripped!r} is not an amount of memory (MB, or a number with K, M, G or T)")
        return math.ceil(float(match.group(1)) * _MB_PER_UNIT[match.group(2).lower()])

    def flag(self, text: str, line: int, field: str) -> bool:
        word = text.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise self.error(line, field, f"{text.strip()!r} is not a yes/no value (0/1, true/false, yes/no)")

    def hosts(self, text: str, line: int, field: str) -> tuple[str, ...]:
        """A Slurm hostlist (``node[1-3],gpu7``) as distinct names; empty is none."""
        if not text.strip():
            return ()
        try:
            return tuple(dict.fromkeys(hostlist.expand(text)))
        except ValueError as exc:
            raise self.error(line, field, f"{text.strip()!r} is not a Slurm hostlist: {exc}") from None

    def features(self, text: str, line: int, field: str) -> tuple[str, ...]:
        """``a&b`` or ``a b``: every named feature is required (Slurm's AND)."""
        names = tuple(dict.fromkeys(n for n in _FEATURE_SPLIT.split(text.strip()) if n))
        for name in names:
            if _NOT_A_NAME.search(name):
                raise self.error(
                    line, field, f"{text.strip()!r}: only feature names joined by '&' or spaces are modelled"
                )
        return names

    def gpu_type(self, text: str, line: int, field: str) -> str:
        stripped = text.strip()
        if _NOT_A_NAME.search(stripped):
            raise self.error(line, field, f"{stripped!r} is not one GPU type name (letters, digits, _ . + -)")
        return stripped

    def name(self, text: str, line: int, field: str) -> str:
        stripped = text.strip()
        if not stripped:
            raise self.error(line, field, "is empty")
        return stripped

    def timestamp(self, text: str, line: int, field: str) -> float:
        """Seconds since the Unix epoch of a zone-less ``YYYY-mm-dd HH:MM:SS``, read as UTC."""
        match = _TIMESTAMP.fullmatch(text.strip())
        if match is not None:
            day, hour, minute, second = match.groups()
            midnight = self._midnights.get(day)
            if midnight is None:
                try:
                    midnight = (date.fromisoformat(day).toordinal() - _EPOCH_ORDINAL) * 86400.0
                except ValueError:
                    midnight = None
                else:
                    self._midnights[day] = midnight
            if midnight is not None and int(hour) < 24 and int(minute) < 60 and int(second) < 60:
                return midnight + int(hour) * 3600 + int(minute) * 60 + int(second)
        raise self.error(line, field, f"{text!r} is not a date and time as YYYY-mm-dd HH:MM:SS")


class _UniqueIds:
    """Rejects a job id seen before, naming the line where it first appeared."""

    def __init__(self, source: _Source, field: str) -> None:
        self.source = source
        self.field = field
        self.first_line: dict[str, int] = {}

    def check(self, job_id: str, line: int) -> str:
        earlier = self.first_line.setdefault(job_id, line)
        if earlier != line:
            raise self.source.error(line, self.field, f"duplicate job id {job_id!r} (first on line {earlier})")
        return job_id


_RowParser = Callable[[list[str], int], _Row | None]


def _generic_rows(source: _Source, columns: dict[str, int]) -> _RowParser:
    i_id, i_submit, i_user, i_gpus, i_duration = (columns[name] for name in FORMATS["generic"])
    i_model = columns.get("model")
    ids = _UniqueIds(source, "job_id")
    requests = _requests_parser(source, columns)

    def parse(fields: list[str], line: int) -> _Row:
        return (
            source.number(fields[i_submit], line, "submit_time"),
            ids.check(source.name(fields[i_id], line, "job_id"), line),
            source.name(fields[i_user], line, "user"),
            source.count(fields[i_gpus], line, "num_gpus", 1),
            source.duration(fields[i_duration], line, "duration"),
            None if i_model is None else (fields[i_model].strip().lower() or None),
            line,
            None if requests is None else requests(fields, line),
        )

    return parse


def _requests_parser(source: _Source, columns: dict[str, int]) -> Callable[[list[str], int], _Requests | None] | None:
    """The generic format's optional request columns (``None`` when the header has none)."""
    present = {name: columns[name] for name in _REQUESTS if name in columns}
    if not present:
        return None

    def cell(fields: list[str], name: str) -> str:
        index = present.get(name)
        return "" if index is None else fields[index]

    def parse(fields: list[str], line: int) -> _Requests | None:
        cpus_text = cell(fields, "cpus")
        cpus = source.count(cpus_text, line, "cpus", 0) if cpus_text.strip() else 0
        per_node = source.megabytes(cell(fields, "mem_per_node"), line, "mem_per_node")
        per_cpu = source.megabytes(cell(fields, "mem_per_cpu"), line, "mem_per_cpu")
        per_gpu = source.megabytes(cell(fields, "mem_per_gpu"), line, "mem_per_gpu")
        given = [name for name, v in (("mem_per_node", per_node), ("mem_per_cpu", per_cpu), ("mem_per_gpu", per_gpu)) if v]
        if len(given) > 1:
            raise source.error(line, given[1], f"give one of mem_per_node, mem_per_cpu and mem_per_gpu, not {' and '.join(given)} (as Slurm)")
        if per_cpu and not cpus:
            raise source.error(line, "mem_per_cpu", "memory per CPU needs a cpus count")
        out = (
            cpus,
            per_node,
            per_cpu,
            per_gpu,
            source.flag(cell(fields, "exclusive"), line, "exclusive"),
            source.gpu_type(cell(fields, "gpu_type"), line, "gpu_type"),
            source.hosts(cell(fields, "nodelist"), line, "nodelist"),
            source.hosts(cell(fields, "exclude"), line, "exclude"),
            source.features(cell(fields, "features"), line, "features"),
        )
        if overlap := set(out[6]).intersection(out[7]):
            raise source.error(line, "exclude", f"{sorted(overlap)[0]} is both in nodelist and excluded")
        return out if any(out) else None

    return parse


def _philly_rows(source: _Source, columns: dict[str, int]) -> _RowParser:
    i_time, i_duration, i_gpus, i_cluster = (columns[n] for n in ("timestamp", "duration", "num_gpus", "cluster"))

    def parse(fields: list[str], line: int) -> _Row:
        return (
            source.timestamp(fields[i_time], line, "timestamp"),
            f"philly-{line}",
            source.name(fields[i_cluster], line, "cluster"),
            source.count(fields[i_gpus], line, "num_gpus", 1),
            source.duration(fields[i_duration], line, "duration"),
            None,
            line,
            None,
        )

    return parse


def _tiresias_rows(source: _Source, columns: dict[str, int]) -> _RowParser:
    i_id, i_gpus, i_submit, i_model, i_duration = (
        columns[n] for n in ("job_id", "num_gpu", "submit_time", "model_name", "duration")
    )
    ids = _UniqueIds(source, "job_id")

    def parse(fields: list[str], line: int) -> _Row:
        return (
            source.number(fields[i_submit], line, "submit_time"),
            ids.check(source.name(fields[i_id], line, "job_id"), line),
            "tiresias",
            source.count(fields[i_gpus], line, "num_gpu", 1),
            source.duration(fields[i_duration], line, "duration"),
            fields[i_model].strip().lower() or None,
            line,
            None,
        )

    return parse


def _alibaba_rows(source: _Source, columns: dict[str, int]) -> _RowParser:
    ids = _UniqueIds(source, "name")

    def optional_time(fields: list[str], line: int, field: str) -> float | None:
        text = fields[columns[field]]
        return None if text.strip().lower() in ("", "nan") else source.number(text, line, field)

    def amount(fields: list[str], line: int, field: str) -> float:
        text = fields[columns[field]].strip()
        value = source.number(text, line, field) if text else 0.0
        if value < 0:
            raise source.error(line, field, f"must be at least 0, got {text}")
        return value

    def parse(fields: list[str], line: int) -> _Row | None:
        name = ids.check(source.name(fields[columns["name"]], line, "name"), line)
        gpus = source.count(fields[columns["num_gpu"]], line, "num_gpu", 0)
        milli_text = fields[columns["gpu_milli"]].strip()
        milli = source.count(milli_text, line, "gpu_milli", 0) if milli_text else 0
        if milli > 1000:
            raise source.error(line, "gpu_milli", f"a GPU has 1000 milli-GPUs, got {milli}")
        created = source.number(fields[columns["creation_time"]], line, "creation_time")
        scheduled = optional_time(fields, line, "scheduled_time")
        deleted = optional_time(fields, line, "deletion_time")
        if scheduled is not None and scheduled < created:
            raise source.error(line, "scheduled_time", f"scheduled at {scheduled:g}, before creation at {created:g}")
        if scheduled is not None and deleted is not None and deleted < scheduled:
            raise source.error(line, "deletion_time", f"deleted at {deleted:g}, before scheduling at {scheduled:g}")
        if gpus == 0 or 0 < milli < 1000 or scheduled is None or deleted is None or deleted == scheduled:
            return None
        user = source.name(fields[columns["qos"]], line, "qos")
        cpus = math.ceil(amount(fields, line, "cpu_milli") / 1000)
        mem = math.ceil(amount(fields, line, "memory_mib"))
        spec = fields[columns["gpu_spec"]].strip()
        gpu_type = "" if "|" in spec else source.gpu_type(spec, line, "gpu_spec")
        requests: _Requests = (cpus, mem, 0, 0, False, gpu_type, (), (), ())
        return (created, name, user, gpus, deleted - scheduled, None, line, requests if any(requests) else None)

    return parse


_ROW_PARSERS: dict[str, Callable[[_Source, dict[str, int]], _RowParser]] = {
    "generic": _generic_rows,
    "philly": _philly_rows,
    "tiresias": _tiresias_rows,
    "alibaba": _alibaba_rows,
}
