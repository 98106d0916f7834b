"""The ``pyslurm`` backend: Slurm's C API through pyslurm, chosen with ``backend = "pyslurm"``.

pyslurm builds only against the headers of one Slurm release and must match the running
slurmctld. This backend is used only when ``import pyslurm`` works and pyslurm's version
matches Slurm's major.minor; otherwise constructing it raises ``SlurmUnavailable`` saying
why (the ``cli`` backend needs nothing).

Scope, kept small on purpose: job updates (priority, ReqNodeList, reservation) go through
pyslurm's ``Job.modify`` (pyslurm >= 23.2 API), saving a process per batch; snapshots and
reservation changes use the same commands as ``CliBackend`` (their JSON parsing is shared
and tested). Not exercised by the test suite: pyslurm cannot be installed against this
project's test cluster (Debian's Slurm 22.05 / 24.11 ship no matching pyslurm).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from .cli_backend import CliBackend
from .records import CommandResult, JobUpdate, SlurmUnavailable


def _import_pyslurm() -> Any:
    try:
        import pyslurm
    except Exception as e:  # ImportError, or a shared-library mismatch raising OSError
        raise SlurmUnavailable(
            f"backend 'pyslurm' needs the pyslurm package built for this Slurm ({type(e).__name__}: {e}); "
            "install it (pip install 'attentived[pyslurm]' against matching Slurm headers) or use backend = \"cli\"") from None
    return pyslurm


class PyslurmBackend(CliBackend):
    name = "pyslurm"

    def __init__(self, slurm_conf: str | None = None, timeout: float = 30.0, bin_dir: str | None = None) -> None:
        super().__init__(slurm_conf=slurm_conf, timeout=timeout, bin_dir=bin_dir)
        self.pyslurm = _import_pyslurm()
        theirs = str(getattr(self.pyslurm, "__version__", "") or getattr(self.pyslurm, "version", lambda: "")())
        ours = self.version()
        if not theirs.startswith(f"{ours.major}.{ours.minor}"):
            raise SlurmUnavailable(f"pyslurm {theirs or '?'} does not match Slurm {ours}; use backend = \"cli\"")
        if not hasattr(self.pyslurm, "Job") or not hasattr(self.pyslurm, "JobSubmitDescription"):
            raise SlurmUnavailable(f"pyslurm {theirs} lacks the Job/JobSubmitDescription API (pyslurm >= 23.2 needed)")

    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[CommandResult]:
        out = []
        for u in updates:
            t0 = time.monotonic()
            kw: dict[str, Any] = {}
            for key, value in u.fields:
                if key == "Priority":
                    kw["priority"] = int(value)
                elif key == "ReqNodeList":
                    kw["required_nodes"] = value or ""
                elif key == "ReservationName":
                    kw["reservations"] = value or ""
                elif key == "ExcNodeList":
                    kw["excluded_nodes"] = value or ""
                else:
                    kw = {}
                    break
            if not kw:  # a field pyslurm does not cover: the command line does it
                out.extend(super().update_jobs([u]))
                continue
            try:
                self.pyslurm.Job(int(u.job_id)).modify(self.pyslurm.JobSubmitDescription(**kw))
                out.append(CommandResult(("pyslurm.Job.modify", u.job_id, repr(kw)), True, 0, "", time.monotonic() - t0))
            except Exception as e:
                out.append(CommandResult(("pyslurm.Job.modify", u.job_id, repr(kw)), False, 1, str(e), time.monotonic() - t0))
        return out
