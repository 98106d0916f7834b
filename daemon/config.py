"""The daemon's configuration: one TOML file (default ``/etc/attentived/config.toml``).

Every key is declared once in ``KEYS`` (type, default, one-line meaning); ``docs/daemon.md``
documents the same list and a test keeps the two in step. Loading validates everything and
raises ``ConfigError`` with a message that names the key (and the file), e.g.
``/etc/attentived/config.toml: interval: must be a number > 0, got 'fast'``.
Unknown keys are errors too (with a "did you mean" hint): a typo must not silently fall
back to a default.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

DEFAULT_PATH = "/etc/attentived/config.toml"


class ConfigError(ValueError):
    """An invalid configuration; the message names the file and the key."""


@dataclass(frozen=True)
class Key:
    name: str
    kind: str  # "float", "int", "bool", "str", "path", "list[str]", "choice"
    default: Any
    doc: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


KEYS: tuple[Key, ...] = (
    Key("interval", "float", 10.0, "Seconds between cycles (snapshot, decide, apply).", minimum=0.05, maximum=86400),
    Key("partitions", "list[str]", [], "Slurm partitions the daemon manages; jobs elsewhere are never touched. Empty: Slurm's default partition."),
    Key("policy", "str", "fifo+consolidate", "Policy name as `attentived policies` lists it (preset or ORDER+PLACER[+backfill]), or a learned one: `attentive`, or the DRL baselines `deeprm` and `proximity-drl`; with parameters as NAME:KEY=VALUE (e.g. `portfolio:fairness=0.5`, `attentive:model=/path/best.pt`). A bad parameter is refused at start and on reload."),
    Key("fallback_policy", "str", "fifo+consolidate", "Heuristic used when `policy` (or its model) cannot be loaded; the daemon says so in logs and metrics."),
    Key("model", "path", "", "Model file for a learned policy (`attentive`, `deeprm`, `proximity-drl`); empty: that policy's shipped model."),
    Key("seed", "int", 0, "Seed for randomized policies.", minimum=0),
    Key("reservation_prefix", "str", "attentived-", "Name prefix of the daemon's reservations (`<prefix><jobid>`). Ownership is by the journal's record, not the name: a reservation with this prefix the daemon did not create (or a MAINT one) is never touched."),
    Key("reservation_ttl", "float", 900.0, "Seconds a hold reservation lasts; renewed when less than half is left, so a dead daemon's reservations expire by themselves.", minimum=60, maximum=7 * 86400),
    Key("hold_mode", "choice", "block", "`block`: the held job is kept to its held nodes by excluding all others (no reservation); it blocks lower jobs under sched/builtin and starts there the moment they free up. `attach`: a whole-node reservation the held job is attached to; lower jobs may start on GPUs the plan leaves idle.", choices=("block", "attach")),
    Key("hold_depth", "int", 4, "Waiting jobs after the first held one that are also held where they are expected to start, so Slurm cannot start lower jobs at its own placement between cycles (block mode).", minimum=0, maximum=50),
    Key("priority_floor", "int", 1_000_000, "Lowest priority the daemon sets; priorities in [floor, ceiling] are the daemon's. Keep Slurm's own multifactor priorities below it.", minimum=1, maximum=4_000_000_000),
    Key("priority_ceiling", "int", 2_000_000_000, "Highest priority the daemon sets.", minimum=2, maximum=4_294_967_293),
    Key("priority_step", "int", 1000, "Gap between neighbouring priorities when the daemon numbers a queue afresh (room for later insertions without renumbering).", minimum=1, maximum=1_000_000),
    Key("state_dir", "path", "/var/lib/attentived", "Directory for the decision journal (SQLite) and status files."),
    Key("backend", "choice", "cli", "How Slurm is reached: `cli` (Slurm's commands) or `pyslurm`.", choices=("cli", "pyslurm")),
    Key("slurm_conf", "path", "", "SLURM_CONF for Slurm's commands; empty: the environment's or Slurm's default."),
    Key("slurm_bin_dir", "path", "", "Directory holding squeue/sinfo/scontrol; empty: PATH."),
    Key("command_timeout", "float", 30.0, "Seconds before a Slurm command is abandoned (keep it above 5 on Slurm before 24.11: see docs/reliability.md, unregistered jobs).", minimum=1, maximum=600),
    Key("cluster_file", "path", "", "Cluster TOML (see docs); when set it describes GPUs, NVLink islands and switches instead of gres.conf/topology.conf."),
    Key("gres_conf", "path", "", "gres.conf to read `Links=` from; empty: next to slurm.conf (SLURM_CONF from `scontrol show config`)."),
    Key("topology_conf", "path", "", "topology.conf, or a topology.yaml (.yaml/.yml: its cluster_default topology), for the switch tree; empty: topology.yaml next to slurm.conf where it exists, as slurmctld reads it from 25.05 on, else topology.conf there (optional)."),
    Key("metrics_address", "str", "127.0.0.1", "Address of the Prometheus endpoint (/metrics)."),
    Key("metrics_port", "int", 9817, "Port of the Prometheus endpoint; 0 turns it off.", minimum=0, maximum=65535),
    Key("dry_run", "bool", False, "Plan and log every action but change nothing in Slurm (same as `--dry-run`)."),
    Key("log_format", "choice", "json", "`json` (one JSON object per line, for journald/Loki) or `console`.", choices=("json", "console")),
    Key("log_level", "choice", "info", "debug, info, warning or error.", choices=("debug", "info", "warning", "error")),
    Key("journal_max_rows", "int", 200_000, "Rows kept per journal table (cycles, actions, placements); older rows are deleted.", minimum=100),
    Key("journal_max_plans", "int", 2000, "Full plans kept in the journal (they are the largest rows).", minimum=10),
    Key("hand_back_on_exit", "bool", False, "On SIGTERM, hand control back to Slurm: reset the daemon's priorities, remove its pins, delete its reservations."),
    Key("clear_pins_on_exit", "bool", True, "On SIGTERM, remove the daemon's pins (`ReqNodeList`) even without a full hand-back: unlike reservations, pins never expire in Slurm."),
    Key("pin_max_age", "float", 3600.0, "Seconds a pin the daemon set may stay: older pins (a daemon that was down, a hold that never came) are removed and planned afresh.", minimum=60, maximum=7 * 86400),
    Key("stall_avoid", "float", 300.0, "Seconds a job is kept off the nodes where its planned start did not happen by the next cycle (Slurm refused them for a reason the plan did not see).", minimum=0, maximum=86400),
    Key("idle_warn_after", "float", 300.0, "Seconds jobs may wait while GPUs they fit on sit idle before `status` warns (gauge `attentived_idle_with_queue_seconds`).", minimum=0, maximum=86400),
    Key("stability_margin", "float", 60.0, "Seconds a new hold must start earlier than the current one before it moves; a start is not moved off nodes that still take it. Keeps plans from flip-flopping.", minimum=0, maximum=86400),
    Key("accounting_check_interval", "float", 60.0, "Seconds between checks that slurmdbd and its database answer (`sacctmgr show cluster`), when Slurm keeps accounting in slurmdbd; an outage is named in `status` (gauge `attentived_accounting_up`) while scheduling goes on. 0 turns the check off.", minimum=0, maximum=86400),
    Key("backoff_max", "float", 300.0, "Upper bound in seconds of the back-off after consecutive failed cycles.", minimum=1, maximum=86400),
)
_BY_NAME = {k.name: k for k in KEYS}


@dataclass(frozen=True)
class Config:
    interval: float = 10.0
    partitions: tuple[str, ...] = ()
    policy: str = "fifo+consolidate"
    fallback_policy: str = "fifo+consolidate"
    model: str = ""
    seed: int = 0
    reservation_prefix: str = "attentived-"
    reservation_ttl: float = 900.0
    hold_mode: str = "block"
    hold_depth: int = 4
    priority_floor: int = 1_000_000
    priority_ceiling: int = 2_000_000_000
    priority_step: int = 1000
    state_dir: str = "/var/lib/attentived"
    backend: str = "cli"
    slurm_conf: str = ""
    slurm_bin_dir: str = ""
    command_timeout: float = 30.0
    cluster_file: str = ""
    gres_conf: str = ""
    topology_conf: str = ""
    metrics_address: str = "127.0.0.1"
    metrics_port: int = 9817
    dry_run: bool = False
    log_format: str = "json"
    log_level: str = "info"
    journal_max_rows: int = 200_000
    journal_max_plans: int = 2000
    hand_back_on_exit: bool = False
    clear_pins_on_exit: bool = True
    pin_max_age: float = 3600.0
    stall_avoid: float = 300.0
    idle_warn_after: float = 300.0
    stability_margin: float = 60.0
    accounting_check_interval: float = 60.0
    backoff_max: float = 300.0
    source: str = field(default="(defaults)", compare=False)

    def with_overrides(self, **kw: Any) -> Config:
        return replace(self, **kw)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "source"}


assert set(_BY_NAME) == {f.name for f in fields(Config)} - {"source"}, "KEYS and Config disagree"


def load(path: str | os.PathLike[str] | None = None, *, required: bool | None = None) -> Config:
    """Read and validate a config file. ``path=None`` reads ``DEFAULT_PATH`` when it exists and
    otherwise returns the defaults (``required=True`` makes a missing file an error)."""
    if path is None:
        path = DEFAULT_PATH
        if required is None:
            required = False
    elif required is None:
        required = True
    p = Path(path)
    try:
        exists = p.exists()
    except OSError as e:  # a directory on the way the daemon's user may not search
        raise ConfigError(f"{p}: cannot read: {e}") from None
    if not exists:
        if required:
            raise ConfigError(f"{p}: no such config file")
        return Config()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read: {e}") from None
    return parse(text, source=str(p))


def parse(text: str, source: str = "config.toml") -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: not valid TOML: {e}") from None
    return from_dict(data, source)


def from_dict(data: dict[str, Any], source: str = "config") -> Config:
    values: dict[str, Any] = {}
    for name, raw in data.items():
        key = _BY_NAME.get(name)
        if key is None:
            near = difflib.get_close_matches(name, list(_BY_NAME), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            kind = "table" if isinstance(raw, dict) else "key"
            raise ConfigError(f"{source}: unknown {kind} {name!r}{hint}; known keys: {', '.join(_BY_NAME)}")
        values[name] = _coerce(key, raw, source)
    cfg = Config(**values, source=source)
    _check(cfg, source)
    return cfg


def _coerce(key: Key, raw: Any, source: str) -> Any:
    where = f"{source}: {key.name}"
    if key.kind == "bool":
        if not isinstance(raw, bool):
            raise ConfigError(f"{where}: must be true or false, got {raw!r}")
        return raw
    if key.kind in ("int", "float"):
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ConfigError(f"{where}: must be a number, got {raw!r}")
        if key.kind == "int" and not float(raw).is_integer():
            raise ConfigError(f"{where}: must be a whole number, got {raw!r}")
        value = int(raw) if key.kind == "int" else float(raw)
        if key.minimum is not None and value < key.minimum:
            raise ConfigError(f"{where}: must be at least {key.minimum:g}, got {raw!r}")
        if key.maximum is not None and value > key.maximum:
            raise ConfigError(f"{where}: must be at most {key.maximum:g}, got {raw!r}")
        return value
    if key.kind == "list[str]":
        if isinstance(raw, str):
            raw = [p.strip() for p in raw.split(",") if p.strip()]
        if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
            raise ConfigError(f"{where}: must be a list of names, e.g. [\"gpu\"], got {raw!r}")
        for x in raw:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", x):
                raise ConfigError(f"{where}: {x!r} is not a Slurm partition name")
        return tuple(dict.fromkeys(raw))
    if not isinstance(raw, str):
        raise ConfigError(f"{where}: must be a string, got {raw!r}")
    if key.kind == "choice" and raw not in key.choices:
        raise ConfigError(f"{where}: must be one of {', '.join(key.choices)}, got {raw!r}")
    if "\0" in raw or "\n" in raw:
        raise ConfigError(f"{where}: must be one line")
    return raw


def _check(cfg: Config, source: str) -> None:
    """Checks across keys and those that need more than a type."""
    from attentived.agents.registry import make_policy, parse_name

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}", cfg.reservation_prefix):
        raise ConfigError(f"{source}: reservation_prefix: letters, digits, '.', '_' and '-' only (1-41 characters), got {cfg.reservation_prefix!r}")
    if cfg.priority_ceiling <= cfg.priority_floor:
        raise ConfigError(f"{source}: priority_ceiling ({cfg.priority_ceiling}) must be above priority_floor ({cfg.priority_floor})")
    if (cfg.priority_ceiling - cfg.priority_floor) < 1000:
        raise ConfigError(f"{source}: priority_ceiling - priority_floor must be at least 1000")
    try:
        ipaddress.ip_address(cfg.metrics_address)
    except ValueError:
        raise ConfigError(f"{source}: metrics_address: not an IP address: {cfg.metrics_address!r}") from None
    for name in ("policy", "fallback_policy"):
        value = getattr(cfg, name)
        try:
            spec = parse_name(value)
            if name == "policy" and is_learned(value):
                # the model loads in the policy slot, which falls back if it cannot
                if "model" in spec.kwargs() and cfg.model:
                    raise ConfigError(f"{source}: policy: names a model ({value!r}) and so does model ({cfg.model!r}); "
                                      f"set it in one place")
                continue
            make_policy(value, seed=cfg.seed)
        except ConfigError:
            raise
        except Exception as e:  # BadPolicyName, and a model file named in it that will not load
            raise ConfigError(f"{source}: {name}: {e}") from None
    if not cfg.state_dir:
        raise ConfigError(f"{source}: state_dir: must not be empty")


def is_learned(policy: str) -> bool:
    """A policy run from a model file (``attentive`` and the DRL baselines), parameters
    (``attentive:fairness=0.5``) or not."""
    from attentived.agents.registry import LEARNED

    return policy.partition(":")[0].strip() in LEARNED


def render_defaults() -> str:
    """An example config file with every key at its default and its meaning as a comment."""
    out = ["# attentived daemon configuration (TOML). Every key is optional.", ""]
    for k in KEYS:
        out.append(f"# {k.doc}")
        default = k.default
        if isinstance(default, bool):
            val = "true" if default else "false"
        elif isinstance(default, (int, float)):
            val = repr(default)
        elif isinstance(default, list):
            val = "[" + ", ".join(f'"{x}"' for x in default) + "]"
        else:
            val = f'"{default}"'
        out.append(f"{k.name} = {val}")
        out.append("")
    return "\n".join(out)
