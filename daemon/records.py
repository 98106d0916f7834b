"""The typed records every layer above the backends speaks: ``SlurmJob``, ``SlurmNode``,
``SlurmReservation``, ``Snapshot``, the version, the job update and command result, the
errors, and the checks that keep hostile names out of commands.

The parsers (``slurm_json``, ``scontrol_text``) build these records and the backends
(``cli_backend``, ``pyslurm_backend``, ``testing``) return them, so nothing above them
sees Slurm's JSON or text, and every difference between Slurm versions stays in the
parsers. Values that reach Slurm (job ids, node names, reservation and user names) are
checked against strict patterns first: a hostile job name can never become part of a
command.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field


class SlurmError(Exception):
    """Anything that went wrong talking to Slurm."""


class SlurmParseError(SlurmError):
    """Slurm's output could not be understood (malformed, truncated, unexpected version)."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        self.detail = message
        super().__init__(f"{source}: {message}")


class SlurmCommandError(SlurmError):
    """A Slurm command failed: carries its argv, exit status and stderr."""

    def __init__(self, argv: Sequence[str], rc: int | None, stderr: str, stdout: str = "") -> None:
        self.argv = list(argv)
        self.rc = rc
        self.stderr = stderr
        self.stdout = stdout
        what = "timed out" if rc is None else f"failed (exit {rc})"
        err = " ".join(stderr.split())[:500] or "no error output"
        super().__init__(f"{shlex.join(self.argv)} {what}: {err}")


class SlurmUnavailable(SlurmError):
    """Slurm's commands are missing or the controller cannot be reached."""


# ---- what the daemon sees --------------------------------------------------------------------

#: Base job states after which a job holds nothing any more.
FINISHED_STATES = frozenset({
    "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
    "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED",
})
#: States in which a job holds its allocation.
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STAGE_OUT", "SIGNALING", "RESIZING"})

#: Pending reasons under which a job cannot start whatever the daemon does: it is left out of
#: the plan (and left alone) until the reason goes away.
INELIGIBLE_REASONS = frozenset({
    "Dependency", "DependencyNeverSatisfied", "BeginTime", "JobHeldUser", "JobHeldAdmin",
    "PartitionDown", "PartitionInactive", "PartitionTimeLimit", "PartitionNodeLimit",
    "PartitionConfig", "InvalidAccount", "InvalidQOS", "BadConstraints", "ReservationDeleted",
    "FrontEndDown", "NodeDown", "Reservation", "JobHoldMaxRequeue", "BurstBufferOperation",
    # waiting on what no placement changes: licenses, a burst buffer, an array's task limit,
    # an account or policy limit, a passed deadline, a federation lock
    "Licenses", "BurstBufferResources", "BurstBufferStageIn", "JobArrayTaskLimit", "AccountNotAllowed",
    "AccountingPolicy", "ReservationInvalid", "DeadLine", "FedJobLock",
})
#: Association and QOS limits, and every per-account or per-user limit (``MaxCpuPerAccount``,
#: ``MaxMemoryRunMinsPerUser``, ...: src/common/job_state_reason.c) but one: a job kept
#: waiting by ``MaxPoweredUpNodes`` (no more nodes may power up) can start on a node that is
#: up, where the plan puts it (powered-down nodes are not planned on).
_INELIGIBLE_PREFIXES = ("Assoc", "QOS", "Max")
_ELIGIBLE_ALL_THE_SAME = frozenset({"MaxPoweredUpNodes"})

#: Node state flags (or base states) that keep the daemon from planning on a node.
UNUSABLE_NODE_STATES = frozenset({
    "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND",
    "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "POWERING_UP", "POWER_UP", "REBOOT_ISSUED",
    "REBOOT_REQUESTED", "FUTURE", "UNKNOWN", "INVALID", "INVALID_REG", "MAINTENANCE",
})


