"""The daemon's status: one JSON document, rewritten atomically after every cycle.

``<state_dir>/status.json`` is how everything outside the process (``attentived status``,
``ops inspect``, the demo, monitoring scripts) learns the daemon's mode, policy and fallback,
partitions, Slurm findings and last cycle without asking it. Readers may look at any
moment, so the file is written beside and renamed over the old one: it is always whole. A
state dir that cannot be written is logged, never fatal: scheduling goes on.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attentived.atomic import write_file

from .accounting import AccountingWatch
from .config import Config
from .journal import private_dir

FILE = "status.json"


def status_doc(*, config: Config, mode: str, policy_name: str, policy_fallback: str, partitions: Sequence[str],
               slurm_findings: Sequence[Any], errors_total: int, started_at: float, last: Any,
               accounting: AccountingWatch | None = None) -> dict[str, Any]:
    """The status document; ``last``: the last ``CycleResult`` or None; ``accounting``: the
    watch on slurmdbd (``accounting`` is null when Slurm keeps no accounting database)."""
    health = accounting.health if accounting is not None else None
    acct_warning = accounting.warning() if accounting is not None else ""
    return {
        "pid": os.getpid(),
        "started_at": started_at,
        "mode": mode,
        "policy": policy_name,
        "policy_configured": config.policy,
        "policy_fallback": policy_fallback or None,
        "model": config.model or None,
        "partitions": list(partitions),
        "interval": config.interval,
        "config": config.source,
        "hold_mode": config.hold_mode,
        "slurm_reachable": bool(last and last.snapshot_ok),
        "accounting": None if health is None else health.as_dict(),
        "slurm_findings": [f.__dict__ for f in slurm_findings],
        "errors_total": errors_total,
        "warnings": warnings(config, mode, last) + ([acct_warning] if acct_warning else []),
        "last_cycle": None if last is None else {
            "id": last.cycle_id, "started": last.started, "duration": last.duration, "ok": last.ok,
            "skipped": last.skipped, "dry_run": last.dry_run, "error": last.error or None,
            "actions": len(last.outcomes), "failed": last.failed, "overtaken": last.overtaken,
            "unregistered": last.unregistered, "counts": last.counts,
        },
        "updated": time.time(),
    }


def warnings(config: Config, mode: str, last: Any) -> list[str]:
    """What an operator must act on, from the last cycle: planned starts Slurm refused, jobs
    that have fit idle GPUs for longer than ``idle_warn_after`` (live mode only: in a dry
    run nothing is meant to start), and jobs Slurm will not let the daemon update."""
    doc = getattr(last, "plan_doc", None) or {}
    out = [f"job {s['job']}: planned start on {','.join(s['nodes'])} did not happen ({s['reason']}); "
           f"kept off those nodes until {time.strftime('%H:%M:%S', time.localtime(s['avoid_until']))}"
           for s in doc.get("stalls", [])]
    idle = float(getattr(last, "idle_with_queue", 0.0) or 0.0)
    if mode == "live" and idle > config.idle_warn_after:
        out.append(f"jobs have waited {idle:.0f} s while GPUs they fit on sit idle "
                   f"(more than idle_warn_after = {config.idle_warn_after:g} s)")
    left = (getattr(last, "counts", None) or {}).get("unregistered", 0)
    if left:
        out.append(f"{left} pending job(s) left to Slurm: it refuses their updates until slurmdbd has registered "
                   "them (after a slurmctld crash, Slurm before 24.11 refuses until they start); the log's "
                   "slurm.unregistered names them")
    return out


def write_status(state_dir: str | os.PathLike[str], doc: dict[str, Any], log: Any) -> None:
    """Write ``doc`` to ``<state_dir>/status.json`` through a temporary file and a rename."""
    path = Path(state_dir) / FILE
    try:
        private_dir(path.parent)

        def write(tmp: Path) -> None:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                f.write(json.dumps(doc, indent=1))

        write_file(path, write)
    except OSError as e:
        log.warning("status.unwritable", path=str(path), error=str(e))
