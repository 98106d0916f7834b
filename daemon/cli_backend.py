"""The ``cli`` backend (the default): Slurm's own commands.

Reads with ``squeue --json -t all`` (``--json=v0.0.44`` from 26.05 on:
`SlurmVersion.squeue_json`) plus, for nodes and reservations, ``sinfo --json`` /
``scontrol -o show reservation`` on 22.05 and ``scontrol show nodes|reservation --json``
from 23.02 on. Writes with ``scontrol update|create|delete|hold|release``; many job updates
go to one ``scontrol`` process on its standard input (one RPC each, one process in all).
Every command is an argv list (never a shell), runs with a timeout, and a failure raises
``SlurmCommandError`` carrying the argv, exit status and stderr.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from . import scontrol_text, slurm_json
from .backend import BackendMixin
from .records import (
    NO_HOLD_AFTER_END,
    NOT_SENT,
    CommandResult,
    JobUpdate,
    SlurmCommandError,
    SlurmError,
    SlurmParseError,
    SlurmPartition,
    SlurmUnavailable,
    SlurmVersion,
    Snapshot,
    check_job_id,
    check_name,
    controller_gone,
    job_states,
    node_list,
    queue_key,
    reservation_flags,
)

_ERROR_JOB = re.compile(r"(?:for job|JobId=|job_id=|job)\s*([0-9]+)", re.IGNORECASE)
_BATCH_MAX = 500  # updates per scontrol process
_ALONE_WORKERS = 8  # scontrol processes at once when a failed batch is retried update by update


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a bulk output is parsed.

    ``squeue --json`` of a large queue becomes millions of containers at once (24.11 wraps
    every number in a dict), and each few hundred of them the collector would walk the
    whole young heap again: about half of the parse time at 10,000 jobs. The parsed data
    holds no cycles (it is freed by reference counting), so nothing is lost by waiting."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
                self._version = slurm_json.parse_squeue(self.run(["squeue", "--json", "-t", "all"]).stdout).version
        if self._version is None:
            raise SlurmParseError("squeue --json", "no Slurm version in the output")
        return self._version

    def config(self) -> dict[str, str]:
        return scontrol_text.parse_config(self.run(["scontrol", "show", "config"]).stdout)

    def partitions(self) -> tuple[SlurmPartition, ...]:
        return scontrol_text.parse_partitions(self.run(["scontrol", "-a", "-o", "show", "partition"]).stdout)  # -a: hidden ones too

    def read_commands(self) -> dict[str, list[str]]:
        """The argv of each read the snapshot makes, for this Slurm version."""
        version = self.version()
        jobs = ["squeue", version.squeue_json, "-t", "all"]
        if version.has_scontrol_json:
            return {"jobs": jobs, "nodes": ["scontrol", "show", "nodes", "--json"],
                    "reservations": ["scontrol", "show", "reservation", "--json"]}
        return {"jobs": jobs, "nodes": ["sinfo", "--json"],
                "reservations": ["scontrol", "-o", "show", "reservation"]}

    def snapshot(self) -> Snapshot:
        taken = time.time()
        out, timings = self._read(("jobs", "nodes", "reservations"))
        return self._parse(out["jobs"], out["nodes"], out["reservations"], taken, timings)

    def read_back(self, old: Snapshot, partitions: Sequence[str]) -> Snapshot | None:
        """``squeue`` alone first, keyed on light records (``slurm_json.job_states``); the
        nodes and reservations are read, and that same ``squeue`` output parsed in full,
        only when jobs moved. The loaded output is dropped before the collector resumes,
        which would otherwise walk each of its million objects once more."""
        taken = time.time()
        out, timings = self._read(("jobs",))
        with gc_paused():
            jobs = slurm_json.load(out.pop("jobs"), "squeue --json")
            if queue_key(slurm_json.job_states(jobs), partitions) == queue_key(job_states(old.jobs), partitions):
                del jobs
                return None
            rest, more = self._read(("nodes", "reservations"))
            timings.update(more, read=timings["read"] + more["read"])
            fresh = self._parse(jobs, rest["nodes"], rest["reservations"], taken, timings)
            del jobs
        return fresh

    def _read(self, which: Sequence[str]) -> tuple[dict[str, str], dict[str, float]]:
        """Run the named reads (``read_commands``) in parallel: their outputs, and the
        seconds each took and all together (``read_<name>``, ``read``)."""
        cmds = self.read_commands()

        def timed(argv: list[str]) -> tuple[str, float]:
            s = time.monotonic()
            return self.run(argv).stdout, time.monotonic() - s

        t0 = time.monotonic()
        futures = {k: self._pool.submit(timed, cmds[k]) for k in which}
        done = {k: f.result() for k, f in futures.items()}
        timings = {"read": time.monotonic() - t0, **{f"read_{k}": v[1] for k, v in done.items()}}
        return {k: v[0] for k, v in done.items()}, timings

    def _parse(self, jobs: str | dict[str, Any], nodes: str, reservations: str, taken: float,
               timings: dict[str, float]) -> Snapshot:
        """A snapshot from the reads' outputs (``jobs`` possibly loaded already)."""
        version = self.version()
        t0 = time.monotonic()
        with gc_paused():
            jobs_parsed = slurm_json.parse_squeue(jobs)
            if version.has_scontrol_json:
                parsed_nodes = slurm_json.parse_nodes(nodes, source="scontrol show nodes --json")
                resv = slurm_json.parse_reservations(reservations)
            else:
                parsed_nodes = slurm_json.parse_sinfo(nodes)
                resv = scontrol_text.parse_reservations(reservations)
        timings["parse"] = time.monotonic() - t0
        return Snapshot(version=jobs_parsed.version or version, taken_at=taken, jobs=jobs_parsed.jobs,
                        nodes=parsed_nodes, reservations=resv, timings=timings)

    # -- writes --
    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[CommandResult]:
        """Apply job updates in order. One update: ``scontrol update ...``. Several: one
        ``scontrol`` process reading them from stdin (each still one RPC, in order); its
        stderr names the job of each failure ("... for job 12"). When the batch fails as a
        whole (no answer in time, or a failure that cannot be tied to a job), every update
        of it is retried alone (they are idempotent; ``_alone``)."""
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
            return self._alone(updates)
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
            return self._alone(updates)
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

    def _alone(self, updates: list[JobUpdate]) -> list[CommandResult]:
        """Each update in its own ``scontrol``, jobs side by side (each job's own updates in
        order): Slurm before 24.11 holds an update of a job slurmdbd has not registered for
        5 s before it refuses it (daemon/unregistered.py), and a batch of such jobs one
        after another would take minutes. Once one shows slurmctld gone, the updates not yet
        started are not sent."""
        by_job: dict[str, list[int]] = {}
        for i, u in enumerate(updates):
            by_job.setdefault(u.job_id, []).append(i)
        out: list[CommandResult] = [CommandResult(("scontrol", *u.args()), False, None, NOT_SENT) for u in updates]
        gone = threading.Event()

        def run_job(indices: list[int]) -> None:
            for i in indices:
                if gone.is_set():
                    return
                out[i] = r = self._result(["scontrol", *updates[i].args()])
                if not r.ok and controller_gone(r.error):
                    gone.set()

        with concurrent.futures.ThreadPoolExecutor(max_workers=min(_ALONE_WORKERS, len(by_job)),
                                                   thread_name_prefix="slurm-update") as pool:
            list(pool.map(run_job, by_job.values()))
        return out

    def create_reservation(self, name: str, nodes: Sequence[str], users: Sequence[str],
                           minutes: int, ignore_jobs: bool) -> CommandResult:
        argv = ["scontrol", "create", "reservation", f"ReservationName={check_name(name, 'reservation')}",
                f"Nodes={node_list(nodes)}", f"Users={','.join(check_name(u, 'user') for u in users)}",
                "StartTime=now", f"Duration={max(1, int(minutes))}",
                "Flags=" + ",".join(reservation_flags(ignore_jobs))]
        return self._result(argv)

    def update_reservation(self, name: str, **fields: str) -> CommandResult:
        allowed = {"Nodes", "Users", "Duration", "EndTime", "Flags"}
        args = []
        flags = [NO_HOLD_AFTER_END]  # also on reservations made before it was (flags only add up)
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
            if key == "Flags":
                flags.insert(0, value)
                continue
            args.append(f"{key}={value}")
        args.append("Flags=" + ",".join(flags))
        return self._result(["scontrol", "update", f"ReservationName={check_name(name, 'reservation')}", *args])

    def delete_reservation(self, name: str) -> CommandResult:
        return self._result(["scontrol", "delete", f"ReservationName={check_name(name, 'reservation')}"])

    def hold(self, job_ids: Sequence[str]) -> CommandResult:
        return self._result(["scontrol", "hold", ",".join(check_job_id(j) for j in job_ids)])

    def release(self, job_ids: Sequence[str]) -> CommandResult:
        return self._result(["scontrol", "release", ",".join(check_job_id(j) for j in job_ids)])