@dataclass(frozen=True, slots=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int = 0

    @classmethod
    def parse(cls, text: str) -> SlurmVersion:
        """``"22.05.8"``, ``"slurm 24.11.5"``, ``"slurm-wlm 22.05.8"`` -> version."""
        m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
        if not m:
            raise SlurmParseError("version", f"no Slurm version in {text.strip()[:80]!r}")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"

    @property
    def tuple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.micro)

    @property
    def has_scontrol_json(self) -> bool:
        """``scontrol show ... --json`` exists from 23.02 on."""
        return (self.major, self.minor) >= (23, 2)

    @classmethod
    def older_than(cls, text: str, major: int, minor: int, *, unknown: bool) -> bool:
        """Whether the Slurm ``text`` names (``scontrol show config``'s SLURM_VERSION) is
        older than ``major.minor``; ``unknown`` when it names no version."""
        try:
            return cls.parse(text).tuple < (major, minor)
        except SlurmParseError:
            return unknown

    @property
    def squeue_json(self) -> str:
        """``squeue``'s flag for the JSON the daemon reads. From 26.05 on, Slurm's own format
        (data_parser v0.0.45) prints ``"shared": []`` for every job and nothing in its place
        (its source calls the field removed, "replaced by 'oversubscribe' and 'exclusive'",
        which it does not print), so a pending ``--exclusive`` or ``--exclusive=user`` job
        looks like any other and would be pinned where Slurm cannot start it. 26.05 still
        ships v0.0.44, which shows them (recorded: tests/daemon/fixtures/slurm-26.05)."""
        return "--json=v0.0.44" if (self.major, self.minor) >= (26, 5) else "--json"


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm shows it, in every version's output alike.

    ``gpus`` is the job's total; ``gpus_per_node`` is set (and ``per_node_fixed`` true) when
    the job asked for GPUs per node (``--gres=gpu:N`` / ``--gpus-per-node``), which fixes its
    shape to exactly that many on each of ``num_nodes`` nodes. Times are Unix seconds
    (``None`` when unset); ``time_limit`` is in seconds (``None``: unlimited).
    ``gpu_indices`` maps each allocated node to the GPU indices Slurm gave the job there.
    ``cpus`` (in all), ``mem_per_node`` / ``mem_per_cpu`` / ``mem_per_gpu`` (MB, 0 when not
    asked for), ``exclusive`` and ``gpu_type`` are what slurmctld checks on a node besides
    free GPUs; ``exclusive`` is any request or partition setting that keeps the job's nodes
    to it (``--exclusive``, ``--exclusive=user``, ``OverSubscribe=EXCLUSIVE``, ...).
    ``array`` marks a pending job array record: one id for many tasks.
    """

    job_id: str
    name: str = ""
    user: str = ""
    account: str = ""
    partition: str = ""
    state: str = "PENDING"
    reason: str = ""
    gpus: int = 0
    gpus_per_node: int = 0
    per_node_fixed: bool = False
    num_nodes: int = 1
    time_limit: float | None = None
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    priority: int = 0
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    features: str = ""
    nodes: tuple[str, ...] = ()
    gpu_indices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    reservation: str = ""
    held: bool = False
    comment: str = ""
    admin_comment: str = ""
    array: bool = False
    #: A component of a heterogeneous job (``het_job_id``): Slurm starts all components or
    #: none, which a plan of one job at a time cannot promise, so such jobs are left to Slurm.
    heterogeneous: bool = False
    cpus: int = 0
    mem_per_node: int = 0
    mem_per_cpu: int = 0
    mem_per_gpu: int = 0
    mem_set: bool = False  # the user set a memory per node or CPU (``--mem=0`` included)
    cpus_set: bool = False  # the user set CPUs per task or per GPU (``-c``, ``--cpus-per-gpu``)
    exclusive: bool = False
    gpu_type: str = ""
    last_evaluated: float | None = None  # when slurmctld last tried to schedule it

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def eligible(self) -> bool:
        """Pending, not held, not a heterogeneous job's component, and not waiting on
        something the daemon cannot change."""
        if not self.pending or self.held or self.heterogeneous:
            return False
        reason = self.reason.split(",")[0].strip()
        return reason not in INELIGIBLE_REASONS and (
            not reason.startswith(_INELIGIBLE_PREFIXES) or reason in _ELIGIBLE_ALL_THE_SAME)


@dataclass(frozen=True)
class SlurmNode:
    """One node: base state plus flags, GPUs configured and in use (with their indices),
    CPUs and memory (MB) configured and allocated (0 configured: unknown); ``real_memory``
    is what jobs may use (less ``MemSpecLimit`` where Slurm shows it)."""

    name: str
    state: str = "IDLE"
    flags: tuple[str, ...] = ()
    gpus: int = 0
    gpu_type: str = ""
    gpus_used: int = 0
    used_indices: tuple[int, ...] = ()
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    reason: str = ""
    alloc_cpus: int = 0
    cpus: int = 0
    real_memory: int = 0
    alloc_memory: int = 0

    @property
    def usable(self) -> bool:
        return self.state not in UNUSABLE_NODE_STATES and not UNUSABLE_NODE_STATES.intersection(self.flags)

    @property
    def busy(self) -> bool:
        return self.gpus_used > 0 or self.alloc_cpus > 0 or self.state in ("ALLOCATED", "MIXED", "COMPLETING")


@dataclass(frozen=True)
class SlurmReservation:
    name: str
    nodes: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    start_time: float | None = None
    end_time: float | None = None
    partition: str = ""
    state: str = ""  # ACTIVE / INACTIVE where Slurm says so (text output); "" otherwise

    def active(self, now: float) -> bool:
        if self.state:
            return self.state.upper() == "ACTIVE"
        start = self.start_time if self.start_time is not None else 0.0
        end = self.end_time if self.end_time is not None else float("inf")
        return start <= now < end


@dataclass(frozen=True)
class SlurmPartition:
    """A partition as ``scontrol -a -o show partition`` shows it: whether it is the default, and
    what it gives its jobs beyond what they ask (``daemon.job_defaults``)."""

    name: str
    default: bool = False
    job_defaults: str = ""  # its own JobDefaults, "DefCpuPerGPU=2,DefMemPerGPU=2048" ("" for none)
    select_type: str = ""  # its own SelectTypeParameters, "CR_CORE_MEMORY" ("" for the cluster's)


def default_partition(partitions: Iterable[SlurmPartition]) -> str | None:
    """The partition a job that names none goes to (``Default=YES``), if any."""
    return next((p.name for p in partitions if p.default), None)


@dataclass(frozen=True)
class Snapshot:
    """Everything one cycle reads from Slurm, taken at ``taken_at`` (Unix seconds)."""

    version: SlurmVersion
    taken_at: float
    jobs: tuple[SlurmJob, ...]
    nodes: tuple[SlurmNode, ...]
    reservations: tuple[SlurmReservation, ...] = ()
    timings: Mapping[str, float] = field(default_factory=dict)

    def job(self, job_id: str) -> SlurmJob | None:
        return self.jobs_by_id.get(str(job_id))

    @property
    def jobs_by_id(self) -> dict[str, SlurmJob]:
        cached = self.__dict__.get("_jobs_by_id")
        if cached is None:
            cached = {j.job_id: j for j in self.jobs}
            object.__setattr__(self, "_jobs_by_id", cached)
        return cached

    @property
    def nodes_by_name(self) -> dict[str, SlurmNode]:
        return {n.name: n for n in self.nodes}


def in_partitions(job: SlurmJob, partitions: Iterable[str]) -> bool:
    """A job belongs to the managed set when every partition it was submitted to is managed."""
    return managed_partition(job.partition, partitions)


def managed_partition(partition: str, partitions: Iterable[str]) -> bool:
    """Whether every partition of a job's ``partition`` field (``a,b``) is managed."""
    parts = [p for p in partition.split(",") if p]
    wanted = set(partitions)
    return bool(parts) and all(p in wanted for p in parts)


