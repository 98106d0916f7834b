"""Parsers for Slurm's JSON outputs (``squeue --json``, ``sinfo --json``, and from 23.02 on
``scontrol show nodes|reservation --json``) into the backend's typed records.

Written against real recordings (``tests/daemon/fixtures/slurm-22.05`` and ``slurm-24.11``).
What differs between versions, and is absorbed here:

- ``meta``: 22.05 ``{"Slurm": {"version": {"major": 22, ...}}}`` (ints); 23.02+
  ``{"slurm": {"version": {"major": "24", ...}}}`` (strings).
- 24.11 wraps most integers as ``{"set": bool, "infinite": bool, "number": n}``; 22.05 gives a
  plain int or ``null``.
- ``job_state`` and node ``state``: a string (+ ``state_flags``) on 22.05, a list on 24.11.
- ``tres_per_node``: ``gres:gpu:3`` (22.05) vs ``gres/gpu:3`` (24.11); typed forms
  ``gres/gpu:h100:3`` and ``=`` separators are accepted too.
- Node features: a comma string (22.05) vs a list (24.11).

Anything structurally wrong (not JSON, truncated, a job without an id, a field of the wrong
kind) raises ``SlurmParseError`` naming the command and the job or node: a cycle fails
clearly, the daemon does not crash.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from attentived.topology import hostlist

from .records import (
    SlurmJob,
    SlurmNode,
    SlurmParseError,
    SlurmReservation,
    SlurmVersion,
)

#: Slurm's NO_VAL / INFINITE sentinels as 22.05 prints some of them.
_NO_VAL = {0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF, 0xFFFE, 0xFFFF}

_GRES_ITEM = re.compile(
    r"^(?P<name>[A-Za-z0-9_]+)(?::(?P<type>[^:(]+?))?(?::(?P<count>[0-9]+))?(?:\((?P<extra>[^)]*)\))?$"
)
_HOSTLIST_SYNTAX = re.compile(r"[\[\],\s]")
#: The job flag, by data_parser version, saying the user set a memory per node or per CPU.
_MEM_SET = frozenset({"JOB_MEM_SET", "EXACT_MEMORY_REQUESTED"})
#: The job flag, by data_parser version, saying the user set CPUs per task (``-c``).
_CPUS_SET = frozenset({"JOB_CPUS_SET", "EXACT_CPU_COUNT_REQUESTED"})
_TRES_GPU = re.compile(r"^(?:gres[:/])?gpu(?::(?P<type>[^:=]+))?[:=](?P<count>[0-9]+)$")

_NODE_FLAGS = frozenset({
    "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND", "COMPLETING",
    "MAINTENANCE", "RESERVED", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "POWERING_UP",
    "POWER_UP", "REBOOT_ISSUED", "REBOOT_REQUESTED", "CLOUD", "PLANNED", "DYNAMIC_NORM",
    "DYNAMIC_FUTURE", "INVALID_REG", "RESUME", "UNDRAIN", "BLOCKED",
})
_NODE_BASES = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN", "INVALID", "END"})


@dataclass(frozen=True)
class SqueueResult:
    version: SlurmVersion | None
    jobs: tuple[SlurmJob, ...]


# ---- generic helpers -------------------------------------------------------------------------


def load(text: str | bytes, source: str) -> dict[str, Any]:
    """Parse JSON, with a message that says what is wrong (empty, truncated, not an object)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not text or not text.strip():
        raise SlurmParseError(source, "empty output (is slurmctld reachable? does this Slurm support --json?)")
    try:
        data = json.loads(text, strict=False)  # tolerate raw control characters in job names
    except json.JSONDecodeError as e:
        end = len(text.rstrip())
        stripped = text.rstrip()
        truncated = e.pos >= end - 1 or e.msg.startswith("Unterminated") or (
            stripped[:1] in "{[" and stripped[-1:] not in "}]")
        hint = "output truncated" if truncated else "malformed JSON"
        raise SlurmParseError(source, f"{hint} at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise SlurmParseError(source, "JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise SlurmParseError(source, f"expected a JSON object, found {type(data).__name__}")
    return data


def version_of(meta: Any) -> SlurmVersion | None:
    """The Slurm version from a ``meta`` block of either generation."""
    if not isinstance(meta, dict):
        return None
    block = meta.get("slurm") or meta.get("Slurm")
    if not isinstance(block, dict):
        return None
    v = block.get("version")
    if isinstance(v, dict):
        try:
            return SlurmVersion(int(v["major"]), int(v["minor"]), int(v.get("micro") or 0))
        except (KeyError, TypeError, ValueError):
            pass
    release = block.get("release")
    if isinstance(release, str):
        try:
            return SlurmVersion.parse(release)
        except SlurmParseError:
            return None
    return None


def number(value: Any, what: str = "value", source: str = "slurm") -> int | None:
    """An integer field of any version: ``5``, ``null``, ``{"set","infinite","number"}``.
    ``None`` for unset, infinite or Slurm's NO_VAL sentinels."""
    # The common cases first (a job has a dozen numbers, a queue 10,000s of jobs): a plain
    # int (22.05), a set, finite wrapped int (23.02+). Anything else takes the long way.
    if type(value) is int:
        return None if value in _NO_VAL else value
    if type(value) is dict and value.get("set") is True and not value.get("infinite") and type(value.get("number")) is int:
        return None if value["number"] in _NO_VAL else value["number"]
    if value is None:
        return None
    if isinstance(value, bool):
        raise SlurmParseError(source, f"{what}: expected a number, found a boolean")
    if isinstance(value, dict):
        if "number" not in value:
            raise SlurmParseError(source, f"{what}: number object without 'number'")
        if value.get("infinite") or value.get("set") is False:
            return None
        value = value["number"]
        if value is None:
            return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        else:
            raise SlurmParseError(source, f"{what}: expected a number, found {type(value).__name__} {str(value)[:40]!r}")
    if value in _NO_VAL:
        return None
    return value


def text(value: Any, what: str = "value", source: str = "slurm") -> str:
    if type(value) is str:
        return value
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise SlurmParseError(source, f"{what}: expected text, found {type(value).__name__}")


def words(value: Any, what: str = "value", source: str = "slurm") -> tuple[str, ...]:
    """A comma string or a list of strings -> tuple (empty entries dropped)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(w.strip() for w in value.split(",") if w.strip() and w.strip() != "(null)")
    if isinstance(value, list):
        return tuple(text(w, what, source).strip() for w in value if w not in (None, ""))
    raise SlurmParseError(source, f"{what}: expected a list or comma string, found {type(value).__name__}")


def hosts(value: Any, what: str, source: str) -> tuple[str, ...]:
    spec = text(value, what, source).strip()
    if not spec or spec == "(null)":
        return ()
    if not _HOSTLIST_SYNTAX.search(spec):  # one plain name (most jobs run on one node)
        return (spec,)
    try:
        return tuple(hostlist.expand(spec))
    except ValueError as e:
        raise SlurmParseError(source, f"{what}: bad host list {spec[:60]!r}: {e}") from None


def state_of(value: Any, flags: Any = None, what: str = "state", source: str = "slurm") -> tuple[str, tuple[str, ...]]:
    """(base state, flags) from ``"idle"`` + ``["DRAIN"]`` or ``["IDLE", "DRAIN"]``."""
    if isinstance(value, str):
        parts = [p for p in re.split(r"[+,\s]+", value.upper()) if p]
    elif isinstance(value, list):
        parts = [text(p, what, source).upper() for p in value]
    elif value is None:
        parts = []
    else:
        raise SlurmParseError(source, f"{what}: expected a string or list, found {type(value).__name__}")
    parts += [f.upper() for f in words(flags, f"{what} flags", source)]
    parts = [p.rstrip("*~#!%$@^-") for p in parts]
    base = next((p for p in parts if p not in _NODE_FLAGS), parts[0] if parts else "UNKNOWN")
    rest = tuple(dict.fromkeys(p for p in parts if p != base))
    return base, rest


def parse_gres(spec: str) -> list[tuple[str, str, int, tuple[int, ...] | None]]:
    """``gpu:h100:8(S:0-1),gpu:a100:2(IDX:0,3)`` -> [(name, type, count, indices or None)].

    ``IDX:N/A`` or no ``IDX`` gives ``None`` indices; a malformed item raises ``ValueError``.
    """
    out = []
    for item in _split_gres(spec):
        m = _GRES_ITEM.match(item)
        if not m:
            raise ValueError(f"bad GRES item {item!r}")
        name, gtype, count, extra = m.group("name"), m.group("type") or "", m.group("count"), m.group("extra")
        if count is None and gtype.isdigit():  # gpu:3
            count, gtype = gtype, ""
        indices = None
        if extra:
            idx = re.search(r"IDX:([^)]*)", extra)
            if idx and idx.group(1) not in ("N/A", ""):
                indices = tuple(_int_ranges(idx.group(1)))
        out.append((name, gtype, int(count) if count is not None else 1, indices))
    return out


def _split_gres(spec: str) -> list[str]:
    items, depth, cur = [], 0, ""
    for ch in spec.strip():
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            if cur.strip():
                items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        items.append(cur.strip())
    return [i for i in items if i not in ("(null)", "N/A")]


def _int_ranges(spec: str) -> Iterable[int]:
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad index range {part!r}")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a or b - a > 4096:
            raise ValueError(f"bad index range {part!r}")
        yield from range(a, b + 1)


@functools.lru_cache(maxsize=4096)  # GRES and TRES strings repeat across a queue: parse each once
def gpu_indices(spec: str) -> tuple[tuple[int, ...] | None, int]:
    """GPU indices and count from one node's GRES string (``gpu:h100:3(IDX:0-2)``)."""
    idx: list[int] = []
    known = True
    count = 0
    for name, _type, n, indices in parse_gres(spec):
        if name != "gpu":
            continue
        count += n
        if indices is None:
            known = known and n == 0
        else:
            idx.extend(indices)
    return (tuple(sorted(set(idx))) if known else None), count


@functools.lru_cache(maxsize=4096)  # GRES and TRES strings repeat across a queue: parse each once
def tres_gpu_type(spec: str) -> str:
    """The GPU type a TRES request names (``gres/gpu:h100:2`` -> ``h100``), "" for any."""
    for item in (s.strip() for s in spec.split(",")):
        m = _TRES_GPU.match(item)
        if m and m.group("type"):
            return m.group("type")
    return ""


#: ``shared`` values of a job no other job shares a node with: ``--exclusive`` or a partition
#: with ``OverSubscribe=EXCLUSIVE`` (``none``), ``--exclusive=user`` or a partition with
#: ``ExclusiveUser=YES`` (``user``), ``--exclusive=mcs``, ``--exclusive=topo`` (25.05).
#: Slurm reports the partition's setting on pending jobs too, from the partition it last
#: tried the job in (`_pack_default_job_details` in 22.05, `get_job_share_value` in 24.11).
#: A ``user`` job is allocated only the GPUs it asked for, yet slurmctld starts no other
#: user's job on its nodes (tests/daemon/fixtures/README.md): planned, as a pending job, onto
#: whole idle nodes like ``--exclusive``; running, it keeps its nodes (daemon/snapshot.py).
_APART = frozenset({"none", "user", "mcs", "topo"})


def _exclusive(rec: dict[str, Any], src: str) -> bool:
    """Whether Slurm keeps the job's nodes to it (`_APART`): 22.05 says ``"shared":
    "none"``, 24.11 ``"shared": ["none"]`` or ``"exclusive": ["true"]``."""
    shared = words(rec.get("shared"), "shared", src)
    exclusive = words(rec.get("exclusive"), "exclusive", src)
    return any(w.lower() in _APART for w in shared) or any(w.lower() in ("true", "1", "exclusive") for w in exclusive)


_TRES_MEM = re.compile(r"(?:^|,)mem=(?P<n>[0-9]+(?:\.[0-9]+)?)(?P<unit>[KMGTP]?)(?:,|$)")
_MB_PER = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def _tres_mem(spec: str) -> int | None:
    """MB of memory in a TRES string (``cpu=1,mem=62.50G,node=1``), ``None`` without it."""
    m = _TRES_MEM.search(spec)
    return None if m is None else round(float(m.group("n")) * _MB_PER[m.group("unit")])


@functools.lru_cache(maxsize=4096)  # GRES and TRES strings repeat across a queue: parse each once
def tres_gpus(spec: str) -> int:
    """GPUs in a TRES request string (``gres:gpu:3``, ``gres/gpu:h100:2``, ``gres/gpu=4``)."""
    total = 0
    for item in (s.strip() for s in spec.split(",")):
        m = _TRES_GPU.match(item)
        if m:
            total += int(m.group("count"))
    return total


# ---- squeue --json ---------------------------------------------------------------------------


def parse_squeue(raw: str | bytes | dict[str, Any], source: str = "squeue --json") -> SqueueResult:
    """Every job of ``squeue --json`` (the output, or that output already loaded)."""
    data = raw if isinstance(raw, dict) else load(raw, source)
    return SqueueResult(version_of(data.get("meta")),
                        tuple(parse_job(rec, source, i) for i, rec in _job_records(data, source)))


def job_states(raw: str | bytes | dict[str, Any], source: str = "squeue --json") -> list[tuple[str, str, str]]:
    """(job id, base state, partition) of each job of ``squeue --json``, read exactly as
    ``parse_job`` reads them: enough for ``records.queue_key`` (did jobs start, end, come
    or go?) at a fraction of the cost of full records."""
    data = raw if isinstance(raw, dict) else load(raw, source)
    out = []
    for i, rec in _job_records(data, source):
        jid, src, state = _identity(rec, source, i)
        out.append((str(jid), state, text(rec.get("partition"), "partition", src)))
    return out


def _job_records(data: dict[str, Any], source: str) -> Iterable[tuple[int, dict[str, Any]]]:
    """(index, record) of each job object, checking the shape on the way."""
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmParseError(source, "no 'jobs' list (unexpected output or Slurm version)")
    for i, rec in enumerate(jobs):
        if not isinstance(rec, dict):
            raise SlurmParseError(source, f"job #{i}: expected an object, found {type(rec).__name__}")
        yield i, rec


def _identity(rec: dict[str, Any], source: str, index: int) -> tuple[int, str, str]:
    """A job record's id, the name its errors go under, and its base state."""
    jid = number(rec.get("job_id"), f"job #{index} job_id", source)
    if jid is None:
        raise SlurmParseError(source, f"job #{index}: no job_id")
    src = f"{source}: job {jid}"
    state, _flags = _job_state(rec.get("job_state"), src)
    return jid, src, state


def parse_job(rec: dict[str, Any], source: str = "squeue --json", index: int = 0) -> SlurmJob:
    jid, src, state = _identity(rec, source, index)
    reason = text(rec.get("state_reason"), "state_reason", src)
    nodes = hosts(rec.get("nodes"), "nodes", src)
    node_count = number(rec.get("node_count"), "node_count", src) or max(1, len(nodes))
    tres_node = text(rec.get("tres_per_node"), "tres_per_node", src)
    tres_job = text(rec.get("tres_per_job"), "tres_per_job", src)
    tres_task = text(rec.get("tres_per_task"), "tres_per_task", src)
    per_node, per_job, per_task = tres_gpus(tres_node), tres_gpus(tres_job), tres_gpus(tres_task)
    per_socket = tres_gpus(text(rec.get("tres_per_socket"), "tres_per_socket", src))
    tasks = number(rec.get("tasks"), "tasks", src) or 1
    if per_node:
        gpus, fixed = per_node * node_count, True
    elif per_job:
        gpus, fixed = per_job, False
    elif per_task:
        gpus, fixed = per_task * tasks, False
    elif per_socket:
        gpus, fixed = per_socket * node_count, False  # at least one socket per node
    else:
        gpus, fixed = 0, False
    held_flag = rec.get("hold")
    priority = number(rec.get("priority"), "priority", src) or 0
    held = bool(held_flag) if isinstance(held_flag, bool) else False
    if reason.startswith(("JobHeldUser", "JobHeldAdmin")):
        held = True
    elif held_flag is None and state == "PENDING" and priority == 0:
        # 22.05 has no `hold` field: a pending job at priority 0 is held whatever its reason
        # (JobHoldMaxRequeue, BurstBufferOperation, BadConstraints...); Slurm refuses a
        # priority for it, and would keep a pin the plan gave it
        held = True
    limit = number(rec.get("time_limit"), "time_limit", src)
    indices = _job_gpu_indices(rec, nodes, src)
    if not gpus and indices:
        gpus = sum(len(v) for v in indices.values())
    array_str = text(rec.get("array_task_string"), "array_task_string", src)
    cpus = number(rec.get("cpus"), "cpus", src) or 0
    cpus_per_gpu = tres_gpus(text(rec.get("cpus_per_tres"), "cpus_per_tres", src))
    if cpus_per_gpu and gpus:
        cpus = max(cpus, cpus_per_gpu * gpus)
    mem_per_node = number(rec.get("memory_per_node"), "memory_per_node", src) or 0
    mem_per_cpu = number(rec.get("memory_per_cpu"), "memory_per_cpu", src) or 0
    mem_per_gpu = tres_gpus(text(rec.get("memory_per_tres"), "memory_per_tres", src))
    # the user set a memory per node or per CPU, --mem=0 included (flag JOB_MEM_SET;
    # EXACT_MEMORY_REQUESTED in 24.11's JSON; a default memory per CPU shows without it)
    flags = rec.get("flags")
    if not isinstance(flags, list):
        flags, mem_set = None, bool(mem_per_node or mem_per_cpu)
    else:
        try:
            mem_set = not _MEM_SET.isdisjoint(flags)
        except TypeError:  # a list holding lists or objects: words() says what is wrong
            flags = list(words(flags, "flags", src))
            mem_set = not _MEM_SET.isdisjoint(flags)
    cpus_set = bool(cpus_per_gpu) or (flags is not None and not _CPUS_SET.isdisjoint(flags))
    if mem_per_gpu:
        # --mem-per-gpu, or DefMemPerGPU once slurmctld has looked at the job ("gpu:N").
        # cons_tres allocates it, and clears the memory per node or CPU, unless the user
        # set one.
        if mem_set:
            mem_per_gpu = 0
            if flags is not None and "EXACT_MEMORY_REQUESTED" in flags:
                # 24.11 then shows the per-GPU default as the memory per node, whatever the
                # user asked: the request is left only in the TRES asked for, in all
                total = _tres_mem(text(rec.get("tres_req_str"), "tres_req_str", src))
                if total is not None:
                    mem_per_node, mem_per_cpu = -(-total // node_count), 0
        else:
            mem_per_node = mem_per_cpu = 0
    return SlurmJob(
        job_id=str(jid),
        name=text(rec.get("name"), "name", src),
        user=text(rec.get("user_name"), "user_name", src) or str(number(rec.get("user_id"), "user_id", src) or ""),
        account=text(rec.get("account"), "account", src),
        partition=text(rec.get("partition"), "partition", src),
        state=state,
        reason=reason,
        gpus=gpus,
        gpus_per_node=per_node if fixed else (gpus // node_count if gpus and gpus % node_count == 0 else 0),
        per_node_fixed=fixed,
        num_nodes=node_count,
        time_limit=None if limit is None else float(limit) * 60.0,
        submit_time=_time(rec.get("submit_time"), "submit_time", src),
        start_time=_time(rec.get("start_time"), "start_time", src),
        end_time=_time(rec.get("end_time"), "end_time", src),
        priority=priority,
        required_nodes=hosts(rec.get("required_nodes"), "required_nodes", src),
        excluded_nodes=hosts(rec.get("excluded_nodes"), "excluded_nodes", src),
        features=text(rec.get("features"), "features", src),
        nodes=nodes,
        gpu_indices=indices,
        reservation=text(rec.get("resv_name"), "resv_name", src),
        held=held,
        comment=text(rec.get("comment"), "comment", src),
        admin_comment=text(rec.get("admin_comment"), "admin_comment", src),
        array=state == "PENDING" and (bool(array_str) or bool(number(rec.get("array_job_id"), "array_job_id", src))),
        heterogeneous=bool(number(rec.get("het_job_id"), "het_job_id", src)),
        cpus=cpus,
        mem_per_node=mem_per_node,
        mem_per_cpu=mem_per_cpu,
        mem_per_gpu=mem_per_gpu,
        mem_set=mem_set,
        cpus_set=cpus_set,
        exclusive=_exclusive(rec, src),
        last_evaluated=_time(rec.get("last_sched_evaluation"), "last_sched_evaluation", src),
        gpu_type=tres_gpu_type(tres_node) or tres_gpu_type(tres_job) or tres_gpu_type(tres_task),
    )


def _job_state(value: Any, src: str) -> tuple[str, tuple[str, ...]]:
    if isinstance(value, str):
        parts = [value.upper()]
    elif isinstance(value, list) and value:
        parts = [text(v, "job_state", src).upper() for v in value]
    else:
        raise SlurmParseError(src, f"job_state: expected a string or a non-empty list, found {value!r:.40}")
    return parts[0], tuple(parts[1:])


def _time(value: Any, what: str, src: str) -> float | None:
    n = number(value, what, src)
    return float(n) if n else None


def _job_gpu_indices(rec: dict[str, Any], nodes: tuple[str, ...], src: str) -> dict[str, tuple[int, ...]]:
    detail = rec.get("gres_detail")
    if detail is None or detail == []:
        return {}
    if not isinstance(detail, list):
        raise SlurmParseError(src, f"gres_detail: expected a list, found {type(detail).__name__}")
    names = list(nodes)
    if len(names) != len(detail):
        names = _alloc_node_names(rec.get("job_resources")) or names
    if len(names) != len(detail):
        raise SlurmParseError(src, f"gres_detail has {len(detail)} entries for {len(names)} nodes")
    out: dict[str, tuple[int, ...]] = {}
    for node, spec in zip(names, detail):
        try:
            idx, _count = gpu_indices(text(spec, "gres_detail", src))
        except ValueError as e:
            raise SlurmParseError(src, f"gres_detail {spec!r:.60}: {e}") from None
        if idx:
            out[node] = idx
    return out


def _alloc_node_names(res: Any) -> list[str]:
    if not isinstance(res, dict):
        return []
    nodes = res.get("nodes")
    if isinstance(nodes, dict) and isinstance(nodes.get("allocation"), list):  # 23.11+
        return [str(a.get("name")) for a in nodes["allocation"] if isinstance(a, dict)]
    alloc = res.get("allocated_nodes")  # 22.05
    if isinstance(alloc, list):
        return [str(a.get("nodename")) for a in alloc if isinstance(a, dict)]
    return []


# ---- nodes -----------------------------------------------------------------------------------


def parse_sinfo(raw: str | bytes, source: str = "sinfo --json") -> tuple[SlurmNode, ...]:
    """22.05 ``sinfo --json``: one entry per node under ``nodes``."""
    data = load(raw, source)
    if "nodes" not in data and "sinfo" in data:
        raise SlurmParseError(source, "grouped sinfo output (Slurm 23.02+): read nodes with 'scontrol show nodes --json'")
    return parse_nodes(data, source)


def parse_nodes(raw: str | bytes | dict[str, Any], source: str = "scontrol show nodes --json") -> tuple[SlurmNode, ...]:
    """Per-node records (22.05 ``sinfo --json`` or 23.02+ ``scontrol show nodes --json``)."""
    data = raw if isinstance(raw, dict) else load(raw, source)
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise SlurmParseError(source, "no 'nodes' list")
    out: dict[str, SlurmNode] = {}
    for i, rec in enumerate(nodes):
        if not isinstance(rec, dict):
            raise SlurmParseError(source, f"node #{i}: expected an object")
        name = text(rec.get("name"), f"node #{i} name", source)
        if not name:
            raise SlurmParseError(source, f"node #{i}: no name")
        src = f"{source}: node {name}"
        base, flags = state_of(rec.get("state"), rec.get("state_flags"), "state", src)
        try:
            _idx, total = gpu_indices(text(rec.get("gres"), "gres", src))
            used_idx, used = gpu_indices(text(rec.get("gres_used"), "gres_used", src))
        except ValueError as e:
            raise SlurmParseError(src, str(e)) from None
        gtype = next((t for n, t, _c, _i in parse_gres(text(rec.get("gres"), "gres", src)) if n == "gpu"), "")
        out[name] = SlurmNode(
            name=name, state=base, flags=flags, gpus=total, gpu_type=gtype, gpus_used=used,
            used_indices=used_idx or (), features=words(rec.get("active_features", rec.get("features")), "features", src),
            partitions=words(rec.get("partitions"), "partitions", src), reason=text(rec.get("reason"), "reason", src),
            alloc_cpus=number(rec.get("alloc_cpus"), "alloc_cpus", src) or 0,
            cpus=number(rec.get("cpus"), "cpus", src) or 0,
            # what jobs may use: less MemSpecLimit, which slurmctld keeps from them (shown from
            # 23.02 on; 22.05's sinfo does not show it)
            real_memory=max(0, (number(rec.get("real_memory"), "real_memory", src) or 0)
                            - (number(rec.get("specialized_memory"), "specialized_memory", src) or 0)),
            alloc_memory=number(rec.get("alloc_memory"), "alloc_memory", src) or 0,
        )
    return tuple(out.values())


# ---- reservations ----------------------------------------------------------------------------


def parse_reservations(raw: str | bytes, source: str = "scontrol show reservation --json") -> tuple[SlurmReservation, ...]:
    data = load(raw, source)
    items = data.get("reservations")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise SlurmParseError(source, "'reservations' is not a list")
    out = []
    for i, rec in enumerate(items):
        if not isinstance(rec, dict):
            raise SlurmParseError(source, f"reservation #{i}: expected an object")
        name = text(rec.get("name"), f"reservation #{i} name", source)
        src = f"{source}: reservation {name}"
        out.append(SlurmReservation(
            name=name, nodes=hosts(rec.get("node_list"), "node_list", src),
            users=words(rec.get("users"), "users", src), flags=tuple(f.upper() for f in words(rec.get("flags"), "flags", src)),
            start_time=_time(rec.get("start_time"), "start_time", src), end_time=_time(rec.get("end_time"), "end_time", src),
            partition=text(rec.get("partition"), "partition", src),
        ))
    return tuple(out)
