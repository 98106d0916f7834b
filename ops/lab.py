"""Python handle on the attentived Slurm lab: a real multi-node Slurm on this machine.

The lab itself is a set of shell scripts shipped as package data in ``attentived/slurmlab/``
(``install.sh``, ``start.sh``, ``stop.sh``, ``reset.sh`` and the config templates): one slurmctld
and N slurmd ("node1".."nodeN") with 8 fake H100 GPUs each and, unless ``accounting=False``,
slurmdbd on its own MariaDB (an account "lab" with the users, the service user
``attentived`` an operator), all running as root under a run directory (default
``/tmp/attentived-lab``). ``slurm="24.11"`` (or ``ATTENTIVED_LAB_SLURM``) runs Slurm 24.11:
the host's own packages on Debian 13, on Debian 12 a Debian 13 root built once (``prepare()``)
in which every daemon and, through ``run_dir/client-bin``, every client command runs. This
module starts and stops it and runs Slurm commands against it, always with argv lists and
timeouts::

    from attentived.ops.lab import Lab

    lab = Lab()                      # or Lab(run_dir="/tmp/x", nodes=16, port_base=18817)
    lab.start()                      # about 7 s; needs root and Slurm (see install())
    job = lab.submit("alice", 2, script="nvidia-smi || echo $CUDA_VISIBLE_DEVICES")
    lab.wait_for_state(job, "COMPLETED")
    print(lab.output(job), lab.squeue_json()["jobs"][-1]["job_state"])
    lab.reset()                      # cancel jobs, drop reservations, resume nodes
    lab.stop()

``Lab`` is also a context manager (start on enter, stop on exit).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path

__all__ = [
    "DEFAULT_PORT_BASE",
    "DEFAULT_RUN_DIR",
    "GPUS_PER_NODE",
    "Lab",
    "LabError",
    "OPERATOR",
    "USERS",
    "install",
    "parse_scontrol_line",
    "scripts_dir",
    "slurm_installed",
]

DEFAULT_RUN_DIR = "/tmp/attentived-lab"
DEFAULT_PORT_BASE = 17817
GPUS_PER_NODE = 8
USERS = ("alice", "bob", "carol")
#: The daemon's service user in the lab: no root, Slurm operator rights from slurmdbd.
OPERATOR = "attentived"
PARTITIONS = ("main", "other")

_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_SLURM_VERSION = re.compile(r"^[0-9]+\.[0-9]+$")
# processes that belong to a lab: these executables, naming the run dir (see common.sh)
_DAEMON_EXES = ("slurmctld", "slurmd", "slurmstepd", "munged", "mariadbd", "mysqld")
# the environment user submissions run with (a job inherits its submitter's environment)
_USER_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


class LabError(RuntimeError):
    """A lab script or Slurm command failed; ``output`` holds what it printed."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(f"{message}\n{output}".rstrip())
        self.output = output


def scripts_dir() -> Path:
    """The directory holding the lab scripts (package data ``attentived/slurmlab``)."""
    path = Path(str(resources.files("attentived").joinpath("slurmlab")))
    if not (path / "start.sh").is_file():
        raise LabError(f"lab scripts not found in {path} (is attentived installed with its package data?)")
    return path