def queue_key(states: Iterable[tuple[str, str, str]], partitions: Sequence[str]) -> tuple[frozenset[str], frozenset[str]]:
    """What a plan rests on among the jobs, from (job id, base state, partition) triples
    (``job_states``, or ``slurm_json.job_states`` read straight from the output): the ids
    of those holding an allocation and of the managed pending ones."""
    active: set[str] = set()
    pending: set[str] = set()
    for job_id, state, partition in states:
        if state in ACTIVE_STATES:
            active.add(job_id)
        elif state == "PENDING" and managed_partition(partition, partitions):
            pending.add(job_id)
    return frozenset(active), frozenset(pending)


def job_states(jobs: Iterable[SlurmJob]) -> Iterator[tuple[str, str, str]]:
    """(job id, base state, partition) of each job, for ``queue_key``."""
    return ((j.job_id, j.state, j.partition) for j in jobs)


def moved(old: Snapshot, new: Snapshot, partitions: Sequence[str]) -> bool:
    """Whether Slurm started or ended jobs, or managed pending jobs came or went, between
    two snapshots: then a plan made on ``old`` is stale."""
    return queue_key(job_states(old.jobs), partitions) != queue_key(job_states(new.jobs), partitions)


# ---- actions ---------------------------------------------------------------------------------

