"""The Slurm backend interface: one bulk snapshot per cycle, and the few actions a plan needs.

Everything above this module speaks in the typed records defined here (``SlurmJob``,
``SlurmNode``, ``SlurmReservation``, ``Snapshot``), never in Slurm's JSON or text, so the
parsers (``slurm_json``, ``scontrol_text``) absorb every difference between Slurm versions.

Backends:

- ``CliBackend`` (``backend = "cli"``, the default): Slurm's own commands. Reads with
  ``squeue --json -t all`` plus, for nodes and reservations, ``sinfo --json`` /
  ``scontrol -o show reservation`` on 22.05 and ``scontrol show nodes|reservation --json``
  from 23.02 on. Writes with ``scontrol update|create|delete|hold|release``; many job updates
  go to one ``scontrol`` process on its standard input (one RPC each, one process in all).
  Every command is an argv list (never a shell), runs with a timeout, and a failure raises
  ``SlurmCommandError`` carrying the argv, exit status and stderr.
- ``PyslurmBackend`` (``backend = "pyslurm"``, in ``daemon/pyslurm_backend.py``): only
  when ``import pyslurm`` works against the running Slurm.

Values that reach Slurm (job ids, node names, reservation and user names) are checked
against strict patterns first: a hostile job name can never become part of a command.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol, Sequence

# ---- errors --------------------------------------------------------------------------------


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
    "FrontEndDown", "NodeDown", "Reservation",
})
_INELIGIBLE_PREFIXES = ("Assoc", "QOS", "MaxCpuPerAccount", "MaxGRESPerAccount", "MaxJobsPerAccount")

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


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm shows it, in every version's output alike.

    ``gpus`` is the job's total; ``gpus_per_node`` is set (and ``per_node_fixed`` true) when
    the job asked for GPUs per node (``--gres=gpu:N`` / ``--gpus-per-node``), which fixes its
    shape to exactly that many on each of ``num_nodes`` nodes. Times are Unix seconds
    (``None`` when unset); ``time_limit`` is in seconds (``None``: unlimited).
    ``gpu_indices`` maps each allocated node to the GPU indices Slurm gave the job there.
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
    array: bool = False  # a pending job array record (many tasks behind one id)

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
        """Pending, not held, and not waiting on something the daemon cannot change."""
        if not self.pending or self.held or self.array:
            return False
        reason = self.reason.split(",")[0].strip()
        return reason not in INELIGIBLE_REASONS and not reason.startswith(_INELIGIBLE_PREFIXES)


@dataclass(frozen=True)
class SlurmNode:
    """One node: base state plus flags, GPUs configured and in use (with their indices)."""

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

    @property
    def reservations_by_name(self) -> dict[str, SlurmReservation]:
        return {r.name: r for r in self.reservations}


# ---- actions ---------------------------------------------------------------------------------

_JOB_ID = re.compile(r"[0-9]{1,12}")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_UPDATABLE = {"Priority", "ReqNodeList", "ReservationName", "ExcNodeList", "AdminComment"}


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


class Backend(Protocol):
    """What the cycle needs from Slurm. All write methods return ``CommandResult``s instead of
    raising for per-action failures (a failed action must not stop the rest of a plan);
    reads raise ``SlurmError``."""

    name: str

    def version(self) -> SlurmVersion: ...
    def snapshot(self) -> Snapshot: ...
    def config(self) -> dict[str, str]: ...
    def default_partition(self) -> str | None: ...
    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[CommandResult]: ...
    def create_reservation(self, name: str, nodes: Sequence[str], users: Sequence[str],
                           minutes: int, ignore_jobs: bool) -> CommandResult: ...
    def update_reservation(self, name: str, **fields: str) -> CommandResult: ...
    def delete_reservation(self, name: str) -> CommandResult: ...
    def hold(self, job_ids: Sequence[str]) -> CommandResult: ...
    def release(self, job_ids: Sequence[str]) -> CommandResult: ...


class BackendMixin:
    """The one-job conveniences, on top of ``update_jobs``."""

    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[CommandResult]:  # pragma: no cover - abstract
        raise NotImplementedError

    def set_priority(self, job_id: str, priority: int) -> CommandResult:
        if not 1 <= int(priority) < 0xFFFFFFFE:
            raise ValueError(f"priority {priority} out of range (1 .. 4294967293; 0 would hold the job)")
        return self.update_jobs([JobUpdate(job_id, (("Priority", str(int(priority))),))])[0]

    def pin(self, job_id: str, nodes: Sequence[str]) -> CommandResult:
        if not nodes:
            raise ValueError("pin needs at least one node")
        return self.update_jobs([JobUpdate(job_id, (("ReqNodeList", node_list(nodes)),))])[0]

    def unpin(self, job_id: str) -> CommandResult:
        return self.update_jobs([JobUpdate(job_id, (("ReqNodeList", ""),))])[0]

    def attach(self, job_id: str, reservation: str) -> CommandResult:
        return self.update_jobs([JobUpdate(job_id, (("ReservationName", check_name(reservation, "reservation")),))])[0]

    def detach(self, job_id: str) -> CommandResult:
        return self.update_jobs([JobUpdate(job_id, (("ReservationName", ""),))])[0]


# ---- the cli backend -------------------------------------------------------------------------

_ERROR_JOB = re.compile(r"(?:for job|JobId=|job_id=|job)\s*([0-9]+)", re.IGNORECASE)
_BATCH_MAX = 500  # updates per scontrol process


class CliBackend(BackendMixin):
    """Slurm through its command-line clients (argv lists, timeouts, no shell)."""

    name = "cli"

    def __init__(self, slurm_conf: str | None = None, timeout: float = 30.0,
                 bin_dir: str | None = None) -> None:
        self.slurm_conf = slurm_conf or None
        self.timeout = float(timeout)
        self.bin_dir = bin_dir or None
        self._version: SlurmVersion | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=3, thread_name_prefix="slurm-read")

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    # -- running commands --
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        env.setdefault("LANG", "C.UTF-8")
        return env

    def _argv(self, argv: Sequence[str]) -> list[str]:
        argv = [str(a) for a in argv]
        if self.bin_dir:
            argv[0] = os.path.join(self.bin_dir, argv[0])
        return argv

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run one Slurm command; ``SlurmCommandError`` on failure when ``check``."""
        full = self._argv(argv)
        try:
            proc = subprocess.run(
                full, input=input, stdin=None if input is not None else subprocess.DEVNULL,
                capture_output=True, text=True, errors="replace", env=self._env(),
                timeout=timeout or self.timeout,
            )
        except FileNotFoundError:
            raise SlurmUnavailable(f"{full[0]}: command not found (install Slurm's client commands or set slurm_bin_dir)") from None
        except subprocess.TimeoutExpired as exc:
            out = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            raise SlurmCommandError(full, None, out or f"no answer within {timeout or self.timeout:g} s") from None
        if check and proc.returncode != 0:
            raise SlurmCommandError(full, proc.returncode, proc.stderr, proc.stdout)
        return proc

    def _result(self, argv: Sequence[str], input: str | None = None) -> CommandResult:
        t0 = time.monotonic()
        try:
            proc = self.run(argv, input=input, check=False)
        except SlurmCommandError as exc:
            return CommandResult(tuple(exc.argv), False, exc.rc, exc.stderr, time.monotonic() - t0)
        except SlurmUnavailable as exc:
            return CommandResult(tuple(argv), False, 127, str(exc), time.monotonic() - t0)
        ok = proc.returncode == 0
        return CommandResult(tuple(self._argv(argv)), ok, proc.returncode, proc.stderr.strip(), time.monotonic() - t0)

    # -- reads --
    def version(self) -> SlurmVersion:
        if self._version is None:
            try:
                self._version = SlurmVersion.parse(self.run(["scontrol", "--version"]).stdout)
            except SlurmError:
                from .slurm_json import parse_squeue

                self._version = parse_squeue(self.run(["squeue", "--json", "-t", "all"]).stdout).version
        return self._version

    def config(self) -> dict[str, str]:
        from .scontrol_text import parse_config

        return parse_config(self.run(["scontrol", "show", "config"]).stdout)

    def default_partition(self) -> str | None:
        from .scontrol_text import parse_lines

        for rec in parse_lines(self.run(["scontrol", "-o", "show", "partition"]).stdout, "scontrol show partition"):
            if rec.get("Default", "").upper() == "YES":
                return rec.get("PartitionName")
        return None

    def read_commands(self) -> dict[str, list[str]]:
        """The argv of each read the snapshot makes, for this Slurm version."""
        if self.version().has_scontrol_json:
            return {"jobs": ["squeue", "--json", "-t", "all"], "nodes": ["scontrol", "show", "nodes", "--json"],
                    "reservations": ["scontrol", "show", "reservation", "--json"]}
        return {"jobs": ["squeue", "--json", "-t", "all"], "nodes": ["sinfo", "--json"],
                "reservations": ["scontrol", "-o", "show", "reservation"]}

    def snapshot(self) -> Snapshot:
        from . import scontrol_text, slurm_json

        version = self.version()
        cmds = self.read_commands()
        t0 = time.monotonic()
        taken = time.time()

        def timed(argv: list[str]) -> tuple[str, float]:
            s = time.monotonic()
            return self.run(argv).stdout, time.monotonic() - s

        futures = {k: self._pool.submit(timed, v) for k, v in cmds.items()}
        out = {k: f.result() for k, f in futures.items()}
        t_read = time.monotonic() - t0
        jobs_parsed = slurm_json.parse_squeue(out["jobs"][0])
        if version.has_scontrol_json:
            nodes = slurm_json.parse_nodes(out["nodes"][0], source="scontrol show nodes --json")
            resv = slurm_json.parse_reservations(out["reservations"][0])
        else:
            nodes = slurm_json.parse_sinfo(out["nodes"][0])
            resv = scontrol_text.parse_reservations(out["reservations"][0])
        return Snapshot(
            version=jobs_parsed.version or version, taken_at=taken, jobs=jobs_parsed.jobs, nodes=nodes,
            reservations=resv,
            timings={"read": t_read, "parse": time.monotonic() - t0 - t_read,
                     **{f"read_{k}": v[1] for k, v in out.items()}},
        )

    # -- writes --
    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[CommandResult]:
        """Apply job updates in order. One update: ``scontrol update ...``. Several: one
        ``scontrol`` process reading them from stdin (each still one RPC, in order); its
        stderr names the job of each failure ("... for job 12"). When a failure cannot be
        tied to a job, every update of that batch is retried alone (they are idempotent)."""
        updates = list(updates)
        if not updates:
            return []
        if len(updates) == 1:
            return [self._result(["scontrol", *updates[0].args()])]
        results: list[CommandResult] = []
        for start in range(0, len(updates), _BATCH_MAX):
            results.extend(self._batch(updates[start : start + _BATCH_MAX]))
        return results

    def _batch(self, updates: list[JobUpdate]) -> list[CommandResult]:
        text = "".join(" ".join(u.args()) + "\n" for u in updates)
        t0 = time.monotonic()
        timeout = max(self.timeout, 0.05 * len(updates))
        try:
            proc = self.run(["scontrol"], input=text, timeout=timeout, check=False)
        except SlurmError:
            return [self._result(["scontrol", *u.args()]) for u in updates]
        per = (time.monotonic() - t0) / len(updates)
        if proc.returncode == 0 and not proc.stderr.strip():
            return [CommandResult(("scontrol", *u.args()), True, 0, "", per) for u in updates]
        errors: dict[str, list[str]] = {}
        unmapped = False
        for line in proc.stderr.splitlines():
            if not line.strip():
                continue
            m = _ERROR_JOB.search(line)
            if m:
                errors.setdefault(m.group(1), []).append(line.strip())
            else:
                unmapped = True
        if unmapped or not errors:
            return [self._result(["scontrol", *u.args()]) for u in updates]
        # A job with several updates in the batch: retry them alone to know which one failed.
        counts: dict[str, int] = {}
        for u in updates:
            counts[u.job_id] = counts.get(u.job_id, 0) + 1
        out = []
        for u in updates:
            if u.job_id not in errors:
                out.append(CommandResult(("scontrol", *u.args()), True, 0, "", per))
            elif counts[u.job_id] > 1:
                out.append(self._result(["scontrol", *u.args()]))
            else:
                out.append(CommandResult(("scontrol", *u.args()), False, proc.returncode, "; ".join(errors[u.job_id]), per))
        return out

    def create_reservation(self, name: str, nodes: Sequence[str], users: Sequence[str],
                           minutes: int, ignore_jobs: bool) -> CommandResult:
        argv = ["scontrol", "create", "reservation", f"ReservationName={check_name(name, 'reservation')}",
                f"Nodes={node_list(nodes)}", f"Users={','.join(check_name(u, 'user') for u in users)}",
                "StartTime=now", f"Duration={max(1, int(minutes))}"]
        if ignore_jobs:
            argv.append("Flags=IGNORE_JOBS")
        return self._result(argv)

    def update_reservation(self, name: str, **fields: str) -> CommandResult:
        allowed = {"Nodes", "Users", "Duration", "EndTime", "Flags"}
        args = []
        for key, value in fields.items():
            if key not in allowed:
                raise ValueError(f"refusing to update reservation field {key!r}")
            if key == "Nodes":
                value = node_list(value.split(","))
            elif key == "Users":
                value = ",".join(check_name(u, "user") for u in value.split(","))
            elif key == "Flags":
                if not re.fullmatch(r"[-+]?[A-Z_]+(,[-+]?[A-Z_]+)*", value):
                    raise ValueError(f"bad reservation flags {value!r}")
            elif key == "Duration" and not str(value).isdigit():
                raise ValueError(f"Duration must be whole minutes, got {value!r}")
            elif key == "EndTime" and not re.fullmatch(r"now(\+[0-9]{1,6})?|[0-9T:-]{10,19}", str(value)):
                raise ValueError(f"EndTime must be 'now', 'now+SECONDS' or YYYY-MM-DDTHH:MM:SS, got {value!r}")
            args.append(f"{key}={value}")
        return self._result(["scontrol", "update", f"ReservationName={check_name(name, 'reservation')}", *args])

    def delete_reservation(self, name: str) -> CommandResult:
        return self._result(["scontrol", "delete", f"ReservationName={check_name(name, 'reservation')}"])

    def hold(self, job_ids: Sequence[str]) -> CommandResult:
        return self._result(["scontrol", "hold", ",".join(check_job_id(j) for j in job_ids)])

    def release(self, job_ids: Sequence[str]) -> CommandResult:
        return self._result(["scontrol", "release", ",".join(check_job_id(j) for j in job_ids)])


def make_backend(name: str, *, slurm_conf: str | None = None, timeout: float = 30.0,
                 bin_dir: str | None = None) -> Backend:
    """``cli`` or ``pyslurm``; the latter raises ``SlurmUnavailable`` with the reason when
    pyslurm cannot be used here."""
    if name == "cli":
        return CliBackend(slurm_conf=slurm_conf, timeout=timeout, bin_dir=bin_dir)
    if name == "pyslurm":
        from .pyslurm_backend import PyslurmBackend

        return PyslurmBackend(slurm_conf=slurm_conf, timeout=timeout, bin_dir=bin_dir)
    raise ValueError(f"unknown backend {name!r}: use 'cli' or 'pyslurm'")