def _run_script(name: str, args: Sequence[str] = (), *, env: Mapping[str, str] | None = None,
                timeout: float = 120) -> str:
    argv = ["bash", str(scripts_dir() / name), *args]
    try:
        proc = subprocess.run(argv, env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise LabError(f"{name} timed out after {timeout:g} s", out) from exc
    if proc.returncode != 0:
        raise LabError(f"{name} {shlex.join(args)} failed (exit {proc.returncode})", proc.stdout)
    return proc.stdout


def slurm_installed() -> bool:
    """True when slurmctld, slurmd, the client commands, munged and, for accounting, slurmdbd
    and MariaDB are installed."""
    try:
        _run_script("install.sh", ["--check"], timeout=30)
    except LabError:
        return False
    return True


def install(timeout: float = 900) -> str:
    """Install Slurm, munge, slurmdbd and MariaDB with apt-get (root only); a no-op when they
    are there."""
    return _run_script("install.sh", timeout=timeout)


def parse_scontrol_line(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value two`` (``scontrol -o show ...``) -> dict.

    A word without ``=`` continues the previous value (values such as ``Reason=`` may hold
    spaces); keys like ``AllocNode:Sid`` are kept as printed.
    """
    out: dict[str, str] = {}
    key = None
    for word in line.split():
        k, sep, v = word.partition("=")
        if sep and k[:1].isalpha():
            key = k
            out[key] = v
        elif key is not None:
            out[key] += " " + word
    return out


class Lab:
    """One lab instance, identified by its run directory.

    ``nodes``, ``nodes_per_switch``, ``port_base`` and the scheduler settings only matter for
    ``start()``; the others work on whatever lab runs in ``run_dir``.
    """

    def __init__(self, run_dir: str | os.PathLike[str] | None = None, nodes: int = 4, *,
                 nodes_per_switch: int = 2, port_base: int | None = None,
                 sched_type: str | None = None, prio_type: str | None = None,
                 sched_params: str | None = None, extra_conf: str | None = None,
                 topology: str | None = None, warmup: bool = True, users: Iterable[str] = USERS,
                 accounting: bool = True, operator: str | None = OPERATOR,
                 slurm: str | None = None, timeout: float = 30) -> None:
        self.run_dir = Path(run_dir or os.environ.get("ATTENTIVED_LAB_RUN") or DEFAULT_RUN_DIR)
        # "": the host's own Slurm; None: ATTENTIVED_LAB_SLURM decides (unset: the host's)
        self.slurm = os.environ.get("ATTENTIVED_LAB_SLURM", "") if slurm is None else slurm
        if self.slurm and not _SLURM_VERSION.match(self.slurm):
            raise ValueError(f"bad Slurm version {self.slurm!r} (e.g. '24.11')")
        self.nodes = int(nodes)
        self.nodes_per_switch = int(nodes_per_switch)
        env_port = os.environ.get("ATTENTIVED_LAB_PORT_BASE")
        self.port_base = int(port_base if port_base is not None else env_port or DEFAULT_PORT_BASE)
        self.sched_type = sched_type
        self.prio_type = prio_type
        self.sched_params = sched_params
        self.extra_conf = extra_conf
        self.topology = topology  # topology.conf's text instead of the lab's switches
        self.warmup = warmup
        self.users = tuple(users)
        self.accounting = bool(accounting)
        self.operator = operator or ""
        for u in (*self.users, *([self.operator] if self.operator else [])):
            if not _NAME.match(u):
                raise ValueError(f"bad user name {u!r}")
        self.timeout = timeout

    def __repr__(self) -> str:
        slurm = f", slurm={self.slurm!r}" if self.slurm else ""
        return f"Lab(run_dir={str(self.run_dir)!r}, nodes={self.nodes}, port_base={self.port_base}{slurm})"

    # ---- paths ---------------------------------------------------------------------------
    @property
    def slurm_conf(self) -> Path:
        return self.run_dir / "etc" / "slurm.conf"

    @property
    def client_bin(self) -> Path:
        """Where a lab whose Slurm runs in a Debian root keeps its client commands (which run
        inside that root); absent for a lab of the host's own Slurm."""
        return self.run_dir / "client-bin"

    @property
    def jobs_dir(self) -> Path:
        """World-writable (1777) directory where ``submit`` puts job output (``<id>.out``)."""
        return self.run_dir / "jobs"


    def output_path(self, job_id: int) -> Path:
        return self.jobs_dir / f"{int(job_id)}.out"

    def output(self, job_id: int) -> str:
        return self.output_path(job_id).read_text()

    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    # ---- life cycle ----------------------------------------------------------------------
    def _script_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["ATTENTIVED_LAB_RUN"] = str(self.run_dir)
        env["ATTENTIVED_LAB_SLURM"] = self.slurm
        env.pop("SLURM_CONF", None)
        return env

    def prepare(self, timeout: float = 1800) -> Path | None:
        """The Debian root this lab's Slurm runs in, built first when missing (root.sh: root
        and network to the Debian mirror, about a minute; cached for every later start).
        None when the host's own Slurm serves (no ``slurm`` asked, or the host's release
        ships it). LabError, saying what failed, when the root cannot be built."""
        if not self.slurm:
            return None
        try:
            out = _run_script("root.sh", [self.slurm], env=self._script_env(), timeout=timeout)
        except LabError as exc:  # root.sh's last line names the step that failed
            lines = exc.output.strip().splitlines()
            raise LabError(lines[-1].removeprefix("slurm lab: ") if lines else str(exc), exc.output) from None
        lines = out.strip().splitlines()
        return Path(lines[-1]) if lines and lines[-1].startswith("/") else None

    def start(self, timeout: float = 180) -> float:
        """Wipe the run dir and start the lab; returns the seconds the start took (building
        the Debian root a ``slurm`` version may need, ``prepare()``, comes first, uncounted).

        Raises LabError when it is already running (``stop()`` first) or does not come up.
        """
        self.prepare()
        args = ["--nodes", str(self.nodes), "--nodes-per-switch", str(self.nodes_per_switch),
                "--port-base", str(self.port_base)]
        if self.slurm:
            args += ["--slurm", self.slurm]
        t0 = time.monotonic()
        _run_script("start.sh", args, env=self._start_env(), timeout=timeout)
        return time.monotonic() - t0

    def render(self, timeout: float = 30) -> Path:
        """Write the configuration files ``start()`` would write into ``run_dir/etc``, without
        starting anything."""
        args = ["--render-only", "--nodes", str(self.nodes), "--nodes-per-switch",
                str(self.nodes_per_switch), "--port-base", str(self.port_base)]
        _run_script("start.sh", args, env=self._start_env(), timeout=timeout)
        return self.run_dir / "etc"

    def _start_env(self) -> dict[str, str]:
        """start.sh's settings for this lab (users, accounting, scheduler, extra lines)."""
        env = self._script_env()
        env["ATTENTIVED_LAB_USERS"] = " ".join(self.users)
        env["ATTENTIVED_LAB_WARMUP"] = "1" if self.warmup else "0"
        env["ATTENTIVED_LAB_ACCOUNTING"] = "1" if self.accounting else "0"
        env["ATTENTIVED_LAB_OPERATOR"] = self.operator
        for key, value in (("SCHED_TYPE", self.sched_type), ("PRIO_TYPE", self.prio_type),
                           ("SCHED_PARAMS", self.sched_params), ("EXTRA_CONF", self.extra_conf),
                           ("TOPOLOGY", self.topology)):
            if value is not None:
                env[f"ATTENTIVED_LAB_{key}"] = value
        return env

    def stop(self, timeout: float = 90) -> None:
        """Cancel the lab's jobs, end all its daemons and unmount its Debian root, if it has
        one (files stay in the run dir)."""
        if not self.run_dir.exists():
            return
        _run_script("stop.sh", env=self._script_env(), timeout=timeout)

    def reset(self, timeout: float = 60) -> None:
        """Cancel all jobs, delete reservations, resume nodes, restart dead slurmds."""
        _run_script("reset.sh", env=self._script_env(), timeout=timeout)

    def info(self) -> dict[str, str]:
        """Settings the running lab was started with (``run_dir/lab.info``)."""
        path = self.run_dir / "lab.info"
        if not path.is_file():
            return {}
        return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)

    def is_running(self) -> bool:
        """True when this run dir's slurmctld is alive."""
        try:
            pid = int((self.run_dir / "pid" / "slurmctld.pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError):
            return False
        return f"{self.run_dir}/" in cmdline

    def processes(self) -> list[int]:
        """PIDs of this lab's slurmctld/slurmd/slurmstepd/munged/slurmdbd/MariaDB processes,
        and of anything running inside its Debian root (via /proc)."""
        needle = f"{self.run_dir}/".encode()
        conf = f"SLURM_CONF={self.slurm_conf}".encode()
        root = str(self.run_dir / "root")
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if os.readlink(proc / "root") == root:
                    found.append(int(proc.name))
                    continue
                exe = os.path.basename(os.readlink(proc / "exe"))
                if not exe.startswith(_DAEMON_EXES):
                    continue
                if needle in (proc / "cmdline").read_bytes() or conf in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                continue
        return sorted(found)

    def __enter__(self) -> Lab:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @contextlib.contextmanager
    def exclusive(self, timeout: float = 600) -> Iterator[None]:
        """Hold ``<run_dir>.lock`` so that two test sessions never share one lab at once."""
        lock_path = Path(f"{self.run_dir}.lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "a") as fh:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise LabError(f"{lock_path} is held by another process for over {timeout:g} s") from None
                    time.sleep(0.5)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # ---- Slurm commands ------------------------------------------------------------------
    def _path(self, path: str) -> str:
        """``path`` with the lab's own client commands first, when it has any (as env.sh)."""
        return f"{self.client_bin}:{path}" if self.client_bin.is_dir() else path

    def env(self) -> dict[str, str]:
        """``os.environ`` plus ``SLURM_CONF`` / ``ATTENTIVED_LAB_RUN`` of this lab and its client
        commands first on ``PATH``, ready for ``subprocess.run(["squeue"], env=lab.env())``."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.slurm_conf)
        env["ATTENTIVED_LAB_RUN"] = str(self.run_dir)
        env["PATH"] = self._path(env.get("PATH", _USER_PATH))
        return env

    def user_env(self) -> dict[str, str]:
        """The small environment commands run as a demo user get (and their jobs inherit)."""
        return {"PATH": self._path(_USER_PATH), "LANG": os.environ.get("LANG", "C.UTF-8"),
                "SLURM_CONF": str(self.slurm_conf)}

    def command(self, argv: Sequence[str], user: str | None = None) -> list[str]:
        """argv to run ``argv`` as ``user`` (None or "root": as is): ``runuser -u USER -- ...``."""
        argv = [str(a) for a in argv]
        if user in (None, "root"):
            return argv
        if not _NAME.match(user):
            raise ValueError(f"bad user name {user!r}")
        return ["runuser", "-u", user, "--", *argv]

    def run(self, argv: Sequence[str], *, user: str | None = None, timeout: float | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against this lab, as root or as a demo user."""
        env = self.env() if user in (None, "root") else self.user_env()
        full = self.command(argv, user)
        try:
            proc = subprocess.run(full, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired as exc:
            raise LabError(f"{shlex.join(full)} timed out") from exc
        if check and proc.returncode != 0:
            raise LabError(f"{shlex.join(full)} failed (exit {proc.returncode})", proc.stdout + proc.stderr)
        return proc

    def scontrol(self, *args: str, timeout: float | None = None) -> str:
        return self.run(["scontrol", *args], timeout=timeout).stdout

    def sbatch_argv(self, user: str | None, gpus: int, *, nodes: int | None = None,
                    partition: str | None = None, script: str = "sleep 5", name: str | None = None,
                    hold: bool = False, extra_args: Sequence[str] = ()) -> list[str]:
        """The sbatch argv ``submit`` uses (``gpus`` is the job's total; see ``submit``)."""
        gpus = int(gpus)
        if gpus < 0:
            raise ValueError("gpus must be >= 0")
        if nodes is None:
            nodes = max(1, -(-gpus // GPUS_PER_NODE))
        nodes = int(nodes)
        if nodes < 1 or gpus % nodes:
            raise ValueError(f"{gpus} GPUs cannot be split evenly over {nodes} node(s)")
        per_node = gpus // nodes
        if per_node > GPUS_PER_NODE:
            raise ValueError(f"{per_node} GPUs per node: a lab node has {GPUS_PER_NODE}")
        who = user or "root"
        argv = ["sbatch", "--parsable", "--job-name", name or f"{who}-{gpus}gpu",
                "--chdir", str(self.jobs_dir), "--output", str(self.jobs_dir / "%j.out"),
                "--nodes", str(nodes)]
        if per_node:
            argv += ["--gres", f"gpu:{per_node}"]
        if partition:
            argv += ["--partition", partition]
        if hold:
            argv.append("--hold")
        argv += [str(a) for a in extra_args]
        argv += ["--wrap", script]
        return self.command(argv, user)

    def submit(self, user: str | None, gpus: int, *, nodes: int | None = None,
               partition: str | None = None, script: str = "sleep 5", name: str | None = None,
               hold: bool = False, extra_args: Sequence[str] = ()) -> int:
        """Submit a batch job as ``user`` (a demo user such as "alice", or None/"root").

        ``gpus`` is the job's total GPU count, split evenly over ``nodes`` (default: as few
        nodes as fit, 8 GPUs each); ``script`` is the shell code the job runs (one argv element,
        handed to ``sbatch --wrap``); its output goes to ``output_path(job_id)``.
        ``extra_args`` are further sbatch options, e.g. ``["--nodelist", "node3"]``.
        Returns the job id.
        """
        argv = self.sbatch_argv(user, gpus, nodes=nodes, partition=partition, script=script,
                                name=name, hold=hold, extra_args=extra_args)
        env = self.env() if user in (None, "root") else self.user_env()
        try:
            proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired as exc:
            raise LabError("sbatch timed out") from exc
        if proc.returncode != 0:
            raise LabError(f"sbatch as {user or 'root'} failed (exit {proc.returncode})",
                           proc.stdout + proc.stderr)
        return int(proc.stdout.strip().split(";")[0])

    def squeue_json(self) -> dict:
        """``squeue --json -t all``: every job slurmctld still knows, finished ones included
        (22.05 ignores -t and any other filter; 24.11 needs -t all to show finished jobs)."""
        return json.loads(self.run(["squeue", "--json", "-t", "all"]).stdout)

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol -o -d show job ID`` as a dict (JobState, UserId, NodeList, Priority, ...)."""
        return parse_scontrol_line(self.scontrol("-o", "-d", "show", "job", str(int(job_id))))

    def nodes_info(self) -> dict[str, dict[str, str]]:
        """``scontrol -o show nodes`` as {name: {key: value}} (stable across Slurm versions)."""
        out = {}
        for line in self.scontrol("-o", "show", "nodes").splitlines():
            if line.strip():
                d = parse_scontrol_line(line)
                out[d["NodeName"]] = d
        return out

    def reservations(self) -> dict[str, dict[str, str]]:
        out = {}
        for line in self.scontrol("-o", "show", "reservation").splitlines():
            if line.startswith("ReservationName="):
                d = parse_scontrol_line(line)
                out[d["ReservationName"]] = d
        return out

    def job_state(self, job_id: int) -> str:
        """Short state (PENDING, RUNNING, COMPLETED, ...); "" when slurmctld forgot the job."""
        proc = self.run(["squeue", "-h", "-t", "all", "-j", str(int(job_id)), "-o", "%T"], check=False)
        return proc.stdout.strip()

    def wait_for_state(self, job_id: int, states: str | Iterable[str], timeout: float = 30,
                       poll: float = 0.05) -> str:
        """Wait until the job reaches one of ``states``; returns it, LabError on timeout."""
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in wanted:
                return state
            time.sleep(poll)
        raise LabError(f"job {job_id} is {state or 'unknown'} after {timeout:g} s, not {sorted(wanted)}")
