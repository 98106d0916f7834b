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

from .config import Config

FILE = "status.json"


def status_doc(*, config: Config, mode: str, policy_name: str, policy_fallback: str, partitions: Sequence[str],
               slurm_findings: Sequence[Any], errors_total: int, started_at: float, last: Any) -> dict[str, Any]:
    """The status document; ``last``: the last ``CycleResult`` or None."""
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
        "slurm_findings": [f.__dict__ for f in slurm_findings],
        "errors_total": errors_total,
        "last_cycle": None if last is None else {
            "id": last.cycle_id, "started": last.started, "duration": last.duration, "ok": last.ok,
            "skipped": last.skipped, "dry_run": last.dry_run, "error": last.error or None,
            "actions": len(last.outcomes), "failed": last.failed, "counts": last.counts,
        },
        "updated": time.time(),
    }


def write_status(state_dir: str | os.PathLike[str], doc: dict[str, Any], log: Any) -> None:
    """Write ``doc`` to ``<state_dir>/status.json`` through a temporary file and a rename."""
    path = Path(state_dir) / FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(path)
    except OSError as e:
        log.warning("status.unwritable", path=str(path), error=str(e))
