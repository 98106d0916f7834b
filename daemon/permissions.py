"""The start-up probe: will Slurm accept the daemon's writes?

A live daemon without operator rights would run every cycle, plan, and have every
``scontrol update`` refused: hours of ``slurm.action ok=false`` lines instead of one clear
error. ``attentived start`` asks this probe first and refuses to start when it finds a
problem (the message comes from ``checks.operator_problem``).
"""

from __future__ import annotations

import os
from typing import Any

from .backend import Backend
from .checks import operator_problem
from .config import Config
from .records import SlurmError


def permission_problem(backend: Backend, config: Config, *, shadow: bool, log: Any) -> str:
    """Why Slurm will refuse the daemon's writes, or "" when it will not. Read-only;
    skipped in dry-run and shadow mode, for backends without commands (the in-memory Slurm)
    and when Slurm cannot be asked (the cycles will say so)."""
    run = getattr(backend, "run", None)
    if run is None or config.dry_run or shadow:
        return ""
    import pwd

    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        conf = backend.config()
    except SlurmError as e:
        log.warning("startup.permission_probe_skipped", error=str(e))
        return ""
    slurm_user = conf.get("SlurmUser", "")
    if uid == 0 or slurm_user.split("(")[0].strip() == user:
        return ""
    level: str | None = None
    try:
        proc = run(["sacctmgr", "-n", "-P", "show", "user", user, "format=AdminLevel"], check=False)
        if proc.returncode == 0 and proc.stdout.strip():
            level = proc.stdout.strip().splitlines()[0]
    except SlurmError:
        level = None
    return operator_problem(user, uid, slurm_user, conf.get("AccountingStorageType", ""), level)