_JOB_ID = re.compile(r"[0-9]{1,12}")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_UPDATABLE = {"Priority", "ReqNodeList", "ReservationName", "ExcNodeList", "AdminComment"}


def job_number(job_id: str) -> int:
    """A job id as the number Slurm orders by (lower first); 0 for ids that are not plain
    numbers (array tasks, het components), which then sort first."""
    return int(job_id) if job_id.isdigit() else 0


def check_job_id(job_id: str | int) -> str:
    text = str(job_id)
    if not _JOB_ID.fullmatch(text):
        raise ValueError(f"refusing job id {text!r}: not a plain Slurm job id")
    return text


def check_name(value: str, what: str) -> str:
    """A node, user or reservation name that may go into a Slurm command."""
    if not _SAFE_NAME.fullmatch(value):
        raise ValueError(f"refusing {what} {value!r}: only letters, digits, '.', '_' and '-' may reach Slurm")
    return value


def node_list(nodes: Iterable[str]) -> str:
    """Comma-separated node names (checked); "" clears a node list."""
    return ",".join(check_name(n, "node name") for n in nodes)


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """``scontrol update JobId=<id> Key=Value ...``; an empty value clears the field."""

    job_id: str
    fields: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        check_job_id(self.job_id)
        for key, value in self.fields:
            if key not in _UPDATABLE:
                raise ValueError(f"refusing to update job field {key!r}")
            if value and key == "Priority" and not value.isdigit():
                raise ValueError(f"priority must be a whole number, got {value!r}")
            if value and key in ("ReqNodeList", "ExcNodeList"):
                node_list(value.split(","))
            if value and key in ("ReservationName", "AdminComment"):
                check_name(value, key)

    def args(self) -> list[str]:
        return ["update", f"JobId={self.job_id}", *(f"{k}={v}" for k, v in self.fields)]


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one Slurm action returned."""

    argv: tuple[str, ...]
    ok: bool
    rc: int | None = 0
    stderr: str = ""
    seconds: float = 0.0

    @property
    def error(self) -> str:
        return "" if self.ok else (" ".join(self.stderr.split())[:300] or f"exit {self.rc}")


#: What slurmctld being down looks like in a command's error (the cli backend's own timeout too).
_GONE = ("timed out", "Unable to contact slurm controller", "Connection refused", "Socket timed out",
         "no answer within")  # the last is cli_backend's own timeout
NOT_SENT = "not sent: slurmctld stopped answering earlier in this cycle"
#: Slurm's words (22.05 to 24.05) for an update of a job slurmdbd has not yet registered
#: (ESLURM_JOB_SETTING_DB_INX; daemon/unregistered.py).
DB_INDEX_REFUSAL = "the DB index is being set"
#: The reservation flag that keeps Slurm from holding the jobs still waiting in a reservation
#: when it ends (Slurm's default; ``Flags=`` in ``scontrol create/update reservation``; shown
#: as NO_HOLD_JOBS_AFTER_END). Flags are added by an update, never removed.
NO_HOLD_AFTER_END = "NO_HOLD_JOBS_AFTER"


def reservation_flags(ignore_jobs: bool) -> tuple[str, ...]:
    """The flags of a reservation the daemon creates: `NO_HOLD_AFTER_END` always, and
    ``IGNORE_JOBS`` when a job still runs on its nodes."""
    return ("IGNORE_JOBS", NO_HOLD_AFTER_END) if ignore_jobs else (NO_HOLD_AFTER_END,)


def controller_gone(error: str) -> bool:
    """Whether a command's error says slurmctld is not answering (not a refused action)."""
    return any(g in error for g in _GONE)


def refused_for_db_index(error: str) -> bool:
    """Whether an update's error is Slurm waiting for slurmdbd to register the job."""
    return DB_INDEX_REFUSAL in error
